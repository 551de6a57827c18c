"""Multi-level sample (§3.1) against an exact oracle: |Ŝ − S| <= ε·S₀ at rate 1 − δ."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import HEADER_SIZE, CorruptSketchError, Family, IncompatibleSketchError, SketchError, pack_header
from sketches.decayed import DecayedAdditiveSketch, suggest_capacity
from sketches.decayed.decay import parse_decay
from tests.strategies import arrival_order, binom_upper, merge_tree

VMIN, VMAX = 0.0, 100.0
SPECS = [
    {"kind": "none"},
    {"kind": "sliding", "window": 0},
    {"kind": "sliding", "window": 50},
    {"kind": "sliding", "window": 5000},
    {"kind": "exponential", "half_life": 20.0},
    {"kind": "polynomial", "alpha": 1.0},
    {"kind": "finite_exponential", "half_life": 300.0, "mu": 0.01},
    {"kind": "super_exponential", "scale": 400.0, "beta": 2.0},
]


def oracle(ticks, values, weights, decay, at, mask):
    g = parse_decay(decay)(np.maximum(at - ticks, 0))
    return float((weights * g * mask(values)).sum()), float((weights * g).sum())


@st.composite
def streams(draw, max_n=6000):
    """Out-of-order streams: random, late, bursts on one tick, reversed; odd weights."""
    n = draw(st.integers(0, max_n))
    span = draw(st.sampled_from([1, 10, 1000, 100_000]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ticks = arrival_order(draw, rng, n, span)
    vk = draw(st.sampled_from(["uniform", "few", "edges"]))
    values = {
        "uniform": rng.uniform(VMIN, VMAX, n),
        "few": rng.integers(0, 5, n) * 25.0,
        "edges": np.where(rng.random(n) < 0.5, VMIN, VMAX),
    }[vk]
    wk = draw(st.sampled_from(["ones", "real", "heavy", "zeros", "tiny"]))
    weights = {
        "ones": np.ones(n),
        "real": rng.exponential(3.0, n),
        "heavy": np.where(rng.random(n) < 0.01, 1e12, rng.random(n)),
        "zeros": np.where(rng.random(n) < 0.5, 0.0, 1.0),
        "tiny": rng.uniform(1e-6, 2e-6, n),
    }[wk]
    return ticks.astype(np.int64), values, weights, seed


def _feed(sk, ticks, values, weights, rng, max_chunks=8):
    for part in np.array_split(np.arange(ticks.size), rng.integers(1, max_chunks + 1)):
        sk.update(ticks[part], values[part], weights[part])


def _check(sk, ticks, values, weights, rng, specs=None, strict=True):
    """Every query interval holds (δ = 1e-6 makes a failure a 1e-6 event); ε·S₀ is met."""
    if ticks.size == 0:
        for spec in SPECS:
            e = sk.query(spec, 0.0, 0)
            assert (e.estimate, e.lower, e.upper, e.confidence) == (0.0, 0.0, 0.0, 1.0)
        return
    top = int(ticks.max())
    floor = sk.max_total * 2.0**-62  # below this S₀ the ε claim is not made (module proof)
    for spec in specs or [SPECS[i] for i in rng.choice(len(SPECS), 3, replace=False)]:
        for at in {top, top + 37, int(np.median(ticks)), 0}:
            taus = [VMIN - 1, VMIN, float(rng.uniform(VMIN, VMAX)), 50.0, 75.0, VMAX, VMAX + 1]
            for tau in taus:
                s, s0 = oracle(ticks, values, weights, spec, at, lambda v: v >= tau)
                e = sk.query(spec, tau, at)
                tol = 1e-9 * s0 + 1e-300
                assert e.lower - tol <= s <= e.upper + tol, (spec, at, tau, s, e)
                assert e.kind == "additive" and e.confidence == 1 - sk.delta and e.epsilon == sk.epsilon
                if strict and s0 >= 1e4 * floor:
                    assert abs(e.estimate - s) <= sk.epsilon * s0 + tol, (spec, at, tau, s, s0, e)
                    eps = sk.epsilon
                    assert e.upper - e.lower <= 2 * eps * (1 + eps) / (1 - eps) * s0 + tol
            lo, hi = sorted(rng.uniform(VMIN, VMAX, 2))
            s, s0 = oracle(ticks, values, weights, spec, at, lambda v: (v >= lo) & (v <= hi))
            e = sk.range_sum(spec, lo, hi, at)
            assert e.lower - 1e-9 * s0 <= s <= e.upper + 1e-9 * s0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from([0.25, 0.5]), st.integers(1, 2**63))
def test_bounds_hold_on_adversarial_streams(stream, eps, sid):
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    sk = DecayedAdditiveSketch(eps, 1e-6, VMIN, VMAX, seed=seed % 7, max_total=1e13, stream=sid)
    _feed(sk, ticks, values, weights, rng)
    assert sk.stored <= 64 * sk.k and sk.is_empty == (ticks.size == 0)
    _check(sk, ticks, values, weights, rng)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_n=5000), st.integers(2, 64))
def test_merges_in_any_tree_shape_are_exact(stream, nparts):
    """Merge = union + re-scan: every tree shape gives the same sample, and it holds."""
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, nparts, ticks.size)
    results = []
    for shape in ("chain", "balanced", "random"):
        parts = []
        for p in range(nparts):
            sk = DecayedAdditiveSketch(0.5, 1e-6, VMIN, VMAX, seed=3, max_total=1e13, stream=1000 + p)
            m = owner == p
            _feed(sk, ticks[m], values[m], weights[m], np.random.default_rng(p))
            parts.append(sk)
        rng_shape = np.random.default_rng(seed + 1)
        order = rng_shape.permutation(nparts)
        results.append(merge_tree([parts[i] for i in order], shape, rng_shape))
    ref = results[0]
    for other in results[1:]:
        for name in ("_t", "_r", "_v", "_w", "_lev"):
            assert np.array_equal(getattr(ref, name), getattr(other, name))
        assert math.isclose(ref.total_weight, other.total_weight, rel_tol=1e-12)
    _check(ref, ticks, values, weights, rng)


def test_violation_rate_and_tightness_over_many_seeds():
    """Over 300 independent samples: violations <= δ (binomial, 1e-4), unbiased, tight.

    The bias check must be able to fail: an estimator scaled by 1.05 is rejected by it.
    """
    eps, delta, runs = 0.2, 0.1, 300
    rng = np.random.default_rng(12345)
    n = 3000
    ticks = rng.integers(0, 5000, n)
    ticks = ticks[np.argsort(ticks + rng.pareto(1.0, n) * 100)].astype(np.int64)
    values = rng.uniform(VMIN, VMAX, n)
    weights = np.where(rng.random(n) < 0.02, 50.0, rng.exponential(1.0, n))
    at = int(ticks.max())
    queries = [(spec, tau) for spec in (SPECS[0], SPECS[3], SPECS[4], SPECS[5]) for tau in (10.0, 50.0, 90.0)]
    truth = [oracle(ticks, values, weights, spec, at, lambda v, t=tau: v >= t) for spec, tau in queries]
    err = np.zeros((runs, len(queries)))
    inside = np.zeros((runs, len(queries)), bool)
    half = np.zeros((runs, len(queries)))
    for run in range(runs):
        sk = DecayedAdditiveSketch(eps, delta, VMIN, VMAX, max_total=1e7, stream=run + 1)
        _feed(sk, ticks, values, weights, np.random.default_rng(run))
        for q, (spec, tau) in enumerate(queries):
            e = sk.query(spec, tau, at)
            s, s0 = truth[q]
            err[run, q] = (e.estimate - s) / s0
            inside[run, q] = e.lower <= s <= e.upper
            half[run, q] = (e.upper - e.lower) / 2 / s0
    limit = binom_upper(runs, delta)
    assert ((np.abs(err) > eps).sum(axis=0) <= limit).all()
    assert ((~inside).sum(axis=0) <= limit).all()
    sd = err.std(axis=0, ddof=1)
    assert (sd > 0).all(), "a sample must vary between seeds"
    assert (np.abs(err.mean(axis=0)) <= 4 * sd / math.sqrt(runs) + 1e-12).all()
    assert (half <= eps * (1 + eps) / (1 - eps)).all() and (np.quantile(np.abs(err), 0.9, axis=0) <= eps / 2).all()
    # power: a 5% scale error is caught by the same bias test
    scaled = np.array([[(1.05 * (err[r, q] * truth[q][1] + truth[q][0]) - truth[q][0]) / truth[q][1]
                        for q in range(len(queries))] for r in range(runs)])
    assert (np.abs(scaled.mean(axis=0)) > 4 * scaled.std(axis=0, ddof=1) / math.sqrt(runs)).any()


def test_weights_are_sampled_in_proportion_and_levels_halve():
    """Level ℓ >= 1 samples an event with probability min(1, w/θ_ℓ), θ_ℓ = θ_unit·2^ℓ."""
    sk = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, max_total=1e7, stream=99)
    from sketches.decayed._sample_kernels import draw

    w = np.full(200_000, 3.0)
    lev, _ = draw(w, np.uint64(5), np.uint64(0), sk._key_u, sk._key_r, sk.theta_unit, 63)
    for ell in range(1, 63):
        p = min(1.0, 3.0 / (sk.theta_unit * 2.0**ell))
        got = (lev >= ell).mean()
        assert abs(got - p) <= 5 * math.sqrt(p * (1 - p) / w.size) + 1e-12, (ell, got, p)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams(max_n=3000), st.data())
def test_many_queries_read_together_are_each_query(stream, data):
    """``range_sums`` (answers over time: a decay per row) gives each query exactly what
    ``range_sum`` gives it with that row's decay, over instants before, at and after the
    events, selections of ticks, and a decay that breaks the rules on some rows."""
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    sk = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX, max_total=data.draw(st.sampled_from([1.0, 1e9])), stream=4)
    _feed(sk, ticks, values, weights, rng)
    top = int(ticks.max()) if ticks.size else 10
    k = data.draw(st.integers(1, 40))
    ats = [data.draw(st.integers(0, top + 50)) for _ in range(k)]
    untils = [data.draw(st.one_of(st.none(), st.integers(-1, top + 50))) for _ in range(k)]
    offsets = np.array([data.draw(st.floats(0, 1, exclude_max=True)) for _ in range(k)])
    alpha = np.array([data.draw(st.sampled_from([0.5, 1.5, -0.01])) for _ in range(k)])  # < 0: grows

    def rows_decay(a, rows):
        return (np.maximum(a, 0.0) * 0.5 + offsets[rows, None] + 1.0) ** -alpha[rows, None]

    lo, hi = data.draw(st.sampled_from([(VMIN, VMAX), (30.0, 60.0), (25.0, 25.0)]))
    got = sk.range_sums(rows_decay, lo, hi, ats, untils)
    if got is None:
        assert sk._t.size == 0 and not sk.is_empty
        return
    for i in range(k):
        def one(a, i=i):
            return (np.maximum(a, 0.0) * 0.5 + offsets[i] + 1.0) ** -alpha[i]
        try:
            want = sk.range_sum(one, lo, hi, ats[i], untils[i])
        except SketchError as e:
            want = e
        if isinstance(want, SketchError):
            assert isinstance(got[i], SketchError) and str(got[i]) == str(want)
        else:
            assert got[i] == want, (i, got[i], want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_n=80), st.data())
def test_a_sample_holding_every_event_answers_the_exact_sum_of_the_ticks_counted(stream, data):
    """Fewer events than a level keeps: every event is sampled at level 0 with its own
    weight, so the estimate is the exact decayed sum over the ticks counted (``until``
    included, the ticks after it left out), one query at a time and many at once."""
    ticks, values, weights, seed = stream
    rng = np.random.default_rng(seed)
    sk = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX, stream=7)
    assert ticks.size < sk.k
    _feed(sk, ticks, values, weights, rng)
    top = int(ticks.max()) if ticks.size else 10
    spec = data.draw(st.sampled_from(SPECS))
    ats = [data.draw(st.integers(0, top + 20)) for _ in range(data.draw(st.integers(1, 8)))]
    picks = [data.draw(st.sampled_from(ticks.tolist())) for _ in ats] if ticks.size else [5] * len(ats)
    untils = [data.draw(st.sampled_from([None, u, u - 1, u + 1])) for u in picks]
    lo, hi = data.draw(st.sampled_from([(VMIN, VMAX), (30.0, 60.0)]))
    decay = parse_decay(spec)
    rows = sk.range_sums(lambda a, r: decay(a), lo, hi, ats, untils)
    for i, (at, until) in enumerate(zip(ats, untils)):
        counted = ticks <= (np.iinfo(np.int64).max if until is None else until)
        s, s0 = oracle(ticks[counted], values[counted], weights[counted], spec, at, lambda v: (v >= lo) & (v <= hi))
        _, total = oracle(ticks, values, weights, spec, at, lambda v: v >= VMIN)
        e = sk.range_sum(spec, lo, hi, at, until)
        assert abs(e.estimate - s) <= 1e-9 * total + 1e-300, (at, until, s, e)
        assert rows is None or rows[i] == e, (i, rows[i], e)


def test_uncovered_events_widen_the_interval_honestly():
    """With max_total far too small the top level overflows; old events stay accounted."""
    rng = np.random.default_rng(5)
    n = 20000
    ticks = rng.integers(0, 10000, n).astype(np.int64)
    values = rng.uniform(VMIN, VMAX, n)
    weights = rng.exponential(1.0, n)
    sk = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX, max_total=1.0, stream=4)
    _feed(sk, ticks, values, weights, rng)
    assert sk._ovf >= 0
    for spec in (SPECS[0], SPECS[5]):
        s, s0 = oracle(ticks, values, weights, spec, int(ticks.max()), lambda v: v >= 30)
        e = sk.query(spec, 30.0, int(ticks.max()))
        assert e.lower <= s <= e.upper
    blob = sk.to_bytes()
    assert DecayedAdditiveSketch.from_bytes(blob).to_bytes() == blob


def test_empty_and_degenerate_answers():
    sk = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1)
    assert sk.is_empty and sk.stored == 0
    assert sk.query(SPECS[0], 0, 5).upper == 0
    sk.update(np.array([10, 11]), np.array([5.0, 6.0]), np.array([0.0, 0.0]))
    e = sk.query(SPECS[0], 0, 20)
    assert not sk.is_empty and e.lower == 0 and e.upper < 1e-4  # θ_1 floor of the bound
    sk.update(np.array([10, 11]), np.array([5.0, 60.0]))
    e = sk.query({"kind": "sliding", "window": 3}, 0, 20)  # window empty at t = 20
    assert e.estimate == 0 and e.lower == 0 and e.upper < 1e-4
    e = sk.query(SPECS[0], 101, 20)
    assert e.estimate == 0 and e.lower == 0
    e = sk.query(SPECS[0], 50, 11)
    assert e.estimate == 1.0 and e.lower <= 1 <= e.upper
    e = sk.query(SPECS[0], 0, 0)  # events after `at` count with age 0
    assert e.estimate == 2.0
    with pytest.raises(SketchError):
        sk.range_sum(SPECS[0], 5, 4, 20)


@pytest.mark.parametrize("bad", [
    dict(ticks=[1.5], values=[1.0]), dict(ticks=[-1], values=[1.0]), dict(ticks=[2**62], values=[1.0]),
    dict(ticks=[1], values=[101.0]), dict(ticks=[1], values=[float("nan")]),
    dict(ticks=[1], values=[1.0], weights=[-1.0]), dict(ticks=[1], values=[1.0], weights=[float("inf")]),
    dict(ticks=[1, 2], values=[1.0]), dict(ticks=[[1]], values=[[1.0]]),
])
def test_bad_batches_are_refused(bad):
    sk = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1)
    with pytest.raises(SketchError):
        sk.update(**bad)
    assert sk.is_empty


def test_bad_queries_are_refused():
    sk = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1)
    sk.update(np.arange(10), np.arange(10.0))
    with pytest.raises(SketchError):
        sk.query(lambda a: np.minimum(1.0, 0.1 * a), 0, 9)  # increasing: not a decay
    with pytest.raises(SketchError):
        sk.query(lambda a: np.full_like(a, 2.0), 0, 9)
    with pytest.raises(SketchError):
        sk.query({"kind": "sliding"}, 0, 9)
    with pytest.raises(SketchError):
        sk.query(SPECS[0], float("nan"), 9)
    with pytest.raises(SketchError):
        sk.query(SPECS[0], 0, 1.5)
    e = sk.query(lambda a: 1.0 / (1.0 + a), 0, 9)  # any non-increasing callable works
    assert e.lower <= (1.0 / (1.0 + np.arange(10.0))).sum() <= e.upper


@pytest.mark.parametrize("args", [
    (0, 0.1, 0, 1), (1, 0.1, 0, 1), (0.1, 0, 0, 1), (0.1, 1, 0, 1), (0.1, 0.1, 1, 1),
    (0.1, 0.1, 0, float("inf")), (0.1, 0.1, 0, 1, -1), (0.1, 0.1, 0, 1, 0, 0.0),
])
def test_bad_parameters_are_refused(args):
    with pytest.raises(SketchError):
        DecayedAdditiveSketch(*args)


def test_merge_refuses_a_sketch_that_shares_its_random_stream():
    a = DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1)
    with pytest.raises(IncompatibleSketchError, match="^cannot merge sketches that share a random stream$"):
        a.merge(DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX, stream=1))
    assert a.merge(DecayedAdditiveSketch(0.2, 0.1, VMIN, VMAX)) is a and a.is_empty


def _small():
    sk = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX, seed=2, stream=77)
    rng = np.random.default_rng(0)
    sk.update(rng.integers(0, 50, 40), rng.uniform(VMIN, VMAX, 40), rng.exponential(1.0, 40))
    return sk


def test_read_back_answers_the_same_and_copies_draw_fresh_streams():  # round trips: test_contract
    sk = _small()
    assert sk.query(SPECS[5], 20, 60) == DecayedAdditiveSketch.from_bytes(sk.to_bytes()).query(SPECS[5], 20, 60)
    assert f"stored={sk.stored}" in repr(sk)
    # an empty prototype's copies draw their own random streams at their first update
    proto = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX)
    c1, c2 = proto.copy(), proto.copy()
    c1.update([1], [1.0])
    c2.update([1], [1.0])
    assert c1._stream != c2._stream
    c1.merge(c2)


def _patch(blob: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(blob)
    struct.pack_into(fmt, b, HEADER_SIZE + offset, value)
    return bytes(b)


def _reencode(sk, **cols) -> bytes:
    """``sk``'s blob with some event columns replaced (the layout of ``to_bytes``)."""
    from sketches._codec import Writer

    c = {"t": sk._t, "r": sk._r, "v": sk._v, "w": sk._w, "lev": sk._lev, **cols}
    n = c["t"].size
    raw = sk.to_bytes()[HEADER_SIZE:]
    state = 48 + 1 + 8 + 8 + 8 + 8 + 8 + 4
    t = np.asarray(c["t"], np.int64)
    r = np.asarray(c["r"], np.uint64)
    starts = sk._page_starts(t, r).tolist()  # content-defined pages, as to_bytes cuts them
    wr = Writer().raw(raw[: state - 4]).raw(struct.pack("<I", n)).uint(len(starts))
    for a, b in zip(starts, starts[1:] + [n]):
        wr.uint(b - a).uint(int(t[a])).uints((t[a : b - 1] - t[a + 1 : b]).view(np.uint64))
        wr.array(r[a:b], "<u8").floats(c["v"][a:b]).floats(c["w"][a:b]).array(c["lev"][a:b], "u1")
    payload = wr.bytes()
    return pack_header(Family.DECAYED_ADDITIVE, len(payload), fmt=3) + payload


def test_corrupt_fields_are_refused():
    sk = _small()
    blob, n = sk.to_bytes(), sk.stored
    assert _reencode(sk) == blob
    head = 48  # six 8-byte parameters
    t, v, w, lev = sk._t.copy(), sk._v.copy(), sk._w.copy(), sk._lev.copy()
    bad = [
        _patch(blob, 0, "<d", 1.5),  # epsilon
        _patch(blob, 16, "<d", 200.0),  # value_min > value_max
        _patch(blob, 40, "<d", -1.0),  # max_total
        _patch(blob, head, "<B", 2),  # has_stream flag
        _patch(_patch(blob, head, "<B", 0), head + 1, "<Q", 5),  # no stream but a stream id
        _patch(blob, head + 17, "<d", float("nan")),  # total weight
        _patch(blob, head + 17, "<d", 1e-9),  # total below the stored weights
        _patch(blob, head + 25, "<Q", n - 1),  # fewer events than stored
        _patch(blob, head + 33, "<q", -2),  # uncovered tick
        _patch(blob, head + 33, "<q", 10**6),  # an uncovered tick the scan does not confirm
        _patch(blob, head + 41, "<I", n + 1),  # event count
        _patch(blob, head + 41, "<I", 10**6),  # event count beyond the blob
        _reencode(sk, t=np.concatenate([t[:-1], [t[-2] - t[0] - 5]])),  # a gap below tick 0
        _reencode(sk, t=np.concatenate([t[:1], [t[0] + 10**6], t[2:]])),  # out of key order
        _reencode(sk, t=t + 2**62),  # ticks past the limit
        _reencode(sk, v=np.concatenate([[101.0], v[1:]])),  # value out of range
        _reencode(sk, v=np.concatenate([[np.nan], v[1:]])),  # value not a number
        _reencode(sk, w=np.concatenate([[0.0], w[1:]])),  # zero weight stored
        _reencode(sk, w=np.concatenate([[np.inf], w[1:]])),
        _reencode(sk, lev=np.concatenate([[64], lev[1:]]).astype(np.uint8)),  # level past the top
    ]
    for i, b in enumerate(bad):
        with pytest.raises(CorruptSketchError):
            DecayedAdditiveSketch.from_bytes(b)
    # an event its levels would have dropped breaks the sample's closure
    big = DecayedAdditiveSketch(0.3, 0.05, VMIN, VMAX, stream=8)
    big.update(np.arange(2000), np.zeros(2000))
    lev = big._lev.copy()
    assert lev[-1] > 0
    lev[-1] = 0
    with pytest.raises(CorruptSketchError):
        DecayedAdditiveSketch.from_bytes(_reencode(big, lev=lev))


def test_sizing_meets_the_target():
    """k makes the Freedman half-width at most ε·S₀ with 3 tails (module proof)."""
    for eps, delta in ((0.05, 0.01), (0.1, 1e-6), (0.3, 0.2), (0.01, 0.05)):
        k, c = suggest_capacity(eps, delta)
        sk = DecayedAdditiveSketch(eps, delta, 0, 1)
        assert sk.k == k and sk.p_bad <= delta / 8
        assert sk._alpha(3) <= eps * (1 + 1e-9)
        # minimal for its C: one sample fewer breaks one of the two conditions
        lg = math.log(3 / (delta - delta / 8))
        h = math.log(c) - 1 + 1 / c
        assert (k - 1 < 4 * c * (1 + eps / 3) * lg / eps**2) or (62 * math.exp(-(k - 1) * h) > delta / 8)


def test_interval_is_the_freedman_half_width():
    """The half-width is a(x̄), x̄ = max{x : x − a(x) <= Ŝ₀}, recomputed here by bisection.

    The bound is conservative on real data, so a narrowed interval would pass the rate
    tests; this pins the formula of the module proof instead.
    """
    rng = np.random.default_rng(11)
    for eps, delta, max_total in ((0.2, 0.1, 1e7), (0.1, 1e-3, 2.0**48), (0.3, 0.05, 1e40)):
        sk = DecayedAdditiveSketch(eps, delta, VMIN, VMAX, max_total=max_total, stream=3)
        n = 20000
        ticks = rng.integers(0, 10000, n)
        sk.update(ticks, rng.uniform(VMIN, VMAX, n), rng.exponential(1.0, n))
        for spec in (SPECS[0], SPECS[4]):
            s0_hat = sk.query(spec, VMIN, 9999).estimate
            e = sk.query(spec, 40.0, 9999)
            lg = math.log(3 / (delta - 62 * math.exp(-sk.k * (math.log(sk.c) - 1 + 1 / sk.c))))
            theta1 = 2 * sk.c * max_total / sk.k * 2.0**-62

            def a(x):
                r = max(theta1, 2 * sk.c * x / sk.k)
                return r * lg / 3 + math.sqrt((r * lg / 3) ** 2 + 2 * r * x * lg)

            lo, hi = s0_hat, 2 * s0_hat + 1
            while hi - a(hi) <= s0_hat:
                hi *= 2
            for _ in range(300):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if mid - a(mid) <= s0_hat else (lo, mid)
            half = a(lo)
            rounding = (sk.stored + 8) * 2.0**-52 * s0_hat
            assert math.isclose(e.upper - e.estimate, half + rounding, rel_tol=1e-9)
            if s0_hat >= 1e4 * max_total * 2.0**-62:  # the ε claim (above the θ_1 floor)
                assert half <= eps * (1 + eps) / (1 - eps) * s0_hat * 1.01
            else:
                assert half > eps * s0_hat  # max_total = 1e40 is far too loose for these sums
