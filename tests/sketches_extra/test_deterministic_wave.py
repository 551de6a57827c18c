"""Deterministic wave against an exact oracle: the deterministic bound never fails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, SketchError
from sketches_extra.deterministic_wave import DeterministicWave, suggest_max_window_weight, wave_levels
from tests.sketches_extra import in_order
from tests.sketches_extra.in_order import EPS, SETTINGS, Oracle, feed, queries, small_wave


def streams(max_n=2500):
    return in_order.streams(max_n, integral=True)


def check_query(sk, oracle, lo, hi, nominal=True):
    """The shared checks; while the window weight stayed within U (``nominal``), also the
    ε bound and the bracket's width."""
    e = in_order.check_query(sk, oracle, lo, hi, width=nominal)
    if nominal and hi >= sk.clock:
        assert e.epsilon <= sk.epsilon_bound * (1 + 1e-9)
    return e


@SETTINGS
@given(streams(), EPS, st.sampled_from([0, 1, 7, 50, 1000, 10**5]), st.sampled_from([1, 10**3, 10**9, 2**50]))
def test_bounds_hold_at_every_point_of_the_stream(data, eps, window, u):
    ticks, weights, rng = data
    weights = np.minimum(weights, u)
    sk = DeterministicWave(eps, window, u)
    nominal = Oracle(ticks, weights).max_window(window) <= u

    def check(sk, j):
        part = Oracle(ticks[:j], weights[:j])
        for lo, hi in queries(sk, rng, 10):
            check_query(sk, part, lo, hi, nominal)
        assert sk.overflowed <= (not nominal)
        assert sk.items <= int(sk._caps.sum())

    feed(sk, ticks, weights, rng, check)
    assert sk.nbytes == len(sk.to_bytes())


@SETTINGS
@given(streams(600), EPS, st.sampled_from([0, 3, 40]))
def test_overflowed_wave_still_brackets_and_reports_its_real_error(data, eps, window):
    """A window heavier than U loses the ε promise but never the bracket (or the truth)."""
    ticks, weights, rng = data
    weights = np.minimum(weights, 50)
    sk = DeterministicWave(eps, window, max_window_weight=50)
    oracle = Oracle(ticks, weights)
    feed(sk, ticks, weights, rng)
    if ticks.size:
        for lo, hi in queries(sk, rng, 20):
            check_query(sk, oracle, lo, hi, nominal=oracle.max_window(window) <= 50)


def test_composed_epsilon_matches_section_5_1():
    a = DeterministicWave(0.1, 100, 1000)
    b = DeterministicWave(0.1, 100, 1000)
    a.update(np.arange(0, 100, 2))
    b.update(np.arange(1, 100, 2))
    a.merge(b)
    assert a.eta == pytest.approx(0.1)
    assert a.query(50, 99).epsilon == pytest.approx(0.1 + 0.1 + 0.01)  # ε + ε' + εε'
    c = DeterministicWave(0.1, 100, 1000)
    c.update(np.arange(0, 100, 3))
    c.merge(a)
    assert c.query(50, 99).epsilon == pytest.approx(1.1**3 - 1)
    # a part with no events in the window adds no error
    d = DeterministicWave(0.1, 100, 1000)
    d.update(np.array([0, 1]))
    e = DeterministicWave(0.1, 100, 1000)
    e.update(np.array([500, 501]))
    assert d.merge(e).eta == 0.0 and d.clock == 501


def test_duplicated_positions_across_batches():
    """Corollary 1: many items on one tick, arriving in several batches."""
    sk = DeterministicWave(0.1, 10, 10**6)
    ticks, weights = [], []
    rng = np.random.default_rng(5)
    for t in range(0, 200, 3):
        for _ in range(int(rng.integers(1, 6))):
            w = rng.integers(0, 20, int(rng.integers(1, 30)))
            sk.update(np.full(w.size, t), w)
            ticks.append(np.full(w.size, t))
            weights.append(w)
    oracle = Oracle(np.concatenate(ticks), np.concatenate(weights))
    for lo in range(sk.clock - 10, sk.clock + 1):
        check_query(sk, oracle, lo, sk.clock)


def test_rebase_keeps_sums_exact():
    """Partial sums are shifted before int64 overflow; the answers do not change."""
    u = 2**58
    sk = DeterministicWave(0.05, 3, u)
    rng = np.random.default_rng(1)
    ticks = np.sort(rng.integers(0, 2000, 400))
    ticks = np.unique(ticks)
    weights = rng.integers(2**50, 2**55, ticks.size)
    oracle = Oracle(ticks, weights)
    for i in range(0, ticks.size, 37):
        sk.update(ticks[i:i + 37], weights[i:i + 37])
    assert sum(int(x) for x in weights) > 2**62  # the lifetime total passed int64's range
    assert oracle.max_window(3) <= u
    for lo in range(sk.clock - 3, sk.clock + 1):
        check_query(sk, oracle, lo, sk.clock)
    assert DeterministicWave.from_bytes(sk.to_bytes()).to_bytes() == sk.to_bytes()


def test_specific_corruptions_are_refused():
    sk = small_wave()
    blob = sk.to_bytes()
    n = sk.items
    o = 16 + 76

    def refused(offset, value, fmt="<i8"):
        bad = bytearray(blob)
        raw = np.array([value], dtype=fmt).tobytes()
        bad[offset: offset + len(raw)] = raw
        with pytest.raises(CorruptSketchError):
            DeterministicWave.from_bytes(bytes(bad))

    refused(16, 0.0, "<f8")  # epsilon
    refused(16 + 16, 2**60)  # U above 2^58
    refused(o + 8 * n, 0)  # a stored value of 0
    refused(o + 16 * n, 10**12)  # a partial sum above the total
    refused(o, -10**6)  # an item before the window
    refused(o + 24 * n, 200, "u1")  # a level out of range
    bad = bytearray(blob)
    bad[16 + 56: 16 + 64] = np.array([np.nan]).tobytes()
    with pytest.raises(CorruptSketchError):
        DeterministicWave.from_bytes(bytes(bad))


def test_invalid_input_is_refused():
    sk = DeterministicWave(0.1, 100, 1000)
    for bad in ([-1], [1.5], [np.nan], [1001]):
        with pytest.raises(SketchError):
            sk.update(np.array([1]), np.array(bad))
    with pytest.raises(SketchError):
        sk.update(np.array([1.0]))
    with pytest.raises(SketchError):
        sk.update(np.array([-2**62]))
    for args in ((0.0, 1, 10), (1.0, 1, 10), (0.1, -1, 10), (0.1, 1, 0), (0.1, 1, 2**59)):
        with pytest.raises(SketchError):
            DeterministicWave(*args)
    assert sk.is_empty and sk.query(0, 10).upper == 0
    sk.update(np.array([100]), np.array([4.0]))  # integral floats are fine
    with pytest.raises(SketchError):
        sk.query(-1, 100)
    with pytest.raises(SketchError):
        sk.query(50, 40)
    assert sk.query(0, 100).estimate == 4 and sk.query(101, 200).upper == 0


def test_sizing_helpers_and_levels():
    assert wave_levels(0.1, 1) == 1
    # the top level spans at least U: k·2^(ℓ−1) >= U (Corollary 1)
    for eps in (0.01, 0.05, 0.1, 0.3):
        for u in (1, 10, 10**6, 2**40):
            lv = wave_levels(eps, u)
            k = DeterministicWave(eps, 5, u)._k
            assert k * 2 ** (lv - 1) >= u or lv == 1
            assert lv == 1 or k * 2 ** (lv - 2) < u
    assert suggest_max_window_weight(2.5, 99, 10) == 2500
    sk = DeterministicWave(0.07, 5, 100)
    assert sk.epsilon_wave == pytest.approx(1 / 15) and sk.epsilon_wave <= 0.07


@SETTINGS
@given(streams(2000), EPS, st.sampled_from([3, 60, 2000]))
def test_reconstructed_log_is_within_rho(data, eps, window):
    """ECM §5.1 Lemma 1 for waves: the log read off a wave errs by at most ρ·x at any lo."""
    ticks, weights, rng = data
    sk = DeterministicWave(eps, window, 2**50)
    feed(sk, ticks, weights, rng)
    if not ticks.size:
        return
    oracle = Oracle(ticks, weights)
    pt, pw, rho = sk._reconstruct(sk.clock)
    assert rho <= sk.epsilon_wave * (1 + 1e-12)
    order = np.argsort(pt)
    rebuilt = Oracle(pt[order], pw[order])
    for lo in range(sk.clock - window, sk.clock + 1, max(1, window // 60)):
        truth = oracle(lo, sk.clock)
        assert abs(rebuilt(lo, sk.clock) - truth) <= rho * truth
