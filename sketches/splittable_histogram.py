"""Splittable histogram: deterministic ε-relative count and sum over a sliding timestamp
window of an asynchronous (out-of-order) stream.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2.1 (intervals I_k and the pair
D_j, D_{j+1}; levels S_0..S_M; splitting; Algorithms 1-3), §2.2 (Lemmas 1-3, Theorems 1-2),
§3 (sum: the batched insertion of Algorithm 4, Theorems 3-4).

Byte layout (format 2, after the common 16-byte header, family SPLITTABLE_HISTOGRAM,
little endian; varints are LEB128 and signed ones zig-zag, see ``sketches._codec``)::

    f64 epsilon | i64 window | f64 max_total | f64 unit | u32 substreams
    substreams × substream:
        varint± clock | u8 has_old | [interval old] | interval new
    interval:
        varint± k | u8 exact | u8 levels
        levels × level:
            varint T + 1 | varint flops | varint n
            level 0:   varint± first tick, n−1 varint tick gaps | float column weights
                       (local ticks, increasing)
            level ≥ 1: n × u8 log2(width) | float column weights (buckets tile [T + 1, Wp − 1])

A float column is one constant, scaled integers or raw f64, whichever is exact.
Only non-empty sub-streams are written. Each level keeps its ``alpha`` most recent buckets (the
discard of Algorithm 4, lines 39-45, that memory defers), and an interval that lies wholly
before ``clock - window + 1`` is left out (``has_old = 0``).
"""

from __future__ import annotations

import functools
import math
import struct
from fractions import Fraction

import numpy as np

from sketches._bytes import HEADER_SIZE, Reader, Writer
from sketches._codec import max_float_column_size, varint_size
from sketches._splittable_kernels import (INTERVAL_ERRORS, aggregate_sorted, exact_suffix_terms,
                                          insert_all, is_sorted, read_interval, suffix_at, write_interval)
from sketches.base import (CorruptSketchError, Estimate, EstimateColumns, Family, Sketch, SketchError,
                           epsilon_and_window, int_ranges, window_range)

__all__ = [
    "SplittableHistogram",
    "suggest_alpha",
    "suggest_levels",
    "suggest_parameters",
    "paper_space_bits",
]

METHOD = "splittable-histogram"
MAX_WINDOW = 2**40
TICK_LIMIT = 2**61
MAX_ALPHA = 2**20
EMPTY_CLOCK = -(2**62)
_U = Fraction(1, 2**53)  # unit roundoff of float64
_EXACT_LIMIT = 2.0**53


# -- sizing --------------------------------------------------------------------------------
def _log2_window(window: int) -> int:
    """log2 of Wp, the window rounded up to a power of two (§2.1: W is a power of 2)."""
    return max(0, (int(window) - 1).bit_length())


@functools.lru_cache(maxsize=256)  # (pure; every read of a histogram sizes it again)
def suggest_alpha(epsilon: float, window: int) -> int:
    """Buckets kept per level, α = ⌈(1 + log₂ Wp)(2 + ε)/ε⌉ (§2.1, Algorithm 1)."""
    return int(math.ceil((1 + _log2_window(window)) * (2 + epsilon) / epsilon))


@functools.lru_cache(maxsize=256)  # (pure; a loop of up to 600 steps on every read)
def suggest_levels(max_total: float, unit: float = 1.0) -> int:
    """Top level M = ⌈log₂(B/unit)⌉ (at least 1), so 2^(M+1)·unit > B (Lemma 2)."""
    ratio = max_total / unit
    m = 1
    while 2.0**m < ratio:
        m += 1
    return m


def suggest_parameters(epsilon: float, window: int, max_total: float = 2.0**48,
                       unit: float = 1.0) -> tuple[int, int]:
    """``(alpha, M)``: buckets per level and top level index for ε, W and B (§2.1)."""
    return suggest_alpha(epsilon, window), suggest_levels(max_total, unit)


def paper_space_bits(epsilon: float, window: int, max_total: float = 2.0**48,
                     unit: float = 1.0) -> int:
    """Theorem 2's space, counted: 2 intervals × (M + 1) levels × α buckets ⟨w, l, r⟩ of
    ``2·log₂ Wp + ⌈log₂(B/unit)⌉`` bits each."""
    alpha, m = suggest_parameters(epsilon, window, max_total, unit)
    return 2 * (m + 1) * alpha * (2 * _log2_window(window) + m)


# -- exact arithmetic helpers for the bounds -------------------------------------------------
def _gamma(k: int) -> Fraction | None:
    """γ_k = k·u/(1 − k·u): the relative error of a product of k factors (1 ± u)
    (Higham, *Accuracy and Stability of Numerical Algorithms*, Lemma 3.1); None if huge."""
    ku = k * _U
    if ku >= Fraction(1, 4):
        return None
    return ku / (1 - ku)


def _down(x: Fraction) -> float:
    f = float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def _up(x: Fraction | None) -> float:
    if x is None:
        return math.inf
    f = float(x)
    return math.nextafter(f, math.inf) if Fraction(f) < x else f


def _down_ratio(num: int, den: int) -> float:
    """``_down(Fraction(num, den))`` for ``den > 0`` without building the Fraction."""
    f = num / den  # correctly rounded, as float(Fraction) is
    a, b = f.as_integer_ratio()
    return math.nextafter(f, -math.inf) if a * den > num * b else f


def _up_ratio(num: int, den: int) -> float:
    """``_up(Fraction(num, den))`` for ``den > 0``."""
    f = num / den
    a, b = f.as_integer_ratio()
    return math.nextafter(f, math.inf) if a * den < num * b else f


def _ceil_digits(x: Fraction, digits: int = 9) -> float:
    """``x`` rounded up to ``digits`` significant digits (a readable, still valid ε)."""
    scale = Fraction(10) ** (digits - 1 - math.floor(math.log10(float(x))))
    f = float(Fraction(math.ceil(x * scale)) / scale)
    return f if Fraction(f) >= x else _up(x)


class _Term:
    """One suffix s_t of one interval: fsum of its buckets and a bracket of its truth."""

    __slots__ = ("est", "lower", "upper", "delta", "eps", "ok")

    def __init__(self, est, lower, upper, delta, eps, ok):
        self.est, self.lower, self.upper = est, lower, upper  # upper None = unbounded
        self.delta, self.eps, self.ok = delta, eps, ok


_ZERO_TERM = _Term(Fraction(0), Fraction(0), Fraction(0), Fraction(0), Fraction(0), True)


class _Interval:
    """The data structure D_k of the interval [k·Wp, (k+1)·Wp − 1] (§2.1)."""

    def __init__(self, k: int, cap: int, levels: int = 2):
        self.k = k
        self.L = np.zeros((levels, cap), np.int64)
        self.M = np.zeros((levels, cap), np.float64)
        self.n = np.ones(levels, np.int64)  # Algorithm 1: levels ≥ 1 start as ⟨0, 0, Wp−1⟩
        self.n[0] = 0  # and S_0 = ∅
        self.T = np.full(levels, -1, np.int64)
        self.F = np.zeros(levels, np.int64)
        self.exact = True

    @property
    def levels(self) -> int:
        return self.L.shape[0]

    @property
    def total(self) -> float:
        # The top level never splits, so its one bucket holds everything inserted.
        return float(self.M[-1, 0])

    def fit(self, levels: int, cap: int) -> None:
        """At least ``levels`` levels of ``cap`` buckets, in one allocation (a read or merged
        interval is kept compact; a worker reads one every update, so padding the rows and
        stacking the levels one array at a time was a tenth of its update). A level added
        never split: it is one root bucket with all the mass so far, the level Algorithm 1
        would have built. Only the shape changes: every kernel reads a level's first n
        buckets, so the state, its bytes and its answers are the same."""
        old, have = self.L.shape
        if levels <= old and cap <= have:
            return
        rows, cols = max(levels, old), max(cap, have)
        L = np.zeros((rows, cols), np.int64)
        M = np.zeros((rows, cols), np.float64)
        L[:old, :have], M[:old, :have] = self.L, self.M
        self.L, self.M = L, M
        if rows > old:
            extra = rows - old
            M[old:, 0] = M[old - 1, 0]
            self.n = np.concatenate([self.n, np.ones(extra, np.int64)])
            self.T = np.concatenate([self.T, np.full(extra, -1, np.int64)])
            self.F = np.concatenate([self.F, np.full(extra, self.F[old - 1], np.int64)])

    def copy(self, compact: bool = False) -> "_Interval":
        """A deep copy; ``compact`` keeps only the filled columns (for a sub-stream that is
        only read: merged sub-streams never take new events)."""
        d = _Interval.__new__(_Interval)
        d.k, d.exact = self.k, self.exact
        width = max(1, int(self.n.max())) if compact else self.L.shape[1]
        d.L, d.M = self.L[:, :width].copy(), self.M[:, :width].copy()
        d.n, d.T, d.F = self.n.copy(), self.T.copy(), self.F.copy()
        return d

    def gamma(self) -> Fraction | None:
        """Relative perturbation of every mass held at any level (see the class notes)."""
        return Fraction(0) if self.exact else _gamma(int(self.F.max()))


class _Substream:
    """One splittable histogram of one sub-stream: its clock and the pair D_j, D_{j+1}."""

    __slots__ = ("clock", "old", "new")

    def __init__(self):
        self.clock: int | None = None
        self.old: _Interval | None = None
        self.new: _Interval | None = None

    def copy(self, compact: bool = False) -> "_Substream":
        p = _Substream()
        p.clock = self.clock
        p.old = None if self.old is None else self.old.copy(compact)
        p.new = None if self.new is None else self.new.copy(compact)
        return p


def _set_row(cols: EstimateColumns, i: int, e: Estimate) -> None:
    cols.estimate[i], cols.lower[i], cols.upper[i] = e.estimate, e.lower, e.upper
    cols.relative[i], cols.epsilon[i], cols.confidence[i] = e.kind == "relative", e.epsilon, e.confidence


def _checked_ranges(ranges: list, window: int, clock: int | None, out: list) -> tuple:
    """``(indices, los, his)`` of the ranges ``window_range`` takes (their ends as int64
    arrays); a refused range's :class:`SketchError` goes to ``out``. Ranges of Python ints
    are checked at once; any other (or any refused) is read by ``window_range`` for its
    message."""
    ends = int_ranges(ranges)
    if ends is not None:
        lo, hi = ends
        good = (hi >= lo) & (hi - lo + 1 <= window)
        if clock is not None:
            good &= lo >= clock - window + 1
        if good.all():
            return list(range(len(ranges))), lo, hi
    ok, ends = [], []
    for i, (lo, hi) in enumerate(ranges):
        try:
            ends.append(window_range(lo, hi, window, clock))
        except SketchError as e:
            out[i] = e
            continue
        ok.append(i)
    ends = np.array(ends, np.int64).reshape(len(ok), 2)
    return ok, ends[:, 0], ends[:, 1]


class SplittableHistogram(Sketch):
    """Deterministic sliding-window count and sum for out-of-order arrivals.

    Time is cut into intervals of ``Wp`` ticks (``window`` rounded up to a power of two);
    the ticks still queryable, ``[clock − window + 1, clock]``, lie in the last two, whose
    structures D_j, D_{j+1} are kept (§2.1). Each D has levels S_0..S_M: S_0 holds exact
    singletons; S_i (i ≥ 1) holds buckets ⟨w, l, r⟩ tiling the interval, of weight in
    [2^i·ρ, 2^(i+1)·ρ) (ρ = ``unit``), that split in two halves when they fill (a bucket of
    one tick never splits); each level keeps its α most recent buckets,
    α = ⌈(1 + log₂ Wp)(2 + ε)/ε⌉ (Algorithm 1), discarding the older ones once it holds
    2α (a deferred discard: Lemma 3 only needs α buckets after T_i). A weight is a batched
    insertion of real mass (Algorithm 4, Theorem 3). Levels are added as the interval's
    total X grows, so that 2^(M+1)·ρ > X (Lemma 2): a level that never split is one
    bucket holding X, exactly what Algorithm 1 would have built; M ≤ ⌈log₂(B/ρ)⌉.

    **Lemma 1, read on the state.** Let s_t be the true weight at ticks ≥ t of one
    interval and e_t the weight of the buckets with l ≥ t at a level ℓ with T_ℓ < t. Then

        e_t − Δ_t ≤ s_t ≤ e_t + Δ_t ≤ e_t + 2^ℓ·ρ·(1 + log₂ Wp)

    with Δ_t = 0 at level 0 or for t = 0, and otherwise
    Δ_t = [D ≥ 1]·2^ℓρ·(A + 1) + [t > l(b)]·(w(b) − [D ≥ 1]·2^ℓρ), where b is the bucket
    holding t, D its depth in the split tree, z the trailing zero bits of t and
    A = min(D, log₂ Wp − z) the number of b's ancestors that hold t − 1. *Proof* (§2.2,
    Lemma 1 and Proposition 1): mass counted on the wrong side of t was first assigned to
    a node holding both t − 1 and t — one of those A ancestors, each of which took 2^ℓρ
    of its own before splitting (the root 2^(ℓ+1)ρ, hence A + 1), or b itself, which has
    taken w(b) − 2^ℓρ so far. Mass, not elements, is counted, so real weights are fine.

    **Bounds** (S = true weight of the events with tick in ``[lo, hi]``, Ŷ the estimate,
    ``[lower, upper]`` always contains S):

    * ``hi ≥ clock`` (the paper's window ``[c − w, c]``; Theorems 1 and 3):
      ``|Ŷ − S| ≤ ε·S``, ``kind="relative"``. The window is one suffix of D_j and all of
      D_{j+1} (Δ_0 = 0). Algorithm 3 reads the smallest ℓ with T_ℓ < t and Lemma 3 gives
      2^ℓρ(1 + log₂ Wp) ≤ ε·s_t: for ℓ ≥ 2 always, for ℓ = 1 when the α buckets of S_0
      weigh ≥ ρ each (counts, integer sums with ρ = 1); the query checks
      ε·weight(S_0) ≥ 2ρ(1 + log₂ Wp) on the state. The interval is
      ``[max(Σ(e − Δ), Ŷ/(1+ε)), min(Σ(e + Δ), Ŷ/(1−ε))]``: ``|Ŷ − S| ≤ εS`` gives
      ``S(1−ε) ≤ Ŷ ≤ S(1+ε)``, i.e. ``Ŷ/(1+ε) ≤ S ≤ Ŷ/(1−ε)``.
    * ``hi < clock``: S = s_lo − s_(hi+1) per interval, two boundaries each within ε of
      a suffix of ``[lo, clock]``: ``|Ŷ − S| ≤ ε_Σ·Q``, ``Q`` = weight of
      ``[lo, clock]``, ``kind="additive"``, ``epsilon = ε_Σ`` = the sum of the
      boundaries' ε (2ε, or ε when one boundary is exact).
    * If the ℓ = 1 check fails (per-tick weights below ρ), that boundary still errs by
      ≤ 2ρ(1 + log₂ Wp) = ε·S* with S* = 2ρ(1 + log₂ Wp)/ε: the answer is additive with
      ``Q = weight of [lo, clock] + P·S*``, P the number of such boundaries. A finer
      ``unit`` restores the relative bound.

    **Rounding.** Weights are float64. Each rounded operation (``w + r`` and
    ``w + r − 2^(ℓ+1)ρ`` in Algorithm 4, sums of equal ticks in a batch) is exact
    arithmetic on masses scaled by (1 ± u), u = 2^−53, so the state is the exact state of
    a stream whose masses are within 1 ± γ of the true ones, γ = F·u/(1 − F·u) for the F
    rounded operations of the interval (Higham, Lemma 3.1). Bucket sums use ``math.fsum``
    (one rounding). The bounds carry both factors (Lemma 3 then gives ε(1+γ)/(1−γ)), are
    computed in exact rationals and rounded outward, and ``epsilon`` reports the composed
    value: exactly ε when every weight is an integer (ρ integral, totals < 2^53), where
    no operation rounds.

    **Merge** (not in the paper): the merged sketch keeps the sub-streams side by side, each a
    splittable histogram of its own sub-stream with its own clock; a query asks every sub-stream
    and adds the answers and the intervals. After merging k sub-streams — depth 1, or any tree
    of depth h — ``|Ŷ − S| ≤ Σ_p |Ŷ_p − S_p| ≤ Σ_p ε·S_p = ε·S`` for ``hi ≥ clock``
    (the window ``[lo, clock]`` covers each sub-stream's suffix window ``[lo, clock_p]``), and
    ``≤ max_p ε_Σ,p · Q`` otherwise: the composed ε is ε for every k and h, and the
    intervals add exactly. The price is space, the sum of the sub-streams' (a sub-stream wholly
    before ``clock − window + 1`` is dropped); :attr:`substreams` says how many. New events
    go into this sketch's own first sub-stream.

    Parameters
    ----------
    epsilon : float
        Relative error target ε in (0, 1).
    window : int
        Longest window W in ticks; a query covers at most ``window`` ticks.
    max_total : float
        Upper bound B on the weight in one interval of ``Wp`` ticks; an update that would
        exceed it raises :class:`SketchError` (and changes nothing).
    unit : float, keyword-only
        ρ, the weight of one element for the level thresholds 2^i·ρ (default 1: counts,
        integer sums, or any sum whose weight per tick is ≥ 1).

    Examples
    --------
    >>> import numpy as np
    >>> sh = SplittableHistogram(0.1, window=64)
    >>> sh.update(np.array([5, 3, 9, 9, 1]))
    >>> e = sh.query(0, sh.clock_tick)
    >>> e.lower <= 5 <= e.upper, e.kind, e.epsilon
    (True, 'relative', 0.1)
    >>> other = SplittableHistogram(0.1, window=64)
    >>> other.update(np.array([8, 9]), np.array([2.5, 0.5]))
    >>> m = sh.merge(other).query(6, 9)
    >>> m.lower <= 5.0 <= m.upper, sh.substreams
    (True, 2)
    >>> SplittableHistogram.from_bytes(sh.to_bytes()).query(6, 9) == m
    True
    """

    _OWNED = ("_substreams",)
    FAMILY, FORMAT = Family.SPLITTABLE_HISTOGRAM, 2  # format 2: compact encodings
    WHAT, NOUN = "splittable histogram", "splittable histograms"
    PARAMS = "epsilon, window, max_total or unit"
    SHOWN = ("epsilon", "window", "max_total", "unit", "alpha", "substreams", "clock_tick")

    def __init__(self, epsilon: float, window: int, max_total: float = 2.0**48, *,
                 unit: float = 1.0):
        epsilon, window = epsilon_and_window(epsilon, window, MAX_WINDOW)
        max_total, unit = float(max_total), float(unit)
        if not (math.isfinite(unit) and 2.0**-200 <= unit <= 2.0**200):
            raise SketchError(f"unit must be a positive number in [2^-200, 2^200], got {unit}")
        if not (math.isfinite(max_total) and unit <= max_total <= unit * 2.0**600):
            raise SketchError(f"max_total must be in [unit, unit·2^600], got {max_total}")
        self.epsilon, self.window, self.max_total, self.unit = epsilon, window, max_total, unit
        self.log_w = _log2_window(window)
        self.wp = 1 << self.log_w
        self.alpha = suggest_alpha(epsilon, window)
        if self.alpha > MAX_ALPHA:
            raise SketchError(f"epsilon {epsilon} needs {self.alpha} buckets per level; "
                              f"at most {MAX_ALPHA} are supported")
        self.max_level = suggest_levels(max_total, unit)
        # A level reaches 2·alpha − 1 buckets before its deferred discard; one element
        # adds at most log₂ Wp more by splitting.
        self._cap = 2 * self.alpha + self.log_w + 2
        self._unit_integral = unit.is_integer()
        self._substreams: list[_Substream] = [_Substream()]

    def raise_max_total(self, max_total: float) -> None:
        """Take intervals of up to ``max_total`` from now on (never lowers it). ``max_total``
        is only a cap: levels are added as an interval's weight needs them (Lemma 2), so
        raising it changes no state and no bound."""
        max_total = float(max_total)
        if max_total > self.max_total:
            if not (math.isfinite(max_total) and max_total <= self.unit * 2.0**600):
                raise SketchError(f"max_total must be in [unit, unit·2^600], got {max_total}")
            self.max_total = max_total
            self.max_level = suggest_levels(max_total, self.unit)

    # -- updates -------------------------------------------------------------------------
    def update(self, ticks: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Insert a batch of events, in any order; ``weights`` default to 1.

        Equal ticks become one batched insertion of their total weight (Algorithm 4).
        Events older than ``clock − window + 1`` (after the batch) are expired and
        dropped. Raises :class:`SketchError`, changing nothing, on bad input or when an
        interval's total would exceed ``max_total``.
        """
        t = np.asarray(ticks)
        if t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
            raise SketchError("ticks must be a 1-D array of integers")
        if weights is None:
            w = None
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != t.shape:
                raise SketchError("ticks and weights must have the same length")
        if t.size == 0:
            return
        tmin, tmax = int(t.min()), int(t.max())
        if tmin <= -TICK_LIMIT or tmax >= TICK_LIMIT:
            raise SketchError("ticks must be in (-2^61, 2^61)")
        t = t.astype(np.int64, copy=False)
        if w is not None and not (np.all(np.isfinite(w)) and np.all(w >= 0.0)):
            raise SketchError("weights must be finite and >= 0")

        sub = self._substreams[0]
        clock = max(self.clock_tick, tmax)
        sub_clock = tmax if sub.clock is None else max(sub.clock, tmax)
        live = clock - self.window + 1
        keep = t >= live
        if w is not None:
            keep &= w > 0.0
        ts = t[keep]
        ws = np.ones(ts.size) if w is None else w[keep]
        exact_batch = self._unit_integral and (w is None or bool(np.all(ws == np.floor(ws))))
        if ts.size and not is_sorted(ts):
            order = np.argsort(ts, kind="stable")
            ts, ws = ts[order], ws[order]
        ut, um, longest = aggregate_sorted(ts, ws) if ts.size else (ts, ws, 0)

        # Which D_j, D_{j+1} the sub-stream holds after the batch (§2.1).
        wp = self.wp
        top = sub_clock // wp
        held = {d.k: d for d in (sub.old, sub.new) if d is not None}
        old, new = held.get(top - 1), held.get(top)
        split = int(np.searchsorted(ut, top * wp))
        plan = []
        for k, lo, hi, d in ((top - 1, 0, split, old), (top, split, ut.size, new)):
            if hi > lo:
                local, mass = ut[lo:hi] - k * wp, um[lo:hi]
                plan.append((k, d, local, mass, self._target_levels(d, mass, exact_batch)))
        # Everything is checked; now change the state.
        for k, d, local, mass, levels in plan:
            if d is None:
                d = _Interval(k, self._cap, levels)
                if k == top:
                    new = d
                else:
                    old = d
            d.fit(levels, self._cap)
            if longest > 1:
                d.F += longest - 1
            insert_all(d.L, d.M, d.n, d.T, d.F, d.levels, local, mass, self.alpha, wp, self.unit)
            d.exact = d.exact and exact_batch and d.total < _EXACT_LIMIT
        if old is not None and (old.k + 1) * wp - 1 < sub_clock - self.window + 1:
            old = None  # wholly expired
        sub.new, sub.old, sub.clock = new, old, sub_clock
        self._prune()

    def _target_levels(self, d: _Interval | None, mass: np.ndarray, exact_batch: bool) -> int:
        """Levels needed so the top level never splits (Lemma 2); refuses totals above B."""
        total = (0.0 if d is None else d.total) + float(mass.sum())
        if not (exact_batch and (d is None or d.exact) and total < _EXACT_LIMIT):
            # Margin for the rounding of the top bucket's running sum and of mass.sum().
            total *= 1.0 + 4.0 * (mass.size + 4) * 2.0**-53
        if total > self.max_total:
            raise SketchError(
                f"the weight in one interval of {self.wp} ticks would reach {total:.6g}, "
                f"above max_total = {self.max_total:.6g}"
            )
        m = 1
        while 2.0 ** (m + 1) * self.unit <= total:
            m += 1
        return max(m + 1, 2 if d is None else d.levels)

    def _prune(self) -> None:
        """Drop merged sub-streams whose every tick is before ``clock − window + 1``."""
        live = self.clock_tick - self.window + 1
        self._substreams[1:] = [p for p in self._substreams[1:] if p.clock is not None and p.clock >= live]
        if self._substreams[0].clock is not None and self._substreams[0].clock < live:
            self._substreams[0] = _Substream()  # this sketch's own events have all expired

    @property
    def clock_tick(self) -> int:
        """Largest tick inserted (``-2**62`` when empty)."""
        clocks = [p.clock for p in self._substreams if p.clock is not None]
        return max(clocks) if clocks else EMPTY_CLOCK

    # -- queries -------------------------------------------------------------------------
    def query(self, lo: int, hi: int) -> Estimate:
        """Total weight of the events with a tick in ``[lo, hi]`` (inclusive).

        Requires ``hi − lo + 1 <= window`` and ``lo >= clock − window + 1`` (older ticks
        have expired); raises :class:`SketchError` otherwise. See the class notes for
        the bounds. Read in integers when the state is exact (:meth:`query_many`), in
        rationals otherwise (:meth:`query_rational`); both give the same numbers.
        """
        got = self.query_many([(lo, hi)])[0]
        if isinstance(got, SketchError):
            raise got
        return got

    def query_rational(self, lo: int, hi: int) -> Estimate:
        """:meth:`query` in exact rationals, whatever the state (the reference the
        integer path is tested against)."""
        lo, hi = window_range(lo, hi, self.window, None if self.is_empty else self.clock_tick)
        eps = Fraction(self.epsilon)
        if self.is_empty:
            return Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
        est = Fraction(0)
        lower: Fraction | None = Fraction(0)  # None: no lower bound above zero
        upper: Fraction | None = Fraction(0)  # None: no upper bound
        relative = True
        eps_max = eps_sum = Fraction(0)
        for sub in self._substreams:
            if sub.clock is None:
                continue
            sub_sum = Fraction(0)
            for d in (sub.old, sub.new):
                if d is None:
                    continue
                start = d.k * self.wp
                end = start + self.wp - 1
                a, b = max(lo, start), min(hi, end, sub.clock)
                if a > b:
                    continue
                local_clock = min(sub.clock, end) - start
                first = self._suffix(d, a - start, local_clock)
                second = self._suffix(d, b + 1 - start, local_clock)
                est += first.est - second.est
                if lower is not None:
                    lower = None if second.upper is None else lower + first.lower - second.upper
                if upper is not None:
                    upper = None if first.upper is None else upper + first.upper - second.lower
                for term in (first, second):
                    sub_sum += term.eps
                    eps_max = max(eps_max, term.eps)
                # Relative to S when [a, b] is the suffix s_a itself, or both ends are exact.
                if not ((second is _ZERO_TERM and first.ok)
                        or not (first.delta or second.delta or first.eps or second.eps)):
                    relative = False
            eps_sum = max(eps_sum, sub_sum)
        lower = Fraction(0) if lower is None else max(lower, Fraction(0))
        if relative:
            # Theorems 1 and 3, summed over disjoint pieces: |Ŷ − S| ≤ ε_max·S, so
            # Ŷ/(1 + ε_max) ≤ S ≤ Ŷ/(1 − ε_max).
            lower = max(lower, est / (1 + eps_max))
            if eps_max < 1:
                cap = est / (1 - eps_max)
                upper = cap if upper is None else min(upper, cap)
            guarantee, eps_rep = "relative", eps_max
        else:
            # Each suffix errs by ≤ ε_k·(its weight [+ S* if its check failed]) and every
            # suffix of a sub-stream lies in [lo, clock]: the errors add to ≤ max_p Σ ε_k · Q.
            guarantee, eps_rep = "additive", eps_sum
        est = max(est, Fraction(0))
        est_f = float(est)
        if Fraction(est_f) != est:  # the reported float is one rounding away from Ŷ
            eps_rep += _U * (1 + eps_rep)
        lo_f, up_f = _down(lower), _up(upper)
        est_f = min(max(est_f, lo_f), up_f)
        eps_f = self.epsilon if eps_rep <= eps else _ceil_digits(eps_rep)
        return Estimate(est_f, lo_f, up_f, guarantee, eps_f, 1.0, METHOD)

    def query_many(self, ranges) -> list:
        """:meth:`query` of every ``(lo, hi)`` of ``ranges``, each result equal to what
        :meth:`query_rational` returns for it (or the :class:`SketchError` it raises), computed in
        one pass: the suffix terms of all ranges read per interval in one compiled call,
        in integers when the interval is exact (integer masses: counts, integer sums),
        and the bracket finished in integers (``_finish_exact``). Ranges over an interval
        that is not exact, or whose numbers reach 2^53, are read by :meth:`query_rational`."""
        ranges = list(ranges)
        out, todo, terms = self._read_many(ranges)
        if terms is None:
            return out
        p, q = Fraction(self.epsilon).as_integer_ratio()
        additive_eps: dict[int, float] = {}
        for i, big_i, est_i, lower_i, upper_i, delta_i, relative_i, terms_i in zip(
                todo, *(t.tolist() for t in terms)):
            if big_i:
                out[i] = self.query_rational(*ranges[i])
            else:
                out[i] = self._finish_exact(est_i, lower_i, upper_i, delta_i, relative_i, terms_i, p, q,
                                            additive_eps)
        return out

    def query_columns(self, ranges) -> EstimateColumns:
        """:meth:`query_many`'s estimates as columns (refusals in ``refused``): the same
        floats (``tests/app/test_ranges.py``), finished in NumPy where no rounding is
        involved: an exact count or sum below 2^53 converts as Python's ``float(int)``
        does. The ratios ``est/(1 ± ε)`` of a relative bracket with a split bucket are
        finished in Python integers, one range at a time, as :meth:`_finish_exact` does."""
        ranges = list(ranges)
        k = len(ranges)
        cols = EstimateColumns.zeros(k, METHOD, relative=True, epsilon=self.epsilon)
        out, todo, terms = self._read_many(ranges)
        cols.refused.update((i, got) for i, got in enumerate(out) if isinstance(got, SketchError))
        if terms is None:  # refusals, an empty sketch's zeros, or rational readings
            for i in todo:
                _set_row(cols, i, out[i])
            return cols
        big, est, lower, upper, any_delta, relative, eps_terms = terms
        at = np.asarray(todo, np.int64)
        lower = np.maximum(lower, 0)
        # relative and exact (ε_max = 0): the estimate itself on both sides
        plain = relative & ~any_delta
        lower = np.where(plain, np.maximum(lower, est), lower)
        upper = np.where(plain, np.minimum(upper, est), upper)
        e = np.maximum(est, 0).astype(np.float64)
        lo, up = lower.astype(np.float64), upper.astype(np.float64)
        cols.estimate[at], cols.lower[at], cols.upper[at] = np.minimum(np.maximum(e, lo), up), lo, up
        cols.relative[at] = relative
        # an additive bracket reports ε times its erring terms (rounded up to 9 digits)
        for terms_i in np.unique(eps_terms[~relative & (eps_terms > 1)]).tolist():
            cols.epsilon[at[~relative & (eps_terms == terms_i)]] = _ceil_digits(terms_i * Fraction(self.epsilon))
        ratios = np.flatnonzero((relative & any_delta) | big)
        if ratios.size:
            p, q = Fraction(self.epsilon).as_integer_ratio()
            for j in ratios.tolist():
                got = self.query_rational(*ranges[todo[j]]) if big[j] else self._finish_exact(
                    int(est[j]), int(lower[j]), int(upper[j]), True, True, 0, p, q, {})
                _set_row(cols, todo[j], got)
        return cols

    def _read_many(self, ranges) -> tuple:
        """What :meth:`query_many` and :meth:`query_columns` share: ``(out, todo, terms)``,
        ``out`` with each refused range's :class:`SketchError` (and, when the sketch is
        empty or not exact, every estimate: ``terms`` None), ``todo`` the indices left to
        finish, and ``terms`` their integer columns ``(big, est, lower, upper, any_delta,
        relative, eps_terms)`` as arrays (``big``: read in rationals instead)."""
        ranges = list(ranges)
        out: list = [None] * len(ranges)
        empty = self.is_empty
        todo, los, his = _checked_ranges(ranges, self.window, None if empty else self.clock_tick, out)
        if not todo:
            return out, todo, None
        if empty:
            for i in todo:
                out[i] = Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
            return out, todo, None
        exact = self.unit.is_integer() and self.unit < 2.0**53 and all(
            d.exact for p in self._substreams if p.clock is not None for d in (p.old, p.new) if d is not None)
        if not exact:
            for i in todo:
                out[i] = self.query_rational(*ranges[i])
            return out, todo, None
        k = los.size
        est = np.zeros(k, np.int64)
        lower = np.zeros(k, np.int64)
        upper = np.zeros(k, np.int64)
        any_delta = np.zeros(k, bool)
        relative = np.ones(k, bool)
        big = np.zeros(k, bool)
        eps_terms = np.zeros(k, np.int64)  # the largest per-sub-stream count of terms erring by ε
        unit = int(self.unit)
        for sub in self._substreams:
            if sub.clock is None:
                continue
            sub_terms = np.zeros(k, np.int64)
            for d in (sub.old, sub.new):
                if d is None:
                    continue
                start = d.k * self.wp
                end = start + self.wp - 1
                a, b = np.maximum(los, start), np.minimum(np.minimum(his, end), sub.clock)
                live = a <= b
                if not live.any():
                    continue
                local_clock = min(sub.clock, end) - start
                m0 = Fraction(math.fsum(d.M[0, : d.n[0]].tolist()))
                ok1 = Fraction(self.epsilon) * m0 >= 2 * Fraction(self.unit) * (1 + self.log_w)
                ts = np.concatenate([a[live] - start, b[live] + 1 - start])
                f, lo_t, hi_t, hd, ok, zero, too_big = exact_suffix_terms(
                    d.L, d.M, d.n, d.T, d.levels, ts, self.wp, self.log_w, unit, ok1, local_clock)
                m = int(live.sum())
                f1, f2, l1, l2, h1, h2 = f[:m], f[m:], lo_t[:m], lo_t[m:], hi_t[:m], hi_t[m:]
                est[live] += f1 - f2
                lower[live] += l1 - h2
                upper[live] += h1 - l2
                sub_terms[live] += hd[:m].astype(np.int64) + hd[m:]
                any_delta[live] |= hd[:m] | hd[m:]
                relative[live] &= (zero[m:] & ok[:m]) | ~(hd[:m] | hd[m:])
                big[live] |= too_big[:m] | too_big[m:]
            eps_terms = np.maximum(eps_terms, sub_terms)
        big |= est >= _EXACT_LIMIT
        return out, todo, (big, est, lower, upper, any_delta, relative, eps_terms)

    def _finish_exact(self, est: int, lower: int, upper: int, any_delta: bool, relative: bool,
                      eps_terms: int, p: int, q: int, additive_eps: dict) -> Estimate:
        """The end of :meth:`query` for an exact state, in integers: the same bracket, the
        same outward rounding (``_down``/``_up`` of the same rationals: an int's true
        division is correctly rounded, as ``float(Fraction)`` is). ``p/q`` is ε;
        ``additive_eps`` keeps the reported ε of each count of erring terms."""
        lower = max(lower, 0)
        lo_f = up_f = None
        if relative:
            if not any_delta:  # ε_max = 0: est/(1 ± 0)
                lower, upper = max(lower, est), min(upper, est)
            else:  # est/(1 + ε) = est·q/(q + p), est/(1 − ε) = est·q/(q − p)
                num, den = est * q, q + p
                if lower * den < num:
                    lo_f = _down_ratio(num, den)
                num, den = est * q, q - p
                if p < q and upper * den > num:
                    up_f = _up_ratio(num, den)
            guarantee = "relative"
            eps_f = self.epsilon
        else:
            guarantee = "additive"
            eps_f = additive_eps.get(eps_terms)
            if eps_f is None:
                eps_f = additive_eps[eps_terms] = (self.epsilon if eps_terms <= 1 else
                                                   _ceil_digits(eps_terms * Fraction(self.epsilon)))
        est = max(est, 0)
        lo_f = float(lower) if lo_f is None else lo_f
        up_f = float(upper) if up_f is None else up_f
        est_f = min(max(float(est), lo_f), up_f)
        return Estimate(est_f, lo_f, up_f, guarantee, eps_f, 1.0, METHOD)

    def _suffix(self, d: _Interval, t: int, local_clock: int, force: int = -1) -> _Term:
        """Bracket of s_t, the weight at local ticks ≥ t of interval ``d``, read at the
        level Algorithm 3 picks (or at level ``force``, which must have T < t)."""
        if t > local_clock or t >= self.wp:
            return _ZERO_TERM  # no event is later than the clock
        level, first, bucket = suffix_at(d.L, d.n, d.T, d.levels, t, self.wp, force)
        f = Fraction(math.fsum(d.M[level, first : d.n[level]].tolist()))
        g = d.gamma()
        if g is None:  # more rounded operations than the bound can carry: no bound
            return _Term(f, Fraction(0), None, Fraction(1), Fraction(1), False)
        s = Fraction(0) if d.exact else _U  # fsum: one rounding, none when exact
        delta = Fraction(0)
        if level > 0 and t > 0:
            unit_l = Fraction(self.unit) * 2**level
            blo = int(d.L[level, bucket])
            bhi = int(d.L[level, bucket + 1]) - 1 if bucket + 1 < d.n[level] else self.wp - 1
            depth = self.log_w - ((bhi - blo + 1).bit_length() - 1)
            zeros = (t & -t).bit_length() - 1
            ancestors = min(depth, self.log_w - zeros)
            delta = unit_l * (ancestors + (1 if ancestors else 0))
            if t > blo:
                delta += Fraction(float(d.M[level, bucket])) - (unit_l if depth else 0)
        # Perturbed stream: X ∈ [f/(1+s), f/(1−s)], s'_t ∈ X ± Δ, truth ∈ s'_t/(1 ± g).
        low = max(f / (1 + s) - delta, Fraction(0)) / (1 + g)
        high = (f / (1 - s) + delta) / (1 - g)
        if not delta:
            return _Term(f, low, high, delta, s * (1 + g) + g, True)
        ok = level >= 2
        if level == 1:  # Lemma 3 for ℓ = 1 needs S_0 to weigh enough
            m0 = Fraction(math.fsum(d.M[0, : d.n[0]].tolist())) / (1 + s)
            ok = Fraction(self.epsilon) * m0 >= 2 * Fraction(self.unit) * (1 + self.log_w)
        ep = Fraction(self.epsilon) * (1 + g) / (1 - g)
        return _Term(f, low, high, delta, s * (1 + ep) * (1 + g) + ep * (1 + g) + g, ok)

    # -- merging ---------------------------------------------------------------------------
    def _merge(self, other: "SplittableHistogram") -> "SplittableHistogram":
        """Fold ``other`` in and return self.

        ``other``'s sub-streams are copied in beside this sketch's own: a query adds the sub-streams'
        answers, so ``|Ŷ − S| ≤ Σ_p ε·S_p = ε·S`` after any number of merges in any tree
        shape (class notes, **Merge**). Refuses itself, another class or other
        parameters with :class:`IncompatibleSketchError`.
        """
        self._substreams.extend(p.copy(compact=True) for p in other._substreams if p.clock is not None)
        self._prune()
        return self

    def _params(self) -> tuple:
        return (self.epsilon, self.window, self.max_total, self.unit)

    @property
    def substreams(self) -> int:
        """Number of sub-streams held (1 unless merged)."""
        return max(1, sum(p.clock is not None for p in self._substreams))

    @property
    def is_empty(self) -> bool:
        return all(p.clock is None for p in self._substreams)

    # -- bytes -------------------------------------------------------------------------------
    _HEAD = struct.Struct("<dqddI")

    def max_nbytes(self) -> int:
        """Each sub-stream (one unless merged) writes at most two intervals (old and new, §2.1) of
        at most ``max_level + 1`` levels (Lemma 2), and at most ``alpha`` buckets a level
        (the deferred discard of Algorithm 4 is done on writing); a level's mark is at most
        Wp, its flop count at most 2^62 (the reader's limits), a local tick below Wp."""
        a, tick = self.alpha, varint_size(2 * self.wp)
        level = varint_size(self.wp) + varint_size(2**62) + varint_size(a) + a + max_float_column_size(a)
        interval = 10 + 2 + (self.max_level + 1) * level + 10 + a * tick  # + level 0's ticks
        return HEADER_SIZE + self._HEAD.size + self.substreams * (10 + 1 + 2 * interval)

    def _payload(self) -> bytes:
        substreams = [p for p in self._substreams if p.clock is not None]
        wr = Writer().pack(self._HEAD, self.epsilon, self.window, self.max_total, self.unit, len(substreams))
        for p in substreams:
            live = p.clock - self.window + 1
            old = p.old if p.old is not None and (p.old.k + 1) * self.wp - 1 >= live else None
            new = p.new if p.new is not None else _Interval(p.clock // self.wp, 1)
            wr.ints(np.array([p.clock])).raw(bytes([old is not None]))
            for d in (old, new):
                if d is not None:
                    self._write_interval(d, wr)
        return wr.bytes()

    def _write_interval(self, d: _Interval, wr: Writer) -> None:
        if d.levels > 255:  # the level count is one byte
            raise ValueError("bytes must be in range(0, 256)")
        wr.raw(write_interval(d.k, d.exact, d.L, d.M, d.n, d.T, d.F, self.alpha, self.wp).tobytes())

    @classmethod
    def _read(cls, r: Reader) -> "SplittableHistogram":
        epsilon, window, max_total, unit, n_substreams = r.unpack(cls._HEAD)
        sk = cls(epsilon, window, max_total, unit=unit)
        if n_substreams > 1 << 20:
            raise CorruptSketchError("splittable histogram has too many sub-streams")
        sk._substreams = []
        for _ in range(n_substreams):
            p = _Substream()
            p.clock = int(r.ints(1)[0])
            has_old = r.take(1)[0]
            if not -TICK_LIMIT < p.clock < TICK_LIMIT or has_old not in (0, 1):
                raise CorruptSketchError("splittable histogram sub-stream header out of range")
            top = p.clock // sk.wp
            if has_old:
                p.old = sk._read_interval(r, top - 1)
            p.new = sk._read_interval(r, top)
            sk._substreams.append(p)
        if not sk._substreams:
            sk._substreams = [_Substream()]
        return sk

    def _read_interval(self, r: Reader, k: int) -> _Interval:
        """Interval ``k`` at the reader's position, every level checked in one compiled
        pass (``read_interval``: the checks of §2.1's invariants, listed there)."""
        code, end, exact, L, M, n, T, F = read_interval(
            r.buf, r.pos, k, self.max_level + 1, self.wp, self.alpha, self.log_w, self.unit,
            self._unit_integral)
        if code:
            raise CorruptSketchError(INTERVAL_ERRORS[code]) if code > 0 else r.fail_code(code)
        r.pos = end
        d = _Interval.__new__(_Interval)
        d.k, d.exact, d.L, d.M, d.n, d.T, d.F = k, exact, L, M, n, T, F
        return d
