"""Splittable histogram against an exact oracle: the deterministic bound never fails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, IncompatibleSketchError, SketchError
from sketches.splittable_histogram import SplittableHistogram, suggest_alpha


@st.composite
def streams(draw):
    """Out-of-order streams: random, bursts on one tick, duplicates, big and zero weights."""
    n = draw(st.integers(0, 3000))
    span = draw(st.sampled_from([1, 5, 100, 1000, 10_000]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ticks = rng.integers(0, span, n)
    shape = draw(st.sampled_from(["random", "late", "burst", "reverse"]))
    if shape == "late":
        ticks = ticks[np.argsort(ticks + rng.pareto(1.0, n) * span / 20)]
    elif shape == "burst":
        ticks[rng.random(n) < 0.5] = rng.integers(0, span)
    elif shape == "reverse":
        ticks = np.sort(ticks)[::-1]
    kind = draw(st.sampled_from(["ones", "real", "heavy", "zeros"]))
    weights = {
        "ones": np.ones(n),
        "real": rng.exponential(3.0, n),
        "heavy": np.where(rng.random(n) < 0.01, 1e12, rng.random(n)),
        "zeros": np.where(rng.random(n) < 0.5, 0.0, 1.0),
    }[kind]
    return ticks.astype(np.int64), weights, seed


def _feed(sk, ticks, weights, rng, max_chunks=10):
    for part in np.array_split(np.arange(ticks.size), rng.integers(1, max_chunks + 1)):
        sk.update(ticks[part], weights[part])


def _check(sk, ticks, weights, window, eps, rng, queries=25):
    c = sk.clock
    if sk.is_empty:
        e = sk.query(0, 0)
        assert (e.lower, e.upper) == (0.0, 0.0)
        return
    los = list(rng.integers(max(0, c - window + 1), c + 1, queries)) + [max(0, c - window + 1), c]
    for lo in los:
        for hi in (c, int(rng.integers(lo, c + 1)), c + 10):
            if hi - lo + 1 > window:
                continue
            truth = weights[(ticks >= lo) & (ticks <= hi)].sum()
            e = sk.query(int(lo), int(hi))
            assert e.lower - 1e-7 * truth <= truth <= e.upper + 1e-7 * truth, (lo, hi, truth, e)
            assert e.confidence == 1.0 and e.kind == "relative" and e.method == "splittable-histogram"
            # Theorem 1 (within ε of the truth) counts unit elements: it needs every weight
            # to be 0 or at least 1, so level-0 buckets weigh at least 2^0 (Lemma 3).
            if hi >= c and np.all((weights == 0) | (weights >= 1)):
                assert abs(e.estimate - truth) <= eps * truth + 1e-6 * max(1.0, truth)
                assert e.upper - e.lower <= 2 * eps * truth + 1e-6 * max(1.0, truth)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from([0.01, 0.05, 0.1, 0.5]), st.sampled_from([1, 7, 64, 100, 1000]))
def test_every_window_holds_its_bound(stream, eps, window):
    ticks, weights, seed = stream
    rng = np.random.default_rng(seed)
    sk = SplittableHistogram(eps, window)
    _feed(sk, ticks, weights, rng)
    _check(sk, ticks, weights, window, eps, rng)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(2, 64), st.sampled_from(["chain", "balanced", "random"]))
def test_merges_of_many_parts_in_any_tree_shape_keep_the_bound(stream, parts, shape):
    ticks, weights, seed = stream
    rng = np.random.default_rng(seed)
    eps, window = 0.1, 500
    owner = rng.integers(0, parts, ticks.size)
    sketches = []
    for p in range(parts):
        sk = SplittableHistogram(eps, window)
        sel = owner == p
        _feed(sk, ticks[sel], weights[sel], rng, 3)
        sketches.append(sk)
    while len(sketches) > 1:
        if shape == "chain":
            a, b = sketches.pop(0), sketches.pop(0)
            sketches.insert(0, a.merge(b))
        elif shape == "balanced":
            sketches = [sketches[i].merge(sketches[i + 1]) if i + 1 < len(sketches) else sketches[i]
                        for i in range(0, len(sketches), 2)]
        else:
            i, j = sorted(rng.choice(len(sketches), 2, replace=False))
            merged = sketches[i].merge(sketches[j])
            sketches = [s for k, s in enumerate(sketches) if k not in (i, j)] + [merged]
    merged = SplittableHistogram.from_bytes(sketches[0].to_bytes())
    _check(merged, ticks, weights, window, eps, rng, queries=10)


def test_a_merged_sketch_still_takes_raw_events():
    a, b = SplittableHistogram(0.05, 100), SplittableHistogram(0.05, 100)
    a.update(np.arange(50))
    b.update(np.arange(40, 90))
    a.merge(b)
    a.update(np.array([95, 96]))
    e = a.query(0, 96)
    assert e.lower <= 102 <= e.upper


def test_level_zero_answers_recent_windows_exactly():
    sk = SplittableHistogram(0.1, 1000)
    sk.update(np.arange(1000) % 50)  # 50 distinct ticks, well under alpha: exact
    e = sk.query(10, 49)
    assert e.estimate == 800 and e.lower <= 800 <= e.upper and e.upper - e.lower < 1e-6


def test_expired_ranges_are_refused():
    sk = SplittableHistogram(0.1, 100)
    sk.update(np.array([0, 500]))
    with pytest.raises(SketchError, match="before clock - window"):
        sk.query(350, 400)
    with pytest.raises(SketchError, match="exceeds the window"):
        sk.query(0, 500)


def test_space_follows_the_papers_bound():
    # Theorem 2: M+1 levels of alpha buckets each, alpha = (1 + log W)(2 + eps)/eps.
    sk = SplittableHistogram(0.05, 4096)
    rng = np.random.default_rng(3)
    sk.update(rng.integers(0, 4096, 200_000))
    assert suggest_alpha(0.05, 4096) == 533
    levels = int(np.log2(200_000)) + 2
    assert sk.nbytes <= 2 * levels * 533 * 24 + 4096


def test_merge_refusals_have_fixed_messages():
    a = SplittableHistogram(0.1, 100)
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        a.merge(a)
    with pytest.raises(IncompatibleSketchError, match="different epsilon or window"):
        a.merge(SplittableHistogram(0.2, 100))
    with pytest.raises(IncompatibleSketchError, match="can only merge a SplittableHistogram"):
        a.merge(object())


def test_bad_input_is_refused():
    sk = SplittableHistogram(0.1, 100)
    with pytest.raises(SketchError):
        sk.update(np.array([1, 2]), np.array([1.0, -1.0]))
    with pytest.raises(SketchError):
        sk.update(np.array([1]), np.array([np.inf]))
    with pytest.raises(SketchError):
        SplittableHistogram(1.5, 100)


def test_every_truncation_and_corruption_is_refused():
    sk = SplittableHistogram(0.2, 64)
    rng = np.random.default_rng(5)
    sk.update(rng.integers(0, 200, 500), rng.exponential(2.0, 500))
    blob = sk.to_bytes()
    assert SplittableHistogram.from_bytes(blob).to_bytes() == blob
    for cut in range(len(blob)):
        with pytest.raises(CorruptSketchError):
            SplittableHistogram.from_bytes(blob[:cut])
    refused = 0
    for pos in rng.choice(len(blob), 300, replace=False):
        bad = bytearray(blob)
        bad[pos] ^= 0xFF
        try:
            back = SplittableHistogram.from_bytes(bytes(bad))
        except CorruptSketchError:
            refused += 1
            continue
        # A flipped byte that still parses must still be a structurally valid sketch.
        back.query(max(0, back.clock - 10), back.clock)
    assert refused > 0
