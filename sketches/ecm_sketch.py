"""ECM-sketch: Count-Min with sliding-window cells — point, inner-product and self-join
queries over any window ``w ≤ W`` of an asynchronous stream, mergeable across sites.

Papapetrou, O., Garofalakis, M. and Deligiannakis, A. (2012). *Sketching distributed
sliding-window data streams.* §4 (the sketch: a d × w Count-Min array whose cells are
sliding-window counters; Theorem 1 point queries, Theorem 2 inner products), §5.3
(aggregation of sketches from many sites).

Cells are :class:`~sketches.pane_ring.PaneRing` counters (exact per time pane) rather than
exponential histograms: an asynchronous stream may deliver any event late, which an
exponential histogram cannot take, while panes are exact under any arrival order. For a
range, each cell's true count c lies in ``[inside, touching]`` (the panes wholly inside,
and those that touch). The Count-Min guarantee (Cormode & Muthukrishnan; ECM §4.1 with
ε_sw = 0): with ``w = ⌈e/ε⌉`` and ``d = ⌈ln 1/δ⌉``, with probability ≥ 1 − δ some row j*
has noise ≤ ε·N, where N = ‖a_r‖₁ is the window's count. So, for a key of frequency f::

    f ≤ min_j touching_j                                  (always: cells only add)
    f ≥ min_j inside_j − ε · N_touching                   (probability ≥ 1 − δ)

and likewise ``F2 ≤ min_j Σ_b touching_j[b]²`` always and ``F2 ≥ min_j Σ_b inside_j[b]² −
ε·N²``; ``A·B ≤ min_j Σ_b touchingA_j[b]·touchingB_j[b]`` always and ``A·B ≥ min_j Σ_b
insideA_j[b]·insideB_j[b] − ε·N_A·N_B`` (Theorem 2's argument). ``epsilon`` reported is ε,
additive in N (or N², N_A·N_B).

Merging adds the arrays (same seed and shape): exact, so the order-preserving aggregation
of §5.3 composes with no extra error at any depth.

Examples
--------
>>> import numpy as np
>>> ecm = ECMSketch(0.05, 0.05, window=100)
>>> ecm.update(np.arange(50), np.full(50, 7, np.uint64))
>>> e = ecm.frequency(7, 0, 49)
>>> e.lower <= 50 <= e.upper
True
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
from sketches.hashing import splitmix64
from sketches.pane_ring import PaneRing

__all__ = ["ECMSketch", "suggest_shape"]

METHOD = "ecm-sketch/pane-cells"
_HEAD = struct.Struct("<ddqIIIq")


def suggest_shape(epsilon: float, delta: float) -> tuple[int, int]:
    """(depth d, width w) of the Count-Min array: w = ⌈e/ε⌉, d = ⌈ln 1/δ⌉ (ECM §4.1)."""
    return max(1, math.ceil(math.log(1 / delta))), math.ceil(math.e / epsilon)


class ECMSketch:
    def __init__(self, epsilon: float, delta: float, window: int, seed: int = 0, panes: int | None = None):
        if not (0 < epsilon < 1 and 0 < delta < 1):
            raise SketchError("epsilon and delta must be in (0, 1)")
        self.epsilon, self.delta, self.window, self.seed = float(epsilon), float(delta), int(window), int(seed)
        self.depth, self.width = suggest_shape(epsilon, delta)
        # Panes: the window's edge is uncertain by one pane, about 1/panes of the window.
        self.panes = int(panes or math.ceil(2 / epsilon))
        self.ring = PaneRing(self.window, self.panes, self.depth * self.width)

    # -- updates ---------------------------------------------------------------------------
    def _cells(self, keys: np.ndarray) -> np.ndarray:
        rows = np.empty((keys.size, self.depth), np.int64)
        for j in range(self.depth):  # one vectorised hash per row, not per event
            rows[:, j] = (splitmix64(keys, self.seed * 1000 + j) % np.uint64(self.width)).astype(np.int64)
            rows[:, j] += j * self.width
        return rows

    def update(self, ticks: np.ndarray, keys: np.ndarray, weights: np.ndarray | None = None) -> None:
        ticks = np.asarray(ticks, np.int64)
        keys = np.asarray(keys, np.uint64)
        if ticks.shape != keys.shape:
            raise SketchError("ticks and keys must have the same length")
        if weights is None:
            weights = np.ones(ticks.size)
        weights = np.asarray(weights, np.float64)
        if weights.shape != ticks.shape or np.any(weights < 0) or not np.all(np.isfinite(weights)):
            raise SketchError("weights must be finite, >= 0 and one per event")
        self.ring.add(ticks, self._cells(keys), weights)

    @property
    def clock(self) -> int:
        return self.ring.clock

    @property
    def is_empty(self) -> bool:
        return self.ring.newest < 0

    # -- queries -----------------------------------------------------------------------------
    def _arrays(self, lo, hi, inner):
        inside, touching, n_in, n_touch = self.ring.sums(lo, hi, inner)
        shape = (self.depth, self.width)
        return inside.reshape(shape), touching.reshape(shape), n_in, n_touch

    def _estimate(self, low_rows, high_rows, slack) -> Estimate:
        upper = float(high_rows.min())
        lower = max(0.0, float(low_rows.min()) - slack)
        estimate = min(max(float(low_rows.min()), lower), upper)
        return Estimate(estimate, min(lower, upper), upper, "additive", self.epsilon, 1 - self.delta, METHOD)

    def frequency(self, key: int, lo: int, hi: int, inner=None) -> Estimate:
        """Events with ``key`` in ticks ``[lo, hi]`` (Theorem 1)."""
        inside, touching, _, n_touch = self._arrays(lo, hi, inner)
        cols = self._cells(np.array([key], np.uint64))[0] - np.arange(self.depth) * self.width
        rows = np.arange(self.depth)
        return self._estimate(inside[rows, cols], touching[rows, cols], self.epsilon * n_touch)

    def self_join(self, lo: int, hi: int, inner=None) -> Estimate:
        """Σ_keys f² over ``[lo, hi]`` (Theorem 2 with A = B)."""
        inside, touching, _, n_touch = self._arrays(lo, hi, inner)
        return self._estimate((inside**2).sum(axis=1), (touching**2).sum(axis=1),
                              self.epsilon * n_touch**2)

    def inner_product(self, other: "ECMSketch", lo: int, hi: int, inner=None) -> Estimate:
        """Σ_keys f_A · f_B over ``[lo, hi]`` (Theorem 2)."""
        self._check_compatible(other)
        a_in, a_touch, _, na = self._arrays(lo, hi, inner)
        b_in, b_touch, _, nb = other._arrays(lo, hi, inner)
        return self._estimate((a_in * b_in).sum(axis=1), (a_touch * b_touch).sum(axis=1),
                              self.epsilon * na * nb)

    def count(self, lo: int, hi: int, inner=None) -> tuple[float, float]:
        """(inside, touching) totals: deterministic bounds on the window's count N."""
        _, _, n_in, n_touch = self._arrays(lo, hi, inner)
        return n_in, n_touch

    # -- merging --------------------------------------------------------------------------------
    def _check_compatible(self, other) -> None:
        if not isinstance(other, ECMSketch):
            raise IncompatibleSketchError("can only combine an ECMSketch with an ECMSketch")
        if (other.epsilon, other.delta, other.window, other.seed, other.panes) != (
                self.epsilon, self.delta, self.window, self.seed, self.panes):
            raise IncompatibleSketchError("cannot combine ECM-sketches with different parameters or seed")

    def merge(self, other: "ECMSketch") -> "ECMSketch":
        if other is self:
            raise IncompatibleSketchError("cannot merge a sketch with itself")
        self._check_compatible(other)
        self.ring.merge(other.ring)
        return self

    def copy(self) -> "ECMSketch":
        return ECMSketch.from_bytes(self.to_bytes())

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())

    def __repr__(self) -> str:
        return (f"ECMSketch(epsilon={self.epsilon}, delta={self.delta}, window={self.window}, "
                f"d={self.depth}, w={self.width}, panes={self.panes}, clock={self.clock})")

    # payload: f64 epsilon | f64 delta | i64 window | u32 panes | u32 depth | u32 width | i64 seed | ring
    def to_bytes(self) -> bytes:
        payload = _HEAD.pack(self.epsilon, self.delta, self.window, self.panes, self.depth,
                             self.width, self.seed) + self.ring.to_bytes()
        return pack_header(Family.ECM, len(payload)) + payload

    @classmethod
    def from_bytes(cls, data) -> "ECMSketch":
        _, payload = unpack_header(data, Family.ECM)
        if len(payload) < _HEAD.size:
            raise CorruptSketchError("ECM-sketch truncated")
        eps, delta, window, panes, depth, width, seed = _HEAD.unpack_from(payload)
        if not (0 < eps < 1 and 0 < delta < 1 and 1 <= window <= 2**40 and 1 <= panes <= 100_000):
            raise CorruptSketchError("ECM-sketch parameters out of range")
        sk = cls(eps, delta, window, seed, panes)
        if (depth, width) != (sk.depth, sk.width):
            raise CorruptSketchError("ECM-sketch shape does not match its parameters")
        sk.ring, pos = PaneRing.read(payload, _HEAD.size, window, panes, depth * width)
        if pos != len(payload):
            raise CorruptSketchError("trailing bytes after ECM-sketch")
        return sk
