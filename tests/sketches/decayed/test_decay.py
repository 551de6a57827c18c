"""Decay functions: values, classes (§1.2), specs, and the refusals of §4."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketches.base import SketchError
from sketches.decayed import DecayedRelativeSketch
from sketches.decayed.decay import (CallableDecay, Exponential, FiniteExponential, NoDecay, Polynomial,
                                    SlidingWindow, SuperExponential, as_decay, decay_from_code, parse_decay,
                                    relative_guarantee_refusal)

DECAYS = [
    NoDecay(),
    SlidingWindow(0),
    SlidingWindow(37),
    Exponential(5.0),
    Exponential(0.3),
    Polynomial(0.5),
    Polynomial(1.5),
    Polynomial(3.0),
    FiniteExponential(4.0, 0.01),
    SuperExponential(10.0, 2.0),
]
AGES = np.array([0, 1, 2, 3, 10, 36, 37, 38, 100, 1000, 10**6, 2**40])


def test_values_match_their_formulas():
    a = AGES.astype(float)
    assert np.array_equal(NoDecay()(AGES), np.ones(a.size))
    assert np.array_equal(SlidingWindow(37)(AGES), (a <= 37).astype(float))
    assert np.allclose(Exponential(5.0)(AGES), 2.0 ** (-a / 5.0), rtol=1e-15, atol=0)
    assert np.allclose(Polynomial(1.5)(AGES), (a + 1) ** -1.5, rtol=1e-15, atol=0)
    fe = FiniteExponential(4.0, 0.01)
    assert fe.age_limit == math.floor(4.0 * math.log2(100))
    assert np.allclose(fe(AGES), np.where(a <= fe.age_limit, 2.0 ** (-a / 4.0), 0.0), rtol=1e-15, atol=0)
    assert np.allclose(SuperExponential(10.0, 2.0)(AGES), 2.0 ** (-((a / 10.0) ** 2)), rtol=1e-15, atol=0)


@pytest.mark.parametrize("d", DECAYS, ids=lambda d: str(d.spec()))
def test_every_decay_is_a_decay_function(d):
    """Definition 1.1: values in [0, 1], f(0) = 1, never increasing; negative ages clamp."""
    ages = np.concatenate([np.arange(2000), AGES])
    ages.sort()
    f = d(ages)
    assert f[0] == 1.0 and np.all((f >= 0) & (f <= 1)) and np.all(np.diff(f) <= 0)
    assert d(np.array([-5, -1]))[0] == d(np.array([0]))[0]


@pytest.mark.parametrize("d", DECAYS, ids=lambda d: str(d.spec()))
def test_classes_follow_section_1_2(d):
    x = np.arange(0, 400, dtype=float)
    f = d(x)
    flags = [d.finite, d.exponential, d.super_exponential, d.converging]
    assert sum(flags) == 1
    if d.finite:
        n = d.age_limit
        assert d(np.array([n]))[0] > 0 and d(np.array([n + 1, n + 1000]))[1] == 0
    else:
        assert d.age_limit is None
    if d.exponential:  # f(x+1)/f(x) constant (while f is a normal float)
        g = f[f > 1e-200]
        ratio = g[1:] / g[:-1]
        assert np.allclose(ratio, ratio[0], rtol=1e-9)
    if d.converging:  # f(x+1)/f(x) non-decreasing
        ratio = f[1:] / f[:-1]
        assert np.all(np.diff(ratio) >= -1e-12)
    if d.super_exponential:  # f(x)/f(x+1) >= σ > 1 from c = 0 on
        g = d(np.arange(0, 30, dtype=float))
        assert np.all(g[:-1] / np.maximum(g[1:], 1e-300) >= 2 ** (1 / 10.0**2) * (1 - 1e-12))


@pytest.mark.parametrize("d", DECAYS, ids=lambda d: str(d.spec()))
def test_spec_and_code_round_trips(d):
    assert parse_decay(d.spec()) == d
    assert parse_decay(d) is d
    assert decay_from_code(d.code, *d.params()) == d
    assert as_decay(d.spec()) == d


@pytest.mark.parametrize("spec", [
    {}, {"kind": "linear"}, {"kind": "sliding"}, {"kind": "sliding", "window": -1},
    {"kind": "sliding", "window": 2.5}, {"kind": "sliding", "window": 3, "alpha": 1},
    {"kind": "exponential", "half_life": 0}, {"kind": "exponential", "half_life": float("nan")},
    {"kind": "polynomial", "alpha": -1}, {"kind": "polynomial", "alpha": "x"},
    {"kind": "finite_exponential", "half_life": 3, "mu": 1.0},
    {"kind": "finite_exponential", "half_life": 3}, {"kind": "super_exponential", "scale": 1, "beta": 1.0},
    {"kind": "none", "window": 3}, "sliding", None,
])
def test_bad_specs_are_refused(spec):
    with pytest.raises(SketchError):
        parse_decay(spec)


def test_callable_decay_only_through_as_decay():
    d = as_decay(lambda a: 1.0 / (1.0 + a))
    assert isinstance(d, CallableDecay) and d(np.array([1.0]))[0] == 0.5
    with pytest.raises(SketchError):
        as_decay(3)
    with pytest.raises(SketchError):
        as_decay(lambda a: np.ones(2))(np.arange(3))


@pytest.mark.parametrize("d, theorem", [
    (SlidingWindow(60), "Theorem 4.1"),
    (SlidingWindow(0), "Theorem 4.1"),
    (FiniteExponential(4.0, 0.01), "Theorem 4.1"),
    (Exponential(5.0), "Theorem 4.2"),
    (SuperExponential(10.0, 2.0), "Theorem 4.3"),
])
def test_impossible_relative_guarantees_are_refused_with_their_theorem(d, theorem):
    msg = relative_guarantee_refusal(d)
    assert theorem in msg and "DecayedAdditiveSketch" in msg
    if isinstance(d, FiniteExponential):
        assert "§4.4" in msg
    with pytest.raises(SketchError) as info:
        DecayedRelativeSketch(0.1, d, 0, 10)
    assert str(info.value) == msg
    with pytest.raises(SketchError) as info:
        DecayedRelativeSketch(0.1, d.spec(), 0, 10)
    assert str(info.value) == msg


@pytest.mark.parametrize("d", [NoDecay(), Polynomial(0.01), Polynomial(1.5), Polynomial(64)])
def test_converging_decays_are_accepted(d):
    assert relative_guarantee_refusal(d) is None
    DecayedRelativeSketch(0.1, d, 0, 10)


def test_callable_decays_get_no_relative_guarantee():
    msg = relative_guarantee_refusal(lambda a: np.ones_like(a))
    assert msg is not None and "DecayedAdditiveSketch" in msg


@settings(max_examples=200, deadline=None)
@given(st.floats(0.01, 8), st.floats(0.001, 0.99), st.integers(0, 10**9))
def test_polynomial_is_converging_everywhere(alpha, eps, x0):
    """f(x)/f(x+d) shrinks as x grows: what keeps a WBMH bucket within 1 + ε (Fact 3.1)."""
    f = Polynomial(alpha)
    x = np.array([x0, x0 + 1, x0 + 7, 2 * x0 + 9], dtype=float)
    d = 5.0
    r = f(x) / f(x + d)
    assert np.all(np.diff(r) <= 1e-12 * r[:-1])
