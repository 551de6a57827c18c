"""Sliding-window quantiles and range counts of a bounded value, deterministic.

Values in the declared range ``[vmin, vmax]`` fall into ``bins`` equal bins; each time pane
(:mod:`sketches.pane_ring`) keeps exact bin counts, so arrival order does not matter.

For a window, every bin's true count lies in ``[inside, touching]``. The true q-quantile
``v*`` — the smallest value with at least ``q·N`` events ``≤ v*`` — is bracketed by bins
(the rank function is read from the bounds of each prefix)::

    lower = left edge of the first bin b with Σ_{≤b} touching ≥ q · N_inside
    upper = right edge of the first bin b with Σ_{≤b} inside ≥ q · N_touching

Any bin before ``lower``'s has fewer than q·N events at or below it, and by ``upper``'s bin
at least q·N are, so ``lower ≤ v* ≤ upper`` always (confidence 1). The bracket is never
narrower than one bin: ``(vmax − vmin)/bins`` is the value resolution. This replaces the
dyadic ECM of Papapetrou et al. (2012, §6.1) for bounded values: exact counts per bin need
no hashing, so the bracket is deterministic; the cost is a fixed value grid.

Examples
--------
>>> import numpy as np
>>> vh = ValueHistogram(0.0, 100.0, window=1000, panes=10, bins=100)
>>> vh.update(np.arange(100), np.arange(100, dtype=float))
>>> [(round(lo), round(hi)) for lo, hi in vh.quantiles([0.5], 0, 99)]
[(49, 50)]
"""

from __future__ import annotations

import math
import struct

import numpy as np

from sketches.base import (
    CorruptSketchError,
    Estimate,
    Family,
    IncompatibleSketchError,
    SketchError,
    pack_header,
    unpack_header,
)
from sketches.pane_ring import PaneRing

__all__ = ["ValueHistogram"]

METHOD = "value-histogram/pane-cells"
_HEAD = struct.Struct("<ddqII")


class ValueHistogram:
    def __init__(self, vmin: float, vmax: float, window: int, panes: int = 40, bins: int = 1024):
        if not (math.isfinite(vmin) and math.isfinite(vmax) and vmin < vmax):
            raise SketchError("value range must be finite with vmin < vmax")
        self.vmin, self.vmax, self.window = float(vmin), float(vmax), int(window)
        self.panes, self.bins = int(panes), int(bins)
        self.step = (self.vmax - self.vmin) / self.bins
        self.ring = PaneRing(self.window, self.panes, self.bins)

    def update(self, ticks: np.ndarray, values: np.ndarray) -> None:
        values = np.asarray(values, np.float64)
        if np.any(values < self.vmin) or np.any(values > self.vmax) or not np.all(np.isfinite(values)):
            raise SketchError("values must lie in the declared range")
        bins = np.minimum(((values - self.vmin) / self.step).astype(np.int64), self.bins - 1)
        self.ring.add(np.asarray(ticks, np.int64), bins[:, None], np.ones(values.size))

    @property
    def clock(self) -> int:
        return self.ring.clock

    @property
    def is_empty(self) -> bool:
        return self.ring.newest < 0

    def quantiles(self, qs, lo: int, hi: int, inner=None) -> list[tuple[float, float]]:
        """Brackets ``(lower, upper)`` of the true q-quantile value, one per q."""
        inside, touching, n_in, n_touch = self.ring.sums(lo, hi, inner)
        cum_in, cum_touch = np.cumsum(inside), np.cumsum(touching)
        out = []
        for q in qs:
            if n_touch == 0:
                out.append((math.nan, math.nan))
                continue
            # Rounding may only widen: the low target is shaded down, the high one is not.
            target_low = max(q * n_in * (1 - 1e-12), 1e-12)
            target_high = max(q * n_touch, 1e-12)
            b_lo = int(np.searchsorted(cum_touch, target_low, side="left"))
            b_hi = int(np.searchsorted(cum_in, target_high, side="left"))
            lower = self.vmin + min(b_lo, self.bins - 1) * self.step
            upper = self.vmax if b_hi >= self.bins - 1 else self.vmin + (b_hi + 1) * self.step
            out.append((lower, max(upper, lower)))
        return out

    def range_count(self, a: float, b: float, lo: int, hi: int, inner=None) -> Estimate:
        """Events with value in ``[a, b]``: bins wholly inside count low, bins touching high."""
        inside, touching, _, _ = self.ring.sums(lo, hi, inner)
        first_full = math.ceil((a - self.vmin) / self.step)
        last_full = math.floor((b - self.vmin) / self.step) - 1
        first_touch = max(0, math.floor((a - self.vmin) / self.step))
        last_touch = min(self.bins - 1, math.floor((b - self.vmin) / self.step))
        low = float(inside[max(first_full, 0) : last_full + 1].sum()) if last_full >= first_full else 0.0
        high = float(touching[first_touch : last_touch + 1].sum())
        return Estimate((low + high) / 2, low, high, "additive", 0.0, 1.0, METHOD)

    def merge(self, other: "ValueHistogram") -> "ValueHistogram":
        if other is self:
            raise IncompatibleSketchError("cannot merge a sketch with itself")
        if not isinstance(other, ValueHistogram) or (other.vmin, other.vmax, other.window, other.panes, other.bins) != (
                self.vmin, self.vmax, self.window, self.panes, self.bins):
            raise IncompatibleSketchError("cannot merge value histograms with different parameters")
        self.ring.merge(other.ring)
        return self

    def copy(self) -> "ValueHistogram":
        return ValueHistogram.from_bytes(self.to_bytes())

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())

    def __repr__(self) -> str:
        return (f"ValueHistogram([{self.vmin}, {self.vmax}], bins={self.bins}, window={self.window}, "
                f"panes={self.panes}, clock={self.clock})")

    # payload: f64 vmin | f64 vmax | i64 window | u32 panes | u32 bins | ring
    def to_bytes(self) -> bytes:
        payload = _HEAD.pack(self.vmin, self.vmax, self.window, self.panes, self.bins) + self.ring.to_bytes()
        return pack_header(Family.VALUE_HISTOGRAM, len(payload)) + payload

    @classmethod
    def from_bytes(cls, data) -> "ValueHistogram":
        _, payload = unpack_header(data, Family.VALUE_HISTOGRAM)
        if len(payload) < _HEAD.size:
            raise CorruptSketchError("value histogram truncated")
        vmin, vmax, window, panes, bins = _HEAD.unpack_from(payload)
        if not (math.isfinite(vmin) and math.isfinite(vmax) and vmin < vmax and 1 <= window <= 2**40
                and 1 <= panes <= 100_000 and 1 <= bins <= 1 << 20):
            raise CorruptSketchError("value histogram parameters out of range")
        vh = cls(vmin, vmax, window, panes, bins)
        vh.ring, pos = PaneRing.read(payload, _HEAD.size, window, panes, bins)
        if pos != len(payload):
            raise CorruptSketchError("trailing bytes after value histogram")
        return vh
