"""Exponential histogram: deterministic ε-relative count and sum over a time-based sliding
window of an in-order stream, with order-preserving aggregation.

Datar, M., Gionis, A., Indyk, P. and Motwani, R. (2002). *Maintaining stream statistics over
sliding windows.* SIAM J. Computing. Used as in Papapetrou, Garofalakis and Deligiannakis
(2012), *Sketching distributed sliding-window data streams* (ECM-sketch), §3 (invariant 1),
§4.2.1 (time-based windows) and §5.1 (aggregation, Theorem 4, multi-level aggregation).

What it shares with :mod:`sketches_extra.deterministic_wave` (range queries from suffixes,
aggregation of many parts, the bracket of a relative estimate) is in
:mod:`sketches_extra._in_order`.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from sketches_extra._eh_kernels import (
    TICK_LIMIT,
    check_invariant,
    compress,
    ingest,
    reconstruct,
    scan_batch,
    suffix,
)
from sketches.base import HEADER_SIZE, CorruptSketchError, Estimate, Reader, SketchError
from sketches_extra._in_order import NO_CLOCK, UNIT_ROUNDOFF, InOrderWindowSum, bracket_estimate, check_in_order, coerce_ticks

__all__ = ["ExponentialHistogram", "suggest_epsilon", "max_buckets"]

METHOD = "exponential-histogram"
_MAX_DEPTH = 4096
_MAX_SUM = 1e300  # keeps every sum, and the bounds derived from it, finite
# payload: epsilon, window, clock, depth, flags, terms, bucket count
_FIXED = struct.Struct("<dqqIIQQ")


def suggest_epsilon(target: float, depth: int = 0) -> float:
    """Per-histogram ε whose composed bound after ``depth`` aggregation levels is ``target``.

    The bound after ``h`` levels is ``(1 + ε)^(h+1) − 1`` (see the class docstring), so
    ``ε = (1 + target)^(1/(h+1)) − 1``. It plays the role of §5.1's
    ``(√(1+2h+h²+4hε) − 1 − h)/(2h)``, for the exact composition used here.
    """
    if not 0.0 < target < 1.0 or depth < 0:
        raise SketchError("target must be in (0, 1) and depth >= 0")
    return (1.0 + target) ** (1.0 / (depth + 1)) - 1.0


def max_buckets(epsilon: float, max_window_weight: float, min_weight: float = 1.0) -> int:
    """Upper bound on the buckets kept: ``2·log_{1+2ε}((1+2ε)·U / w_min) + 2``.

    Two adjacent buckets could not be merged, so the weight newer than every second
    bucket grows by a factor ``1 + 2ε`` (see the class docstring); it starts at ``w_min``
    and stays below ``(1 + 2ε)·U``.
    """
    r = max_window_weight * (1.0 + 2.0 * epsilon) / min_weight
    return int(2 * math.ceil(math.log(max(r, 1.0)) / math.log1p(2.0 * epsilon)) + 2)


class ExponentialHistogram(InOrderWindowSum):
    """ε-relative sum (or count) of the events of a time window ``[lo, clock]``.

    Parameters
    ----------
    epsilon : float
        Relative error target ε in (0, 1).
    window : int
        Longest window in ticks: queries may start at any ``lo >= clock - window``, so the
        sketch answers for ``window + 1`` ticks, ``[clock − window, clock]``.

    Notes
    -----
    **State.** Buckets ``(s_j, e_j, C_j)`` ordered by time, bucket 1 the newest: ``C_j``
    is the weight of the events with ticks in ``[s_j, e_j]``; bucket tick ranges do not
    overlap (at most one shared boundary tick after a time-disjoint merge). Invariant 1
    of ECM §3, in a form that works for real weights: a bucket spanning more than one tick
    has ``C_j <= 2ε·Σ_{i<j} C_i``; a single-tick bucket is exact and has no constraint
    (a burst on one tick is always one exact bucket). Events arrive in order, each one
    becomes (or joins) the newest single-tick bucket, and a greedy pass merges adjacent
    buckets whenever the merged bucket still obeys the invariant. Merging never changes
    the weight newer than any other bucket, and new events only grow it, so the invariant
    holds at all times. Buckets ending before ``clock − window`` are dropped.

    **Query bound** (Datar et al. §3; ECM §3). For ``lo >= clock − window`` let ``a`` be
    the weight of the buckets with ``s_j >= lo`` and ``s`` that of the bucket with
    ``s_j < lo <= e_j`` (at most one). Then ``a <= x <= a + s`` for the true weight
    ``x`` of ``[lo, clock]``, and the estimate ``x̂ = a + s/2`` satisfies
    ``|x̂ − x| <= s/2 <= ε·a <= ε·x`` by invariant 1 (a straddling bucket spans two ticks
    or more). The reported ``[lower, upper]`` is ``[a, a + s]`` itself; it is tighter
    than the bracket ``[x̂/(1+ε), x̂/(1−ε)]`` that ``|x̂ − x| <= ε·x`` alone gives
    (``x >= x̂/(1+ε)`` and ``x <= x̂/(1−ε)``), because ``s <= 2εa``.

    **Aggregation** (ECM §5.1, Theorem 4). ``merge`` rebuilds a histogram from each part's
    buckets read as a log: half of ``C_j`` at ``s_j``, half at ``e_j`` (all of it when
    ``s_j = e_j``). For a part whose buckets exactly summarise a stream ``S*`` with
    ``|S*(lo) − S(lo)| <= η·S(lo)`` for every admissible ``lo``, the rebuilt stream
    ``R`` differs from ``S*`` only by the straddling bucket: ``|R(lo) − S*(lo)| <= C_j/2
    <= ε·S*(lo)`` (Lemma 1), hence ``|R(lo) − S(lo)| <= (η + ε + ηε)·S(lo)``; the sum
    over parts keeps the largest factor (Lemma 2). A fresh histogram has ``η = 0``, one
    aggregation level gives ``η = ε`` and the query bound ``ε + ε' + εε'`` with
    ``ε' = ε``; after ``h`` levels ``1 + η = (1 + ε)^h`` and queries satisfy::

        |x̂ − x| <= ((1 + ε)^(h+1) − 1)·x,      x ∈ [a/(1+η), (a + s)/(1−η)]

    (upper = ∞ once η >= 1). This is the exact composition of §5.1's multi-level
    argument; its ``hε(1+ε) + ε`` drops the higher-order terms for ``h >= 2``. The depth
    ``h`` is kept in the state and reported through ``epsilon``. Merging many parts with
    :meth:`merge_many` costs one level; folding parts one by one costs one level each.
    When the parts' retained events are disjoint in time (e.g. consecutive batches of one
    stream) buckets are concatenated instead, which adds no error: older buckets only
    gain newer weight, so invariant 1 keeps holding.

    **Real weights.** Weights are float64 (non-negative, finite; the retained weight
    must stay below 1e300). When every weight is an
    integer, no aggregation happened and the retained weight is below 2^53, all sums are
    exact. Otherwise every stored or computed sum is a float sum of at most ``K``
    non-negative terms (``K`` = events and rebuilt points behind the state, plus the
    buckets), so it is within a factor ``1 ± γ_K`` of the exact sum,
    ``γ_K = K·u/(1 − K·u)``, ``u = 2^-53`` (Higham, *Accuracy and Stability of Numerical
    Algorithms*, §4.2); the invariant test is made with ``2ε(1 − 2^-50)`` so it holds in
    exact arithmetic. Queries then use ``ε_g = ε·((1+γ)/(1−γ))²`` in place of ``ε``,
    widen ``[lower, upper]`` by the factors ``1 ± γ`` and round them outward.

    **Ticks.** Events older than the newest tick seen (``clock``) are refused with
    :class:`SketchError`; a batch is sorted first, so only its ticks below the clock
    before the batch matter. ``query(lo, hi)`` with ``hi < clock`` is answered as the
    difference of the suffixes ``[lo, clock]`` and ``[hi+1, clock]``: its bracket is the
    difference of their brackets and its error is at most ``ε_lo + ε_hi`` times the
    weight of ``[lo, clock]``, reported with ``kind="additive"``.

    Examples
    --------
    >>> import numpy as np
    >>> eh = ExponentialHistogram(epsilon=0.05, window=1000)
    >>> eh.update(np.arange(2000), np.ones(2000))
    >>> e = eh.query(eh.clock_tick - 500, eh.clock_tick)
    >>> e.lower <= 501 <= e.upper, e.epsilon, e.method
    (True, 0.05, 'exponential-histogram')
    >>> other = ExponentialHistogram(0.05, 1000)
    >>> other.update(np.arange(1500, 2000))
    >>> m = eh.merge(other).query(1500, 1999)
    >>> m.lower <= 1000 <= m.upper, round(m.epsilon, 4)
    (True, 0.1025)
    >>> ExponentialHistogram.from_bytes(eh.to_bytes()).query(1500, 1999) == m
    True
    """

    FAMILY, METHOD = 2, METHOD  # header family byte (sketches.base.Family leaves it free)
    WHAT, NOUN = "exponential histogram", "exponential histograms"
    PARAMS = "epsilon or window"
    SHOWN = ("epsilon", "window", "clock_tick", "buckets", "depth")

    def __init__(self, epsilon: float, window: int):
        epsilon = float(epsilon)
        if not 0.0 < epsilon < 1.0:
            raise SketchError(f"epsilon must be in (0, 1), got {epsilon}")
        self._eps = epsilon
        self._window = self._check_window(window)
        self._two_eps = 2.0 * epsilon * (1.0 - 2.0**-50)
        self._reset(64)

    def _reset(self, cap: int) -> None:
        self._st = np.empty(cap, np.int64)
        self._en = np.empty(cap, np.int64)
        self._w = np.empty(cap, np.float64)
        self._m = 0
        self._clock = NO_CLOCK
        self._depth = 0
        self._integral = True
        self._terms = 0

    # ------------------------------------------------------------------ properties
    @property
    def clock_tick(self) -> int:
        """Newest tick seen (``-2^63`` before the first event)."""
        return int(self._clock)

    @property
    def depth(self) -> int:
        """Aggregation levels behind the state (0 for a histogram fed events only)."""
        return self._depth

    @property
    def epsilon_bound(self) -> float:
        """Composed relative bound ``(1 + ε)^(depth+1) − 1`` of full-precision queries."""
        if self._depth == 0:
            return self._eps
        return (1.0 + self._eps) ** (self._depth + 1) - 1.0

    @property
    def buckets(self) -> int:
        return self._m

    @property
    def is_empty(self) -> bool:
        """True until the first event (of any weight) has been seen."""
        return self._clock == NO_CLOCK

    @property
    def nbytes(self) -> int:
        return HEADER_SIZE + _FIXED.size + 24 * self._m


    def copy(self) -> "ExponentialHistogram":
        new = ExponentialHistogram(self._eps, self._window)
        new._load(self._st[: self._m], self._en[: self._m], self._w[: self._m])
        new._clock, new._depth = self._clock, self._depth
        new._integral, new._terms = self._integral, self._terms
        return new

    def _load(self, st, en, w) -> None:
        cap = max(64, 2 * len(st))
        self._st = np.empty(cap, np.int64)
        self._en = np.empty(cap, np.int64)
        self._w = np.empty(cap, np.float64)
        m = len(st)
        self._st[:m], self._en[:m], self._w[:m] = st, en, w
        self._m = m

    def _ingest(self, t, w) -> None:
        i, limit = 0, max(64, 2 * self._m)
        while True:
            while limit > len(self._st):
                self._grow()
            i, self._m, limit = ingest(self._st, self._en, self._w, self._m, t, w, i,
                                       self._two_eps, self._window, limit)
            if i == t.size:
                return

    def _grow(self) -> None:
        m, cap = self._m, 2 * len(self._st)
        for name, dt in (("_st", np.int64), ("_en", np.int64), ("_w", np.float64)):
            arr = np.empty(cap, dt)
            arr[:m] = getattr(self, name)[:m]
            setattr(self, name, arr)

    # ---------------------------------------------------------------------- update
    def update(self, ticks, weights=None) -> None:
        """Add a batch of events (``weights`` default to 1: counting).

        The batch is sorted by tick first; a tick older than :attr:`clock` raises
        :class:`SketchError` and leaves the sketch unchanged.
        """
        t, w = _coerce_batch(ticks, weights)
        if t.size == 0:
            return
        status, srt, integral, positives, wmax, total = scan_batch(t, w)
        _raise_scan(status)
        if not np.sum(self._w[: self._m]) + total < _MAX_SUM:
            raise SketchError("weights too large: window sums must stay below 1e300")
        if not srt:
            order = np.argsort(t, kind="stable")
            t, w = t[order], w[order]
        check_in_order(int(t[0]), self._clock)
        self._ingest(t, w)
        self._clock = int(t[-1])
        self._m = compress(self._st, self._en, self._w, self._m, self._two_eps,
                           self._clock - self._window)
        self._terms += int(positives)
        self._integral = self._integral and bool(integral) and wmax < 2.0**53

    # ----------------------------------------------------------------------- query
    def _suffix(self, lo: int) -> Estimate:
        m = self._m
        a, s = suffix(self._st, self._en, self._w, m, lo)
        g = 0.0
        if not (self._integral and self._depth == 0 and np.sum(self._w[:m]) < 2.0**53):
            g = _gamma(self._terms + m + 8)
            if g >= 0.25:  # beyond ~2^51 terms the rounding bound is void
                return Estimate(0.5 * (a + a + s), 0.0, math.inf, "relative", math.inf, 1.0, METHOD)
        # Depth-h lineage: 1 + η = (1 + ε_g)^h, rounded up (the class docstring).
        eps_g = self._eps * ((1.0 + g) / (1.0 - g)) ** 2 if g else self._eps
        eta = ((1.0 + eps_g) ** self._depth - 1.0) * (1.0 + 8 * UNIT_ROUNDOFF) if self._depth else 0.0
        return bracket_estimate(a, a + s, self._eps, eta, g, METHOD)

    # ----------------------------------------------------------------------- merge
    def _fold(self, parts: list) -> None:
        """Aggregate the non-empty ``parts``: concatenated when their buckets are disjoint in
        time (exact), else rebuilt from their reconstructed logs (one level deeper)."""
        clock = max(p._clock for p in parts)
        horizon = clock - self._window
        live = []
        for p in parts:
            keep = p._en[: p._m] >= horizon
            if keep.any():
                live.append((p, p._st[: p._m][keep], p._en[: p._m][keep], p._w[: p._m][keep]))
        if not sum(float(np.sum(x[3])) for x in live) < _MAX_SUM:
            raise SketchError("weights too large: window sums must stay below 1e300")
        live.sort(key=lambda x: (int(x[1][0]), int(x[2][-1])))
        disjoint = all(live[i][2][-1] <= live[i + 1][1][0] for i in range(len(live) - 1))
        if disjoint:
            self._concatenate(live)
        else:
            self._rebuild(live, clock)
        self._clock = clock
        self._m = compress(self._st, self._en, self._w, self._m, self._two_eps, horizon)


    def _params(self) -> tuple:
        return (self._eps, self._window)

    def _concatenate(self, live) -> None:
        # Exact: each part's buckets keep their newer weight or gain some (proof above).
        depth = max((p._depth for p, *_ in live), default=self._depth)
        integral = all(p._integral for p, *_ in live)
        terms = sum(p._terms for p, *_ in live)
        if live:
            self._load(*(np.concatenate([x[i] for x in live]) for i in (1, 2, 3)))
        else:
            self._m = 0
        self._depth, self._integral, self._terms = depth, integral, terms

    def _rebuild(self, live, clock) -> None:
        horizon = clock - self._window
        points = [reconstruct(st, en, w, len(st), horizon) for _, st, en, w in live]
        pt = np.concatenate([x[0] for x in points])
        pw = np.concatenate([x[1] for x in points])
        order = np.argsort(pt, kind="stable")
        pt, pw = pt[order], pw[order]
        depth = max(p._depth for p, *_ in live) + 1
        if depth > _MAX_DEPTH:
            raise SketchError(f"more than {_MAX_DEPTH} aggregation levels")
        terms = sum(p._terms for p, *_ in live) + int(pt.size)
        self._st = np.empty(max(64, 2 * pt.size), np.int64)
        self._en = np.empty_like(self._st)
        self._w = np.empty(len(self._st), np.float64)
        self._m = 0
        self._ingest(pt, pw)
        self._depth, self._integral, self._terms = depth, False, terms

    # --------------------------------------------------------------- serialization
    # Payload, little endian (after the 16-byte header of sketches.base):
    #
    #   0        8        16       24      28      32       40      48
    #   +--------+--------+--------+-------+-------+--------+-------+--------------+
    #   | eps    | window | clock  | depth | flags | terms  | m     | buckets      |
    #   | f64    | i64    | i64    | u32   | u32   | u64    | u64   | see below    |
    #   +--------+--------+--------+-------+-------+--------+-------+--------------+
    #
    #   buckets: i64[m] first tick, then i64[m] last tick, then f64[m] weight, oldest
    #   first. clock = -2^63 marks an empty sketch; flags bit 0: all weights integral.
    def _payload(self) -> bytes:
        m = self._m
        return b"".join([
            _FIXED.pack(self._eps, self._window, self._clock, self._depth,
                        int(self._integral), self._terms, m),
            self._st[:m].astype("<i8").tobytes(),
            self._en[:m].astype("<i8").tobytes(),
            self._w[:m].astype("<f8").tobytes(),
        ])

    @classmethod
    def _read(cls, rd: Reader) -> "ExponentialHistogram":
        eps, window, clock, depth, flags, terms, m = rd.unpack(_FIXED)
        if rd.left() != 24 * m:
            raise CorruptSketchError("exponential histogram bucket arrays have the wrong length")
        if not (0.0 < eps < 1.0) or not 0 <= window < TICK_LIMIT:
            raise CorruptSketchError("exponential histogram parameters out of range")
        if flags > 1 or depth > _MAX_DEPTH or terms >= 1 << 62 or terms < m:
            raise CorruptSketchError("exponential histogram header fields out of range")
        if clock == NO_CLOCK:
            if m or depth or terms:
                raise CorruptSketchError("empty exponential histogram with content")
        elif not -TICK_LIMIT < clock < TICK_LIMIT:
            raise CorruptSketchError("exponential histogram clock out of range")
        st, en = (rd.array("<i8", m).astype(np.int64) for _ in range(2))
        w = rd.array("<f8", m).astype(np.float64)
        sk = cls(eps, window)
        if m:
            if en[-1] > clock or en[0] < clock - window or st[0] <= -TICK_LIMIT:
                raise CorruptSketchError("exponential histogram buckets outside the window")
            if not check_invariant(st, en, w, m, sk._two_eps):
                raise CorruptSketchError("exponential histogram buckets break invariant 1")
            if flags and not np.all(w == np.floor(w)):
                raise CorruptSketchError("exponential histogram flagged integral has fractions")
        sk._load(st, en, w)
        sk._clock, sk._depth, sk._integral, sk._terms = clock, depth, bool(flags), terms
        return sk


# ---------------------------------------------------------------- batch helpers
def _coerce_batch(ticks, weights):
    t = coerce_ticks(ticks)
    if weights is None:
        return t, np.ones(t.size, np.float64)
    w = np.asarray(weights)
    if w.shape != t.shape:
        raise SketchError("weights must have the shape of ticks")
    if w.size and w.dtype.kind not in "iuf":
        raise SketchError("weights must be numbers")
    return t, np.ascontiguousarray(w, dtype=np.float64)


def _raise_scan(status: int) -> None:
    if status == 1:
        raise SketchError("ticks must lie in (-2^62, 2^62)")
    if status == 2:
        raise SketchError("weights must be finite and non-negative")


def _gamma(k: int) -> float:
    ku = k * UNIT_ROUNDOFF
    return 1.0 if ku >= 0.5 else ku / (1.0 - ku)
