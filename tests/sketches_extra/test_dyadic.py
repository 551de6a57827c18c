"""DyadicECM against an exact oracle: ranges, quantiles and heavy hitters over ids.

The range and quantile brackets and the heavy-hitter recall are deterministic: checked on
every hypothesis example. The heavy-hitter precision (nothing below ``(phi - eps) count``)
is randomized: checked by its failure rate over many seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, IncompatibleSketchError, SketchError
from sketches_extra.dyadic import DyadicECM, _decompose

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def ids_of(rng, n, levels, skew):
    top = 1 << levels
    if skew is None:
        return rng.integers(0, top, n, dtype=np.uint64)
    support = min(top, 4096)
    p = 1.0 / np.arange(1, support + 1) ** skew
    perm = rng.permutation(top)[:support] if top <= 2**20 else rng.integers(0, top, support, dtype=np.uint64)
    return perm[rng.choice(support, n, p=p / p.sum())].astype(np.uint64)


def make_stream(rng, n, window, levels, skew, late=0.3):
    ticks = np.sort(rng.integers(0, max(1, int(window * rng.uniform(0.5, 3))), n))
    lat = rng.random(n) < late
    ticks[lat] -= rng.integers(0, window + 1, int(lat.sum()))
    w = np.ones(n)
    w[rng.random(n) < 0.1] = 0
    w[rng.random(n) < 0.05] = 1000
    return ticks.astype(np.int64), ids_of(rng, n, levels, skew), w


def feed(sk, t, x, w, rng):
    for part in np.array_split(np.arange(len(t)), int(rng.integers(1, 5))):
        sk.update(t[part], x[part], w[part])
    return sk


def freq(t, x, w, lo, hi, levels):
    m = (t >= lo) & (t <= hi) & (w > 0)
    ids, inv = np.unique(x[m], return_inverse=True)
    return ids.astype(np.int64) if levels < 63 else ids, np.bincount(inv, weights=w[m]) if m.any() else np.zeros(0)


def true_quantile(ids, f, q):
    """Smallest id v with weight(id <= v) >= q * count (0 when there is nothing)."""
    if len(f) == 0 or q == 0:
        return 0
    cum = np.cumsum(f)
    return int(ids[np.searchsorted(cum, q * cum[-1] * (1 - 1e-15))])


streams = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31),
    "n": st.integers(0, 500),
    "window": st.sampled_from([1, 5, 100, 2000]),
    "levels": st.sampled_from([1, 3, 8, 12, 20]),
    "skew": st.sampled_from([None, 0.8, 1.2, 1.5]),
    "eps": st.sampled_from([0.1, 0.3]),
})


def test_decompose_covers_exactly():
    for levels in (1, 3, 6):
        for a in range(1 << levels):
            for b in range(a, 1 << levels):
                nodes = _decompose(a, b, levels)
                cover = sorted(v for lev, i in nodes for v in range(i << lev, (i + 1) << lev))
                assert cover == list(range(a, b + 1)) and len(nodes) <= 2 * levels


@SETTINGS
@given(streams)
def test_brackets_are_deterministic(p):
    rng = np.random.default_rng(p["seed"])
    L = p["levels"]
    t, x, w = make_stream(rng, p["n"], p["window"], L, p["skew"])
    sk = feed(DyadicECM(p["eps"], 0.1, p["window"], L, seed=p["seed"] % 5), t, x, w, rng)
    if sk.is_empty:
        c = max(sk.clock, 0)
        assert sk.heavy_hitters(0.1, c, c + 5) == [] and sk.quantiles([0.5], c, c + 5)[0][1].upper == 0
        return
    h, c = sk.clock - sk.window + 1, sk.clock
    for lo, hi in [(h, c), (c, c), (int(rng.integers(h, c + 1)), c), (h, max(h, c - 1))]:
        ids, f = freq(t, x, w, lo, hi, L)
        count = float(f.sum())
        # quantiles: the bracket always holds
        qs = np.array([0, 0.01, 0.25, 0.5, 0.9, 1.0])
        for q, e in sk.quantiles(qs, lo, hi):
            v = true_quantile(ids, f, q)
            assert e.lower <= v <= e.upper and e.lower <= e.estimate <= e.upper
        # range counts: always inside the bracket
        top = (1 << L) - 1
        for a, b in [(0, top), (0, 0), (top, top), tuple(sorted(rng.integers(0, top + 1, 2).tolist()))]:
            tr = float(f[(ids >= a) & (ids <= b)].sum())
            e = sk.range_count(a, b, lo, hi)
            assert e.lower <= tr * (1 + 1e-12) and tr <= e.upper * (1 + 1e-12)
        # heavy hitters: every heavy id is listed, with an honest upper bound
        for phi in (0.05, 0.3, 1.0):
            got = {i: e for i, e in sk.heavy_hitters(phi, lo, hi)}
            for i, fi in zip(ids.tolist(), f.tolist()):
                if fi > 0 and fi >= phi * count:
                    assert i in got and got[i].upper >= fi
        # point queries
        for i, fi in list(zip(ids.tolist(), f.tolist()))[:5]:
            assert sk.frequency(i, lo, hi).upper >= fi


def test_heavy_hitter_precision_rate_within_delta():
    trials, fails, limit_fp = 60, 0, 0
    for seed in range(trials):
        rng = np.random.default_rng(30_000 + seed)
        L = 16
        t, x, w = make_stream(rng, 4000, 1000, L, [0.8, 1.1, 1.5][seed % 3])
        sk = feed(DyadicECM(0.1, 0.1, 1000, L, seed=seed), t, x, w, rng)
        lo = int(rng.integers(sk.clock - 999, sk.clock + 1))
        ids, f = freq(t, x, w, lo, sk.clock, L)
        count = f.sum()
        phi = 0.25
        got = sk.heavy_hitters(phi, lo, sk.clock)
        fmap = dict(zip(ids.tolist(), f.tolist()))
        fails += any(fmap.get(i, 0.0) < (phi - sk.epsilon) * count for i, _ in got)
        limit_fp = max(limit_fp, 1 - sk.hh_confidence(phi))
    # failure probability <= 1 - hh_confidence(phi) <= delta; allow the binomial tail
    acc, lim = 0.0, trials
    for k in range(trials + 1):
        acc += math.comb(trials, k) * 0.1**k * 0.9 ** (trials - k)
        if 1 - acc < 1e-4:
            lim = k
            break
    assert limit_fp <= 0.1 and fails <= lim


def test_estimates_are_useful():
    """Point and quantile estimates are tight enough that a trivial bracket would fail."""
    rng = np.random.default_rng(7)
    L = 10  # every level small enough to be exact
    t, x, w = make_stream(rng, 20000, 3000, L, 1.1)
    sk = feed(DyadicECM(0.1, 0.1, 3000, L, seed=1), t, x, w, rng)
    assert sk.hashed_levels <= 2
    lo = sk.clock - 2000
    ids, f = freq(t, x, w, lo, sk.clock, L)
    count = f.sum()
    for q, e in sk.quantiles(np.linspace(0.05, 0.95, 7), lo, sk.clock):
        v = true_quantile(ids, f, q)
        below = f[ids < e.estimate].sum()
        assert abs(below / count - q) <= e.epsilon + 0.05 and e.lower <= v <= e.upper
    top = ids[np.argmax(f)]
    e = sk.frequency(int(top), lo, sk.clock)
    assert e.upper - e.lower <= 0.2 * count


@SETTINGS
@given(streams, st.integers(2, 16))
def test_merges_keep_the_brackets(p, n_parts):
    rng = np.random.default_rng(p["seed"])
    L = p["levels"]
    t, x, w = make_stream(rng, p["n"], p["window"], L, p["skew"])
    owner = rng.integers(0, n_parts, len(t))
    parts = [feed(DyadicECM(p["eps"], 0.1, p["window"], L, seed=2), t[owner == i], x[owner == i], w[owner == i], rng)
             for i in range(n_parts)]
    merged = parts[0]
    for q in parts[1:]:
        merged.merge(q)
    assert merged._tb.validate() is None
    if merged.is_empty:
        return
    lo, hi = merged.clock - merged.window + 1, merged.clock
    ids, f = freq(t, x, w, lo, hi, L)
    for q, e in merged.quantiles(np.array([0.1, 0.5, 0.99]), lo, hi):
        assert e.lower <= true_quantile(ids, f, q) <= e.upper
    blob = merged.to_bytes()
    assert DyadicECM.from_bytes(blob).to_bytes() == blob and len(blob) == merged.nbytes


def test_refusals_and_validation():
    a = DyadicECM(0.1, 0.1, 100, 8, seed=1)
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        a.merge(a)
    with pytest.raises(IncompatibleSketchError, match="^can only merge a DyadicECM with another DyadicECM$"):
        a.merge(3)
    with pytest.raises(IncompatibleSketchError,
                       match="^cannot merge dyadic ECM sketches with different epsilon, delta, window, levels or seed$"):
        a.merge(DyadicECM(0.1, 0.1, 100, 9, seed=1))
    with pytest.raises(SketchError):
        a.update(np.array([1]), np.array([256], np.uint64))
    with pytest.raises(SketchError):
        DyadicECM(0.1, 0.1, 100, 0)
    a.update(np.array([1, 2]), np.array([3, 4], np.uint64))
    for bad in [lambda: a.range_count(5, 4, 0, 2), lambda: a.quantiles([1.5], 0, 2),
                lambda: a.heavy_hitters(0, 0, 2), lambda: a.frequency(256, 0, 2)]:
        with pytest.raises(SketchError):
            bad()


def test_truncations_and_kinds_are_refused():
    sk = DyadicECM(0.3, 0.3, 20, 4, seed=1)
    sk.update(np.array([1, 5, 3]), np.array([1, 2, 15], np.uint64))
    blob = sk.to_bytes()
    for n in range(len(blob)):
        with pytest.raises(CorruptSketchError):
            DyadicECM.from_bytes(blob[:n])
    from sketches.ecm import ECMSketch

    with pytest.raises(CorruptSketchError):
        ECMSketch.from_bytes(blob)
    with pytest.raises(CorruptSketchError):
        DyadicECM.from_bytes(ECMSketch(0.1, 0.1, 5).to_bytes())
    assert "DyadicECM(epsilon=0.3" in repr(sk) and sk.copy().to_bytes() == blob
