"""ECM-sketch against an exact oracle: deterministic bounds always, randomized ones by rate.

Streams: hypothesis draws their shape, NumPy the bulk: Zipf keys of skew 0.8-1.5 or
uniform keys, out-of-order arrivals (delays up to the window), bursts on one tick,
duplicates, weight 0 and huge weights, random batch splits, merges of 2-64 parts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches._ecm_kernels import NO_CLOCK, straddle_ratio
from sketches.base import CorruptSketchError, IncompatibleSketchError, SketchError
from sketches.ecm import ECMSketch, split_epsilon, suggest_dimensions
from tests.strategies import merge_tree

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- streams and the oracle ------------------------------------------------------------------
def zipf_keys(rng, n, skew, support=5000):
    p = 1.0 / np.arange(1, support + 1) ** skew
    ranks = rng.choice(support, size=n, p=p / p.sum())
    return (ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(12345)  # scatter ids


def make_stream(rng, n, window, *, skew=None, late=0.3, burst=0.0, zero=0.0, huge=0.0):
    """Events in arrival order: ticks drift forward, a fraction arrives late by up to the
    window, some land on one burst tick; weights 1, 0 or 10^12."""
    keys = zipf_keys(rng, n, skew) if skew else rng.integers(0, 2**64, n, dtype=np.uint64) % np.uint64(3000)
    span = max(1, int(window * rng.uniform(0.5, 3.0)))
    ticks = np.sort(rng.integers(0, span, n))
    lat = rng.random(n) < late
    ticks[lat] -= rng.integers(0, window + 1, int(lat.sum()))
    if burst and n:
        b = rng.random(n) < burst
        ticks[b] = ticks[rng.integers(0, n)]
    w = np.ones(n)
    w[rng.random(n) < zero] = 0
    w[rng.random(n) < huge] = 1e12
    return ticks.astype(np.int64), keys, w


def feed(sk, ticks, keys, w, rng, max_batches=6):
    cuts = np.sort(rng.integers(0, len(ticks) + 1, rng.integers(0, max_batches)))
    for part in np.split(np.arange(len(ticks)), cuts):
        sk.update(ticks[part], keys[part], w[part])
    return sk


def truth(ticks, keys, w, key, lo, hi):
    m = (ticks >= lo) & (ticks <= hi)
    return float(w[m & (keys == np.uint64(key))].sum()), float(w[m].sum())


def suffix(ticks, w, lo, clock):
    return float(w[(ticks >= lo) & (ticks <= clock)].sum())


def ranges(rng, sk, n=6):
    """Query ranges inside the window, window edges included."""
    h, c = sk.clock - sk.window + 1, sk.clock
    out = [(h, c), (c, c), (h, h), (h, c + 3)]
    for _ in range(n):
        lo = int(rng.integers(h, c + 1))
        out.append((lo, int(rng.integers(lo, c + 2))))
    return out


def binom_tail_limit(n, p, alpha=1e-4):
    """Smallest k with P[Binomial(n, p) > k] < alpha: more failures than this means the
    failure rate exceeds p (a broken sketch fails far above it)."""
    acc = 0.0
    for k in range(n + 1):
        acc += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if 1 - acc < alpha:
            return k
    return n


streams = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31),
    "n": st.integers(0, 600),
    "window": st.sampled_from([1, 2, 3, 7, 50, 300, 1000, 5000]),
    "skew": st.sampled_from([None, 0.8, 1.0, 1.2, 1.5]),
    "late": st.sampled_from([0.0, 0.2, 0.9]),
    "burst": st.sampled_from([0.0, 0.3]),
    "zero": st.sampled_from([0.0, 0.2]),
    "huge": st.sampled_from([0.0, 0.05]),
    "eps": st.sampled_from([0.05, 0.1, 0.3]),
    "purpose": st.sampled_from(["point", "inner"]),
})


def build(p):
    rng = np.random.default_rng(p["seed"])
    t, k, w = make_stream(rng, p["n"], p["window"], skew=p["skew"], late=p["late"], burst=p["burst"],
                          zero=p["zero"], huge=p["huge"])
    sk = feed(ECMSketch(p["eps"], 0.1, p["window"], seed=p["seed"] % 7, purpose=p["purpose"]), t, k, w, rng)
    return rng, sk, t, k, w


def check_buckets(sk):
    """Lemma A (deterministic): straddling weight <= R * weight starting at or after lo."""
    tb = sk._tb
    assert tb.validate() is None
    if len(tb):
        for lo in np.unique(np.concatenate([tb.s, tb.e, tb.e + 1, [tb.horizon]])):
            if tb.horizon <= lo <= tb.clock:
                assert straddle_ratio(tb, int(lo)) <= tb.ratio * (1 + 1e-9)


# -- sizing ------------------------------------------------------------------------------------
def test_split_follows_the_paper():
    sw, cm = split_epsilon(0.1, "point")
    assert sw == cm == pytest.approx(math.sqrt(1.1) - 1)
    assert sw + cm + sw * cm == pytest.approx(0.1)
    sw, cm = split_epsilon(0.1, "inner")
    assert sw * sw + 2 * sw + cm * (1 + sw) ** 2 == pytest.approx(0.1)
    # the paper's split minimises memory ~ 1 / (eps_sw eps_cm) on the Thm 2 constraint
    grid = np.linspace(1e-4, 0.048, 20000)
    prod = grid * (0.1 - grid**2 - 2 * grid) / (1 + grid) ** 2
    assert sw == pytest.approx(grid[np.argmax(prod)], abs=1e-4)
    d, w, r = suggest_dimensions(0.1, 0.1)
    assert (d, w) == (3, 56) and r == pytest.approx(2 * (math.sqrt(1.1) - 1))


@pytest.mark.parametrize("bad", [
    dict(epsilon=0), dict(epsilon=1), dict(epsilon=float("nan")), dict(delta=0), dict(delta=1.5),
    dict(window=0), dict(window=1.5), dict(window=2**62), dict(seed=-1), dict(purpose="range"),
    dict(epsilon=1e-9),
])
def test_bad_parameters(bad):
    args = dict(epsilon=0.1, delta=0.1, window=10, seed=0, purpose="point") | bad
    with pytest.raises(SketchError):
        ECMSketch(**args)


def test_bad_updates():
    sk = ECMSketch(0.1, 0.1, 100)
    for ticks, keys, w in [
        (np.array([1.5]), np.array([1], np.uint64), None),
        (np.array([1]), np.array([1.0]), None),
        (np.array([1, 2]), np.array([1], np.uint64), None),
        (np.array([1]), np.array([-1]), None),
        (np.array([1]), np.array([1], np.uint64), np.array([-1.0])),
        (np.array([1]), np.array([1], np.uint64), np.array([np.nan])),
        (np.array([1]), np.array([1], np.uint64), np.array([1.0, 2.0])),
        (np.array([2**62]), np.array([1], np.uint64), None),
    ]:
        with pytest.raises(SketchError):
            sk.update(ticks, keys, w)
    assert sk.is_empty and sk.clock == NO_CLOCK


# -- deterministic bounds (hypothesis) ----------------------------------------------------------
@SETTINGS
@given(streams)
def test_deterministic_bounds(p):
    rng, sk, t, k, w = build(p)
    check_buckets(sk)
    if sk.is_empty:
        c = sk.clock if sk.clock != NO_CLOCK else 0
        assert sk.frequency(1, c, c + 10).upper == 0
        return
    present = np.unique(k[w > 0])[:5].tolist() + [int(rng.integers(0, 2**63))]
    for lo, hi in ranges(rng, sk):
        n_suffix = suffix(t, w, lo, sk.clock)
        kk = 1 if hi >= sk.clock else 2
        for key in present:
            f, tot = truth(t, k, w, key, lo, hi)
            e = sk.frequency(key, lo, hi)
            assert f <= e.upper  # always: every row overestimates, every touching bucket counted
            assert e.lower <= e.estimate <= e.upper
            # width: at most the straddling weight (Lemma A) plus the collision allowance
            assert e.upper - e.lower <= kk * sk._tb.ratio * n_suffix + sk.eps_cm_eff * (tot + kk * sk._tb.ratio * n_suffix) + 1e-6 * (1 + tot)
        sj = sk.self_join(lo, hi)
        m = (t >= lo) & (t <= hi)
        _, inv = np.unique(k[m], return_inverse=True)
        exact = float((np.bincount(inv, weights=w[m]) ** 2).sum()) if m.any() else 0.0
        assert exact <= sj.upper * (1 + 1e-12) and sj.lower <= sj.upper


@SETTINGS
@given(streams)
def test_ranges_with_one_key_read_the_same(p):
    """``range_keys`` is ``range_key`` range by range (refusals included), and ranges that
    share a key give the same readings: what answers over time rely on to read each set of
    buckets once."""
    rng, sk, t, k, w = build(p)
    c = sk.clock if sk.clock != NO_CLOCK else 0
    rs = ranges(rng, sk, 30) if not sk.is_empty else [(c, c + 1), (c + 1, c)]
    rs += [(c - sk.window, c), (c + 2, c + 1)]

    def key(lo, hi):
        try:
            return sk.range_key(lo, hi)
        except SketchError as e:
            return str(e)

    assert [str(g) if isinstance(g, SketchError) else g for g in sk.range_keys(rs)] == [key(*r) for r in rs]
    # ends that are not all Python ints are checked one range at a time: the same keys
    as_numpy = [(np.int64(lo), hi) for lo, hi in rs]
    assert [str(g) if isinstance(g, SketchError) else g for g in sk.range_keys(as_numpy)] == [key(*r) for r in rs]
    ids = np.unique(k)[:8]
    seen = {}
    for r in rs:
        kk = key(*r)
        if isinstance(kk, str):
            continue
        reading = (sk.self_join(*r), sk.frequency(int(ids[0]) if ids.size else 1, *r),
                   None if not ids.size else tuple(np.asarray(a).tolist() if isinstance(a, np.ndarray) else a
                                                   for a in (sk.frequency_arrays(ids, *r) or ())))
        assert seen.setdefault(kk, reading) == reading


@SETTINGS
@given(streams)
def test_many_reads_together_are_each_read_alone(p):
    """``frequency_arrays_many`` (every read's cells and sums in one compiled call each)
    is ``frequency_arrays`` read by read: the same numbers, refusals and exact zeros."""
    rng, sk, t, k, w = build(p)
    c = sk.clock if sk.clock != NO_CLOCK else 0
    rs = ranges(rng, sk, 12) if not sk.is_empty else [(c, c + 1), (c + 1, c)]
    rs += [(c - sk.window, c), (c + 2, c + 1)]
    keys = np.unique(np.concatenate([k, rng.integers(0, 2**63, 5).astype(np.uint64)]))
    reads = [(rng.choice(keys, int(rng.integers(0, min(9, keys.size + 1))), replace=False), *r) for r in rs]

    def shown(got):
        if isinstance(got, SketchError):
            return str(got)
        return None if got is None else tuple(a.tolist() if isinstance(a, np.ndarray) else a for a in got)

    def alone(ids, lo, hi):
        try:
            return sk.frequency_arrays(ids, lo, hi)
        except SketchError as e:
            return e

    assert [shown(g) for g in sk.frequency_arrays_many(reads)] == [shown(alone(*r)) for r in reads]


def test_lo_before_window_is_refused_and_hi_before_lo_is_zero():
    sk = ECMSketch(0.1, 0.1, 10)
    sk.update(np.arange(100), np.arange(100, dtype=np.uint64))
    with pytest.raises(SketchError, match="before clock - window"):
        sk.frequency(5, 89, 99)
    e = sk.frequency(95, 99, 90)
    assert (e.lower, e.upper, e.confidence) == (0, 0, 1.0)
    assert sk.frequency(95, 90, 99).upper >= 1


def test_an_emptied_sketch_still_refuses_ranges_it_forgot():
    sk = ECMSketch(0.1, 0.1, 10)
    sk.update(np.array([5]), np.array([1], np.uint64))
    sk.update(np.array([100]), np.array([2], np.uint64), np.array([0.0]))  # moves the clock only
    assert sk.is_empty and sk.clock == 100
    with pytest.raises(SketchError):
        sk.frequency(1, 0, 100)
    assert sk.frequency(1, 91, 100).upper == 0


def test_burst_on_one_tick_and_huge_weights_are_exact():
    sk = ECMSketch(0.1, 0.1, 1000)
    keys = np.array([7] * 500 + [8] * 500, np.uint64)
    w = np.array([1e12] * 500 + [1.0] * 500)
    sk.update(np.full(1000, 42), keys, w)
    sk.update(np.array([10, 11]), np.array([7, 7], np.uint64), np.array([0.0, 0.0]))  # weight 0: nothing
    e = sk.frequency(7, 42, 42)
    assert e.upper >= 5e14 and e.lower <= 5e14 and sk.n_buckets == 1
    assert sk.frequency(7, 43, 60).upper == 0


def test_events_older_than_the_window_are_dropped():
    sk = ECMSketch(0.1, 0.1, 10)
    sk.update(np.array([100]), np.array([1], np.uint64))
    sk.update(np.array([50, 95]), np.array([1, 1], np.uint64))  # 50 < 100 - 10 + 1
    assert sk.frequency(1, 91, 100).upper == 2


# -- randomized bounds: violation rate within delta, and the estimates are useful --------------
def _rate_run(purpose, trials=160):
    fails_lo = fails_est = 0
    widths = []
    for seed in range(trials):
        rng = np.random.default_rng(10_000 + seed)
        window = int(rng.integers(50, 3000))
        skew = [None, 0.8, 1.1, 1.5][seed % 4]
        t, k, w = make_stream(rng, 3000, window, skew=skew, late=0.3)
        sk = feed(ECMSketch(0.1, 0.1, window, seed=seed, purpose=purpose), t, k, w, rng)
        lo = int(rng.integers(sk.clock - window + 1, sk.clock + 1))
        key = k[rng.integers(0, len(k))] if seed % 3 else np.uint64(rng.integers(0, 2**63))
        f, tot = truth(t, k, w, key, lo, sk.clock)
        e = sk.frequency(int(key), lo, sk.clock)
        fails_lo += not (e.lower <= f <= e.upper)
        fails_est += abs(e.estimate - f) > e.epsilon * tot + 1e-9
        widths.append((e.upper - e.lower) / max(tot, 1))
    return trials, fails_lo, fails_est, np.median(widths)


@pytest.mark.parametrize("purpose", ["point", "inner"])
def test_frequency_violation_rate_within_delta(purpose):
    n, fl, fe, width = _rate_run(purpose)
    limit = binom_tail_limit(n, 0.1)
    assert fl <= limit and fe <= limit
    assert width <= 0.25  # an interval like [0, inf] or [0, N] fails here


def test_inner_product_violation_rate_within_delta():
    trials, fails, errs, widths = 80, 0, 0, []
    for seed in range(trials):
        rng = np.random.default_rng(20_000 + seed)
        window = int(rng.integers(100, 2000))
        ta, ka, wa = make_stream(rng, 2000, window, skew=1.1)
        tb, kb, wb = make_stream(rng, 2000, window, skew=1.3)
        a = feed(ECMSketch(0.1, 0.1, window, seed=3, purpose="inner"), ta, ka, wa, rng)
        b = feed(ECMSketch(0.1, 0.1, window, seed=3, purpose="inner"), tb, kb, wb, rng)
        clock = max(a.clock, b.clock)
        lo = int(rng.integers(clock - window + 1, clock + 1))
        hi = clock
        if lo < a.clock - window + 1 or lo < b.clock - window + 1:
            continue
        ma, mb = (ta >= lo) & (ta <= hi), (tb >= lo) & (tb <= hi)
        ua, ia = np.unique(ka[ma], return_inverse=True)
        ub, ib = np.unique(kb[mb], return_inverse=True)
        fa, fb = np.bincount(ia, weights=wa[ma]), np.bincount(ib, weights=wb[mb])
        common, xa, xb = np.intersect1d(ua, ub, return_indices=True)
        exact = float((fa[xa] * fb[xb]).sum())
        e = a.inner_product(b, lo, hi)
        assert exact <= e.upper * (1 + 1e-12)  # deterministic
        fails += not (e.lower <= exact)
        na, nb = suffix(ta, wa, lo, a.clock), suffix(tb, wb, lo, b.clock)
        errs += abs(e.estimate - exact) > e.epsilon * na * nb + 1e-6
        widths.append((e.upper - e.lower) / max(na * nb, 1))
    limit = binom_tail_limit(trials, 0.1)
    assert fails <= limit and errs <= limit
    assert np.median(widths) <= 0.2  # a trivial [0, N_a N_b] bracket fails here


def test_inner_product_refuses_other_parameters():
    a = ECMSketch(0.1, 0.1, 100, seed=1, purpose="inner")
    with pytest.raises(IncompatibleSketchError):
        a.inner_product(ECMSketch(0.1, 0.1, 100, seed=2, purpose="inner"), 0, 10)


# -- merges ---------------------------------------------------------------------------------
@SETTINGS
@given(streams, st.integers(2, 64), st.sampled_from(["chain", "balanced", "random"]))
def test_merge_of_many_parts(p, n_parts, shape):
    rng = np.random.default_rng(p["seed"])
    t, k, w = make_stream(rng, p["n"], p["window"], skew=p["skew"], late=p["late"], zero=p["zero"], huge=p["huge"])
    owner = rng.integers(0, n_parts, len(t))
    parts = [feed(ECMSketch(p["eps"], 0.1, p["window"], seed=5, purpose=p["purpose"]),
                  t[owner == i], k[owner == i], w[owner == i], rng, 3) for i in range(n_parts)]
    single = feed(ECMSketch(p["eps"], 0.1, p["window"], seed=5, purpose=p["purpose"]), t, k, w, rng)
    merged = merge_tree(parts, shape, rng)
    assert merged.clock == single.clock
    check_buckets(merged)
    assert merged.merge_depth >= math.ceil(math.log2(n_parts))
    if merged.is_empty:
        return
    for lo, hi in ranges(rng, merged, 3):
        n_suffix = suffix(t, w, lo, merged.clock)
        for key in np.unique(k)[:4]:
            f, tot = truth(t, k, w, key, lo, hi)
            e = merged.frequency(int(key), lo, hi)
            assert f <= e.upper
            kk = 1 if hi >= merged.clock else 2
            assert e.upper - e.lower <= kk * merged._tb.ratio * n_suffix + merged.eps_cm_eff * (tot + kk * merged._tb.ratio * n_suffix) + 1e-6 * (1 + tot)
    if len(t) and t.max() - t.min() < p["window"]:  # nothing expired: cell totals are exact
        assert np.allclose(merged._counts.sum(axis=0), single._counts.sum(axis=0), rtol=1e-12)


def test_merge_with_empty_and_disjoint_clocks():
    a, b = ECMSketch(0.1, 0.1, 10, seed=1), ECMSketch(0.1, 0.1, 10, seed=1)
    a.update(np.array([5]), np.array([1], np.uint64))
    assert a.merge(b).frequency(1, 0, 5).upper == 1
    b.update(np.array([1000]), np.array([2], np.uint64))
    a.merge(b)  # a's event is now older than the window
    assert a.clock == 1000 and a.frequency(1, 991, 1000).upper == 0
    assert 0.9 < a.frequency(2, 991, 1000).lower <= 1 == a.frequency(2, 991, 1000).upper


# -- bytes ------------------------------------------------------------------------------------
@SETTINGS
@given(streams)
def test_bytes_round_trip(p):
    rng, sk, t, k, w = build(p)
    blob = sk.to_bytes()
    assert len(blob) == sk.nbytes
    back = ECMSketch.from_bytes(blob)
    assert back.to_bytes() == blob and back.clock == sk.clock and repr(back) == repr(sk)
    if not sk.is_empty:
        for lo, hi in ranges(rng, sk, 2):
            key = int(k[0]) if len(k) else 1
            assert back.frequency(key, lo, hi) == sk.frequency(key, lo, hi)
    cp = sk.copy()
    assert cp.to_bytes() == blob
    cp.update(np.array([sk.clock if sk.clock != NO_CLOCK else 0]), np.array([1], np.uint64))
    assert sk.to_bytes() == blob  # the copy is independent


def _small():
    sk = ECMSketch(0.3, 0.3, 50, seed=2)
    sk.update(np.array([3, 1, 2, 40, 40, 7]), np.array([1, 2, 3, 1, 1, 9], np.uint64),
              np.array([1, 2, 3, 4, 0.5, 6]))
    return sk


def test_corruptions_are_refused_or_harmless():
    sk = _small()
    blob = bytearray(sk.to_bytes())
    rng = np.random.default_rng(0)
    for _ in range(400):
        bad = bytearray(blob)
        i = int(rng.integers(0, len(bad)))
        bad[i] ^= 1 << int(rng.integers(0, 8))
        try:
            back = ECMSketch.from_bytes(bytes(bad))
        except CorruptSketchError:
            continue
        assert back._tb.validate() is None  # whatever is accepted is a valid state
        back.frequency(1, max(back.clock - back.window + 1, 0), back.clock)


def test_specific_corruptions():
    sk = _small()
    blob = sk.to_bytes()
    with pytest.raises(CorruptSketchError):
        ECMSketch.from_bytes(b"XXXX" + blob[4:])
    with pytest.raises(CorruptSketchError):
        ECMSketch.from_bytes("not bytes")
    dy_flag = bytearray(blob)
    dy_flag[6] = 1  # a DyadicECM's flags
    with pytest.raises(CorruptSketchError):
        ECMSketch.from_bytes(bytes(dy_flag))
    # a bucket mass that breaks invariant (C) or disagrees with its counts
    tampered = sk.copy()
    tampered._tb.m = tampered._tb.m * 3
    with pytest.raises(CorruptSketchError):
        ECMSketch.from_bytes(tampered.to_bytes())


# -- the rest of the contract ------------------------------------------------------------------
def test_repr_copy_clock_and_empty():
    sk = ECMSketch(0.1, 0.1, 100, seed=3)
    assert sk.is_empty and sk.clock_tick == NO_CLOCK and "clock_tick=None" in repr(sk)
    sk.update(np.array([5, 9]), np.array([1, 2], np.uint64), np.array([0.0, 0.0]))
    assert sk.is_empty and sk.clock == 9
    sk.update(np.array([5, 9]), np.array([1, 2], np.uint64))
    assert not sk.is_empty and "ECMSketch(epsilon=0.1" in repr(sk) and sk.copy().clock == 9


def test_out_of_order_is_as_good_as_in_order():
    rng = np.random.default_rng(4)
    t, k, w = make_stream(rng, 20000, 5000, skew=1.2, late=0.0)
    a, b = ECMSketch(0.1, 0.1, 5000, seed=1), ECMSketch(0.1, 0.1, 5000, seed=1)
    a.update(t, k, w)
    perm = rng.permutation(len(t))
    for part in np.array_split(perm, 20):
        b.update(t[part], k[part], w[part])
    check_buckets(b)
    lo = b.clock - 2000
    f, tot = truth(t, k, w, k[0], lo, b.clock)
    eb = b.frequency(int(k[0]), lo, b.clock)
    assert eb.lower <= f <= eb.upper and abs(eb.estimate - f) <= eb.epsilon * tot
    assert b.n_buckets <= 3 * a.n_buckets


def test_memory_at_eps_delta_01_is_under_one_megabyte():
    rng = np.random.default_rng(9)
    n = 400_000
    t, k, w = make_stream(rng, n, 10**6, skew=1.1, late=0.1)
    sk = ECMSketch(0.1, 0.1, 10**6)
    for part in np.array_split(np.arange(n), 8):
        sk.update(t[part], k[part], w[part])
    assert sk.nbytes <= 1_000_000


def _reference_plan_update(tb, ticks, weights):
    """The former ``TimeBuckets.plan_update`` in NumPy, kept as the reference for the
    compiled ``add_leaves`` half."""
    from sketches._ecm_kernels import compress

    n_old = len(tb)
    clock = max(tb.clock, int(ticks.max())) if ticks.shape[0] else tb.clock
    horizon = clock - tb.window + 1
    sel = np.flatnonzero((weights > 0) & (ticks >= horizon))
    ts, ws = ticks[sel], weights[sel]
    ut, inv = np.unique(ts, return_inverse=True)
    lm = np.bincount(inv, weights=ws, minlength=ut.shape[0])
    keep = np.flatnonzero(tb.e >= horizon)
    lvl, idx, s, e, m = tb.lvl[keep], tb.idx[keep], tb.s[keep], tb.e[keep], tb.m[keep].copy()
    leaf_rows = np.flatnonzero(lvl == 0)
    match = np.zeros(ut.shape[0], bool)
    jj = np.zeros(ut.shape[0], np.int64)
    if leaf_rows.shape[0]:
        j = np.searchsorted(idx[leaf_rows], ut)
        jj = np.minimum(j, leaf_rows.shape[0] - 1)
        match = (j < leaf_rows.shape[0]) & (idx[leaf_rows[jj]] == ut)
    leaf_at = np.empty(ut.shape[0], np.int64)
    leaf_at[match] = leaf_rows[jj[match]]
    np.add.at(m, leaf_at[match], lm[match])
    new = ~match
    n_new = int(new.sum())
    leaf_at[new] = keep.shape[0] + np.arange(n_new)
    nt = ut[new]
    out = compress(np.concatenate([lvl, np.zeros(n_new, np.int64)]), np.concatenate([idx, nt]),
                   np.concatenate([s, nt]), np.concatenate([e, nt]), np.concatenate([m, lm[new]]), tb.ratio)
    tb.clock = clock
    dest = tb._adopt(*out)
    old_dest = np.full(n_old, -1, np.int64)
    old_dest[keep] = dest[: keep.shape[0]]
    return sel, dest[leaf_at][inv], old_dest, len(tb)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 600), st.integers(0, 2**31), st.sampled_from([1, 50, 5000, 10**6]),
                          st.booleans()), min_size=1, max_size=10),
       st.sampled_from([0.05, 0.3]), st.sampled_from([100, 3601, 10**7]))
def test_compiled_plan_update_is_the_former_one(batches, ratio, window):
    """``TimeBuckets.plan_update`` (its first half one compiled pass, ``add_leaves``) returns
    what the former NumPy version did, and leaves the same buckets, for batches that hit
    old leaves, add new ones, expire buckets, repeat ticks, carry zero weights and span a
    short or a long range (the former grouped them two ways)."""
    from sketches._ecm_kernels import TimeBuckets

    new, ref = TimeBuckets(window, ratio), TimeBuckets(window, ratio)
    clock = 10**6
    for n, seed, span, weighted in batches:
        rng = np.random.default_rng(seed)
        clock += int(rng.integers(0, window // 2 + 2))
        ticks = (clock - rng.integers(0, span, n)).astype(np.int64)
        weights = (rng.integers(0, 4, n) * rng.random(n)) if weighted else np.ones(n)
        got, want = new.plan_update(ticks, weights), _reference_plan_update(ref, ticks, weights)
        assert got[3] == want[3]
        for a, b in zip(got[:3], want[:3]):
            assert np.array_equal(a, b)
        for name in ("lvl", "idx", "s", "e", "m", "clock"):
            assert np.array_equal(getattr(new, name), getattr(ref, name)), name


@SETTINGS
@given(streams, st.booleans())
def test_self_joins_as_columns_are_each_self_join(p, fractional):
    """``self_join_columns`` (each set of buckets read once, the sets' vectors added in one
    compiled call and their products taken at once) is ``self_join`` range by range: the
    same floats, written alike, refusals and exact zeros included. Fractional weights make
    every sum round, so a sum taken in another order would show."""
    rng, sk, t, k, w = build(p)
    if fractional:
        w = w * rng.uniform(0.1, 3.0, w.size)
        sk = feed(ECMSketch(p["eps"], 0.1, p["window"], seed=p["seed"] % 7, purpose=p["purpose"]), t, k, w, rng)
    c = sk.clock if sk.clock != NO_CLOCK else 0
    rs = ranges(rng, sk, 20) if not sk.is_empty else [(c, c + 1), (c + 1, c)]
    rs += [(c - sk.window, c), (c + 2, c + 1), (c - sk.window - 1, c)]
    columns = sk.self_join_columns(rs)
    for j, r in enumerate(rs):
        try:
            one = sk.self_join(*r)
        except SketchError as e:
            assert str(columns.refused.get(j)) == str(e), (r, columns.refused.get(j), e)
            continue
        assert j not in columns.refused, (r, columns.refused[j])
        assert repr(columns.row(j)) == repr(one), (r, columns.row(j), one)
