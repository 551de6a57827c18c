"""Derived aggregates (§1.1) on both sketches against an exact oracle."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import SketchError
from sketches.decayed import (
    DecayedAdditiveSketch,
    DecayedRelativeSketch,
    heavy_hitters,
    quantile,
    range_sum,
    relative_frequency,
)
from sketches.decayed.decay import NoDecay, Polynomial, parse_decay
from tests.strategies import binom_upper

VMIN, VMAX = 0.0, 20.0


def _weights_by_point(values, weights, g):
    pts, inv = np.unique(values, return_inverse=True)
    return pts, np.bincount(inv, weights=weights * g, minlength=pts.size)


def true_quantile(values, weights, g, phi):
    """v* = max{v : W(< v) <= φ·S₀}: the smallest point p with W(<= p) > φ·S₀, else VMAX,
    compared exactly over each point's weight. In floats a cumulative sum can end above the
    total (NumPy adds a sum of more than 8 in another order), and φ = 1 then named the
    largest point seen instead of VMAX: a CI run failed on the oracle."""
    pts, w = _weights_by_point(values, weights, g)
    exact = [Fraction(x) for x in w.tolist()]
    bar, below = Fraction(phi) * sum(exact), Fraction(0)
    for p, wp in zip(pts, exact):
        below += wp
        if below > bar:
            return float(p)
    return VMAX


def test_the_quantile_oracle_is_exact_where_a_float_cumsum_overshoots():
    w = np.array([1.7975680453095255, 5.6799351158151765, 4.061706379498719, 2.33167600132066,
                  0.657218505307233, 2.869416504130695, 0.31550995925821407, 16.84585911623038,
                  0.47188311773115266, 4.956252329736612, 3.80450290981876, 0.6398345187924309,
                  3.6024898610775833, 0.09563025028303354, 2.7113501292195807, 2.3932069565947898,
                  0.11845362312333889, 2.2073771673448843, 7.512185900820556, 1.6025736292976844,
                  1.1311372754390943])
    assert np.cumsum(w)[-1] > w.sum()  # the float trap
    values = np.arange(w.size) / 2.0  # points 0 .. 10, all below VMAX
    assert true_quantile(values, w, np.ones(w.size), 1.0) == VMAX
    assert true_quantile(values, w, np.ones(w.size), 0.0) == 0.0


@st.composite
def streams(draw):
    n = draw(st.integers(1, 6000))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    span = draw(st.sampled_from([1, 100, 10_000]))
    ticks = rng.integers(0, span, n).astype(np.int64)
    kind = draw(st.sampled_from(["zipf", "uniform", "one"]))
    values = {
        "zipf": np.minimum(rng.zipf(1.5, n) - 1, 20).astype(float),
        "uniform": rng.integers(0, 21, n).astype(float),
        "one": np.full(n, 7.0),
    }[kind]
    weights = draw(st.sampled_from(["ones", "real"]))
    weights = np.ones(n) if weights == "ones" else rng.exponential(2.0, n)
    return ticks, values, weights, seed


def _check_all(sk, ticks, values, weights, decay, at, exact_values):
    f = sk.decay if decay is None else parse_decay(decay)
    g = f(np.maximum(at - ticks, 0))
    q = exact_values
    s0 = float((weights * g).sum())
    tol = 1e-9
    for v in (0.0, 1.0, 7.0, 13.0, 20.0):
        e = relative_frequency(sk, v, at, decay)
        truth = float((weights * g * (q == v)).sum()) / s0 if s0 > 0 else 0.0
        assert e.lower - tol <= truth <= e.upper + tol, (v, truth, e)
        assert 0 <= e.lower <= e.estimate <= e.upper <= 1
    lo, hi = 3.0, 11.0
    e = range_sum(sk, lo, hi, at, decay)
    truth = float((weights * g * ((q >= lo) & (q <= hi))).sum())
    assert e.lower - tol * s0 <= truth <= e.upper + tol * s0
    for phi in (0.05, 0.2, 0.5):
        try:
            hh = heavy_hitters(sk, phi, at, decay)
        except SketchError:
            assert isinstance(sk, DecayedAdditiveSketch)
            continue
        got = {v: e for v, e in hh}
        pts, w = _weights_by_point(q, weights, g)
        for p, wp in zip(pts, w):
            if s0 > 0 and wp / s0 >= phi:
                assert p in got, (phi, p, wp / s0)
        for v, e in hh:
            truth = float((weights * g * (q == v)).sum()) / s0 if s0 > 0 else 0.0
            assert e.lower - tol <= truth <= e.upper + tol and e.upper >= phi
    for phi in (0.0, 0.1, 0.5, 0.9, 1.0):
        e = quantile(sk, phi, at, decay)
        v = true_quantile(q, weights, g, phi)
        assert e.lower <= v <= e.upper, (phi, v, e)
        assert VMIN <= e.lower <= e.estimate <= e.upper <= VMAX


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from([NoDecay(), Polynomial(1.0), Polynomial(2.5)]), st.sampled_from([0.01, 0.2]))
def test_relative_sketch_derived_bounds_always_hold(stream, decay, eps):
    ticks, values, weights, seed = stream
    sk = DecayedRelativeSketch(eps, decay, VMIN, VMAX, resolution=1.0)
    sk.update(ticks, values, weights)
    for at in (int(ticks.max()), int(ticks.max()) + 50, int(ticks.min())):
        _check_all(sk, ticks, values, weights, None, at, values)
    at = int(ticks.max())
    if isinstance(decay, NoDecay):  # exact: the quantile bracket collapses onto v*
        g = np.ones(ticks.size)
        pts = np.unique(values)
        for phi in (0.1, 0.5, 0.9):
            v = true_quantile(values, weights, g, phi)
            e = quantile(sk, phi, at)
            i = np.searchsorted(pts, v)
            assert e.upper <= (pts[i + 1] if i + 1 < pts.size else VMAX)
            assert e.lower >= (pts[i - 1] if i > 0 else VMIN)
    for v in np.unique(values):  # ratio of two (1 ± ε) brackets
        e = relative_frequency(sk, v, at)
        assert e.kind == "relative" and e.confidence == 1.0
        assert e.upper <= e.lower * (1 + eps) ** 2 * (1 + 1e-9) + 1e-12 or e.upper == 1.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from([{"kind": "none"}, {"kind": "sliding", "window": 40},
                                   {"kind": "exponential", "half_life": 30.0}]), st.integers(1, 2**62))
def test_additive_sketch_derived_bounds_hold(stream, decay, sid):
    """δ = 1e-6: a failure would be a one-in-a-million event."""
    ticks, values, weights, seed = stream
    sk = DecayedAdditiveSketch(0.4, 1e-6, VMIN, VMAX, max_total=1e6, stream=sid)
    sk.update(ticks, values, weights)
    for at in (int(ticks.max()), int(ticks.min())):
        _check_all(sk, ticks, values, weights, decay, at, values)


def test_additive_derived_rates_over_many_seeds():
    """Containment of quantile and frequency intervals and heavy-hitter recall at rate 1 − δ;
    the quantile bracket must also be narrow in rank (a [min, max] answer fails)."""
    delta, runs, eps, phi = 0.1, 200, 0.1, 0.8
    rng = np.random.default_rng(7)
    n = 30000  # far more events than the k = 1622 samples a level keeps
    ticks = rng.integers(0, 3000, n).astype(np.int64)
    values = np.where(rng.random(n) < 0.3, 0.0, rng.integers(0, 21, n)).astype(float)
    weights = rng.exponential(1.0, n)
    decay = {"kind": "polynomial", "alpha": 0.7}
    at = int(ticks.max())
    g = parse_decay(decay)(np.maximum(at - ticks, 0))
    s0 = float((weights * g).sum())
    pts, w = _weights_by_point(values, weights, g)
    heavy = set(pts[w / s0 >= 0.15].tolist())
    assert heavy == {0.0}
    vq = true_quantile(values, weights, g, phi)
    fails = {"quantile": 0, "freq": 0, "recall": 0}
    rank_lo, rank_hi = [], []
    for run in range(runs):
        sk = DecayedAdditiveSketch(eps, delta, VMIN, VMAX, max_total=1e6, stream=run + 1)
        sk.update(ticks, values, weights)
        assert sk.stored < n / 2
        e = quantile(sk, phi, at, decay)
        fails["quantile"] += not (e.lower <= vq <= e.upper)
        rank_lo.append(w[pts <= e.lower].sum() / s0)  # decayed rank at and below lower
        rank_hi.append(w[pts < e.upper].sum() / s0)
        e = relative_frequency(sk, 0.0, at, decay)
        truth = w[pts == 0.0].sum() / s0
        fails["freq"] += not (e.lower <= truth <= e.upper)
        got = {v for v, _ in heavy_hitters(sk, 0.15, at, decay)}
        fails["recall"] += not heavy <= got
    limit = binom_upper(runs, delta)
    assert all(v <= limit for v in fails.values()), fails
    assert np.median(rank_lo) >= phi - 3 * eps and np.median(rank_hi) <= phi + 3 * eps, (rank_lo, rank_hi)


def test_decay_rules_of_each_sketch():
    add = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1)
    add.update([1, 2], [1.0, 2.0])
    with pytest.raises(SketchError):
        quantile(add, 0.5, 2)  # the additive sketch needs the decay at query time
    with pytest.raises(SketchError):
        range_sum(add, 0, 1, 2)
    rel = DecayedRelativeSketch(0.2, Polynomial(1.0), VMIN, VMAX, resolution=1)
    rel.update([1, 2], [1.0, 2.0])
    assert quantile(rel, 0.5, 2, {"kind": "polynomial", "alpha": 1.0}).lower <= 2
    with pytest.raises(SketchError):
        quantile(rel, 0.5, 2, {"kind": "polynomial", "alpha": 2.0})
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(SketchError):
            heavy_hitters(rel, bad, 2)
    with pytest.raises(SketchError):
        quantile(rel, -0.1, 2)


def test_heavy_hitters_refuse_a_phi_below_the_sample_resolution():
    rng = np.random.default_rng(3)
    sk = DecayedAdditiveSketch(0.3, 0.1, 0.0, 1000.0, stream=2)
    sk.update(rng.integers(0, 100, 5000), rng.uniform(0, 1000, 5000))
    with pytest.raises(SketchError, match="below what this sketch can certify"):
        heavy_hitters(sk, 0.01, 99, {"kind": "none"})
    assert heavy_hitters(sk, 0.9, 99, {"kind": "none"}) == []


def test_empty_sketches():
    for sk in (DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX), DecayedRelativeSketch(0.2, NoDecay(), VMIN, VMAX)):
        d = {"kind": "none"}
        assert heavy_hitters(sk, 0.5, 3, d) == []
        e = quantile(sk, 0.5, 3, d)
        assert e.lower <= VMAX <= e.upper
        e = relative_frequency(sk, 3.0, 3, d)
        assert e.lower == 0.0
        assert range_sum(sk, 0, 5, 3, d).upper == 0.0


@pytest.mark.parametrize("side", ["upper", "lower"])
def test_quantile_certifies_against_the_worst_side_of_s0(side):
    """Two events: value 1 now (an exact bucket), value 2 long ago at the newest (or
    oldest) end of a wide bucket, so Ŝ₀ is below (or above) S₀; φ puts v* at the rank's
    jump. Certifying against Ŝ₀ instead of the bracket of S₀ would exclude v*."""
    from sketches.decayed import _wbmh_kernels as K

    eps, clock = 0.3, 10**6
    sk = DecayedRelativeSketch(eps, Polynomial(1.0), VMIN, VMAX, resolution=1)
    b = K.poly_boundaries(1.0, eps, 2**22)
    F, L = K.buckets_of(np.array([clock // 2]), clock, b, K.capacities(b), False)
    assert L[0] - F[0] > 100  # a wide bucket
    ticks = np.array([clock, int(L[0]) if side == "upper" else int(F[0])])
    values = np.array([1.0, 2.0])
    weights = np.array([1e-7, 1.0])  # the old event dominates S₀, so Ŝ₀ is off by ~ε/2
    sk.update(ticks, values, weights)
    g = Polynomial(1.0)(clock - ticks) * weights
    s0 = g.sum()
    phi = g[0] / s0 if side == "upper" else g[0] / s0 * (1 - 1e-6)
    v = true_quantile(values, np.ones(2), g, phi)
    assert v == (2.0 if side == "upper" else 1.0)
    e = quantile(sk, phi, clock)
    assert e.lower <= v <= e.upper, (side, v, e)


def test_heavy_hitter_intervals_pay_for_every_heavy_value():
    """Recall of all ⌊1/φ⌋ possible heavy values is a union bound: tails = ⌊1/φ⌋ + 2."""
    rng = np.random.default_rng(2)
    sk = DecayedAdditiveSketch(0.1, 0.05, VMIN, VMAX, max_total=1e6, stream=5)
    n = 20000
    sk.update(rng.integers(0, 1000, n), rng.integers(0, 4, n).astype(float))
    d = {"kind": "none"}
    s0 = sk.query(d, VMIN, 999).estimate
    for phi in (0.2, 0.3):
        tails = max(4, math.floor(1 / phi) + 2)
        a, _ = sk._deviation(s0, tails)
        for v, e in heavy_hitters(sk, phi, 999, d):
            n_hat = sk.range_sum(d, v, v, 999).estimate
            assert math.isclose(e.upper, min(1.0, (n_hat + a) / (s0 - a)), rel_tol=1e-6)


def test_frequency_and_quantile_brackets_read_one_consistent_world():
    """Issue 21: each side from one world (N low with R high; W(≤u) low with W(>u) high).
    The brackets hold the truth, lie inside the earlier ones (lo_N/hi_S, hi_N/lo_S;
    lo(W(≤u)) > φ·hi(S₀)) and are strictly narrower somewhere."""
    rng = np.random.default_rng(21)
    n = 20_000
    ticks = rng.integers(0, 50_000, n)
    values = np.minimum(rng.zipf(1.3, n) - 1, 20).astype(float)
    weights = rng.exponential(2.0, n)
    sk = DecayedRelativeSketch(0.2, Polynomial(1.0), VMIN, VMAX, resolution=1)
    sk.update(ticks, values, weights)
    at = 50_000
    g = Polynomial(1.0)(at - ticks) * weights
    s0 = g.sum()
    view = sk._view(None, at)
    _, dl, du = view.total(4)
    narrower = 0
    for v in np.unique(values):
        e = relative_frequency(sk, v, at)
        truth = g[values == v].sum() / s0
        assert e.lower <= truth <= e.upper, (v, truth, e)
        _, nl, nu = view.select(view.points == sk.quantize(np.array([v]))[0], 4)
        old_lo, old_hi = min(1.0, nl / du), min(1.0, nu / dl)
        assert old_lo <= e.lower * (1 + 1e-12) and e.upper <= old_hi * (1 + 1e-12)
        narrower += (e.upper - e.lower) < 0.9 * (old_hi - old_lo)
    assert narrower >= 3
    _, le_lo, _ = view.cumulative(4, inclusive=True)
    for phi in (0.5, 0.9, 0.99):
        e = quantile(sk, phi, at)
        truth = true_quantile(values, np.ones(n), g, phi)
        assert e.lower <= truth <= e.upper, (phi, truth, e)
        up = np.flatnonzero(le_lo > phi * du)
        assert e.upper <= (float(view.points[up[0]]) if up.size else VMAX)
