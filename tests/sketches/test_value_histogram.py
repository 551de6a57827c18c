"""Value histogram (sliding-window quantiles) against an exact oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, IncompatibleSketchError
from sketches.value_histogram import ValueHistogram

W = 1000


def _ranges(rng, clock):
    lo = int(rng.integers(max(0, clock - W + 1), clock + 1))
    return lo, (clock if rng.random() < 0.6 else int(rng.integers(lo, clock + 1)))


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


def test_range_counts_bracket_the_truth():
    rng = np.random.default_rng(3)
    values = rng.uniform(0, 100, 5000)
    ticks = rng.integers(0, W, 5000)
    vh = ValueHistogram(0.0, 100.0, W, panes=10, bins=64)
    vh.update(ticks, values)
    for a, b in ((0, 100), (10.5, 20.25), (99.9, 100)):
        truth = ((values >= a) & (values <= b)).sum()
        e = vh.range_count(a, b, 0, vh.clock)
        assert e.lower <= truth <= e.upper


def test_corrupt_blobs_are_refused():
    vh = ValueHistogram(0, 1, 50, panes=5, bins=8)
    vh.update(np.arange(10), np.linspace(0, 1, 10))
    blob = vh.to_bytes()
    assert ValueHistogram.from_bytes(blob).to_bytes() == blob
    for cut in range(0, len(blob), max(1, len(blob) // 200)):
        with pytest.raises(CorruptSketchError):
            ValueHistogram.from_bytes(blob[:cut])
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        vh.merge(vh)
