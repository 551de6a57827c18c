"""Windowed quantiles: a deterministic bracket of the q-quantile of ``value`` over any
sliding window of an out-of-order stream, with rank error ≤ ε·n_w and value error ≤ α.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2.1 (intervals, levels, splitting),
§2.2 (Lemma 1, Proposition 1, Lemmas 2-3, Theorem 1), §3 (batched insertion, Theorem 3).
Values are mapped to logarithmic buckets as in DDSketch (Masson, Rim and Lee, *DDSketch: a
fast and fully-mergeable quantile sketch with relative-error guarantees*, VLDB 2019, §2).

Design
------
Each bucket ⟨w, l, r⟩ of the splittable histogram carries, instead of its count alone, the
counts of its events per value bucket (a sparse list of (key, count), keys ordered like the
values). Everything else is the count structure of ``sketches.splittable_histogram``: time
intervals of ``Wp`` ticks, levels S_0..S_M of α = ⌈(1 + log₂ Wp)(2 + ε)/ε⌉ buckets, buckets
of level i split in two halves of 2^i events when they reach 2^(i+1) (Algorithm 4).

**Why the bound carries over.** Lemma 1's proof assigns every element to one leaf bucket
and lets a split hand the parent's elements to its children *arbitrarily*; it bounds the
elements counted on the wrong side of a suffix boundary t (the sets X_1 and X_2 ∪ X_3) by
2^ℓ(1 + log₂ Wp). Those sets do not depend on values, so for every value v the
sub-stream of events with value ≤ v has at most as many misplaced elements:

    |C_t(≤v) − ê_t(≤v)| ≤ Δ_t ≤ 2^ℓ·(1 + log₂ Wp)        for every v at once,

where C_t(≤v) is the true number of events with tick ≥ t and value ≤ v and ê_t(≤v) the sum
of the value histograms of the level-ℓ buckets with l ≥ t (Δ_t is read from the state as
in ``SplittableHistogram``). A split gives the left child the 2^i events of smallest value
and the right child the rest — an arbitrary assignment the proof allows — so children
cover narrower value ranges and hold fewer entries. Lemma 3 and Theorem 1 then give, for a
window [t, clock] holding n_w events (the level is the smallest with T_ℓ < t):

    |C(≤v) − ê(≤v)| ≤ Δ ≤ ε·n_w                           (rank error, every v)

and level 0 (exact ticks) gives Δ = 0 for windows inside its α most recent ticks. A window
[lo, hi] with hi < clock is a difference of two suffixes: Δ = Δ_lo + Δ_(hi+1) ≤ 2ε·n',
n' = events in [lo, clock]. Counts are integers: nothing rounds.

**Values.** γ = (1 + α)/(1 − α); a value v > 0 has key i with γ^(i−1) < v ≤ γ^i, so every
point of its bucket is within α of the bucket's centre 2γ^i/(1 + γ) (DDSketch, Lemma 2).
Negative values use the mirrored keys, and |v| < 1e-300 the zero key. Every event keeps
its exact key for life: only its time is blurred by splits.

**Bracket.** With rank brackets Cl(v) ≤ C(≤v) ≤ Cu(v) (made monotone) and count bracket
N_l ≤ n_w ≤ N_u, the true q-quantile v* (the smallest v with C(≤v) ≥ max(q·n_w, 1)) is

    lower = lower edge of the first key k with Cu(k) ≥ max(⌈q·N_l⌉, 1)
    upper = upper edge of the first key k with Cl(k) ≥ max(⌈q·N_u⌉, 1)
    lower ≤ v* ≤ upper                                      (always; confidence 1)

Keys below lower's have Cu < q·N_l ≤ q·n_w, so they hold no v*; upper's key has
C ≥ q·N_u ≥ q·n_w. When ranks are exact (Δ = 0) the bracket is one value bucket, at most
γ − 1 ≈ 2α wide (relative). The keys scanned are those of the top level's root bucket of
every held interval: it never splits, so it holds every event of its interval.

**Merge** (not in the paper): parts are kept side by side, each a sketch of its own
sub-stream with its own clock (as ``SplittableHistogram``); the rank brackets add, so
Σ_p Δ_p ≤ Σ_p ε·n_p = ε·n_w for any number of parts and any merge tree.

Byte layout (after the common 16-byte header, family WINDOWED_QUANTILES, little endian)::

    f64 epsilon | i64 window | f64 value_accuracy | u32 parts
    parts × part:  i64 clock | u8 has_old | [interval old] | interval new
    interval:      i64 k | u8 levels | levels × level
    level:         i64 T | u32 buckets | u32 entries | u32 blob bytes | blob
    blob (LEB128): buckets × (level 0: tick − previous tick − 1, from T; else log₂ width)
                   | buckets × entries of the bucket
                   | entries × zigzag(key − previous key in the bucket, first from 0)
                   | entries × count

Bucket weights are the sums of their counts. Each level keeps its α most recent buckets
(the deferred discard of Algorithm 4, lines 39-45, done now).
"""

from __future__ import annotations

import math
import operator
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from sketches import _windowed_quantile_kernels as K
from sketches.base import (
    CorruptSketchError,
    Family,
    IncompatibleSketchError,
    SketchError,
    pack_header,
    unpack_header,
)
from sketches.splittable_histogram import suggest_alpha

__all__ = ["WindowedQuantiles", "QuantileBracket", "RankTable", "DistributionRow"]

METHOD = "splittable-histogram/log-buckets"
MAX_WINDOW = 2**40
TICK_LIMIT = 2**61
MIN_INDEXED = 1e-300
MAX_LEVELS = 63
_MSG_SELF = "cannot merge a sketch with itself"
_MSG_TYPE = "can only merge a WindowedQuantiles with another WindowedQuantiles"
_MSG_PARAMS = "cannot merge windowed quantile sketches with different epsilon, window or value_accuracy"


class _Level:
    __slots__ = ("left", "wt", "off", "keys", "cnts", "T")

    def __init__(self, left, wt, off, keys, cnts, T):
        self.left, self.wt, self.off, self.keys, self.cnts, self.T = left, wt, off, keys, cnts, int(T)

    @classmethod
    def empty(cls) -> "_Level":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64),
                   np.zeros(0, np.int32), np.zeros(0, np.int64), -1)

    @classmethod
    def root(cls, total: int, keys, cnts) -> "_Level":
        """One bucket ⟨total, 0, Wp − 1⟩: a level that never split (Algorithm 1)."""
        return cls(np.zeros(1, np.int64), np.array([total], np.int64),
                   np.array([0, len(keys)], np.int64), keys.copy(), cnts.copy(), -1)

    def copy(self) -> "_Level":
        return _Level(self.left.copy(), self.wt.copy(), self.off.copy(), self.keys.copy(),
                      self.cnts.copy(), self.T)


class _Interval:
    """D_k: the levels of the interval [k·Wp, (k + 1)·Wp − 1] (§2.1)."""

    __slots__ = ("k", "levels")

    def __init__(self, k: int, levels: list):
        self.k, self.levels = k, levels

    @classmethod
    def new(cls, k: int) -> "_Interval":
        keys, cnts = np.zeros(0, np.int32), np.zeros(0, np.int64)
        return cls(k, [_Level.empty(), _Level.root(0, keys, cnts)])

    @property
    def top(self) -> _Level:
        return self.levels[-1]

    @property
    def total(self) -> int:
        return int(self.top.wt[0])

    def copy(self) -> "_Interval":
        return _Interval(self.k, [lv.copy() for lv in self.levels])


class _Part:
    __slots__ = ("clock", "old", "new")

    def __init__(self, clock=None, old=None, new=None):
        self.clock, self.old, self.new = clock, old, new

    def copy(self) -> "_Part":
        return _Part(self.clock, None if self.old is None else self.old.copy(),
                     None if self.new is None else self.new.copy())


@dataclass(frozen=True)
class RankTable:
    """Rank brackets of a tick range, on the keys every held event can have.

    ``cl[j] <= C(≤ keys[j]) <= cu[j]`` (monotone) and ``n_lower <= n <= n_upper``, where
    C counts the range's events with a key at most ``keys[j]``; ``est`` is the sketch's
    own reading. ``rank_error`` is Δ (events); ``epsilon`` the guarantee Δ ≤ ε·basis.
    """

    keys: np.ndarray
    lo_edge: np.ndarray
    hi_edge: np.ndarray
    est: np.ndarray
    cl: np.ndarray
    cu: np.ndarray
    n_lower: int
    n_upper: int
    n_est: int
    rank_error: int
    epsilon: float
    to_clock: bool  # basis of epsilon: the window's count (True) or [lo, clock]'s


@dataclass(frozen=True)
class QuantileBracket:
    """``lower <= v* <= upper`` always; both errors stated."""

    q: float
    estimate: float
    lower: float
    upper: float
    rank_error: int
    epsilon: float
    value_accuracy: float
    to_clock: bool

    @property
    def relative_width(self) -> float:
        scale = abs(self.estimate)
        return (self.upper - self.lower) / scale if scale > 0 else (0.0 if self.upper == self.lower else math.inf)


@dataclass(frozen=True)
class DistributionRow:
    """One value bucket: its edges and brackets of C(≤ upper edge) and of its own count."""

    lower_edge: float
    upper_edge: float
    count: int
    cdf_lower: int
    cdf_upper: int


class WindowedQuantiles:
    """Deterministic quantile brackets over any window ``w ≤ window`` of an asynchronous
    stream; see the module notes for the design and its proof.

    Parameters
    ----------
    epsilon : float
        Rank error target ε in (0, 1): every rank a bracket is read from is within
        ε·n_w of the truth for a window ending at the clock (Theorem 1).
    window : int
        Longest window W in ticks.
    value_accuracy : float
        α in (0, 1): value buckets are (γ^(i−1), γ^i] with γ = (1 + α)/(1 − α).

    Examples
    --------
    >>> import numpy as np
    >>> wq = WindowedQuantiles(0.05, window=100, value_accuracy=0.01)
    >>> wq.update(np.array([3, 1, 2, 2, 5]), np.array([10.0, 20.0, 30.0, 40.0, 50.0]))
    >>> b = wq.quantiles([0.5], 0, wq.clock)[0]
    >>> b.lower <= 30.0 <= b.upper, b.rank_error, round(b.relative_width, 3)
    (True, 0, 0.02)
    >>> other = WindowedQuantiles(0.05, window=100, value_accuracy=0.01)
    >>> other.update(np.array([4]), np.array([-7.0]))
    >>> m = wq.merge(other).quantiles([0.0], 0, 5)[0]
    >>> m.lower <= -7.0 <= m.upper, wq.parts
    (True, 2)
    >>> WindowedQuantiles.from_bytes(wq.to_bytes()).to_bytes() == wq.to_bytes()
    True
    """

    def __init__(self, epsilon: float, window: int, value_accuracy: float = 0.01):
        epsilon, value_accuracy = float(epsilon), float(value_accuracy)
        try:
            window = operator.index(window)
        except TypeError:
            raise SketchError(f"window must be an integer number of ticks, got {window!r}") from None
        if not 0.0 < epsilon < 1.0:
            raise SketchError(f"epsilon must be in (0, 1), got {epsilon}")
        if not 1e-6 <= value_accuracy < 1.0:
            raise SketchError(f"value_accuracy must be in [1e-6, 1), got {value_accuracy}")
        if not 1 <= window <= MAX_WINDOW:
            raise SketchError(f"window must be between 1 and 2^40 ticks, got {window}")
        self.epsilon, self.window, self.value_accuracy = epsilon, window, value_accuracy
        self.log_w = max(0, (window - 1).bit_length())
        self.wp = 1 << self.log_w
        self.alpha = suggest_alpha(epsilon, window)
        if self.alpha > 1 << 20:
            raise SketchError(f"epsilon {epsilon} needs {self.alpha} buckets per level; at most 2^20")
        self.gamma = (1.0 + value_accuracy) / (1.0 - value_accuracy)
        self.log_gamma = math.log(self.gamma)
        # Keys: bias + i for γ^(i−1) < |v| ≤ γ^i, i ≥ 1 − bias covers |v| ≥ MIN_INDEXED.
        self._bias = 1 - math.floor(math.log(MIN_INDEXED) / self.log_gamma)
        self._max_key = self._bias + math.ceil(math.log(1.7976931348623157e308) / self.log_gamma) + 1
        self._parts: list[_Part] = [_Part()]

    # -- updates ---------------------------------------------------------------------------
    def keys_of(self, values: np.ndarray) -> np.ndarray:
        """Value-bucket keys (ordered like the values)."""
        return K.value_keys(np.ascontiguousarray(values, np.float64), self.log_gamma, MIN_INDEXED, self._bias)

    def edges_of(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) value edges of keys: every value with the key lies between them."""
        return K.key_edges(np.ascontiguousarray(keys, np.int32), self.log_gamma, MIN_INDEXED, self._bias)

    def update(self, ticks: np.ndarray, values: np.ndarray) -> None:
        """Insert a batch of events (tick, value), in any order.

        Events older than ``clock − window + 1`` (after the batch) are dropped. Raises
        :class:`SketchError`, changing nothing, on bad input.
        """
        t = np.asarray(ticks)
        v = np.asarray(values, dtype=np.float64)
        if t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
            raise SketchError("ticks must be a 1-D array of integers")
        if v.shape != t.shape:
            raise SketchError("ticks and values must have the same length")
        if t.size == 0:
            return
        if not np.all(np.isfinite(v)):
            raise SketchError("values must be finite")
        tmin, tmax = int(t.min()), int(t.max())
        if tmin <= -TICK_LIMIT or tmax >= TICK_LIMIT:
            raise SketchError("ticks must be in (-2^61, 2^61)")
        t = t.astype(np.int64, copy=False)
        part = self._parts[0]
        clock = max(self.clock, tmax)
        part_clock = tmax if part.clock is None else max(part.clock, tmax)
        keep = t >= clock - self.window + 1
        if not keep.all():
            t, v = t[keep], v[keep]
        keys = self.keys_of(v)
        if t.size:
            span = int(t.max()) - int(t.min()) if t.size else 0
            if span < 2**31:
                comp = ((t - t.min()) << 32) | (keys.astype(np.int64) + 2**31)
                order = np.argsort(comp, kind="stable")
            else:
                order = np.lexsort((keys, t))
            t, keys = t[order], keys[order]
        ut, uoff, ck, cc = K.group_cells(t, keys)
        wp = self.wp
        top = part_clock // wp
        held = {d.k: d for d in (part.old, part.new) if d is not None}
        old, new = held.get(top - 1), held.get(top)
        split = int(np.searchsorted(ut, top * wp))
        for k, lo, hi in ((top - 1, 0, split), (top, split, ut.size)):
            if hi <= lo:
                continue
            d = held.get(k) or _Interval.new(k)
            e0, e1 = uoff[lo], uoff[hi]
            self._insert(d, ut[lo:hi] - k * wp, uoff[lo : hi + 1] - e0, ck[e0:e1], cc[e0:e1])
            if k == top:
                new = d
            else:
                old = d
        if old is not None and (old.k + 1) * wp - 1 < part_clock - self.window + 1:
            old = None  # wholly expired
        part.new, part.old, part.clock = new, old, part_clock
        self._prune()

    def _insert(self, d: _Interval, bt, boff, bk, bc) -> None:
        total = d.total + int(bc.sum())
        m = 1
        while 2 ** (m + 1) <= total:
            m += 1
        if m + 1 > MAX_LEVELS:
            raise SketchError("too many events in one interval")
        while len(d.levels) < m + 1:  # Lemma 2: the top level never splits
            top = d.top
            d.levels.append(_Level.root(int(top.wt[0]), top.keys, top.cnts))
        for i, lv in enumerate(d.levels):
            if i == 0:
                out = K.insert_level0(lv.left, lv.wt, lv.off, lv.keys, lv.cnts, lv.T,
                                      bt, boff, bk, bc, self.alpha)
            else:
                out = K.insert_level(lv.left, lv.wt, lv.off, lv.keys, lv.cnts, lv.T,
                                     bt, boff, bk, bc, self.alpha, self.wp, self.log_w, 1 << i)
            d.levels[i] = _Level(*out)

    def _prune(self) -> None:
        live = self.clock - self.window + 1
        self._parts[1:] = [p for p in self._parts[1:] if p.clock is not None and p.clock >= live]
        if self._parts[0].clock is not None and self._parts[0].clock < live:
            self._parts[0] = _Part()

    @property
    def clock(self) -> int:
        """Largest tick inserted (``-2**62`` when empty)."""
        clocks = [p.clock for p in self._parts if p.clock is not None]
        return max(clocks) if clocks else -(2**62)

    # -- suffixes --------------------------------------------------------------------------
    def _level_for(self, d: _Interval, t: int) -> int:
        for i, lv in enumerate(d.levels):
            if lv.T < t:
                return i
        return len(d.levels) - 1  # Lemma 2: T_M = −1

    def _delta(self, lv: _Level, level: int, t: int) -> int:
        """Δ_t of ``SplittableHistogram._suffix``: events misplaced across boundary t."""
        if level == 0 or t <= 0 or t >= self.wp:
            return 0
        b = int(np.searchsorted(lv.left, t, side="right")) - 1
        blo = int(lv.left[b])
        bhi = int(lv.left[b + 1]) - 1 if b + 1 < lv.left.size else self.wp - 1
        depth = self.log_w - ((bhi - blo + 1).bit_length() - 1)
        zeros = (t & -t).bit_length() - 1
        ancestors = min(depth, self.log_w - zeros)
        unit = 1 << level
        delta = unit * (ancestors + (1 if ancestors else 0))
        if t > blo:
            delta += int(lv.wt[b]) - (unit if depth else 0)
        return delta

    def _suffix_entries(self, d: _Interval, t: int, local_clock: int):
        """(keys, counts, Δ, exact-zero) of the suffix [t, Wp − 1] of interval ``d``."""
        if t > local_clock or t >= self.wp:
            return None
        level = self._level_for(d, t)
        lv = d.levels[level]
        first = int(np.searchsorted(lv.left, t, side="left"))
        e = int(lv.off[first])
        return lv.keys[e:], lv.cnts[e:], self._delta(lv, level, t)

    def _check_range(self, lo: int, hi: int) -> tuple[int, int]:
        try:
            lo, hi = operator.index(lo), operator.index(hi)
        except TypeError:
            raise SketchError("query bounds must be integer ticks") from None
        if hi < lo:
            raise SketchError(f"empty range: hi = {hi} < lo = {lo}")
        if hi - lo + 1 > self.window:
            raise SketchError(f"range of {hi - lo + 1} ticks exceeds the window of {self.window}")
        if not self.is_empty and lo < self.clock - self.window + 1:
            raise SketchError(f"range starts at tick {lo}, before clock - window + 1 = "
                              f"{self.clock - self.window + 1}: those ticks have expired")
        return lo, hi

    def _intervals(self):
        for p in self._parts:
            if p.clock is None:
                continue
            for d in (p.old, p.new):
                if d is not None:
                    yield p, d

    def _universe(self) -> np.ndarray:
        """Every key an event held anywhere can have: the top levels' roots (never split)."""
        tops = [d.top.keys for _, d in self._intervals()]
        return np.unique(np.concatenate(tops)) if tops else np.zeros(0, np.int32)

    def _raw(self, lo: int, hi: int, universe: np.ndarray):
        """(cumulative estimate on ``universe``, total, Δ, to_clock) of ticks [lo, hi]."""
        est = np.zeros(universe.size, np.int64)
        delta = 0
        to_clock = True
        for p, d in self._intervals():
            start = d.k * self.wp
            a, b = max(lo, start), min(hi, start + self.wp - 1, p.clock)
            if a > b:
                continue
            local_clock = min(p.clock, start + self.wp - 1) - start
            for t, sign in ((a - start, 1), (b + 1 - start, -1)):
                got = self._suffix_entries(d, t, local_clock)
                if got is None:
                    continue
                keys, cnts, dl = got
                if sign < 0:
                    to_clock = False
                delta += dl
                np.add.at(est, np.searchsorted(universe, keys), sign * cnts)
        cum = np.cumsum(est)
        return cum, int(cum[-1]) if cum.size else 0, delta, to_clock

    def rank_table(self, lo: int, hi: int, inner: tuple[int, int] | None = None) -> RankTable:
        """Rank brackets of the events with a tick in ``[lo, hi]``; with ``inner`` (a
        sub-range), the lower brackets count only ``inner`` (the ticks wholly inside a
        window whose edges cut ticks) — so ``cl ≤ C ≤ cu`` for every range in between."""
        lo, hi = self._check_range(lo, hi)
        universe = self._universe()
        cum, total, delta, to_clock = self._raw(lo, hi, universe)
        if inner is None or tuple(inner) == (lo, hi):
            icum, itotal, idelta = cum, total, delta
        elif inner[0] > inner[1]:
            icum, itotal, idelta = np.zeros_like(cum), 0, 0
        else:
            ilo, ihi = self._check_range(*inner)
            icum, itotal, idelta, _ = self._raw(ilo, ihi, universe)
        n_upper = total + delta
        n_lower = max(0, itotal - idelta)
        cu = np.minimum(cum + delta, n_upper)
        cu = np.minimum.accumulate(cu[::-1])[::-1] if cu.size else cu
        cl = np.maximum(icum - idelta, 0)
        cl = np.maximum.accumulate(cl) if cl.size else cl
        lo_edge, hi_edge = self.edges_of(universe)
        eps = self.epsilon if to_clock else 2 * self.epsilon
        return RankTable(universe, lo_edge, hi_edge, cum, cl, cu, n_lower, n_upper, total,
                         max(delta, idelta), eps, to_clock)

    # -- queries -----------------------------------------------------------------------------
    def quantiles(self, qs, lo: int, hi: int, inner: tuple[int, int] | None = None) -> list:
        """A :class:`QuantileBracket` per q (None when the range has no event)."""
        qs = [float(q) for q in qs]
        if any(not 0.0 <= q <= 1.0 for q in qs):
            raise SketchError("each q must be in [0, 1]")
        table = self.rank_table(lo, hi, inner)
        return [self._bracket(q, table) for q in qs]

    def _bracket(self, q: float, tb: RankTable) -> QuantileBracket | None:
        if tb.n_upper == 0 or tb.keys.size == 0:
            return None
        fq = Fraction(repr(q))  # q as written: 0.1 is one tenth, not its binary neighbour
        need_low = max(math.ceil(fq * tb.n_lower), 1)
        need_high = max(math.ceil(fq * tb.n_upper), 1)
        j_lo = int(np.searchsorted(tb.cu, need_low, side="left"))
        j_hi = int(np.searchsorted(tb.cl, need_high, side="left"))
        last = tb.keys.size - 1
        lower = float(tb.lo_edge[min(j_lo, last)])
        upper = float(tb.hi_edge[min(j_hi, last)])
        # One ulp outward: the edges are the kernels' own exp(), the reported floats exact.
        lower, upper = math.nextafter(lower, -math.inf), math.nextafter(upper, math.inf)
        if tb.n_est > 0:
            j = int(np.searchsorted(np.maximum.accumulate(tb.est), max(math.ceil(fq * tb.n_est), 1)))
            j = min(max(j, 0), last)
            a, b = float(tb.lo_edge[j]), float(tb.hi_edge[j])
            point = 0.0 if tb.keys[j] == 0 else 2 * a * b / (a + b)  # ±2γ^i/(1 + γ)
        else:
            point = (lower + upper) / 2
        point = min(max(point, lower), upper)
        return QuantileBracket(q, point, lower, upper, tb.rank_error, tb.epsilon,
                               self.value_accuracy, tb.to_clock)

    def distribution(self, lo: int, hi: int, inner: tuple[int, int] | None = None) -> list:
        """The CDF of the range by value bucket, each with its rank bracket: a
        :class:`DistributionRow` per key that holds an event of the range (by estimate)."""
        tb = self.rank_table(lo, hi, inner)
        counts = np.diff(np.concatenate(([0], tb.est)))
        keep = np.flatnonzero((counts != 0) | (np.diff(np.concatenate(([0], tb.cu))) != 0))
        return [DistributionRow(float(tb.lo_edge[j]), float(tb.hi_edge[j]), int(counts[j]),
                                int(tb.cl[j]), int(tb.cu[j])) for j in keep]

    def decayed_quantile(self, phi: float, decay, at: int, lo: int | None = None) -> QuantileBracket | None:
        """The φ-quantile of values weighted by ``decay(at − tick)`` (a non-increasing
        function of the age in ticks) over the ticks ``[lo, at]`` (default: all kept).

        Per interval, the level of the range's start is read; on each piece between its
        bucket edges the weight lies in [f(oldest age), f(youngest age)]. By Abel summation
        over the pieces, Σ g·c = Σ_j (g_j − g_(j−1))·C_(p_j) − g_last·C_(hi+1), and each
        suffix count C_p is within Δ_p of its reading (Lemma 1), so

            Σ_b g_b·h_b(≤v) − D_g ≤ W(≤v) ≤ Σ_b G_b·h_b(≤v) + D_G,
            D_g = Σ_j (g_j − g_(j−1))·Δ_(p_j) + g_last·Δ_(hi+1)   (D_G likewise with G)

        for every v. Float sums are widened by 1e-9 of the total. The bracket is read
        like the window quantile's, with weights in place of counts.
        """
        phi = float(phi)
        if not 0.0 <= phi <= 1.0:
            raise SketchError("phi must be in [0, 1]")
        at = operator.index(at)
        hi = min(at, self.clock)
        lo = self.clock - self.window + 1 if lo is None else max(operator.index(lo), self.clock - self.window + 1)
        if self.is_empty or hi < lo:
            return None
        universe = self._universe()
        wl = np.zeros(universe.size)
        wu = np.zeros(universe.size)
        pen_l = pen_u = 0.0
        for p, d in self._intervals():
            start = d.k * self.wp
            a, b = max(lo, start), min(hi, start + self.wp - 1, p.clock)
            if a > b:
                continue
            la, lb = a - start, b - start
            level = self._level_for(d, la)
            lv = d.levels[level]
            first = int(np.searchsorted(lv.left, la, side="left"))
            last = int(np.searchsorted(lv.left, lb, side="right"))  # buckets with l ≤ b
            lefts = lv.left[first:last]
            # Pieces start at la and at each bucket left end in (la, lb].
            starts = np.concatenate(([la], lefts[lefts > la]))
            ends = np.concatenate((starts[1:] - 1, [lb]))
            g = np.asarray(decay(np.asarray(at - (starts + start), np.float64)), np.float64)
            G = np.asarray(decay(np.asarray(at - (ends + start), np.float64)), np.float64)
            if np.any(np.diff(g) < 0) or np.any(G < g):
                raise SketchError("decay must be a non-increasing function of age")
            deltas = np.array([self._delta(lv, level, int(s)) for s in starts], np.float64)
            tail = self._delta(lv, level, lb + 1) if lb + 1 < self.wp else 0
            pen_l += float(np.dot(np.diff(np.concatenate(([0.0], g))), deltas) + g[-1] * tail)
            pen_u += float(np.dot(np.diff(np.concatenate(([0.0], G))), deltas) + G[-1] * tail)
            # Bucket j (first ≤ j < last, l ≥ la) lies in the piece that starts at its l.
            piece = np.searchsorted(starts, lefts, side="right") - 1
            for j, pc in zip(range(first, last), piece):
                e0, e1 = int(lv.off[j]), int(lv.off[j + 1])
                idx = np.searchsorted(universe, lv.keys[e0:e1])
                wl[idx] += g[pc] * lv.cnts[e0:e1]
                wu[idx] += G[pc] * lv.cnts[e0:e1]
        cl, cu = np.cumsum(wl), np.cumsum(wu)
        slack = 1e-9 * (float(cu[-1]) + pen_u) if cu.size else 0.0
        n_upper = float(cu[-1]) + pen_u + slack if cu.size else 0.0
        n_lower = max(0.0, float(cl[-1]) - pen_l - slack) if cl.size else 0.0
        cu = np.minimum(cu + pen_u + slack, n_upper)
        cu = np.minimum.accumulate(cu[::-1])[::-1] if cu.size else cu
        cl = np.maximum.accumulate(np.maximum(cl - pen_l - slack, 0.0)) if cl.size else cl
        if n_upper <= 0:
            return None
        last_key = universe.size - 1
        lo_edge, hi_edge = self.edges_of(universe)
        tiny = 1e-300
        j_lo = int(np.searchsorted(cu, max(phi * n_lower * (1 - 1e-12), tiny), side="left"))
        j_hi = int(np.searchsorted(cl, max(phi * n_upper * (1 + 1e-12), tiny), side="left"))
        lower = math.nextafter(float(lo_edge[min(j_lo, last_key)]), -math.inf)
        upper = math.nextafter(float(hi_edge[min(j_hi, last_key)]), math.inf)
        mid = (np.cumsum(wl) + np.cumsum(wu)) / 2
        j = min(int(np.searchsorted(mid, max(phi * mid[-1], tiny), side="left")), last_key)
        a, b = float(lo_edge[j]), float(hi_edge[j])
        point = 0.0 if universe[j] == 0 else 2 * a * b / (a + b)
        point = min(max(point, lower), upper)
        rank_err = (pen_u + pen_l) / 2
        return QuantileBracket(phi, point, lower, upper, int(math.ceil(rank_err)), self.epsilon,
                               self.value_accuracy, True)

    # -- merging ---------------------------------------------------------------------------
    def merge(self, other: "WindowedQuantiles") -> "WindowedQuantiles":
        """Fold ``other`` in (parts side by side) and return self; refuses itself, another
        class or other parameters with :class:`IncompatibleSketchError`."""
        if other is self:
            raise IncompatibleSketchError(_MSG_SELF)
        if not isinstance(other, WindowedQuantiles):
            raise IncompatibleSketchError(_MSG_TYPE)
        if self._params() != other._params():
            raise IncompatibleSketchError(_MSG_PARAMS)
        self._parts.extend(p.copy() for p in other._parts if p.clock is not None)
        self._prune()
        return self

    def _params(self) -> tuple:
        return (self.epsilon, self.window, self.value_accuracy)

    def copy(self) -> "WindowedQuantiles":
        sk = WindowedQuantiles.__new__(WindowedQuantiles)
        sk.__dict__.update(self.__dict__)
        sk._parts = [p.copy() for p in self._parts]
        return sk

    @property
    def parts(self) -> int:
        return max(1, sum(p.clock is not None for p in self._parts))

    @property
    def is_empty(self) -> bool:
        return all(p.clock is None for p in self._parts)

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())

    def __repr__(self) -> str:
        clock = None if self.is_empty else self.clock
        return (f"WindowedQuantiles(epsilon={self.epsilon}, window={self.window}, "
                f"value_accuracy={self.value_accuracy}, alpha={self.alpha}, parts={self.parts}, "
                f"clock={clock})")

    # -- bytes -------------------------------------------------------------------------------
    _HEAD = struct.Struct("<dqdI")
    _PART = struct.Struct("<qB")
    _INTERVAL = struct.Struct("<qB")
    _LEVEL = struct.Struct("<qIII")

    def to_bytes(self) -> bytes:
        parts = [p for p in self._parts if p.clock is not None]
        out = [self._HEAD.pack(self.epsilon, self.window, self.value_accuracy, len(parts))]
        for p in parts:
            live = p.clock - self.window + 1
            old = p.old if p.old is not None and (p.old.k + 1) * self.wp - 1 >= live else None
            new = p.new if p.new is not None else _Interval.new(p.clock // self.wp)
            out.append(self._PART.pack(p.clock, old is not None))
            for d in (old, new):
                if d is not None:
                    out.append(self._INTERVAL.pack(d.k, len(d.levels)))
                    for i, lv in enumerate(d.levels):
                        out.append(self._write_level(lv, i))
        payload = b"".join(out)
        return pack_header(Family.WINDOWED_QUANTILES, len(payload)) + payload

    def _write_level(self, lv: _Level, i: int) -> bytes:
        n = lv.left.size
        first = max(0, n - self.alpha)  # the deferred discard, done now
        if first == 0:
            t_mark = lv.T
        elif i == 0:
            t_mark = int(lv.left[first - 1])
        else:
            t_mark = int(lv.left[first] - 1)
        left = lv.left[first:]
        e0 = int(lv.off[first])
        keys = lv.keys[e0:].astype(np.int64)
        cnts = lv.cnts[e0:]
        sizes = np.diff(lv.off[first:])
        if i == 0:
            head = np.diff(np.concatenate(([t_mark], left))) - 1
        else:
            right = np.append(left[1:], self.wp)
            head = np.log2(right - left).astype(np.int64)
        prev = np.zeros(keys.size, np.int64)
        if keys.size:
            prev[1:] = keys[:-1]
            prev[(lv.off[first:-1] - e0)[sizes > 0]] = 0  # first key of a bucket: from 0
        d = keys - prev
        zig = (d << 1) ^ (d >> 63)
        seq = np.concatenate((head, sizes, zig, cnts)).astype(np.int64)
        buf = np.empty(seq.size * 10, np.uint8)
        end = K.put_varints(seq, buf, 0)
        return self._LEVEL.pack(t_mark, n - first, keys.size, end) + buf[:end].tobytes()

    @classmethod
    def from_bytes(cls, data) -> "WindowedQuantiles":
        """Read a blob of :meth:`to_bytes`; raises :class:`CorruptSketchError` if invalid."""
        _, payload = unpack_header(data, Family.WINDOWED_QUANTILES)
        buf = np.frombuffer(bytes(payload), np.uint8)
        r = _Reader(buf)
        epsilon, window, accuracy, nparts = r.unpack(cls._HEAD)
        try:
            sk = cls(epsilon, window, accuracy)
        except SketchError as e:
            raise CorruptSketchError(f"windowed quantile parameters out of range: {e}") from None
        if nparts > 1 << 20:
            raise CorruptSketchError("windowed quantile sketch has too many parts")
        sk._parts = []
        for _ in range(nparts):
            clock, has_old = r.unpack(cls._PART)
            if not -TICK_LIMIT < clock < TICK_LIMIT or has_old not in (0, 1):
                raise CorruptSketchError("windowed quantile part header out of range")
            top = clock // sk.wp
            old = sk._read_interval(r, top - 1) if has_old else None
            new = sk._read_interval(r, top)
            sk._parts.append(_Part(clock, old, new))
        if r.left():
            raise CorruptSketchError("trailing bytes after windowed quantile sketch")
        if not sk._parts:
            sk._parts = [_Part()]
        return sk

    def _read_interval(self, r: "_Reader", k: int) -> _Interval:
        got_k, nlevels = r.unpack(self._INTERVAL)
        if got_k != k or not 2 <= nlevels <= MAX_LEVELS:
            raise CorruptSketchError("windowed quantile interval header out of range")
        levels = [self._read_level(r, i, i == nlevels - 1) for i in range(nlevels)]
        d = _Interval(k, levels)
        # Every level holds a part of the interval's events, all of which its top holds.
        tk, tc = d.top.keys, d.top.cnts
        for lv in levels[:-1]:
            if lv.keys.size == 0:
                continue
            u, inv = np.unique(lv.keys, return_inverse=True)
            c = np.bincount(inv, weights=lv.cnts)
            at = np.searchsorted(tk, u)
            if np.any(at >= tk.size) or np.any(tk[np.minimum(at, tk.size - 1)] != u) or np.any(c > tc[np.minimum(at, tk.size - 1)]):
                raise CorruptSketchError("windowed quantile level holds events its interval does not")
        if 2**nlevels <= d.total or (nlevels > 2 and 2 ** (nlevels - 1) > d.total):
            raise CorruptSketchError("windowed quantile interval has the wrong number of levels")
        return d

    def _read_level(self, r: "_Reader", i: int, top: bool) -> _Level:
        t_mark, nb, ne, size = r.unpack(self._LEVEL)
        wp = self.wp
        if not -1 <= t_mark < wp or nb > self.alpha or (t_mark >= 0 and nb != self.alpha):
            raise CorruptSketchError("windowed quantile level header out of range")
        if ne > size or 2 * nb > size or (i > 0 and nb < 1):
            raise CorruptSketchError("windowed quantile level sizes do not match")
        blob = r.take(size)
        seq = np.empty(2 * nb + 2 * ne, np.int64)
        if K.get_varints(blob, 0, seq.size, seq) != size:
            raise CorruptSketchError("windowed quantile level blob is not valid")
        head, sizes, zig, cnts = np.split(seq, [nb, 2 * nb, 2 * nb + ne])
        if np.any(seq < 0) or int(sizes.sum()) != ne or np.any(cnts < 1) or (nb and np.any(sizes < 1) and i > 0 and not (nb == 1 and t_mark == -1)):
            raise CorruptSketchError("windowed quantile level entries are not valid")
        d = (zig >> 1) ^ -(zig & 1)
        off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        starts = off[:-1][sizes > 0]
        rest = np.ones(ne, bool)
        rest[starts] = False
        if np.any(d[rest] <= 0):
            raise CorruptSketchError("windowed quantile keys are not increasing in a bucket")
        bucket_of = np.repeat(np.arange(nb), sizes)
        keys = d.copy()
        if ne:
            # Cumulative sum restarted at every bucket.
            cs = np.cumsum(d)
            base = np.concatenate(([0], cs))[off[:-1]]
            keys = cs - base[bucket_of]
        if ne and (np.any(np.abs(keys) > self._max_key) or np.any((keys != 0) & (np.abs(keys) < 1))):
            raise CorruptSketchError("windowed quantile key out of range")
        wt = np.zeros(nb, np.int64)
        np.add.at(wt, bucket_of, cnts)
        if i == 0:
            left = t_mark + 1 + np.cumsum(head + 1) - 1 if nb else np.zeros(0, np.int64)
            left = left.astype(np.int64)
            if nb and (left[-1] >= wp or np.any(sizes < 1)):
                raise CorruptSketchError("windowed quantile level 0 is not valid")
        else:
            if np.any(head > self.log_w):
                raise CorruptSketchError("windowed quantile level has a bad bucket")
            widths = np.left_shift(1, head)
            left = (t_mark + 1 + np.concatenate(([0], np.cumsum(widths)[:-1]))).astype(np.int64)
            half = 1 << i
            root = nb == 1 and t_mark == -1
            if (left[-1] + widths[-1] != wp or np.any(left % widths)
                    or (not root and np.any(wt < half))
                    or np.any((wt >= 2 * half) & (widths > 1))
                    or (top and not root)):
                raise CorruptSketchError("windowed quantile level is not a valid split tiling")
        return _Level(left, wt, off, keys.astype(np.int32), cnts.astype(np.int64), t_mark)


class _Reader:
    def __init__(self, data: np.ndarray):
        self.data, self.pos = data, 0

    def take(self, n: int) -> np.ndarray:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptSketchError("windowed quantile blob truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> tuple:
        return s.unpack(self.take(s.size).tobytes())

    def left(self) -> int:
        return len(self.data) - self.pos
