"""Exponential histogram against an exact oracle: the deterministic bound never fails."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, SketchError
from sketches.extra.exponential_histogram import ExponentialHistogram, max_buckets, suggest_epsilon
from tests.strategies import merge_tree

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EPS = st.sampled_from([0.01, 0.05, 0.1, 0.3])


class Oracle:
    """All events, answered exactly (math.fsum is the correctly rounded real sum)."""

    def __init__(self, ticks, weights):
        order = np.argsort(ticks, kind="stable")
        self.t = np.asarray(ticks)[order]
        self.w = np.asarray(weights, dtype=np.float64)[order]

    def __call__(self, lo, hi):
        i, j = np.searchsorted(self.t, lo, "left"), np.searchsorted(self.t, hi, "right")
        return math.fsum(self.w[i:j])


@st.composite
def streams(draw, max_n=2500):
    """In-order streams: random gaps, bursts on one tick, duplicates, big and zero weights."""
    # sizes are drawn from a ladder: hypothesis alone would mostly draw tiny streams
    n = min(max_n, draw(st.sampled_from([0, 1, 3, 20, 200, 1000, 2500])) + draw(st.integers(0, 9)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = draw(st.sampled_from(["random", "burst", "sparse", "dense"]))
    gaps = {
        "random": rng.integers(0, 5, n),
        "burst": np.where(rng.random(n) < 0.9, 0, rng.integers(1, 50, n)),
        "sparse": rng.integers(0, 400, n),
        "dense": (rng.random(n) < 0.5).astype(np.int64),
    }[shape]
    ticks = np.cumsum(gaps) + draw(st.integers(-10**6, 10**6))
    kind = draw(st.sampled_from(["ones", "ints", "real", "heavy", "zeros", "mixed"]))
    weights = {
        "ones": np.ones(n),
        "ints": rng.integers(0, 1000, n).astype(np.float64),
        "real": rng.random(n) * 10,
        "heavy": rng.pareto(0.7, n) * 1e12,
        "zeros": np.zeros(n),
        "mixed": np.where(rng.random(n) < 0.3, 0.0, rng.random(n)) * 10.0 ** rng.integers(-30, 200, n),
    }[kind]
    return ticks.astype(np.int64), weights, rng


def feed(sketch, ticks, weights, rng, check=None):
    """Feed in random batch sizes, each batch shuffled (the sketch sorts a batch)."""
    i = 0
    while i < ticks.size:
        j = min(ticks.size, i + int(rng.integers(1, 700)))
        perm = rng.permutation(j - i)
        sketch.update(ticks[i:j][perm], weights[i:j][perm])
        i = j
        if check is not None:
            check(sketch, j)


def check_query(sk, oracle, lo, hi):
    e = sk.query(lo, hi)
    truth = oracle(lo, min(hi, sk.clock))
    assert e.lower <= truth <= e.upper, (lo, hi, truth, e)
    assert e.lower <= e.estimate <= e.upper
    assert e.confidence == 1.0 and e.method == "exponential-histogram"
    if hi >= sk.clock:
        assert e.kind == "relative"
        # the proven relative bound, and the bracket is no wider than it allows
        assert abs(e.estimate - truth) <= e.epsilon * truth * (1 + 1e-9) + 1e-300
        if e.epsilon < 1:
            assert e.upper - e.lower <= 2 * e.epsilon * truth / (1 - e.epsilon) * (1 + 1e-9) + 1e-300
    else:
        assert e.kind == "additive"
        whole = oracle(lo, sk.clock)
        assert abs(e.estimate - truth) <= e.epsilon * whole * (1 + 1e-9) + 1e-300
    return e


def queries(sk, rng, k=40):
    """Window edges, every lo for small windows, and random ranges."""
    c, w = sk.clock, sk.window
    los = list(range(c - w, c + 1)) if w <= 60 else [c - w, c - w + 1, c - 1, c]
    los += [int(x) for x in rng.integers(c - w, c + 1, k)]
    out = [(lo, c) for lo in los]
    for lo in rng.integers(c - w, c + 1, k):
        out.append((int(lo), int(rng.integers(lo, c + 2))))
    return out + [(c + 1, c + 5), (c - w, c + 10**6)]


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


def split(ticks, weights, rng, parts, how):
    """Order-preserving split of one stream into ``parts`` in-order sub-streams."""
    if how == "random":
        owner = rng.integers(0, parts, ticks.size)
    else:  # contiguous time ranges: the exact (concatenating) merge
        owner = np.minimum(np.arange(ticks.size) * parts // max(ticks.size, 1), parts - 1)
    return [(ticks[owner == i], weights[owner == i]) for i in range(parts)]


@SETTINGS
@given(streams(1500), EPS, st.sampled_from([5, 300, 10**5]), st.integers(2, 64),
       st.sampled_from(["flat", "chain", "balanced", "random"]), st.sampled_from(["random", "time"]))
def test_merged_bounds_hold(data, eps, window, parts, shape, how):
    ticks, weights, rng = data
    pieces = split(ticks, weights, rng, parts, how)
    sketches = []
    for t, w in pieces:
        s = ExponentialHistogram(eps, window)
        s.update(t, w)
        sketches.append(s)
    root = merge_tree(sketches, shape, rng)
    if not ticks.size:
        assert root.is_empty
        return
    assert root.clock == ticks.max()
    oracle = Oracle(ticks, weights)
    for lo, hi in queries(root, rng, 20):
        e = check_query(root, oracle, lo, hi)
        if hi >= root.clock:
            # the composed epsilon is the one the state's depth gives
            assert e.epsilon >= root.epsilon_bound - 1e-12
            assert e.epsilon <= root.epsilon_bound * (1 + 1e-6) + 1e-12
    if how == "time" and shape != "random":
        assert root.depth == 0  # time-disjoint parts concatenate without error
    # the aggregate keeps working as a histogram: later events fold in
    later = np.arange(root.clock, root.clock + 50)
    root.update(later, np.ones(50))
    oracle = Oracle(np.concatenate([ticks, later]), np.concatenate([weights, np.ones(50)]))
    for lo, hi in queries(root, rng, 5):
        check_query(root, oracle, lo, hi)


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


@SETTINGS
@given(streams(800), EPS, st.sampled_from([0, 20, 10**4]))
def test_bytes_round_trip(data, eps, window):
    ticks, weights, rng = data
    sk = ExponentialHistogram(eps, window)
    feed(sk, ticks, weights, rng)
    blob = sk.to_bytes()
    back = ExponentialHistogram.from_bytes(blob)
    assert back.to_bytes() == blob
    assert len(blob) == sk.nbytes == back.nbytes
    assert back.is_empty == sk.is_empty and back.clock == sk.clock
    if ticks.size:
        for lo, hi in queries(sk, rng, 10):
            assert back.query(lo, hi) == sk.query(lo, hi)
        # both keep evolving identically
        more = np.arange(sk.clock, sk.clock + 30)
        sk.update(more)
        back.update(more)
        assert back.to_bytes() == sk.to_bytes()


def small_sketch():
    sk = ExponentialHistogram(0.2, 40)
    sk.update(np.array([1, 2, 2, 5, 9, 10, 11, 30, 31, 40]), np.array([1, 2, 0.5, 3, 1, 1, 7, 1, 1, 2.0]))
    return sk


def test_corrupt_bytes_never_crash_or_break_invariants():
    blob = bytearray(small_sketch().to_bytes())
    rng = np.random.default_rng(7)
    for pos in range(len(blob)):
        for _ in range(3):
            bad = bytearray(blob)
            bad[pos] ^= int(rng.integers(1, 256))
            try:
                sk = ExponentialHistogram.from_bytes(bytes(bad))
            except CorruptSketchError:
                continue
            # accepted blobs are valid sketches: queries work and keep their shape
            e = sk.query(sk.clock - sk.window, sk.clock) if not sk.is_empty else None
            assert e is None or e.lower <= e.estimate <= e.upper
    with pytest.raises(CorruptSketchError):
        ExponentialHistogram.from_bytes(b"XXXX" + bytes(blob[4:]))
    with pytest.raises(CorruptSketchError):
        ExponentialHistogram.from_bytes("not bytes")


def test_specific_corruptions_are_refused():
    sk = small_sketch()
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


def test_out_of_order_is_refused_and_leaves_state_unchanged():
    sk = ExponentialHistogram(0.1, 100)
    sk.update(np.array([5, 3, 9]))  # within a batch order does not matter
    before = sk.to_bytes()
    with pytest.raises(SketchError, match="out-of-order"):
        sk.update(np.array([10, 8]))
    assert sk.to_bytes() == before
    sk.update(np.array([9, 9]))  # the clock tick itself is fine (duplicated positions)
    assert sk.query(9, 9).estimate == 3


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


def test_copy_is_independent_and_repr_is_readable():
    sk = small_sketch()
    cp = sk.copy()
    cp.update(np.array([41, 42]))
    assert sk.clock == 40 and cp.clock == 42
    assert "ExponentialHistogram(epsilon=0.2, window=40" in repr(sk)
    assert not sk.is_empty and ExponentialHistogram(0.1, 5).is_empty


def test_estimate_is_useful_not_trivial():
    """A sketch answering [0, inf] would fail: the bracket width tracks ε on a long stream."""
    rng = np.random.default_rng(3)
    ticks = np.sort(rng.integers(0, 10**6, 200_000))
    for eps in (0.01, 0.1):
        sk = ExponentialHistogram(eps, 10**5)
        sk.update(ticks)
        for lo in rng.integers(sk.clock - 10**5, sk.clock, 50):
            truth = np.count_nonzero(ticks >= lo)
            e = sk.query(int(lo), sk.clock)
            assert e.lower <= truth <= e.upper
            assert e.upper - e.lower <= 2 * eps * truth
        assert sk.buckets < 6 / eps * math.log(10**5)


@SETTINGS
@given(streams(2000), EPS, st.sampled_from([3, 60, 2000]))
def test_reconstructed_log_is_within_epsilon(data, eps, window):
    """ECM §5.1 Lemma 1: half of each bucket at each end errs by at most ε·x at any lo."""
    from sketches.extra._eh_kernels import reconstruct

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
