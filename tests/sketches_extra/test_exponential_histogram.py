"""Exponential histogram against an exact oracle: the deterministic bound never fails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, SketchError
from sketches_extra.exponential_histogram import ExponentialHistogram, max_buckets, suggest_epsilon
from tests.sketches_extra.in_order import EPS, SETTINGS, Oracle, check_query, feed, queries, small_histogram, streams


@SETTINGS
@given(streams(), EPS, st.sampled_from([0, 1, 7, 50, 1000, 10**5]))
def test_bounds_hold_at_every_point_of_the_stream(data, eps, window):
    ticks, weights, rng = data
    oracle = Oracle(ticks, weights)
    sk = ExponentialHistogram(eps, window)

    def check(sk, j):
        part = Oracle(ticks[:j], weights[:j])
        for lo, hi in queries(sk, rng, 10):
            e = check_query(sk, part, lo, hi)
            if sk.depth == 0 and hi >= sk.clock and weights[:j].sum() < 2**50 and np.all(weights == np.floor(weights)):
                assert e.epsilon == eps  # exact arithmetic: no rounding widening

    feed(sk, ticks, weights, rng, check)
    if ticks.size:
        for lo, hi in queries(sk, rng):
            check_query(sk, oracle, lo, hi)
        assert sk.nbytes == len(sk.to_bytes())


@SETTINGS
@given(streams(), EPS, st.sampled_from([3, 100, 5000]))
def test_bucket_count_within_space_bound(data, eps, window):
    ticks, weights, rng = data
    sk = ExponentialHistogram(eps, window)
    feed(sk, ticks, np.ones(ticks.size), rng)
    assert sk.buckets <= max_buckets(eps, window + 1 if ticks.size else 1)
    if ticks.size:
        # the window holds at most window+1 ticks' worth of events, one bucket per tick
        span = ticks[ticks >= sk.clock - window]
        assert sk.buckets <= max_buckets(eps, span.size)


def test_composed_epsilon_matches_section_5_1():
    eps = 0.05
    a, b = ExponentialHistogram(eps, 100), ExponentialHistogram(eps, 100)
    a.update(np.arange(0, 100, 2))
    b.update(np.arange(1, 100, 2))
    a.merge(b)
    assert a.depth == 1
    e = a.query(50, 99)
    assert e.epsilon == pytest.approx(eps + eps + eps * eps, rel=1e-9)  # ε + ε' + εε'
    c = ExponentialHistogram(eps, 100)
    c.update(np.arange(0, 100, 3))
    c.merge(a)
    assert c.depth == 2
    assert c.query(50, 99).epsilon == pytest.approx((1 + eps) ** 3 - 1, rel=1e-9)
    target = 0.1
    per = suggest_epsilon(target, depth=3)
    assert (1 + per) ** 4 - 1 == pytest.approx(target)


def test_specific_corruptions_are_refused():
    sk = small_histogram()
    blob = bytearray(sk.to_bytes())
    o = 16 + 48  # first bucket start
    m = sk.buckets
    w_off = o + 16 * m

    def refused(mutate):
        bad = bytearray(blob)
        mutate(bad)
        with pytest.raises(CorruptSketchError):
            ExponentialHistogram.from_bytes(bytes(bad))

    refused(lambda b: b.__setitem__(slice(w_off, w_off + 8), np.float64(-1).tobytes()))
    refused(lambda b: b.__setitem__(slice(w_off, w_off + 8), np.float64(np.nan).tobytes()))
    refused(lambda b: b.__setitem__(slice(16, 24), np.float64(1.5).tobytes()))  # epsilon
    refused(lambda b: b.__setitem__(slice(o, o + 8), np.int64(10**6).tobytes()))  # start > end
    refused(lambda b: b.__setitem__(slice(16 + 40, 16 + 48), np.uint64(m + 1).tobytes()))
    # a huge multi-tick oldest bucket breaks invariant 1
    def huge(b):
        b[o: o + 8] = np.int64(sk.clock - sk.window).tobytes()
        b[w_off: w_off + 8] = np.float64(1e6).tobytes()
    refused(huge)


def test_invalid_input_is_refused():
    sk = ExponentialHistogram(0.1, 100)
    for bad in ([-1.0], [np.nan], [np.inf]):
        with pytest.raises(SketchError):
            sk.update(np.array([1]), np.array(bad))
    with pytest.raises(SketchError):
        sk.update(np.array([1.5]))
    with pytest.raises(SketchError):
        sk.update(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(SketchError):
        sk.update(np.array([2**62]))
    with pytest.raises(SketchError):
        sk.update(np.array([1, 2]), np.array([1e300, 1e300]))
    for eps, window in ((0.0, 1), (1.0, 1), (0.1, -1), (0.1, 1.5)):
        with pytest.raises(SketchError):
            ExponentialHistogram(eps, window)
    assert sk.is_empty
    assert sk.query(0, 10).estimate == 0.0
    sk.update(np.array([100]))
    with pytest.raises(SketchError):
        sk.query(-1, 100)  # before clock - window
    with pytest.raises(SketchError):
        sk.query(50, 40)
    assert sk.query(0, 100).estimate == 1 and sk.query(101, 200).upper == 0


@SETTINGS
@given(streams(2000), EPS, st.sampled_from([3, 60, 2000]))
def test_reconstructed_log_is_within_epsilon(data, eps, window):
    """ECM §5.1 Lemma 1: half of each bucket at each end errs by at most ε·x at any lo."""
    from sketches_extra._eh_kernels import reconstruct

    ticks, weights, rng = data
    sk = ExponentialHistogram(eps, window)
    feed(sk, ticks, np.floor(weights), rng)
    if not ticks.size:
        return
    oracle = Oracle(ticks, np.floor(weights))
    m = sk.buckets
    pt, pw = reconstruct(sk._st[:m], sk._en[:m], sk._w[:m], m, sk.clock - window)
    rebuilt = Oracle(pt, pw)
    for lo in range(sk.clock - window, sk.clock + 1, max(1, window // 60)):
        truth = oracle(lo, sk.clock)
        assert abs(rebuilt(lo, sk.clock) - truth) <= eps * truth * (1 + 1e-12)
