"""``sketches.pane_ring.PaneRing`` against an exact oracle: for every kept range, the panes
inside it count no more than the true count and the panes touching it no less, whatever the
arrival order; a merge is the ring of both inputs' events; the bytes round trip and a
truncated or reshaped copy is refused."""

from __future__ import annotations

import numpy as np
import pytest

from sketches.errors import CorruptSketchError, SketchError
from sketches.pane_ring import PaneRing

WINDOW, PANES, CELLS = 40, 4, 3


def _events(seed: int, n: int = 300, until: int = 120):
    rng = np.random.default_rng(seed)
    ticks = rng.integers(0, until, n)
    cells = rng.integers(0, CELLS, (n, 1))
    weights = rng.integers(1, 4, n).astype(np.float64)
    return ticks, cells, weights


def _ring(ticks, cells, weights, chunk: int = 37) -> PaneRing:
    ring = PaneRing(WINDOW, PANES, CELLS)
    for i in range(0, ticks.size, chunk):  # several adds, each out of order inside
        ring.add(ticks[i:i + chunk], cells[i:i + chunk], weights[i:i + chunk])
    return ring


def _true(ticks, cells, weights, lo: int, hi: int) -> np.ndarray:
    out = np.zeros(CELLS)
    for t, c, w in zip(ticks, cells[:, 0], weights):
        if lo <= t <= hi:
            out[c] += w
    return out


@pytest.mark.parametrize("seed", range(5))
def test_inside_and_touching_panes_bracket_the_true_count_in_any_order(seed):
    ticks, cells, weights = _events(seed)
    order = np.argsort(ticks, kind="stable")  # the ring only keeps what is recent at the end
    ring = _ring(ticks[order][::-1], cells[order][::-1], weights[order][::-1])
    # Every event whose pane the ring still keeps, in the order given (newest first).
    kept = ticks // ring.width >= ring.newest - ring.slots + 1
    clock = int(ticks.max())
    for lo in range(clock - WINDOW + 1, clock + 1, 3):
        for hi in range(lo, clock + 1, 5):
            inside, touching, inside_total, touching_total = ring.sums(lo, hi)
            true = _true(ticks[kept], cells[kept], weights[kept], lo, hi)
            assert np.all(inside <= true) and np.all(true <= touching), (lo, hi)
            assert inside_total <= true.sum() <= touching_total


def test_a_merge_is_the_ring_of_both_inputs_events():
    a, b = _events(10), _events(11)
    merged = _ring(*a)
    merged.merge(_ring(*b))
    both = _ring(*(np.concatenate(x) for x in zip(a, b)))
    for lo, hi in [(90, 119), (100, 105), (81, 81)]:
        for got, want in zip(merged.sums(lo, hi), both.sums(lo, hi)):
            np.testing.assert_array_equal(got, want)


def test_bytes_round_trip_and_a_bad_copy_is_refused():
    ring = _ring(*_events(3))
    blob = ring.to_bytes()
    back, end = PaneRing.read(memoryview(blob), 0, WINDOW, PANES, CELLS)
    assert end == len(blob) and back.to_bytes() == blob
    with pytest.raises(CorruptSketchError):
        PaneRing.read(memoryview(blob[:-1]), 0, WINDOW, PANES, CELLS)
    with pytest.raises(CorruptSketchError):
        PaneRing.read(memoryview(blob), 0, WINDOW, PANES + 1, CELLS)


def test_a_range_before_the_kept_panes_is_refused():
    ring = _ring(*_events(4))
    with pytest.raises(SketchError):
        ring.sums(0, 10)
    with pytest.raises(SketchError):
        PaneRing(0, PANES, CELLS)
