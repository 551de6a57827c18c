"""A ring of time panes, each an array of exact counters: the sliding-window cells of the
value histogram (quantiles) for asynchronous streams.

The window of ``W`` ticks is cut into ``K`` panes of ``P = ⌈W/K⌉`` ticks. An event is
added to the counters of its pane, whatever its arrival order: panes are exact, so
out-of-order arrivals cost nothing. A query over ticks ``[lo, hi]`` returns two sums:

* ``inside`` — panes wholly inside the range, and
* ``touching`` — panes that intersect it,

so for every counter ``inside ≤ true count in [lo, hi] ≤ touching``, deterministically.
Only the (at most two) boundary panes separate the two. Unlike exponential-histogram
cells (Papapetrou et al. 2012, §4), which need in-order arrivals, panes are exact under any
arrival order and their boundary uncertainty is read off their actual state; the price is
the granularity ``P`` of the window's edges.

Merging two rings adds their counters pane by pane: exact, with no composed error.

Byte layout (inside the owner's payload)::

    i64 window | u32 panes | u64 cells | i64 newest pane id (-1 = empty)
    (panes + 1) × i64 pane id | (panes + 1) × cells × f64 counters | (panes + 1) × f64 totals
"""

from __future__ import annotations

import math
import struct

import numpy as np
from numba import njit

from sketches.base import CorruptSketchError, SketchError

__all__ = ["PaneRing"]

_HEAD = struct.Struct("<qIQq")


@njit(cache=True)
def _add(counts, totals, ids, slots, pane_ids, cells, weights, ncells):
    for k in range(slots.shape[0]):
        s = slots[k]
        if ids[s] != pane_ids[k]:
            continue  # expired pane: nothing of it is kept
        w = weights[k]
        totals[s] += w
        for c in range(ncells):
            counts[s, cells[k, c]] += w


class PaneRing:
    """Exact counters per time pane, for the last ``panes + 1`` panes."""

    def __init__(self, window: int, panes: int, cells: int):
        if window < 1 or panes < 1 or cells < 1:
            raise SketchError("pane ring needs a positive window, pane count and cell count")
        self.window, self.panes, self.cells = int(window), int(panes), int(cells)
        self.width = int(math.ceil(self.window / self.panes))
        self.slots = self.panes + 1  # the window's oldest pane may be partly inside it
        self.ids = np.full(self.slots, -1, np.int64)
        self.counts = np.zeros((self.slots, self.cells), np.float64)
        self.totals = np.zeros(self.slots, np.float64)
        self.newest = -1
        self.clock = -1

    # -- updates -------------------------------------------------------------------------
    def add(self, ticks: np.ndarray, cells: np.ndarray, weights: np.ndarray) -> None:
        """Add ``weights[k]`` to each counter ``cells[k, :]`` in the pane of ``ticks[k]``."""
        if ticks.size == 0:
            return
        pane_ids = ticks // self.width
        top = int(pane_ids.max())
        if top > self.newest:
            self._advance(top)
        self.clock = max(self.clock, int(ticks.max()))
        slots = (pane_ids % self.slots).astype(np.int64)
        _add(self.counts, self.totals, self.ids, slots, pane_ids, cells.astype(np.int64),
             weights.astype(np.float64), cells.shape[1])

    def _advance(self, top: int) -> None:
        """Open panes up to ``top``, clearing the slots of panes that fall out."""
        first = max(self.newest + 1, top - self.slots + 1)
        for pane in range(first, top + 1):
            s = pane % self.slots
            self.ids[s] = pane
            self.counts[s] = 0.0
            self.totals[s] = 0.0
        self.newest = top

    # -- queries ---------------------------------------------------------------------------
    def pane_masks(self, lo: int, hi: int, inner: tuple[int, int] | None = None):
        """Boolean masks over slots: panes inside ``inner`` (default ``[lo, hi]``) and
        panes touching ``[lo, hi]``."""
        if self.newest < 0:
            none = np.zeros(self.slots, bool)
            return none, none
        if lo <= self.clock - self.window - self.width:
            raise SketchError(f"range starts at {lo}, before the kept panes")
        ilo, ihi = inner if inner is not None else (lo, hi)
        valid = self.ids >= 0
        start = self.ids * self.width
        end = start + self.width - 1
        # A pane holds nothing after the clock, so it is inside when the range covers
        # everything from its start up to the clock.
        last = np.minimum(end, self.clock)
        inside = valid & (start >= ilo) & (last <= ihi)
        touching = valid & (start <= hi) & (last >= lo)
        return inside, touching

    def sums(self, lo: int, hi: int, inner: tuple[int, int] | None = None):
        """(inside counters, touching counters, inside total, touching total)."""
        inside, touching = self.pane_masks(lo, hi, inner)
        return (self.counts[inside].sum(axis=0), self.counts[touching].sum(axis=0),
                float(self.totals[inside].sum()), float(self.totals[touching].sum()))

    # -- merging and bytes -------------------------------------------------------------------
    def merge(self, other: "PaneRing") -> None:
        top = max(self.newest, other.newest)
        if top > self.newest:
            self._advance(top)
        for s in range(other.slots):
            pane = other.ids[s]
            if pane >= 0 and self.ids[pane % self.slots] == pane:
                self.counts[pane % self.slots] += other.counts[s]
                self.totals[pane % self.slots] += other.totals[s]
        self.clock = max(self.clock, other.clock)

    def copy(self) -> "PaneRing":
        ring = PaneRing(self.window, self.panes, self.cells)
        ring.ids, ring.counts, ring.totals = self.ids.copy(), self.counts.copy(), self.totals.copy()
        ring.newest, ring.clock = self.newest, self.clock
        return ring

    def to_bytes(self) -> bytes:
        return (_HEAD.pack(self.window, self.panes, self.cells, self.newest)
                + struct.pack("<q", self.clock) + self.ids.tobytes() + self.counts.tobytes()
                + self.totals.tobytes())

    @classmethod
    def read(cls, data: memoryview, pos: int, window: int, panes: int, cells: int) -> tuple["PaneRing", int]:
        """Parse a ring at ``pos`` that must have the given shape; returns (ring, new pos)."""
        need = _HEAD.size + 8
        if len(data) < pos + need:
            raise CorruptSketchError("pane ring truncated")
        w, p, c, newest = _HEAD.unpack_from(data, pos)
        (clock,) = struct.unpack_from("<q", data, pos + _HEAD.size)
        if (w, p, c) != (window, panes, cells):
            raise CorruptSketchError("pane ring shape does not match its sketch")
        ring = cls(w, p, c)
        pos += need
        size = ring.slots * 8 * (2 + c)
        if len(data) < pos + size:
            raise CorruptSketchError("pane ring truncated")
        ring.ids = np.frombuffer(data, np.int64, ring.slots, pos).copy()
        pos += ring.slots * 8
        ring.counts = np.frombuffer(data, np.float64, ring.slots * c, pos).reshape(ring.slots, c).copy()
        pos += ring.slots * c * 8
        ring.totals = np.frombuffer(data, np.float64, ring.slots, pos).copy()
        pos += ring.slots * 8
        ring.newest, ring.clock = newest, clock
        ok_ids = ring.ids[ring.ids >= 0]
        if (np.any(ring.ids < -1) or np.any(ok_ids > newest) or np.any(ok_ids % ring.slots != np.nonzero(ring.ids >= 0)[0])
                or not np.all(np.isfinite(ring.counts)) or np.any(ring.counts < 0)
                or np.any(ring.totals < 0) or (newest >= 0 and clock // ring.width != newest)):
            raise CorruptSketchError("pane ring contents are not valid")
        return ring, pos
