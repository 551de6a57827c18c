"""Relative-error decayed correlated sums for one declared converging decay.

Cormode, Tirthapura & Xu (2009), §3.2 (Theorem 3.3): a weight-based merging histogram
(WBMH, after Cohen & Strauss) whose buckets each hold a *bucket sketch* of the undecayed
correlated sum of the events they cover.

Value semantics
---------------
Values are quantized to a declared grid: cell ``j`` holds ``[value_min + j·res,
value_min + (j + 1)·res)`` (the last cell also holds ``value_max``), and an event's
quantized value is its cell's left edge ``v̄``. The sketch answers, exactly in the
relative sense below, ``S_τ = Σ_{v̄ >= τ} w·f(max(0, at − t))``. With values that are
multiples of ``res`` from ``value_min`` (e.g. integers and ``res = 1``), ``v̄ = v``.
The bucket sketch is the exact weight of each cell — mergeable, and with relative error
``ε₂ = 0`` for every threshold (Property 1 of §3.2.1) — so all the error budget goes to
the histogram: ``ε₁ = ε``.

Structure (§3.2.1-3.2.3, §3.2.5)
--------------------------------
Regions ``G_i = [b_i, b_{i+1})`` of ages come from SETBOUNDARIES (``(1 + ε)·f(b_i − 1)
>= f(b_{i−1})``, maximal) and bucket capacities from Lemma 3.1. A bucket of capacity
``I_i`` is merged into its parent when it lies wholly in ``G_i`` — the FINDREGIONS
schedule of Lemma 3.2. With a dummy element at every idle tick (§3.2.5) the partition at
clock ``c`` (the newest tick seen) is a closed-form function of ``c``
(:mod:`._wbmh_kernels`; the tests check it against PROCESSELEMENT driven by
FINDREGIONS tick by tick, :mod:`.schedule`). Empty buckets are never stored, a late
event goes straight to the bucket responsible for its tick, and a jump of the clock by
any number of ticks costs one closed-form evaluation per stored bucket.

Bound and proof (Theorem 3.3 with ε₁ = ε, ε₂ = 0)
-------------------------------------------------
*Invariant (Fact 3.1).* Every bucket ``[F, L]`` has ``f(c − L')/f(c − F) <= 1 + ε`` with
``L' = min(L, c)``. A level-1 bucket spans ``I_1 = b_1`` ticks, and
``(1 + ε)·f(b_1 − 1) >= f(0)``. A merged bucket spans at most ``I_{h+1} <= |G_h|`` ticks
and its newest tick is at least ``b_h`` old, so its ratio is at most
``f(b_h)/f(b_{h+1} − 1) <= 1 + ε``. For a converging ``f``, ``f(x)/f(x + d)`` does not grow
with ``x``, so the ratio never grows as the clock or the query time moves on.

*Query.* Each event of bucket ``B`` has age in ``[at − L', at − F]`` (clamped at 0), so
with ``Q_B`` the exact weight of its cells with ``v̄ >= τ``::

    lower = Σ_B Q_B·f(at − F)  <=  S_τ  <=  Σ_B Q_B·f(max(0, at − L'))  = upper

always (confidence 1, any ``at``). For ``at >= c`` the invariant gives
``upper <= (1 + ε)·lower``, hence ``(1 − ε)·S_τ <= lower <= Ŝ <= upper <= (1 + ε)·S_τ`` with
``Ŝ = (lower + upper)/2`` (so even ``|Ŝ − S_τ| <= (ε/2)·S_τ``). For ``at < c`` the interval
still holds but may be wider than ``ε``.

*Merges.* Partitions only coarsen as the clock grows, so both sketches are advanced to
the larger clock and equal buckets add their cells: the result is the sketch of the
union stream; no error is added at any merge depth.

*Floating point.* A cell is a sum of at most ``ops`` rounded additions and a query adds
at most ``cells·buckets`` products, so ``lower``/``upper`` are moved out by the factor
``η = (ops + cells·buckets + 8)·2^-52``.

Space (Theorem 3.5): ``O(1)`` buckets per region, so ``O(β)`` buckets with
``β = ⌈log_{1+ε}(f(0)/f(age))⌉``, each a row of ``cells`` sums (``nbytes`` stores only the
non-zero cells).
"""

from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np

from sketches._bytes import Reader, Writer
from sketches.base import CorruptSketchError, Estimate, Family, Sketch, SketchError, unit_interval
from sketches.decayed import _wbmh_kernels as K
from sketches.decayed._view import View
from sketches.decayed.additive import check_at, check_batch, check_range
from sketches.decayed.decay import (CallableDecay, Decay, NoDecay, Polynomial, decay_from_code, parse_decay,
                                    relative_guarantee_refusal)

__all__ = ["DecayedRelativeSketch", "region_count"]

METHOD = "wbmh-value-grid"
MAX_CELLS = 1 << 16
_ULP = 2.0**-52


@lru_cache(maxsize=64)
def _regions(alpha: float, eps: float, limit: int) -> tuple[np.ndarray, np.ndarray]:
    b = K.poly_boundaries(alpha, eps, limit)
    return b, K.capacities(b)


def region_count(decay, epsilon: float, max_age: int) -> int:
    """β of Theorem 3.5: regions covering ages ``[0, max_age]`` (0 for no decay)."""
    d = parse_decay(decay)
    if isinstance(d, NoDecay):
        return 1
    if not isinstance(d, Polynomial):
        raise SketchError(relative_guarantee_refusal(d) or "decay not supported")
    b, _ = _regions(d.alpha, float(epsilon), _limit_for(int(max_age)))
    return int(np.searchsorted(b, max_age, side="right"))


def _limit_for(clock: int) -> int:
    """Boundaries are computed past ``clock + 1``, in doublings so the cache stays small."""
    return min(2**62, max(1 << 16, 1 << int(clock + 2).bit_length()))


class DecayedRelativeSketch(Sketch):
    """Decayed correlated sum with relative error for one converging decay (§3.2).

    For the declared decay ``f`` (no decay or polynomial), any threshold ``τ`` and any
    query time ``at >= clock`` (Theorem 3.3, on the quantized values ``v̄``)::

        (1 − ε)·S_τ <= lower <= estimate <= upper <= (1 + ε)·S_τ

    deterministically (``confidence = 1``); ``lower <= S_τ <= upper`` also holds for
    ``at < clock``. Finite, exponential and super-exponential decays are refused with the
    lower bound that rules them out (Theorems 4.1-4.3). Merges add no error.

    Parameters
    ----------
    epsilon : float
        Relative error in (0, 1).
    decay : Decay or dict
        ``{"kind": "none"}`` or ``{"kind": "polynomial", "alpha": a}``.
    value_min, value_max : float
        Declared value range.
    resolution : float, optional
        Width of a value cell; default ``(value_max − value_min)/255`` (256 cells). At
        most 65536 cells; memory is ``buckets × cells × 8`` bytes.

    Examples
    --------
    >>> import numpy as np
    >>> sk = DecayedRelativeSketch(0.1, {"kind": "polynomial", "alpha": 1.5}, 0, 100, resolution=1)
    >>> sk.update(np.arange(1000), np.arange(1000) % 100)
    >>> e = sk.query(tau=50, at=999)
    >>> truth = ((999 - np.arange(1000) + 1.0) ** -1.5 * (np.arange(1000) % 100 >= 50)).sum()
    >>> bool(0.9 * truth <= e.lower <= truth <= e.upper <= 1.1 * truth), e.confidence
    (True, 1.0)
    """

    FAMILY, FORMAT = Family.DECAYED_RELATIVE, 2  # format 2: compact encodings
    WHAT, NOUN = "decayed relative sketch", "decayed relative sketches"
    PARAMS = "epsilon, decay or value grid"
    BATCH = ("ticks", "values", "weights")
    SHOWN = ("epsilon", "decay", "value_min", "value_max", "resolution", "clock_tick", "buckets")

    def __init__(self, epsilon, decay, value_min, value_max, resolution: float | None = None):
        self.epsilon = unit_interval("epsilon", epsilon)
        d = parse_decay(decay)
        refusal = relative_guarantee_refusal(d)
        if refusal is not None:
            raise SketchError(refusal)
        if not isinstance(d, (NoDecay, Polynomial)):  # pragma: no cover - every converging kind
            raise SketchError("relative sketch supports no decay and polynomial decay")
        self.decay: Decay = d
        self.value_min, self.value_max = check_range(value_min, value_max)
        span = self.value_max - self.value_min
        res = span / 255 if resolution is None else float(resolution)
        if not (math.isfinite(res) and res > 0) or span / res >= MAX_CELLS:
            raise SketchError(f"resolution must be > 0 with at most {MAX_CELLS} cells")
        self.resolution = res
        n = int(math.floor(span / res)) + 1
        while n > 1 and self.value_min + (n - 1) * res > self.value_max:
            n -= 1
        while self.value_min + n * res <= self.value_max:
            n += 1
        if n > MAX_CELLS:
            raise SketchError(f"resolution must be > 0 with at most {MAX_CELLS} cells")
        self.cells = n
        self.edges = self.value_min + np.arange(n) * res  # left edges: the quantized values
        self._clock = -1
        self._ops = 0
        self._starts = np.zeros(0, np.int64)
        self._M = np.zeros((0, n), np.float64)
        self._b = self._cap = None

    # -- the partition ---------------------------------------------------------------------
    @property
    def _single(self) -> bool:
        return isinstance(self.decay, NoDecay)

    def _buckets(self, ticks: np.ndarray, clock: int) -> tuple[np.ndarray, np.ndarray]:
        if self._single:
            z = np.zeros(0, np.int64)
            return K.buckets_of(ticks, clock, z, z, True)
        if self._b is None or self._b[-1] <= clock + 1:
            self._b, self._cap = _regions(self.decay.alpha, self.epsilon, _limit_for(clock))
        return K.buckets_of(ticks, clock, self._b, self._cap, False)

    def _advance(self, clock: int) -> None:
        """Move the clock: buckets only merge (FINDREGIONS up to ``clock``, in closed form)."""
        if clock <= self._clock:
            return
        if self._starts.size:
            F, _ = self._buckets(self._starts, clock)
            uniq, groups = np.unique(F, return_inverse=True)
            if uniq.size < F.size:
                self._M = K.fold_rows(self._M, groups.astype(np.int64), uniq.size)
                self._ops += 1
            self._starts = uniq
        self._clock = clock

    # -- updates -------------------------------------------------------------------------------
    def update(self, ticks, values, weights=None) -> None:
        """Insert a batch (any order, late events, bursts, zero or huge weights)."""
        t, v, w = check_batch(ticks, values, weights, self.value_min, self.value_max)
        if t.size == 0:
            return
        total = float(w.sum()) + float(self._M.sum())
        if not math.isfinite(total):
            raise SketchError("total weight overflows float64")
        self._advance(int(t.max()))
        pos = w > 0
        t, v, w = t[pos], v[pos], w[pos]
        if t.size:
            F, _ = self._buckets(t, self._clock)
            starts = np.union1d(self._starts, F)
            if starts.size > self._starts.size:
                M = np.zeros((starts.size, self.cells), np.float64)
                M[np.searchsorted(starts, self._starts)] = self._M
                self._starts, self._M = starts, M
            rows = np.searchsorted(self._starts, F)
            K.accumulate(self._M, rows, K.quantize(v, self.value_min, self.resolution, self.cells), w)
        self._ops += int(t.size)

    # -- queries -------------------------------------------------------------------------------
    def _factors(self, at: int, decay=None, until: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per bucket, the decay of its oldest and of its newest possible tick.

        ``decay`` (default: the declared one) may be any non-increasing decay: the bucket
        brackets hold for it, and are within ``1 + ε`` when it falls no faster than the
        declared one. With ``until``, only events with tick ``<= until`` count: a bucket
        straddling ``until`` adds nothing to the lower and all of itself to the upper."""
        d = self.decay if decay is None else decay
        _, L = self._buckets(self._starts, self._clock)
        newest = np.minimum(L, self._clock)
        lo = np.asarray(d(np.maximum(at - self._starts, 0)), np.float64)
        hi = np.asarray(d(np.maximum(at - newest, 0)), np.float64)
        if until is not None:
            lo = np.where(newest <= until, lo, 0.0)
            hi = np.where(self._starts <= until, hi, 0.0)
        return lo, hi

    def _eta(self) -> float:
        return (self._ops + self.cells * self._starts.size + 8) * _ULP

    def select(self, cell_mask, at: int, decay=None, until: int | None = None) -> Estimate:
        """Decayed weight of the cells in ``cell_mask`` at ``at``, counting ticks
        ``<= until`` only (all by default), under ``decay`` (default: the declared one)."""
        at = check_at(at)
        if self.is_empty:
            return Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
        q = self._M[:, cell_mask].sum(axis=1)
        flo, fhi = self._factors(at, decay, until)
        eta = self._eta()
        lower, upper = float(q @ flo), float(q @ fhi)
        est = (lower + upper) / 2
        return Estimate(est, lower * (1 - eta), upper * (1 + eta), "relative", self.epsilon, 1.0, METHOD)

    def _bracket(self, at, cell_mask) -> Estimate:
        return self.select(cell_mask, at)

    def query(self, tau: float, at: int) -> Estimate:
        """Decayed sum of the events with quantized value ``>= tau`` (Theorem 3.3)."""
        tau = float(tau)
        if math.isnan(tau):
            raise SketchError("tau must be a number")
        return self._bracket(at, self.edges >= tau)

    def range_sum(self, lo_value, hi_value, at) -> Estimate:
        """Decayed sum of the events with quantized value in ``[lo_value, hi_value]``."""
        lo, hi = float(lo_value), float(hi_value)
        if math.isnan(lo) or math.isnan(hi) or hi < lo:
            raise SketchError("value range must be numbers with lo <= hi")
        return self._bracket(at, (self.edges >= lo) & (self.edges <= hi))

    def cell_of(self, value: float) -> int:
        """The cell holding ``value`` (clipped to the declared range)."""
        v = np.array([min(max(float(value), self.value_min), self.value_max)])
        return int(K.quantize(v, self.value_min, self.resolution, self.cells)[0])

    def quantize(self, values) -> np.ndarray:
        """The quantized values ``v̄`` the sketch answers about."""
        v = np.asarray(values, dtype=np.float64)
        return self.edges[K.quantize(np.clip(v, self.value_min, self.value_max).ravel(),
                                     self.value_min, self.resolution, self.cells)].reshape(v.shape)

    def _view(self, decay, at, until: int | None = None) -> View:
        """The §1.1 view at ``at`` for the derived aggregates (see :mod:`.derived`),
        counting ticks ``<= until`` only (all by default)."""
        override = decay if isinstance(decay, CallableDecay) else None  # see _factors
        if decay is not None and override is None and parse_decay(decay) != self.decay:
            raise SketchError("a relative sketch answers only for the decay it was built with")
        at = check_at(at)
        eps = self.epsilon
        if self.is_empty:
            z = np.zeros(0)
            return View(z, z, z, z, "relative", METHOD, lambda e, lo, hi, tails: (lo * 0, hi * 0), 1.0,
                        lambda tails: eps)
        flo, fhi = self._factors(at, override, until)
        lo, hi = flo @ self._M, fhi @ self._M
        nz = np.flatnonzero(self._M.sum(axis=0) > 0)
        eta = self._eta()
        return View(self.edges[nz], (lo[nz] + hi[nz]) / 2, lo[nz], hi[nz], "relative", METHOD,
                    lambda e, a, b, tails: (a * (1 - eta), b * (1 + eta)), 1.0, lambda tails: eps)

    # -- merging -------------------------------------------------------------------------------
    def _params(self) -> tuple:
        return (self.epsilon, self.decay.code, *self.decay.params(), self.value_min, self.value_max,
                self.resolution)

    def _merge(self, other: "DecayedRelativeSketch") -> "DecayedRelativeSketch":
        """Fold ``other`` in: the exact sketch of the union stream (no added error)."""
        if other.is_empty:
            return self
        o = other.copy()
        clock = max(self._clock, o._clock)
        self._advance(clock)
        o._advance(clock)
        starts = np.union1d(self._starts, o._starts)
        M = np.zeros((starts.size, self.cells), np.float64)
        M[np.searchsorted(starts, self._starts)] += self._M
        M[np.searchsorted(starts, o._starts)] += o._M
        self._starts, self._M = starts, M
        self._ops += o._ops + 1
        return self

    @property
    def is_empty(self) -> bool:
        return self._clock < 0

    @property
    def clock_tick(self) -> int:
        """Newest tick seen (-1 when empty)."""
        return self._clock

    @property
    def buckets(self) -> int:
        return int(self._starts.size)


    # -- bytes -------------------------------------------------------------------------------------
    # payload (format 2, little endian; varints are LEB128, see sketches._codec):
    #   f64 epsilon | u8 decay code | f64 decay p1 | f64 decay p2
    #   f64 value_min | f64 value_max | f64 resolution
    #   i64 clock (-1 = empty) | u64 ops | u32 buckets B
    #   | varint first start, B−1 varint start gaps (oldest first, canonical at the clock)
    #   | varint nnz
    #   | varint first flat index, nnz−1 varint (gap − 1) of the non-zero cells of the
    #     row-major B × cells array | float column of their weights

    def max_nbytes(self) -> None:
        """None: the buckets follow the oldest event's age (Theorem 3.5: ``O(β)`` with
        ``β = ⌈log_{1+ε}(f(0)/f(age))⌉``), which no parameter bounds."""
        return None

    def _payload(self) -> bytes:
        p1, p2 = self.decay.params()
        wr = Writer().pack(_HEAD, self.epsilon, self.decay.code, p1, p2, self.value_min, self.value_max,
                           self.resolution, self._clock, self._ops, self.buckets)
        if self.buckets:
            flat = np.flatnonzero(self._M > 0)
            wr.uint(int(self._starts[0])).uints(np.diff(self._starts).view(np.uint64)).uint(flat.size)
            wr.uints((np.diff(flat, prepend=-1) - 1).view(np.uint64)).floats(self._M.ravel()[flat])
        return wr.bytes()

    @classmethod
    def _read(cls, rd: Reader) -> "DecayedRelativeSketch":
        eps, code, p1, p2, vmin, vmax, res, clock, ops, nb = rd.unpack(_HEAD)
        try:
            sk = cls(eps, decay_from_code(code, p1, p2), vmin, vmax, res)
        except SketchError as e:
            raise CorruptSketchError(f"decayed relative sketch parameters out of range: {e}") from None
        if sk.resolution != res or not -1 <= clock < 2**62 or (clock < 0 and nb):
            raise CorruptSketchError("decayed relative sketch header out of range")
        if 2 * nb > rd.left():
            raise CorruptSketchError("decayed relative sketch blob truncated")
        starts = np.zeros(0, np.int64)
        M = np.zeros(nb * sk.cells, np.float64)
        if nb:
            first = rd.uint(2**62)
            gaps = rd.uints(nb - 1)
            if nb > 1 and (gaps.min() == 0 or gaps.astype(np.float64).sum() > clock):
                raise CorruptSketchError("decayed relative sketch bucket starts are not valid")
            starts = first + np.concatenate([[0], np.cumsum(gaps.astype(np.int64))])
            nnz = rd.uint(M.size)
            steps = rd.uints(nnz)
            if nnz and steps.max() >= np.uint64(M.size):
                raise CorruptSketchError("decayed relative sketch cells are not valid")
            flat = np.cumsum(steps.astype(np.int64) + 1) - 1
            w = rd.floats(nnz)
            if nnz and (flat[-1] >= M.size or not np.all(np.isfinite(w)) or w.min() <= 0):
                raise CorruptSketchError("decayed relative sketch cells are not valid")
            M[flat] = w
        rd.done()
        M = M.reshape(nb, sk.cells)
        if nb:
            if starts[0] < 0 or starts[-1] > clock or np.any(np.diff(starts) <= 0):
                raise CorruptSketchError("decayed relative sketch bucket starts are not valid")
            F, _ = sk._buckets(starts, int(clock))
            if not np.array_equal(F, starts):
                raise CorruptSketchError("decayed relative sketch buckets do not match its clock")
        if not math.isfinite(float(M.sum())):
            raise CorruptSketchError("decayed relative sketch total overflows")
        sk._clock, sk._ops, sk._starts, sk._M = int(clock), int(ops), starts, M
        return sk


_HEAD = struct.Struct("<dBdddddqQI")
