"""WBMH with exact value cells (§3.2) against an exact oracle: Theorem 3.3 never fails."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import HEADER_SIZE, CorruptSketchError, SketchError
from sketches.decayed import DecayedRelativeSketch, region_count
from sketches.decayed import _wbmh_kernels as K
from sketches.decayed.decay import NoDecay, Polynomial, parse_decay
from sketches.decayed.schedule import FindRegions, ReferenceWBMH, capacities, merge_time_after, set_boundaries
from tests.strategies import arrival_order, merge_tree

VMIN, VMAX, RES = -10.0, 90.0, 0.5


def quantized(values):
    """The grid semantics, computed independently: left edge of the cell, last cell closed."""
    j = np.floor((values - VMIN) / RES)
    return VMIN + np.minimum(j, math.floor((VMAX - VMIN) / RES)) * RES


def oracle(ticks, values, weights, f, at, mask):
    g = f(np.maximum(at - ticks, 0))
    return float((weights * g * mask(quantized(values))).sum())


@st.composite
def streams(draw, max_n=2500):
    n = draw(st.integers(0, max_n))
    span = draw(st.sampled_from([1, 10, 1000, 100_000, 2**40]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ticks = arrival_order(draw, rng, n, span, ("random", "late", "burst", "reverse", "sorted"))
    vk = draw(st.sampled_from(["grid", "off-grid", "few", "edges"]))
    values = {
        "grid": VMIN + rng.integers(0, 201, n) * RES,
        "off-grid": rng.uniform(VMIN, VMAX, n),
        "few": rng.integers(0, 3, n) * 40.0 + VMIN,
        "edges": np.where(rng.random(n) < 0.5, VMIN, VMAX),
    }[vk]
    wk = draw(st.sampled_from(["ones", "real", "heavy", "zeros"]))
    weights = {
        "ones": np.ones(n),
        "real": rng.exponential(3.0, n),
        "heavy": np.where(rng.random(n) < 0.01, 1e12, rng.random(n)),
        "zeros": np.where(rng.random(n) < 0.5, 0.0, 1.0),
    }[wk]
    return ticks.astype(np.int64), values, weights, seed


DECAYS = [NoDecay(), Polynomial(0.5), Polynomial(1.5), Polynomial(3.0)]


def _feed(sk, ticks, values, weights, rng, max_chunks=8):
    for part in np.array_split(np.arange(ticks.size), rng.integers(1, max_chunks + 1)):
        sk.update(ticks[part], values[part], weights[part])


def _check(sk, ticks, values, weights, rng):
    f, eps = sk.decay, sk.epsilon
    if ticks.size == 0:
        e = sk.query(0.0, 5)
        assert (e.estimate, e.lower, e.upper, e.confidence) == (0.0, 0.0, 0.0, 1.0)
        return
    clock = int(ticks.max())
    assert sk.clock == clock
    for at in {clock, clock + 1, clock + int(rng.integers(0, 10**6)), int(np.median(ticks)), 0}:
        taus = [VMIN - 5, VMIN, VMIN + RES, float(rng.uniform(VMIN, VMAX)), 40.0, 40.25, VMAX, VMAX + 1]
        for tau in taus:
            s = oracle(ticks, values, weights, f, at, lambda q: q >= tau)
            e = sk.query(tau, at)
            tol = 1e-12 * s + 1e-300
            assert e.lower - tol <= s <= e.upper + tol, (at, tau, s, e)
            assert e.confidence == 1.0 and e.kind == "relative" and e.epsilon == eps
            if at >= clock:  # Theorem 3.3
                assert (1 - eps) * s - tol <= e.lower <= e.estimate <= e.upper <= (1 + eps) * s + tol
                assert abs(e.estimate - s) <= eps / 2 * s * (1 + 1e-9) + tol
        lo, hi = sorted(rng.uniform(VMIN - 1, VMAX + 1, 2))
        s = oracle(ticks, values, weights, f, at, lambda q: (q >= lo) & (q <= hi))
        e = sk.range_sum(lo, hi, at)
        assert e.lower - 1e-12 * s <= s <= e.upper + 1e-12 * s
        if at >= clock:
            assert (1 - eps) * s * (1 - 1e-12) <= e.lower and e.upper <= (1 + eps) * s * (1 + 1e-12) + 1e-300


def _invariant(sk):
    """Fact 3.1 on the actual buckets: f(c − L')/f(c − F) <= 1 + ε at the clock."""
    if sk.is_empty:
        return
    _, L = sk._buckets(sk._starts, sk.clock)
    newest = np.minimum(L, sk.clock)
    r = sk.decay(sk.clock - newest) / sk.decay(sk.clock - sk._starts)
    assert np.all(r <= (1 + sk.epsilon) * (1 + 1e-12))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from(DECAYS), st.sampled_from([0.02, 0.1, 0.5]))
def test_theorem_3_3_is_never_violated(stream, decay, eps):
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    sk = DecayedRelativeSketch(eps, decay, VMIN, VMAX, resolution=RES)
    _feed(sk, ticks, values, weights, rng)
    _invariant(sk)
    _check(sk, ticks, values, weights, rng)
    if ticks.size:  # O(β) buckets (Theorem 3.5)
        beta = region_count(decay, eps, sk.clock)
        assert sk.buckets <= 2 * beta + 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_n=1500), st.integers(2, 64), st.sampled_from(["chain", "balanced", "random"]),
       st.sampled_from(DECAYS))
def test_merges_equal_the_single_pass_sketch(stream, nparts, shape, decay):
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, nparts, ticks.size)
    parts = []
    for p in range(nparts):
        sk = DecayedRelativeSketch(0.1, decay, VMIN, VMAX, resolution=RES)
        m = owner == p
        _feed(sk, ticks[m], values[m], weights[m], rng)
        parts.append(sk)
    merged = merge_tree(parts, shape, rng)
    single = DecayedRelativeSketch(0.1, decay, VMIN, VMAX, resolution=RES)
    _feed(single, ticks, values, weights, rng)
    assert merged.clock == single.clock
    assert np.array_equal(merged._starts, single._starts)
    assert np.allclose(merged._M, single._M, rtol=1e-12, atol=0)
    _invariant(merged)
    _check(merged, ticks, values, weights, rng)


@pytest.mark.parametrize("alpha, eps", [(1.0, 0.5), (1.5, 0.1), (0.5, 0.05), (3.0, 0.3), (0.2, 0.01), (1.5, 0.9)])
def test_closed_form_partition_is_findregions_driven_processelement(alpha, eps):
    """§3.2.3/§3.2.5: the partition the sketch computes in closed form is, at every tick,
    the one PROCESSELEMENT builds with dummy elements and the FINDREGIONS hash table."""
    T = 1500
    d = Polynomial(alpha)
    b, cap = set_boundaries(d, eps, T + 2), None
    cap = capacities(b)
    kb = K.poly_boundaries(alpha, eps, T + 2)
    assert np.array_equal(b, kb) and np.array_equal(cap, K.capacities(kb))
    ref = ReferenceWBMH(b, cap)
    for t in range(T):
        ref.advance()
        if t < 300 or t % 5 == 0:
            F, L = K.buckets_of(np.arange(t + 1), t, kb, K.capacities(kb), False)
            assert sorted(set(zip(F.tolist(), L.tolist()))) == ref.partition(), t


def test_findregions_schedule_is_lemma_3_2():
    b = set_boundaries(Polynomial(1.2), 0.2, 5000)
    cap = capacities(b)
    fr = FindRegions(b, cap, 0)
    seen = {}
    for t in range(5000):
        for g in fr.find(t):
            seen.setdefault(g, []).append(t)
    for i in range(1, len(b) - 1):
        m = int(b[i + 1] - b[i]) // int(cap[i])
        want = [int(b[i]) + (k * m + j) * int(cap[i]) - 1 for k in range(5000) for j in range(2, m + 1)]
        want = [x for x in want if x < 5000] if m >= 2 else []
        assert seen.get(i, []) == sorted(want)
        for t in range(0, 5000, 97):
            nxt = merge_time_after(i, t, b, cap)
            later = [x for x in sorted(want) if x >= t]
            assert nxt == (later[0] if later else nxt) or (m < 2 and nxt is None)


def test_idle_gaps_and_huge_clock_jumps():
    """Empty buckets for idle ticks are implicit: a jump of 2^40 ticks costs nothing."""
    sk = DecayedRelativeSketch(0.1, Polynomial(1.5), VMIN, VMAX, resolution=RES)
    ticks = np.array([0, 1, 2, 2**20, 2**40, 2**40 + 5, 3], dtype=np.int64)
    values = np.array([0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    for i in range(ticks.size):
        sk.update(ticks[i : i + 1], values[i : i + 1])
    _invariant(sk)
    _check(sk, ticks, values, np.ones(ticks.size), np.random.default_rng(0))
    assert sk.buckets <= 7


def test_no_decay_is_one_bucket_and_exact():
    sk = DecayedRelativeSketch(0.01, {"kind": "none"}, VMIN, VMAX, resolution=RES)
    rng = np.random.default_rng(1)
    ticks = rng.integers(0, 10**9, 5000)
    values = VMIN + rng.integers(0, 201, 5000) * RES
    sk.update(ticks, values)
    assert sk.buckets == 1
    e = sk.query(20.0, int(ticks.max()))
    assert e.lower == e.upper or abs(e.upper - e.lower) < 1e-9 * e.upper
    assert abs(e.estimate - (values >= 20).sum()) < 1e-6


def test_quantization_semantics():
    sk = DecayedRelativeSketch(0.1, {"kind": "none"}, 0, 10, resolution=3)
    assert sk.cells == 4 and sk.edges.tolist() == [0, 3, 6, 9]
    assert sk.quantize([0, 2.99, 3, 8.9, 9, 10]).tolist() == [0, 0, 3, 6, 9, 9]
    sk.update([1, 2, 3], [2.5, 5.0, 10.0])
    assert sk.query(3.0, 3).estimate == 2.0  # 5 → 3 and 10 → 9 count, 2.5 → 0 does not
    assert sk.query(3.1, 3).estimate == 1.0
    odd = DecayedRelativeSketch(0.1, {"kind": "none"}, 0.1, 0.7, resolution=0.1)
    v = np.array([0.1, 0.2, 0.3, 0.30000000000000004, 0.7])
    q = odd.quantize(v)
    assert np.all(q <= v) and np.all(v - q < 0.1 + 1e-12)
    with pytest.raises(SketchError):
        DecayedRelativeSketch(0.1, {"kind": "none"}, 0, 1, resolution=1e-6)


@pytest.mark.parametrize("bad", [
    dict(ticks=[1.5], values=[1.0]), dict(ticks=[-1], values=[1.0]), dict(ticks=[1], values=[91.0]),
    dict(ticks=[1], values=[1.0], weights=[-1.0]), dict(ticks=[1, 2], values=[1.0]),
])
def test_bad_batches_are_refused(bad):
    sk = DecayedRelativeSketch(0.1, {"kind": "none"}, VMIN, VMAX)
    with pytest.raises(SketchError):
        sk.update(**bad)
    assert sk.is_empty


def test_bad_queries_and_parameters_are_refused():
    sk = DecayedRelativeSketch(0.1, {"kind": "polynomial", "alpha": 1}, VMIN, VMAX)
    for args in [(float("nan"), 3), (1.0, -1), (1.0, 2.5)]:
        with pytest.raises(SketchError):
            sk.query(*args)
    with pytest.raises(SketchError):
        sk.range_sum(5, 4, 1)
    for args in [(0, NoDecay(), 0, 1), (1, NoDecay(), 0, 1), (0.1, NoDecay(), 1, 0), (0.1, NoDecay(), 0, 1, 0.0)]:
        with pytest.raises(SketchError):
            DecayedRelativeSketch(*args)


def _small():
    sk = DecayedRelativeSketch(0.2, Polynomial(1.5), VMIN, VMAX, resolution=RES)
    rng = np.random.default_rng(0)
    sk.update(rng.integers(0, 300, 60), VMIN + rng.integers(0, 201, 60) * RES, rng.exponential(1.0, 60))
    return sk


def test_a_read_back_sketch_answers_the_same():  # round trips in general: test_contract
    sk = _small()
    assert DecayedRelativeSketch.from_bytes(sk.to_bytes()).query(10, 400) == sk.query(10, 400)
    assert "decay=Polynomial(alpha=1.5)" in repr(sk)
    empty = DecayedRelativeSketch(0.2, NoDecay(), 0, 1)
    assert DecayedRelativeSketch.from_bytes(empty.to_bytes()).is_empty


def _patch(blob, offset, fmt, value):
    b = bytearray(blob)
    struct.pack_into(fmt, b, HEADER_SIZE + offset, value)
    return bytes(b)


def test_corrupt_fields_are_refused():
    sk = _small()
    blob = sk.to_bytes()
    head = 8 + 1 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 4
    first = head  # first bucket: i64 start | u32 n | cells | weights
    n0 = int(np.count_nonzero(sk._M[0]))
    cells0 = first + 12
    weights0 = cells0 + 4 * n0
    bad = [
        _patch(blob, 0, "<d", 0.0),  # epsilon
        _patch(blob, 8, "<B", 2),  # exponential decay: refused by Theorem 4.2
        _patch(blob, 8, "<B", 9),  # unknown decay
        _patch(blob, 9, "<d", -1.0),  # alpha
        _patch(blob, 41, "<d", 1e-9),  # resolution: too many cells
        _patch(blob, 49, "<q", -5),  # clock
        _patch(blob, 49, "<q", int(sk._starts[-1]) - 1),  # a bucket after the clock
        _patch(blob, 65, "<I", sk.buckets + 1),  # bucket count
        _patch(blob, first, "<q", int(sk._starts[0]) + 1),  # not a bucket start at this clock
        _patch(blob, first + 8, "<I", 10**6),  # cell count
        _patch(blob, cells0, "<I", 10**5),  # cell out of the grid
        _patch(blob, weights0, "<d", 0.0),  # zero weight stored
        _patch(blob, weights0, "<d", float("nan")),
    ]
    if n0 > 1:
        bad.append(_patch(blob, cells0 + 4, "<I", int(np.flatnonzero(sk._M[0])[0])))  # cells unsorted
    for b in bad:
        with pytest.raises(CorruptSketchError):
            DecayedRelativeSketch.from_bytes(b)


def test_region_count_matches_theorem_3_5():
    """At most β = ⌈log_{1+ε}(f(0)/f(n))⌉ regions cover ages up to n (f(b_i) < f(0)/(1+ε)^i)."""
    for alpha, eps, n in ((1.5, 0.1, 10**6), (1.5, 0.05, 10**9), (0.5, 0.2, 10**4), (3.0, 0.01, 10**5)):
        beta = region_count(Polynomial(alpha), eps, n)
        bound = math.ceil(alpha * math.log(n + 1) / math.log(1 + eps))
        assert 0.5 * bound <= beta <= bound + 1
    assert region_count(NoDecay(), 0.1, 10**6) == 1
    with pytest.raises(SketchError):
        region_count(parse_decay({"kind": "exponential", "half_life": 3}), 0.1, 10)
