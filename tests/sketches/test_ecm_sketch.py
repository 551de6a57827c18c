"""ECM-sketch, value histogram and key candidates against exact oracles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, IncompatibleSketchError
from sketches.ecm_sketch import ECMSketch
from sketches.key_candidates import KeyCandidates
from sketches.value_histogram import ValueHistogram

W = 1000


@st.composite
def keyed_streams(draw):
    n = draw(st.integers(1, 4000))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    skew = draw(st.sampled_from([0.0, 0.8, 1.1, 1.5]))
    universe = draw(st.sampled_from([1, 10, 1000, 100_000]))
    keys = rng.integers(0, universe, n) if skew == 0 else (rng.zipf(1 + skew, n) % universe)
    span = draw(st.sampled_from([10, W, 3 * W]))
    ticks = rng.integers(0, span, n)
    if draw(st.booleans()):  # late arrivals
        ticks = ticks[np.argsort(ticks + rng.pareto(1.0, n) * 50)]
    return ticks.astype(np.int64), keys.astype(np.uint64), seed


def _window_truth(ticks, keys, lo, hi):
    sel = (ticks >= lo) & (ticks <= hi)
    vals, counts = np.unique(keys[sel], return_counts=True)
    return dict(zip(vals.tolist(), counts.astype(float).tolist())), float(sel.sum())


def _ranges(rng, clock):
    lo = int(rng.integers(max(0, clock - W + 1), clock + 1))
    return lo, (clock if rng.random() < 0.6 else int(rng.integers(lo, clock + 1)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_streams(), st.sampled_from([0.05, 0.1]), st.integers(1, 8))
def test_upper_bounds_always_hold_and_lower_bounds_fail_rarely(stream, eps, parts):
    ticks, keys, seed = stream
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, parts, ticks.size)
    sketches = []
    for p in range(parts):  # many sites, merged: aggregation is exact
        sk = ECMSketch(eps, 0.05, W, seed=3)
        sk.update(ticks[owner == p], keys[owner == p])
        sketches.append(sk)
    ecm = sketches[0]
    for other in sketches[1:]:
        ecm.merge(other)
    ecm = ECMSketch.from_bytes(ecm.to_bytes())
    lo, hi = _ranges(rng, ecm.clock)
    truth, n = _window_truth(ticks, keys, lo, hi)
    n_in, n_touch = ecm.count(lo, hi)
    assert n_in <= n <= n_touch
    probe = list(truth)[:20] + [int(x) for x in rng.integers(0, 2**63, 5)]
    for key in probe:
        e = ecm.frequency(key, lo, hi)
        f = truth.get(key, 0.0)
        assert f <= e.upper  # deterministic: cells only over-count
        assert e.lower <= e.estimate <= e.upper
    f2 = sum(v * v for v in truth.values())
    sj = ecm.self_join(lo, hi)
    assert f2 <= sj.upper


def test_lower_bound_violation_rate_is_within_delta():
    """Over many seeds, a Count-Min lower bound fails at most at rate δ (binomial margin)."""
    rng = np.random.default_rng(11)
    trials, failures, delta = 400, 0, 0.1
    for trial in range(trials):
        n = 3000
        keys = (rng.zipf(1.1, n) % 2000).astype(np.uint64)
        ticks = rng.integers(0, W, n)
        ecm = ECMSketch(0.1, delta, W, seed=trial)
        ecm.update(ticks, keys)
        truth, _ = _window_truth(ticks, keys, 0, ecm.clock)
        key = list(truth)[trial % len(truth)]
        e = ecm.frequency(key, 0, ecm.clock)
        failures += not (e.lower <= truth[key])
    # mean δ·trials = 40; a broken lower bound fails far more often.
    assert failures <= delta * trials + 3 * np.sqrt(delta * trials), failures


def test_bounds_are_useful_not_trivial():
    rng = np.random.default_rng(2)
    keys = (rng.zipf(1.3, 20_000) % 1000).astype(np.uint64)
    ecm = ECMSketch(0.05, 0.05, W)
    ecm.update(rng.integers(0, W, keys.size), keys)
    e = ecm.frequency(1, 0, ecm.clock)
    assert e.upper - e.lower <= 2 * 0.05 * 20_000


def test_inner_product_brackets_the_truth():
    rng = np.random.default_rng(4)
    a_keys, b_keys = (rng.zipf(1.2, 5000) % 300).astype(np.uint64), (rng.zipf(1.2, 5000) % 300).astype(np.uint64)
    a_t, b_t = rng.integers(0, 900, 5000), rng.integers(0, 900, 5000)
    a, b = ECMSketch(0.05, 0.05, W, seed=9), ECMSketch(0.05, 0.05, W, seed=9)
    a.update(a_t, a_keys)
    b.update(b_t, b_keys)
    lo, hi = 100, 899
    ta, _ = _window_truth(a_t, a_keys, lo, hi)
    tb, _ = _window_truth(b_t, b_keys, lo, hi)
    truth = sum(ta[k] * tb.get(k, 0.0) for k in ta)
    e = a.inner_product(b, lo, hi)
    assert e.lower <= truth <= e.upper
    with pytest.raises(IncompatibleSketchError, match="different parameters or seed"):
        a.inner_product(ECMSketch(0.05, 0.05, W, seed=10), lo, hi)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 3000), st.sampled_from([4, 64, 1024]))
def test_quantile_brackets_contain_the_true_quantile(seed, n, bins):
    rng = np.random.default_rng(seed)
    values = np.clip(rng.lognormal(3, 1.5, n), 0, 500) if seed % 2 else rng.integers(0, 5, n).astype(float)
    ticks = rng.integers(0, 2 * W, n)
    vh = ValueHistogram(0.0, 500.0, W, panes=20, bins=bins)
    half = n // 2
    vh.update(ticks[:half], values[:half])
    other = ValueHistogram(0.0, 500.0, W, panes=20, bins=bins)
    other.update(ticks[half:], values[half:])
    vh.merge(other)
    lo, hi = _ranges(rng, vh.clock)
    sel = np.sort(values[(ticks >= lo) & (ticks <= hi)])
    qs = [0.0, 0.01, 0.25, 0.5, 0.9, 0.999, 1.0]
    for q, (low, high) in zip(qs, vh.quantiles(qs, lo, hi)):
        if sel.size == 0:
            continue
        # smallest v with at least q·N values <= v
        idx = max(int(np.ceil(q * sel.size)) - 1, 0)
        true_q = sel[idx]
        assert low - 1e-9 <= true_q <= high + 1e-9, (q, low, true_q, high)


def test_key_candidates_cover_every_heavy_key_or_say_so():
    rng = np.random.default_rng(8)
    n = 50_000
    keys = [f"user-{k}" for k in rng.zipf(1.3, n) % 5000]
    ticks = rng.integers(0, 3 * W, n)
    kc = KeyCandidates(W, 20, 80)
    for part in np.array_split(np.arange(n), 7):
        kc.update(ticks[part], [keys[i] for i in part])
    kc = KeyCandidates.from_bytes(kc.to_bytes())
    clock = int(ticks.max())
    for lo in (clock - W + 1, clock - 500, clock - 37):
        sel = (ticks >= lo) & (ticks <= clock)
        touching_n = float(((ticks // kc.width >= lo // kc.width) & (ticks <= clock)).sum())
        names, unlisted_max = kc.candidates(lo, clock, touching_n)
        counts = {}
        for k, s in zip(keys, sel):
            if s:
                counts[k] = counts.get(k, 0) + 1
        for key, f in counts.items():
            if key not in names:
                assert f <= unlisted_max


def test_corrupt_blobs_are_refused():
    ecm = ECMSketch(0.2, 0.2, 50)
    ecm.update(np.arange(30), np.arange(30, dtype=np.uint64))
    vh = ValueHistogram(0, 1, 50, panes=5, bins=8)
    vh.update(np.arange(10), np.linspace(0, 1, 10))
    kc = KeyCandidates(50, 5, 4)
    kc.update(np.arange(10), [f"k{i % 3}" for i in range(10)])
    for sk in (ecm, vh, kc):
        blob = sk.to_bytes()
        assert type(sk).from_bytes(blob).to_bytes() == blob
        for cut in range(0, len(blob), max(1, len(blob) // 200)):
            with pytest.raises(CorruptSketchError):
                type(sk).from_bytes(blob[:cut])
        with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
            sk.merge(sk)
