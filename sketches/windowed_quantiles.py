"""Windowed quantiles: a deterministic bracket of the q-quantile of ``value`` over any
sliding window of an out-of-order stream, with rank error ≤ ε·n_w and value error ≤ α.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2.1 (dyadic time ranges, level 0),
§2.2 (Lemma 1 and Proposition 1: where the misplaced elements of a boundary come from;
Lemma 3 and Theorem 1: the relative error), §3 (a batch as one insertion, Theorem 3).
Values are mapped to logarithmic buckets as in DDSketch (Masson, Rim and Lee, *DDSketch: a
fast and fully-mergeable quantile sketch with relative-error guarantees*, VLDB 2019, §2).

Design
------
The state is a set of *nodes*: dyadic, aligned tick ranges ``[l, l + 2^g − 1]``
(``2^g ≤ Wp``, the window rounded up to a power of two), each holding the exact value
histogram, a sparse list of (key, count), of some events whose ticks lie in its range.
Every event is in exactly one node. A batch adds each event to the one-tick node of its
tick (Theorem 3's batching: a tick's events go in at once). Nodes never split; instead a
*collapse* moves all the events of the nodes inside a dyadic block B into one node B.

**Why the bracket holds (always).** For a boundary t let A_t(≤v) be the events of value
≤ v in the nodes with l ≥ t, and U_t(≤v) those in the nodes with l < t ≤ r (the nodes
that *straddle* t). A node with r < t holds only ticks < t, one with l ≥ t only ticks
≥ t, so for C_t(≤v), the true number of events with tick ≥ t and value ≤ v,

    A_t(≤v) ≤ C_t(≤v) ≤ A_t(≤v) + U_t(≤v)                 for every v at once.

This is Lemma 1's decomposition e_t = s_t + |X_1| − |X_2 ∪ X_3|: the misplaced elements
X_1, X_2, X_3 are exactly those *initially assigned* to the path nodes that contain both
t − 1 and t, and a split then hands them to either side. Here no node splits, so the
elements of the straddling nodes are the whole error, and the bracket reads it per value.

**Why the rank error is ≤ ε·n_w.** Write P_X for the events of node X and of the nodes
enclosing it, and R_x = A_x(≤∞). A collapse into B is made only if

    P_B ≤ ε'·R_(r(B)+1),      ε' = ⌊ε·share·2^24⌋ / 2^24 ≤ ε       (integers: exact)

and this holds for every node of two or more ticks at all times: a one-tick node encloses
nothing and adding to it only grows R; dropping nodes wholly before the window changes no
R_x for a live x; a collapse into B leaves P and R outside B's inside unchanged; a merge
adds P and R part by part (P^a_X ≤ ε'R^a and, through the deepest node of b enclosing X,
P^b_X ≤ ε'R^b, since R_x does not grow with x). The nodes straddling t are nested; with D
the deepest, r(D) ≥ t, so

    U_t = P_D ≤ ε'·R_(r(D)+1) ≤ ε'·A_t ≤ ε·C_t = ε·n_w        (window [t, clock])

— Theorem 1's guarantee, the collapse test playing the part of Lemma 3 (the window holds
enough events for the error) without its 1 + log₂ W factor. A window [lo, hi] with
hi < clock has two edges: Δ = U_lo + U_(hi+1) ≤ 2ε·n', n' the events in [lo, clock].
Nodes of two or more ticks end before ``clock − α + 1`` (α = ⌈(1 + log₂ Wp)(2 + ε)/ε⌉,
the ticks B–T's level 0 keeps), so a window starting inside the α most recent ticks has
exact ranks (Δ = 0), as level 0 gives in Theorem 1.

The share is ``COLLAPSE_SHARE`` = 1/32 for a block ending in the ``STRICT_TICKS`` most
recent ticks (r ≥ clock − STRICT_TICKS + 1 when it collapses) and ``ACCEPTED_SHARE`` = 1/8
behind them; a blob is accepted while every node keeps 1/8 (blobs written before issue 21
collapsed at ε/8 everywhere). The clock only grows, so a node D with r(D) ≥ t for a
boundary t ≥ clock − STRICT_TICKS + 1 was collapsed at ε/32, and so were its enclosing
nodes (they were tested with it): for such t, U_t ≤ (ε/32)·A_t, in any merge of parts
written by this code (a merge adds P and R part by part, as above); else U_t ≤ (ε/8)·A_t.
Why: a window ending 15 minutes before the clock is cut by nodes whose size follows the
events *to the clock*, and brackets of 60 s – 5 min windows there, and of p99.9 at the
clock, reached 8–40 % at ε/8; at ε/32 they stay within two value buckets on a latency
stream. A node of 2^g ticks forms at an age of about 2^g/ε' ticks whatever the rate, so
the recent ticks are where the finer share pays; behind them ε/8 keeps long windows' bytes
(``bench/bench_quantiles.py``).

**Values.** γ = (1 + α_v)/(1 − α_v) for value accuracy α_v; a value v > 0 has key i with
γ^(i−1) < v ≤ γ^i, so every point of its bucket is within α_v of the bucket's centre
2γ^i/(1 + γ) (DDSketch, Lemma 2). Negative values use the mirrored keys, |v| < 1e-300 the
zero key. Every event keeps its exact key for life: only its time is blurred.

**Bracket, from one consistent world.** Split the events held in the nodes that meet
the range into I, those certainly in it (nodes wholly inside, or inside ``inner``), and X,
those that may or may not be (cut nodes, or nodes outside ``inner``): the range holds
I ∪ Y for some unknown Y ⊆ X, so with I(≤v), X(≤v), X(>v) read per value key,

    C(≤v) = I(≤v) + Y(≤v),   n_w = |I| + Y(≤v) + Y(>v),   0 ≤ Y(≤v) ≤ X(≤v), 0 ≤ Y(>v) ≤ X(>v)

(``cl = I(≤·)``, ``cu = I(≤·) + X(≤·)``, ``N_l = |I|``, ``N_u = |I| + |X|``). The true
q-quantile v* is the smallest v with C(≤v) ≥ max(q·n_w, 1) (contract §6), an event's
value, so v* ≤ hi_edge(k) as soon as C(≤hi_edge(k)) ≥ max(q·n_w, 1). Since

    C(≤v) − q·n_w = I(≤v) − q·|I| + (1 − q)·Y(≤v) − q·Y(>v)

grows with Y(≤v) and falls with Y(>v), one world is the worst for each side:

    upper = hi_edge of the first key k with  I(≤k) ≥ max(q·(|I| + X(>k)), 1)
    lower = lo_edge of the first key k with  I(≤k) + X(≤k) ≥ max(q·(|I| + X(≤k)), 1)
    lower ≤ v* ≤ upper                                      (always; confidence 1)

Upper: in every world C(≤k) − q·n_w ≥ I(≤k) − q·(|I| + X(>k)) ≥ 0 (Y(≤k) = 0,
Y(>k) = X(>k)) and C(≤k) ≥ I(≤k) ≥ 1; if no key passes, the last key holds every event.
Lower: for a key k below it, every world has C(≤k) − q·n_w ≤ I(≤k) + (1 − q)·X(≤k)
− q·|I| < 0 (Y(≤k) = X(≤k), Y(>k) = 0) or C(≤k) ≤ cu(k) < 1, so v*'s key is not k.
Both tests are monotone in k (each side only grows), and they are integer inequalities
with q taken exactly as written (a :class:`~fractions.Fraction`): nothing rounds. This is
the straddle of B–T §2.2 (Lemma 1: the misplaced elements X_1, X_2, X_3 are the
boundary's path nodes' events) read per value *and* in the count at once: the earlier
reading (upper: I(≤k) ≥ q·(|I| + |X|), lower: I(≤k) + X(≤k) ≥ q·|I|) put every
straddling event on both sides together, so a p99 whose straddle was ≥ 1 % of the window
fell to the last key. The new tests imply the old ones' failure never more often: upper's
threshold is lower by q·X(≤k), lower's higher by q·X(≤k). When Δ = 0 the bracket is one
value bucket, γ − 1 ≈ 2α_v wide.

**Merge**: the union of the nodes (a node in both adds its histograms), then a collapse:
the invariant holds for the union (above), so any number of parts in any merge tree keep
Δ ≤ ε·n_w. **Space** follows the data, not a declared range: one node per recent tick and
about ln(n)/ε' collapsed nodes behind them on an orderly stream (measured in
``bench/bench_quantiles.py``); at worst one node per dyadic range meeting the window
(under 4·Wp), a bound of ticks, not of events (B–T Theorem 2 bounds buckets by events).

Byte layout (format 3, after the common 16-byte header, family WINDOWED_QUANTILES)::

    f64 epsilon | i64 window | f64 value_accuracy | i64 clock | u32 nodes | varint pages
    per page (varints, sketches._codec): its node count
                             | node lefts (first zig-zag, then gaps)
                             | node log₂ widths | node entry counts
                             | per entry: first key of a node zig-zag, then key gap − 1
                             | per entry: count − 1

The pages are content-defined (``sketches._pages``: a page begins at a node whose range
hashes to a cut point), so a batch that adds one-tick nodes at the clock, collapses a few
blocks and drops the oldest rewrites those pages only (``Sketch.pieces``). ``from_bytes``
checks every field, the pre-order, the alignment, the collapse invariant and that the
pages are cut where the nodes say, and refuses the whole blob otherwise.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from sketches import _windowed_quantile_kernels as K
from sketches._bytes import Reader, Writer
from sketches._pages import page_bytes, page_starts
from sketches.base import CorruptSketchError, Family, Sketch, SketchError, epsilon_and_window, integer_ticks, window_range
from sketches.splittable_histogram import suggest_alpha

__all__ = ["WindowedQuantiles", "QuantileBracket", "RankTable", "DistributionRow"]

METHOD = "dyadic-histogram/log-buckets"
MAX_WINDOW = 2**40
TICK_LIMIT = 2**61
EMPTY_CLOCK = -(2**62)
MIN_INDEXED = 1e-300
MAX_EVENTS = 2**38  # keeps the collapse test's integer products below 2^63
SHIFT = 24
COLLAPSE_SHARE = 1 / 32  # ε' = ε/32 for nodes ending in the STRICT_TICKS most recent ticks
ACCEPTED_SHARE = 1 / 8   # ε/8 behind them, and what a blob must keep (blobs before issue 21)
STRICT_TICKS = 1 << 13   # 2.3 h at 1 s: windows of up to an hour, 15 min or more before the clock


def _universe(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``, by a dense tally when the keys span little
    more than their number (the usual case: a query's keys are a few thousand value
    buckets), so a history of many instants does not sort every entry at each."""
    if keys.size == 0:
        return keys.astype(np.int64), np.zeros(0, np.intp)
    lo, hi = K.key_span(keys)
    if hi - lo + 1 > 4 * keys.size + 65536:
        return np.unique(keys, return_inverse=True)
    return K.dense_unique(keys, lo, hi)


def _first_passing(rank: np.ndarray, basis: np.ndarray, q: Fraction) -> int:
    """The first j with ``rank[j] ≥ max(q·basis[j], 1)``, or ``rank.size``, in Python
    integers (numbers too large for the compiled search, ``K.bracket_keys``): a binary
    search on the test, which must be monotone in j, as the brackets' are."""
    num, den = q.numerator, q.denominator
    lo, hi = 0, int(rank.size)
    while lo < hi:
        mid = (lo + hi) // 2
        r = int(rank[mid])
        if r >= 1 and r * den >= int(basis[mid]) * num:
            hi = mid
        else:
            lo = mid + 1
    return lo


@functools.lru_cache(maxsize=1024)
@functools.lru_cache(maxsize=1024)
def _exact_q(q: float) -> Fraction:
    """``q`` as the decimal it prints as (a range asks the same few q at every instant:
    each made once)."""
    return Fraction(repr(q))


@functools.lru_cache(maxsize=256)
def _exact_qs(qs: tuple[float, ...]) -> tuple[list[Fraction], np.ndarray | None, np.ndarray | None]:
    """Each q as :func:`_exact_q`, and their numerators and denominators as the compiled
    search takes them (None when a denominator is 2^24 or more: searched in rationals)."""
    fqs = [_exact_q(q) for q in qs]
    if not all(f.denominator < 2**24 for f in fqs):
        return fqs, None, None
    # (shared by every call asking these q: the search only reads them)
    return fqs, np.array([f.numerator for f in fqs], np.int64), np.array([f.denominator for f in fqs], np.int64)


_SWEEP_NUMBERS = 1 << 20  # keys × ranges of one ``K.sweep_tables`` call (its output's size)
_DIRECT_RANGES = 8  # up to this many ranges, each sums the nodes it meets (no running sums)


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

    def shares(self) -> tuple[np.ndarray, np.ndarray]:
        """Brackets of the share F(k) = C(≤k)/n_w of the window at or below each key,
        each from its one consistent world (module notes, **Bracket**):

            I(≤k) / (|I| + X(>k))  ≤  F(k)  ≤  (I(≤k) + X(≤k)) / (|I| + X(≤k))

        (F = (I(≤k) + Y(≤k)) / (|I| + Y(≤k) + Y(>k)) falls with Y(>k) and rises with
        Y(≤k)); narrower than cl/N_u … cu/N_l, which count the straddle on both sides.
        A world with no event has no share: 0/0 reads 0 below and 1 above. Rounded outward.
        """
        straddle = self.cu - self.cl
        low_den = (self.n_upper - straddle).astype(np.float64)
        high_den = (self.n_lower + straddle).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            low = np.where(low_den > 0, self.cl / np.where(low_den > 0, low_den, 1.0), 0.0)
            high = np.where(high_den > 0, self.cu / np.where(high_den > 0, high_den, 1.0), 1.0)
        low = np.maximum(np.nextafter(low, -np.inf), 0.0)
        high = np.minimum(np.nextafter(high, np.inf), 1.0)
        return low, high


@dataclass(frozen=True)
class RankTables:
    """Many ranges' :class:`RankTable` laid end to end (``WindowedQuantiles.table_batch``):
    table ``r`` owns ``starts[r]:starts[r + 1]`` of the arrays, its numbers are ``[r]`` of
    the others'. The brackets of all are found at once (``WindowedQuantiles.brackets_of``)."""

    keys: np.ndarray
    lo_edge: np.ndarray
    hi_edge: np.ndarray
    est: np.ndarray
    cl: np.ndarray
    cu: np.ndarray
    starts: np.ndarray
    n_lower: np.ndarray
    n_upper: np.ndarray
    n_est: np.ndarray
    rank_error: np.ndarray
    epsilon: np.ndarray
    to_clock: np.ndarray

    @classmethod
    def of(cls, tables: list) -> RankTables:
        """The batch of these tables (copied)."""
        starts = np.concatenate(([0], np.cumsum([t.keys.size for t in tables], dtype=np.int64)))
        ends = [np.concatenate([getattr(t, f) for t in tables]) if tables else np.zeros(0, np.int64)
                for f in ("keys", "lo_edge", "hi_edge", "est", "cl", "cu")]
        numbers = [np.array([getattr(t, f) for t in tables], dtype)
                   for f, dtype in (("n_lower", np.int64), ("n_upper", np.int64), ("n_est", np.int64),
                                    ("rank_error", np.int64), ("epsilon", np.float64), ("to_clock", bool))]
        return cls(*ends, starts, *numbers)

    def __len__(self) -> int:
        return self.starts.size - 1

    def table(self, r: int) -> RankTable:
        a, b = self.starts[r], self.starts[r + 1]
        return RankTable(self.keys[a:b], self.lo_edge[a:b], self.hi_edge[a:b], self.est[a:b],
                         self.cl[a:b], self.cu[a:b], int(self.n_lower[r]), int(self.n_upper[r]),
                         int(self.n_est[r]), int(self.rank_error[r]), float(self.epsilon[r]),
                         bool(self.to_clock[r]))


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
        return relative_width(self.estimate, self.lower, self.upper)


def relative_width(estimate: float, lower: float, upper: float) -> float:
    """A bracket's width over its estimate (0 for a point at 0, ∞ for a wider one)."""
    scale = abs(estimate)
    return (upper - lower) / scale if scale > 0 else (0.0 if upper == lower else math.inf)


@dataclass(frozen=True)
class DistributionRow:
    """One value bucket: its edges and brackets of C(≤ upper edge) and of its own count."""

    lower_edge: float
    upper_edge: float
    count: int
    cdf_lower: int
    cdf_upper: int
    share_lower: float = 0.0  # bracket of C(≤ upper edge)/n_w (RankTable.shares)
    share_upper: float = 1.0


class WindowedQuantiles(Sketch):
    """Deterministic quantile brackets over any window ``w ≤ window`` of an asynchronous
    stream; see the module notes for the design and its proof.

    Parameters
    ----------
    epsilon : float
        Rank error target ε in (0, 1): every rank a bracket is read from is within
        ε·n_w of the truth for a window ending at the clock.
    window : int
        Longest window W in ticks.
    value_accuracy : float
        α in (0, 1): value buckets are (γ^(i−1), γ^i] with γ = (1 + α)/(1 − α).

    Examples
    --------
    >>> import numpy as np
    >>> wq = WindowedQuantiles(0.05, window=100, value_accuracy=0.01)
    >>> wq.update(np.array([3, 1, 2, 2, 5]), np.array([10.0, 20.0, 30.0, 40.0, 50.0]))
    >>> b = wq.quantiles([0.5], 0, wq.clock_tick)[0]
    >>> b.lower <= 30.0 <= b.upper, b.rank_error, round(b.relative_width, 3)
    (True, 0, 0.02)
    >>> other = WindowedQuantiles(0.05, window=100, value_accuracy=0.01)
    >>> other.update(np.array([4]), np.array([-7.0]))
    >>> m = wq.merge(other).quantiles([0.0], 0, 5)[0]
    >>> bool(m.lower <= -7.0 <= m.upper)
    True
    >>> WindowedQuantiles.from_bytes(wq.to_bytes()).to_bytes() == wq.to_bytes()
    True
    """

    FAMILY, FORMAT = Family.WINDOWED_QUANTILES, 3  # format 3: nodes in content-defined pages
    WHAT, NOUN = "windowed quantile sketch", "windowed quantile sketches"
    PARAMS = "epsilon, window or value_accuracy"
    SHOWN = ("epsilon", "window", "value_accuracy", "nodes", "entries", "clock_tick")
    BATCH = ("ticks", "values")
    _OWNED = ("_left", "_lg", "_off", "_keys", "_cnts", "_wt")

    def __init__(self, epsilon: float, window: int, value_accuracy: float = 0.01):
        epsilon, window = epsilon_and_window(epsilon, window, MAX_WINDOW)
        value_accuracy = float(value_accuracy)
        if not 1e-6 <= value_accuracy < 1.0:
            raise SketchError(f"value_accuracy must be in [1e-6, 1), got {value_accuracy}")
        self.epsilon, self.window, self.value_accuracy = epsilon, window, value_accuracy
        self.log_w = max(0, (window - 1).bit_length())
        self.wp = 1 << self.log_w
        self.alpha = suggest_alpha(epsilon, window)  # exact ticks, as B–T's level 0
        if self.alpha > 1 << 20:
            raise SketchError(f"epsilon {epsilon} needs {self.alpha} exact ticks; at most 2^20")
        self._num = int(math.floor(epsilon * COLLAPSE_SHARE * (1 << SHIFT)))
        self._num_accepted = int(math.floor(epsilon * ACCEPTED_SHARE * (1 << SHIFT)))
        self.gamma = (1.0 + value_accuracy) / (1.0 - value_accuracy)
        self.log_gamma = math.log(self.gamma)
        # Keys: bias + i for γ^(i−1) < |v| ≤ γ^i, i ≥ 1 − bias covers |v| ≥ MIN_INDEXED.
        self._bias = 1 - math.floor(math.log(MIN_INDEXED) / self.log_gamma)
        self._max_key = self._bias + math.ceil(math.log(1.7976931348623157e308) / self.log_gamma) + 1
        self._clock = EMPTY_CLOCK
        self._set(*self._empty_lists())

    @staticmethod
    def _empty_lists():
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(1, np.int64), np.zeros(0, np.int32), z, z

    def _set(self, left, lg, off, keys, cnts, wt) -> None:
        self._left, self._lg, self._off, self._keys, self._cnts, self._wt = left, lg, off, keys, cnts, wt

    def _lists(self):
        return self._left, self._lg, self._off, self._keys, self._cnts, self._wt

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
        t = integer_ticks(ticks)
        v = np.asarray(values, dtype=np.float64)
        if v.shape != t.shape:
            raise SketchError("ticks and values must have the same length")
        if t.size == 0:
            return
        if not np.isfinite(v).all():
            raise SketchError("values must be finite")
        tmin, tmax = int(t.min()), int(t.max())
        if tmin <= -TICK_LIMIT or tmax >= TICK_LIMIT:
            raise SketchError("ticks must be in (-2^61, 2^61)")
        if self.count + t.size >= MAX_EVENTS:
            raise SketchError("too many events in one windowed quantile sketch")
        t = t.astype(np.int64, copy=False)
        clock = max(self._clock, tmax)
        live = clock - self.window + 1
        if tmin < live:
            keep = t >= live
            t, v = t[keep], v[keep]
        self._clock = clock
        if t.size:
            batch = K.batch_nodes(np.ascontiguousarray(t), self.keys_of(v))
            self._set(*K.union(*self._lists(), *batch, live))
        else:
            self._expire()
        self._collapse()

    def _expire(self) -> None:
        live = self._clock - self.window + 1
        self._set(*K.union(*self._lists(), *self._empty_lists(), live))

    def _collapse(self) -> None:
        self._set(*K.collapse(*self._lists(), self.log_w, self._exact_from(), self._num_accepted, SHIFT,
                              self._clock - STRICT_TICKS + 1, self._num))

    def _exact_from(self) -> int:
        return self._clock - self.alpha + 1

    @property
    def clock_tick(self) -> int:
        """Largest tick inserted (``-2**62`` when empty)."""
        return self._clock

    @property
    def count(self) -> int:
        """Events held (some may be older than the window, in a node that reaches into it)."""
        return int(self._wt.sum())

    @property
    def nodes(self) -> int:
        return int(self._left.size)

    @property
    def entries(self) -> int:
        """(node, value key) pairs held: what the bytes and the queries' work follow."""
        return int(self._keys.size)

    # -- ranges ----------------------------------------------------------------------------
    def _check_range(self, lo: int, hi: int) -> tuple[int, int]:
        return window_range(lo, hi, self.window, None if self.is_empty else self._clock)

    def _spans(self):
        """(first tick, last tick that can hold an event) of every node."""
        right = self._left + (np.int64(1) << self._lg) - 1
        return self._left, np.minimum(right, self._clock)

    def _classify(self, lo: int, hi: int):
        """Per node: inside [lo, hi] (certain), cut by an edge (uncertain), and the share of
        its ticks inside (the estimate's guess for a cut node)."""
        first, last = self._spans()
        hi = min(hi, self._clock)
        meets = (last >= lo) & (first <= hi)
        inside = meets & (first >= lo) & (last <= hi)
        cut = meets & ~inside
        share = np.where(inside, 1.0, 0.0)
        if cut.any():
            a, b = np.maximum(first[cut], lo), np.minimum(last[cut], hi)
            share[cut] = (b - a + 1) / (last[cut] - first[cut] + 1)
        return meets, inside, cut, share

    def _entries(self, mask: np.ndarray):
        """Entry indices of the masked nodes and the node of each."""
        sizes = np.diff(self._off)[mask]
        node = np.repeat(np.flatnonzero(mask), sizes)
        idx = np.arange(node.size) - np.repeat(np.cumsum(sizes) - sizes, sizes) + self._off[node]
        return idx, node

    def rank_table(self, lo: int, hi: int, inner: tuple[int, int] | None = None) -> RankTable:
        """Rank brackets of the events with a tick in ``[lo, hi]``; with ``inner`` (a
        sub-range), the lower brackets count only ``inner`` (the ticks wholly inside a
        window whose edges cut ticks) — so ``cl ≤ C ≤ cu`` for every range in between."""
        lo, hi = self._check_range(lo, hi)
        meets, inside, cut, share = self._classify(lo, hi)
        if inner is None or tuple(inner) == (lo, hi):
            i_inside, i_cut = inside, cut
        elif inner[0] > inner[1]:
            i_inside = i_cut = np.zeros_like(inside)
        else:
            _, i_inside, i_cut, _ = self._classify(*self._check_range(*inner))
        idx, node = self._entries(meets)
        universe, inv = _universe(self._keys[idx])
        c = self._cnts[idx].astype(np.float64)
        m = universe.size

        def cum(weights):
            return np.cumsum(np.bincount(inv, weights=weights, minlength=m)).astype(np.int64)

        certain = cum(c * inside[node])
        cu = certain + cum(c * cut[node])
        cl = certain if i_inside is inside else cum(c * i_inside[node])
        # The estimate: every event certainly in the range (an integer, exact) and each cut
        # node's share of its events; the cut part alone is summed in floats, so the same
        # number comes from ``rank_tables``' sweep, which never sums the inside per entry.
        est_f = certain + np.cumsum(np.bincount(inv, weights=c * (share * cut)[node], minlength=m))
        est = np.minimum(np.maximum(np.floor(est_f + 0.5).astype(np.int64), certain), cu)
        n_upper = int(cu[-1]) if m else 0
        n_lower = int(cl[-1]) if m else 0
        delta = max(int(self._wt[cut].sum()), int(self._wt[i_cut].sum()))
        lo_edge, hi_edge = self.edges_of(universe)
        to_clock = hi >= self._clock
        eps = self.epsilon if to_clock else 2 * self.epsilon
        return RankTable(universe, lo_edge, hi_edge, est, cl, cu, n_lower, n_upper,
                         int(est[-1]) if m else 0, delta, eps, to_clock)

    def rank_tables(self, ranges) -> list:
        """:meth:`rank_table` of every ``((lo, hi), inner)`` of ``ranges`` (each the table
        it returns, or the :class:`SketchError` it raises), in one sweep (:meth:`table_batch`)."""
        batch, where = self.table_batch(ranges)
        return [w if isinstance(w, SketchError) else batch.table(w) for w in where]

    def table_batch(self, ranges) -> tuple[RankTables, list]:
        """The :meth:`rank_table` of every ``((lo, hi), inner)`` of ``ranges`` as one
        :class:`RankTables`, and for each range its table's row there, or the
        :class:`SketchError` its read raises; in one sweep over time.

        A range's table needs the value histogram of the nodes wholly inside it, which
        :meth:`rank_table` sums entry by entry. Here the ranges are taken in time order,
        and that histogram is kept as ``Σ(nodes with last ≤ hi) − Σ(nodes with first < lo)
        + Σ(nodes with first < lo and last > hi)`` (the first two are running sums over the
        nodes in order of their last and first ticks, each node's entries added once; the
        third holds the few nodes spanning the whole range): the work is the entries once,
        plus per range the nodes that meet it and a pass over the value keys, not the
        entries of every range, all in compiled code (``K.sweep_tables``). Integer counts,
        so the sums are exact; the estimate's float part comes from the cut nodes alone, as
        :meth:`rank_table` computes it."""
        where: list = [None] * len(ranges)
        todo = []
        for i, ((lo, hi), inner) in enumerate(ranges):
            try:
                lo, hi = self._check_range(lo, hi)
                if inner is None or tuple(inner) == (lo, hi):
                    mode, ilo, itop = 0, 0, 0
                elif inner[0] > inner[1]:
                    mode, ilo, itop = 1, 0, 0
                else:
                    ilo, ihi = self._check_range(*inner)
                    mode, itop = 2, min(ihi, self._clock)
            except SketchError as e:
                where[i] = e
                continue
            todo.append((hi, lo, i, inner, mode, ilo, itop))
        todo.sort(key=lambda r: r[:2])
        if not todo or self._keys.size == 0 or any(b[1] < a[1] for a, b in zip(todo, todo[1:])):
            for r, (hi, lo, i, inner, *_) in enumerate(todo):  # not one sweep: one at a time
                where[i] = r
            return RankTables.of([self.rank_table(lo, hi, inner) for hi, lo, _, inner, *_ in todo]), where
        his, los, rows, modes, ilos, itops = (np.array([r[c] for r in todo], np.int64) for c in (0, 1, 2, 4, 5, 6))
        tops = np.minimum(his, self._clock)
        first, last = self._spans()
        universe, keys, kmin, rank = self._all_keys()
        by_last, by_first = np.argsort(last, kind="stable"), np.argsort(first, kind="stable")
        cnts, m = self._cnts.astype(np.int64, copy=False), universe.size
        upto, before, ptr = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(2, np.int64)
        step = max(1, _SWEEP_NUMBERS // m)  # ranges per call: its output holds ranges × keys
        direct = len(todo) <= _DIRECT_RANGES
        pieces = [K.sweep_tables(first, last, self._off, keys, kmin, rank, cnts, self._wt, m, by_last, by_first,
                                 upto, before, ptr, los[a:a + step], tops[a:a + step],
                                 modes[a:a + step], ilos[a:a + step], itops[a:a + step], direct)
                  for a in range(0, len(todo), step)]
        if len(pieces) == 1:
            pos, est, cl, cu, starts, deltas = pieces[0]
        else:
            pos, est, cl, cu, deltas = (np.concatenate([p[f] for p in pieces]) for f in (0, 1, 2, 3, 5))
            ends = np.cumsum([p[4][-1] for p in pieces])
            starts = np.concatenate([[0]] + [p[4][1:] + e - p[4][-1] for p, e in zip(pieces, ends)])
        lo_edges, hi_edges = self.edges_of(universe)
        top_row = np.maximum(starts[1:] - 1, 0)  # each table's last row (its n), if it has one
        has = starts[1:] > starts[:-1]
        to_clock = his >= self._clock
        for r, i in enumerate(rows.tolist()):
            where[i] = r
        batch = RankTables(universe[pos], lo_edges[pos], hi_edges[pos], est, cl, cu, starts,
                           *(np.where(has, a[top_row], 0) if a.size else np.zeros(len(todo), np.int64)
                             for a in (cl, cu, est)), deltas,
                           np.where(to_clock, self.epsilon, 2 * self.epsilon), to_clock)
        return batch, where

    def _all_keys(self) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        """``(universe, keys, kmin, rank)``: the distinct value keys held, in order, and entry
        ``e``'s key as the ``rank[keys[e] − kmin]``-th of them (``K.sweep_tables``). The
        dense form (a rank per value of the keys' span, the usual case) is kept while the
        state's key array is the same object (``_set`` installs new arrays; nothing writes
        into them): a few KB, where each entry's rank would be 8 bytes an entry."""
        kept = self.__dict__.get("_keys_ranks")
        if kept is not None and kept[0] is self._keys:
            return kept[1:]
        lo, hi = K.key_span(self._keys)
        if hi - lo + 1 > 4 * self._keys.size + 65536:  # sparse keys: each entry's rank
            universe, inv = np.unique(self._keys, return_inverse=True)
            return universe, inv.astype(np.int64), 0, np.arange(universe.size, dtype=np.int64)
        universe, rank = K.key_ranks(self._keys, lo, hi)
        self._keys_ranks = (self._keys, universe, self._keys, int(lo), rank)
        return self._keys_ranks[1:]

    # -- queries -----------------------------------------------------------------------------
    def quantiles(self, qs, lo: int, hi: int, inner: tuple[int, int] | None = None,
                  table: RankTable | None = None) -> list:
        """A :class:`QuantileBracket` per q (None when the range has no event); ``table``:
        the range's :meth:`rank_table` when it was read already (``rank_tables``), else it
        is read by the compiled sweep (``table_batch``: the same table)."""
        qs = [float(q) for q in qs]
        if any(not 0.0 <= q <= 1.0 for q in qs):
            raise SketchError("each q must be in [0, 1]")
        if table is not None:
            return self._brackets(qs, table)
        batch, (row,) = self.table_batch([((lo, hi), inner)])
        if isinstance(row, SketchError):
            raise row
        return self.brackets_of(qs, batch)[row]

    def _brackets(self, qs: list[float], tb: RankTable) -> list:
        return self.brackets_of(qs, RankTables.of([tb]))[0]

    def brackets_of(self, qs, tables: RankTables) -> list:
        """The :class:`QuantileBracket` of each q (None when the range has no event) from
        each table of ``tables`` (:meth:`bracket_columns`' numbers)."""
        qs = [float(q) for q in qs]
        live, point, lower, upper = self.bracket_columns(qs, tables)
        out = [[None] * len(qs) for _ in range(len(tables))]
        errors, epsilons, to_clock = (c.tolist() for c in (tables.rank_error, tables.epsilon, tables.to_clock))
        for r, p, lw, up in zip(np.flatnonzero(live).tolist(), point[live].tolist(), lower[live].tolist(),
                                upper[live].tolist()):
            out[r] = [QuantileBracket(q, p[k], lw[k], up[k], errors[r], epsilons[r], self.value_accuracy,
                                      to_clock[r]) for k, q in enumerate(qs)]
        return out

    def bracket_columns(self, qs, tables: RankTables) -> tuple[np.ndarray, ...]:
        """The brackets of each q from each table of ``tables`` as columns: ``(live, point,
        lower, upper)``, ``live[r]`` whether table r's range holds an event (else it has no
        bracket), the others (tables, q) arrays of floats (rows not live: 0). One consistent
        world per side (module notes), the keys of every (table, q) found in one compiled
        call where the numbers allow, the floats taken for all at once."""
        qs = [float(q) for q in qs]
        if any(not 0.0 <= q <= 1.0 for q in qs):
            raise SketchError("each q must be in [0, 1]")
        R, Q = len(tables), len(qs)
        point, lower, upper = np.zeros((R, Q)), np.zeros((R, Q)), np.zeros((R, Q))
        live = (tables.n_upper > 0) & (np.diff(tables.starts) > 0)
        rows = np.flatnonzero(live)
        if rows.size == 0 or not qs:
            return live, point, lower, upper
        fqs, nums, dens = _exact_qs(tuple(qs))  # q as written: 0.1 is one tenth, not its binary neighbour
        starts = tables.starts
        n_lower, n_upper, n_est = tables.n_lower, tables.n_upper, tables.n_est
        # cl ≤ cu, both non-decreasing: every rank and basis is at most ``top``
        top = np.maximum(np.maximum(n_lower, n_upper), np.maximum(n_est, 0)) + tables.cu[np.maximum(starts[1:] - 1, 0)]
        if dens is not None and int(top[rows].max()) < 2**38:  # products below 2^62
            j_lo, j_hi, j_est = K.bracket_tables(tables.cu, tables.cl, tables.est, starts,
                                                 n_lower, n_upper, n_est, nums, dens)
        else:  # counts too large for int64 products: in Python integers, table by table
            j_lo, j_hi, j_est = (np.zeros((R, Q), np.int64) for _ in range(3))
            for r in rows.tolist():
                tb = tables.table(r)
                straddle = tb.cu - tb.cl  # X(≤k)
                for i, f in enumerate(fqs):
                    j_lo[r, i] = _first_passing(tb.cu, tb.n_lower + straddle, f)
                    j_hi[r, i] = _first_passing(tb.cl, tb.n_upper - straddle, f)
                    j_est[r, i] = (int(np.searchsorted(tb.est, max(-(-f.numerator * tb.n_est // f.denominator), 1)))
                                   if tb.n_est > 0 else 0)
        first, last = starts[rows, None], starts[rows + 1, None] - 1
        # One ulp outward: the edges are the kernels' own exp(), the reported floats exact.
        low = np.nextafter(tables.lo_edge[np.minimum(first + j_lo[rows], last)], -np.inf)
        high = np.nextafter(tables.hi_edge[np.minimum(first + j_hi[rows], last)], np.inf)
        at = np.minimum(first + j_est[rows], last)
        a, b = tables.lo_edge[at], tables.hi_edge[at]
        with np.errstate(divide="ignore", invalid="ignore"):
            harmonic = np.where(tables.keys[at] == 0, 0.0, 2 * a * b / (a + b))  # ±2γ^i/(1 + γ)
        mid = np.where((n_est[rows] > 0)[:, None], harmonic, (low + high) / 2)
        mid = np.where(low > mid, low, mid)  # min(max(point, lower), upper), as Python takes them
        point[rows], lower[rows], upper[rows] = np.where(high < mid, high, mid), low, high
        return live, point, lower, upper

    def distribution(self, lo: int, hi: int, inner: tuple[int, int] | None = None) -> list:
        """The CDF of the range by value bucket, each with its rank bracket: a
        :class:`DistributionRow` per key that holds an event of the range (by estimate)."""
        tb = self.rank_table(lo, hi, inner)
        counts = np.diff(np.concatenate(([0], tb.est)))
        keep = np.flatnonzero((counts != 0) | (np.diff(np.concatenate(([0], tb.cu))) != 0))
        low, high = tb.shares()
        return [DistributionRow(float(tb.lo_edge[j]), float(tb.hi_edge[j]), int(counts[j]),
                                int(tb.cl[j]), int(tb.cu[j]), float(low[j]), float(high[j])) for j in keep]

    def decayed_quantile(self, phi: float, decay, at: int, lo: int | None = None) -> QuantileBracket | None:
        """The φ-quantile of values weighted by ``decay(at − tick)`` (a non-increasing
        function of the age in ticks) over the ticks ``[lo, at]`` (default: all kept).

        A node inside the range holds events aged between ``at − r`` and ``at − l``, so
        each weighs in ``[f(at − l), f(at − r)]``; a node cut by an edge may hold events
        outside the range, so each weighs in ``[0, f(at − min(r, hi))]``. Hence, for every v,

            Σ_N g_N·h_N(≤v) ≤ W(≤v) ≤ Σ_N G_N·h_N(≤v)

        The decayed φ-quantile is the smallest v with W(≤v) ≥ max(φ·W, tiny), i.e.
        (1 − φ)·W(≤v) ≥ φ·W(>v); every event's weight lies in its own [g, G] whatever the
        others', so each side is read from its one worst world (as the window quantile's,
        module notes):

            upper: the first key k with (1 − φ)·L(≤k) ≥ φ·H(>k) and L(≤k) > 0
            lower: the first key k with (1 − φ)·H(≤k) ≥ φ·L(>k) and H(≤k) > 0

        with L = Σ g·h and H = Σ G·h. Upper holds in every world since W(≤k) ≥ L(≤k) and
        W(>k) ≤ H(>k); below lower's key every world has (1 − φ)·W(≤k) ≤ (1 − φ)·H(≤k)
        < φ·L(>k) ≤ φ·W(>k) (or no weight at all at or below k). Float sums are widened by
        1e-9 of the total and each test by 1e-12, against the side it could favour.
        """
        phi = float(phi)
        if not 0.0 <= phi <= 1.0:
            raise SketchError("phi must be in [0, 1]")
        at = operator.index(at)
        live = self._clock - self.window + 1
        hi = min(at, self._clock)
        lo = live if lo is None else max(operator.index(lo), live)
        if self.is_empty or hi < lo:
            return None
        meets, inside, cut, _ = self._classify(lo, hi)
        first, last = self._spans()
        first, last = first[meets], np.minimum(last[meets], hi)
        ages = np.unique(np.concatenate((at - first, at - last)))
        weights = np.asarray(decay(ages.astype(np.float64)), np.float64)
        if weights.shape != ages.shape or np.any(np.diff(weights) > 0) or np.any(weights < 0):
            raise SketchError("decay must be a non-increasing, non-negative function of age")
        f_young = weights[np.searchsorted(ages, at - last)]
        f_old = weights[np.searchsorted(ages, at - first)]
        g = np.where(inside[meets], f_old, 0.0)
        G = f_young
        idx, node = self._entries(meets)
        rank = np.cumsum(meets) - 1  # node index -> position among the meeting nodes
        universe, inv = _universe(self._keys[idx])
        c = self._cnts[idx].astype(np.float64)
        per_l = np.bincount(inv, weights=c * g[rank[node]], minlength=universe.size)
        per_h = np.bincount(inv, weights=c * G[rank[node]], minlength=universe.size)
        cl, cu = np.cumsum(per_l), np.cumsum(per_h)
        if cu.size == 0 or cu[-1] <= 0:
            return None
        slack = 1e-9 * float(cu[-1])
        # W above key k, summed from the top (not a difference of two large sums).
        l_above = np.concatenate((np.cumsum(per_l[::-1])[::-1][1:], [0.0]))
        h_above = np.concatenate((np.cumsum(per_h[::-1])[::-1][1:], [0.0]))
        keep = 1.0 - phi
        up_ok = (keep * np.maximum(cl - slack, 0.0) >= phi * (h_above + slack) * (1 + 1e-12)) & (cl > 0)
        lo_ok = (keep * (cu + slack) * (1 + 1e-12) >= phi * np.maximum(l_above - slack, 0.0)) & (cu > 0)
        last_key = universe.size - 1
        j_hi = int(np.argmax(up_ok)) if up_ok.any() else last_key
        j_lo = int(np.argmax(lo_ok)) if lo_ok.any() else last_key
        lo_edge, hi_edge = self.edges_of(universe)
        tiny = 1e-300
        lower = math.nextafter(float(lo_edge[j_lo]), -math.inf)
        upper = math.nextafter(float(hi_edge[j_hi]), math.inf)
        mid = (cl + cu) / 2
        j = min(int(np.searchsorted(mid, max(phi * mid[-1], tiny), side="left")), last_key)
        a, b = float(lo_edge[j]), float(hi_edge[j])
        point = 0.0 if universe[j] == 0 else 2 * a * b / (a + b)
        point = min(max(point, lower), upper)
        return QuantileBracket(phi, point, lower, upper, int(self._wt[cut].sum()), self.epsilon,
                               self.value_accuracy, True)

    # -- merging ---------------------------------------------------------------------------
    def _merge(self, other: "WindowedQuantiles") -> None:
        """Fold a compatible ``other`` in: the union of the nodes, then a collapse (module
        notes, **Merge**)."""
        if other.is_empty:
            return
        if self.count + other.count >= MAX_EVENTS:
            raise SketchError("too many events in one windowed quantile sketch")
        self._clock = max(self._clock, other._clock)
        live = self._clock - self.window + 1
        self._set(*K.union(*self._lists(), *other._lists(), live))
        self._collapse()

    def _params(self) -> tuple:
        return (self.epsilon, self.window, self.value_accuracy)

    @property
    def substreams(self) -> int:
        """Always 1: merging folds the merged sketches' nodes into one set of nodes (the
        splittable histogram keeps its merged sub-streams side by side instead)."""
        return 1

    @property
    def is_empty(self) -> bool:
        return self._clock == EMPTY_CLOCK

    # -- bytes -------------------------------------------------------------------------------
    _HEAD = struct.Struct("<dqdqI")

    def max_nbytes(self) -> None:
        """None: nodes follow the ticks (at worst one per dyadic range meeting the window,
        under 4·Wp, each with a count per value key: module notes, Space), a bound of
        ticks that epsilon does not set."""
        return None

    def _page_starts(self, left: np.ndarray, lg: np.ndarray) -> np.ndarray:
        """Where the node list's pages begin (``sketches._pages``): a node's identity is
        its range; nodes of one ``left`` (a range and those it encloses that share its
        start) stay in one page."""
        may_cut = np.ones(left.size, bool)
        may_cut[1:] = left[1:] != left[:-1]
        return page_starts(left.view(np.uint64) ^ (lg.astype(np.uint64) << np.uint64(58)), may_cut)

    def _payload_pieces(self) -> list[bytes]:
        """The header, then the nodes in pages: each page its node count, then its nodes'
        columns (first ticks, ranges, entry counts, value keys, counts) written from the
        page's own nodes only, so a page no batch touched keeps its bytes."""
        left, lg, off = self._left, self._lg, self._off
        starts = self._page_starts(left, lg)
        head = Writer().pack(self._HEAD, self.epsilon, self.window, self.value_accuracy,
                             self._clock, left.size).uint(starts.size).bytes()
        if not left.size:
            return [head]
        buf, ends = K.write_pages(left, lg, off, K.key_gaps(self._keys, off), self._cnts, starts)
        return [head] + page_bytes(buf, ends)

    def _payload(self) -> bytes:
        return b"".join(self._payload_pieces())

    @classmethod
    def _read(cls, r: Reader) -> "WindowedQuantiles":
        epsilon, window, accuracy, clock, n = r.unpack(cls._HEAD)
        try:
            sk = cls(epsilon, window, accuracy)
        except SketchError as e:
            raise CorruptSketchError(f"windowed quantile parameters out of range: {e}") from None
        pages = r.uint()
        if n == 0:
            if clock != EMPTY_CLOCK or pages:
                raise r.fail("has a clock or pages but no events")
            return sk
        if not -TICK_LIMIT < clock < TICK_LIMIT or not 1 <= pages <= n or 3 * n > r.left():
            raise r.fail("has a header out of range")
        cols = [_read_page(r, sk, n) for _ in range(pages)]
        left, lg, sizes, gaps, raw = (np.concatenate([c[i] for c in cols]) for i in range(5))
        starts = np.cumsum([0] + [c[0].size for c in cols[:-1]])
        if left.size != n or np.any(left[1:] < left[:-1]):
            raise r.fail("has pages out of order")
        lg = lg.astype(np.int64)
        off = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))))
        keys, ok = K.keys_from_gaps(gaps, off, sk._max_key)
        if not ok:
            raise r.fail("has a value key out of range")
        if raw.max() >= np.uint64(MAX_EVENTS):
            raise r.fail("has a count out of range")
        cnts = raw.astype(np.int64) + 1
        wt = np.add.reduceat(cnts, off[:-1])
        live = clock - window + 1
        right = left + (np.int64(1) << lg) - 1
        same = left[1:] == left[:-1]
        if (np.any(left & ((np.int64(1) << lg) - 1)) or np.any(same & (lg[1:] >= lg[:-1]))
                or left[-1] > clock or right.min() < live or int(wt.sum()) >= MAX_EVENTS):
            raise r.fail("has nodes out of order, misaligned or outside the window")
        if not np.array_equal(starts, sk._page_starts(left, lg)):
            raise r.fail("has pages cut where its nodes do not cut them")
        sk._clock = int(clock)
        if not K.invariant_holds(left, lg, wt, sk._exact_from(), sk._num_accepted, SHIFT):
            raise r.fail("breaks the collapse invariant (its rank error would exceed epsilon)")
        sk._set(left, lg, off.astype(np.int64), keys, cnts, wt)
        return sk


def _read_page(r: Reader, sk: WindowedQuantiles, n: int) -> tuple:
    """One page's columns (``WindowedQuantiles._payload_pieces``), bounds-checked."""
    m = r.uint(n)
    if m < 1 or 3 * m > r.left():
        raise r.fail("has a page out of range")
    left, lg, sizes = r.sorted_ints(m), r.uints(m), r.uints(m)
    if lg.max() > sk.log_w or sizes.min() < 1 or int(sizes.max()) > r.left():
        raise r.fail("has a node out of range")
    ne = int(sizes.sum())
    if 2 * ne > r.left():
        raise r.fail("truncated")
    return left, lg, sizes, r.uints(ne), r.uints(ne)
