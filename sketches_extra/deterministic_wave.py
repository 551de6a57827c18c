"""Deterministic wave: ε-relative count and sum of bounded integers over a time-based
sliding window of an in-order stream, O(1) worst-case work per item.

Gibbons, P. B. and Tirthapura, S. (2004). *Distributed streams algorithms for sliding
windows.* Theory of Computing Systems 37. §3.1 (basic wave, Lemma 1), §3.2 (improved
wave, Fig. 4, Theorem 1, duplicated positions and Corollary 1), §3.3 (sums, Fig. 5,
Theorem 3). Aggregation as in Papapetrou, Garofalakis and Deligiannakis (2012), §5.1
"Deterministic Waves".
"""

from __future__ import annotations

import math
import struct

import numpy as np

from sketches_extra import _wave_kernels as K
from sketches_extra._eh_kernels import TICK_LIMIT
from sketches.base import HEADER_SIZE, CorruptSketchError, Estimate, Reader, SketchError
from sketches_extra._in_order import NO_CLOCK, UNIT_ROUNDOFF, InOrderWindowSum, as_int, bracket_estimate, check_in_order, coerce_ticks

__all__ = ["DeterministicWave", "wave_levels", "suggest_max_window_weight"]

METHOD = "deterministic-wave"
MAX_WINDOW_WEIGHT = 1 << 58
MIN_EPSILON = 1e-4  # queues hold k + 1 = 1/ε + 1 items per level, allocated up front
_REBASE_AT = 1 << 61  # partial sums are int64; shift them down before they get near 2^63
# payload: epsilon, window, max window weight, clock, total, floor tick, floor sum, eta,
# flags, item count
_FIXED = struct.Struct("<dqqqqqqdIQ")


def _k(epsilon: float) -> int:
    """``k = ⌈1/ε⌉`` (so ``1/ε_w = k`` is an integer, as §3.1 assumes) with ``1/k <= ε``."""
    k = int(math.ceil(1.0 / epsilon))
    return k + 1 if 1.0 / k > epsilon else k


def wave_levels(epsilon: float, max_window_weight: int) -> int:
    """``ℓ = ⌈log2(2·ε_w·U)⌉`` levels (Corollary 1 with ``U`` the window weight bound), >= 1."""
    k, u = _k(epsilon), int(max_window_weight)
    levels = 1
    while (k << levels) < 2 * u:
        levels += 1
    return levels


def suggest_max_window_weight(max_rate: float, window: int, max_weight: int = 1) -> int:
    """``U = ⌈max_rate·(window + 1)⌉·max_weight``: events per tick times ticks times ``R``."""
    return int(math.ceil(max_rate * (window + 1))) * int(max_weight)


class DeterministicWave(InOrderWindowSum):
    """ε-relative count or sum of non-negative integers over the window ``[lo, clock]``.

    Parameters
    ----------
    epsilon : float
        Relative error target in [1e-4, 1); the wave uses ``ε_w = 1/⌈1/ε⌉ <= ε``.
    window : int
        Longest window in ticks; queries may start at any ``lo >= clock − window``.
    max_window_weight : int
        ``U``, an upper bound on the total weight of any ``window + 1`` consecutive ticks
        (``N·R`` of §3.3; ``U`` of Corollary 1 for counts). It fixes the number of levels,
        ``⌈log2(2·ε_w·U)⌉``; space grows only with its logarithm.

    Notes
    -----
    **State** (§3.2, Fig. 5). A running total and, for each stored item, its tick ``p``,
    value ``v`` and partial sum ``z`` (the total through it). An item enters at the
    largest level ``j`` such that a multiple of ``2^j`` lies in ``(z − v, z]`` (level
    ``ℓ−1`` for all higher ones); levels ``0..ℓ−2`` keep their newest ``⌈(k+1)/2⌉`` items
    and level ``ℓ−1`` its newest ``k+1`` (``k = 1/ε_w``), in fixed circular queues, so an
    item costs O(1) worst case: one bit search (six steps) and one queue write. Ticks may
    repeat (Corollary 1); the events of one tick in one batch enter as one item (their
    sum), which the sum wave of §3.3 allows. The newest item before the window that
    leaves a queue is remembered (the "largest 1-rank discarded"); items are expired
    lazily, by tick, when read. Outside the per-item path: a batch that is not sorted
    is sorted first, and once per ~2^61 of total weight the partial sums are rebased
    (O(items)).

    **Query bound** (Lemma 1, Theorem 1, Corollary 1, Theorem 3). For ``lo >= clock −
    window`` let ``(p1, z1)`` be the newest known item before ``lo`` and ``(p2, v2, z2)``
    the oldest stored item at or after ``lo``. The items in between lie in ``[p1, p2]``,
    so the window weight ``x`` satisfies ``total − z2 + v2 <= x <= total − z1``; these
    are ``lower`` and ``upper`` (exact integers). The estimate is their midpoint and
    ``|x̂ − x| <= (z2 − v2 − z1)/2 < ε_w·(total − z2 + v2) <= ε_w·x`` while the window
    weight stays within ``U``: the gap is at most ``2^j`` for the level ``j`` holding
    ``p1`` and at least ``2^(j−1)/ε_w`` weight follows ``p2`` (proof of Lemma 1, lifted
    to sums by Theorem 3). The bracket holds whatever the data; if ``U`` is exceeded
    the reported ``epsilon`` becomes the bracket's own relative half-width, so it is
    never understated (see :attr:`overflowed`). The bracket is tighter than the
    ``[x̂/(1+ε), x̂/(1−ε)]`` that ``|x̂ − x| <= ε·x`` alone gives.

    **Aggregation** (ECM §5.1). The stored items are read as a log: between two
    consecutive known items the missing weight ``G = z_k − v_k − z_{k−1}`` lies in
    ``[p_{k−1}, p_k]``; ``⌊G/2⌋`` is put at ``p_{k−1}`` and ``⌈G/2⌉ + v_k`` at ``p_k``, and
    the points of all parts are inserted, in tick order, into a fresh wave. A query
    start inside one gap only sees that gap misplaced, by at most ``⌈G/2⌉ <=
    ρ·(total − z_k + v_k)`` where ``ρ <= ε_w`` is the largest such ratio of the part
    (computed, so an overflowed part still composes honestly); this is Lemma 1 of ECM
    §5.1 with invariant 1 holding for waves. As for the exponential histogram, if a
    part summarises a stream within ``η`` of the truth, the rebuilt stream is within
    ``η + ρ + ηρ``, the union keeps the largest of these, and a query on the result has
    ``|x̂ − x| <= ((1 + ε_w)(1 + η) − 1)·x`` and ``x ∈ [lower/(1+η), upper/(1−η)]``: one
    level gives ``ε + ε' + εε'``. ``η`` is kept in the state. Unlike the exponential
    histogram there is no lossless path for time-disjoint parts (shifting partial sums
    would move items between levels); only when at most one part has events in the
    window is the merge exact.

    **Weights.** Integers in ``[0, U]`` (no weights: counting); others raise
    :class:`SketchError`. All arithmetic is exact int64; partial sums are shifted down by
    a multiple of ``2^ℓ`` (which keeps every item's level) before they near 2^63.

    Examples
    --------
    >>> import numpy as np
    >>> wave = DeterministicWave(epsilon=0.1, window=999, max_window_weight=10_000)
    >>> wave.update(np.repeat(np.arange(3000), 3))        # three events per tick
    >>> e = wave.query(wave.clock_tick - 99, wave.clock_tick)
    >>> e.lower <= 300 <= e.upper, e.epsilon, e.method
    (True, 0.1, 'deterministic-wave')
    >>> other = DeterministicWave(0.1, 999, max_window_weight=10_000)
    >>> other.update(np.arange(2000, 3000), np.full(1000, 7))
    >>> m = wave.merge(other).query(2500, 2999)
    >>> m.lower <= 1500 + 3500 <= m.upper, round(m.epsilon, 4)
    (True, 0.21)
    """

    FAMILY, METHOD = 3, METHOD  # header family byte (sketches.base.Family leaves it free)
    WHAT, NOUN = "deterministic wave", "deterministic waves"
    PARAMS = "epsilon, window or max_window_weight"
    SHOWN = ("epsilon", "window", "max_window_weight", "clock_tick", "items", "levels", "eta")

    def __init__(self, epsilon: float, window: int, max_window_weight: int = 1 << 40):
        epsilon = float(epsilon)
        if not MIN_EPSILON <= epsilon < 1.0:
            raise SketchError(f"epsilon must be in [1e-4, 1), got {epsilon}")
        window = self._check_window(window)
        u = as_int(max_window_weight, "max_window_weight")
        if not 1 <= u <= MAX_WINDOW_WEIGHT:
            raise SketchError(f"max_window_weight must be in [1, 2^58], got {u}")
        self._eps, self._window, self._u = epsilon, window, u
        self._k = _k(epsilon)
        self._levels = wave_levels(epsilon, u)
        self._caps = np.full(self._levels, (self._k + 2) // 2, np.int64)
        self._caps[-1] = self._k + 1
        self._eta = 0.0
        self._clear()

    def _clear(self) -> None:
        shape = (self._levels, self._k + 1)
        self._qp = np.zeros(shape, np.int64)
        self._qv = np.zeros(shape, np.int64)
        self._qz = np.zeros(shape, np.int64)
        self._qn = np.zeros(self._levels, np.int64)
        self._qh = np.zeros(self._levels, np.int64)
        self._sc = np.array([NO_CLOCK, 0, 0, 0, 0, 0], np.int64)

    # ------------------------------------------------------------------ properties
    @property
    def epsilon_wave(self) -> float:
        """``ε_w = 1/k``, the ε the levels are built for."""
        return 1.0 / self._k

    @property
    def epsilon_bound(self) -> float:
        """Composed relative bound ``(1 + ε_w)(1 + η) − 1`` of queries (no overflow)."""
        if self._eta == 0.0:
            return 1.0 / self._k
        return (1.0 + 1.0 / self._k) * (1.0 + self._eta) - 1.0

    @property
    def max_window_weight(self) -> int:
        return self._u

    @property
    def levels(self) -> int:
        return self._levels

    @property
    def clock_tick(self) -> int:
        """Newest tick seen (``-2^63`` before the first event)."""
        return int(self._sc[0])

    @property
    def eta(self) -> float:
        """Relative distance of the summarised stream from the true one (0 unless merged)."""
        return self._eta

    @property
    def overflowed(self) -> bool:
        """True once the window weight exceeded ``max_window_weight``; brackets still hold."""
        return bool(self._sc[5])

    @property
    def is_empty(self) -> bool:
        """True until the first event (of any weight) has been seen."""
        return self._sc[4] == 0

    @property
    def items(self) -> int:
        """Items stored inside the window (what serialization keeps)."""
        return int(self._live()[0].size)

    @property
    def nbytes(self) -> int:
        return HEADER_SIZE + _FIXED.size + 25 * self.items


    def copy(self) -> "DeterministicWave":
        new = DeterministicWave(self._eps, self._window, self._u)
        for name in ("_qp", "_qv", "_qz", "_qn", "_qh", "_sc"):
            setattr(new, name, getattr(self, name).copy())
        new._eta = self._eta
        return new

    def _live(self, clock=None):
        clock = int(self._sc[0]) if clock is None else clock
        horizon = 0 if clock == NO_CLOCK else clock - self._window  # empty: nothing stored
        return K.live(self._qp, self._qv, self._qz, self._qn, self._sc, horizon)

    # ---------------------------------------------------------------------- update
    def update(self, ticks, weights=None) -> None:
        """Add a batch of events (integer weights in ``[0, U]``; none: counting).

        The batch is sorted by tick first; a tick older than :attr:`clock` raises
        :class:`SketchError` and leaves the sketch unchanged.
        """
        t, w = self._coerce(ticks, weights)
        if t.size == 0:
            return
        if t.size > 1 and np.any(t[1:] < t[:-1]):
            order = np.argsort(t, kind="stable")
            t, w = t[order], w[order]
        check_in_order(int(t[0]), self.clock_tick)
        self._update_sorted(t, w)

    def _update_sorted(self, t, w) -> None:
        # Chunks of total weight below 2^60 keep every partial sum under 2^62.
        csum = np.cumsum(w, dtype=np.float64)
        if csum[-1] + self._sc[1] < _REBASE_AT:
            self._ingest(t, w)
            return
        start = 0
        while start < t.size:
            base = csum[start - 1] if start else 0.0
            stop = max(int(np.searchsorted(csum, base + 2.0**60, side="right")), start + 1)
            if self._sc[1] + (csum[stop - 1] - base) >= _REBASE_AT:
                self._rebase()
                if self._sc[1] >= 1 << 60:
                    raise SketchError(
                        "window weight far above max_window_weight: partial sums overflow"
                    )
            self._ingest(t[start:stop], w[start:stop])
            start = stop

    def _ingest(self, t, w) -> None:
        K.ingest(self._qp, self._qv, self._qz, self._qn, self._qh, self._caps, self._sc,
                 t, w, self._window)

    def _coerce(self, ticks, weights):
        t = coerce_ticks(ticks)
        if t.size and (t.min() <= -TICK_LIMIT or t.max() >= TICK_LIMIT):
            raise SketchError("ticks must lie in (-2^62, 2^62)")
        if weights is None:
            return t, np.ones(t.size, np.int64)
        w = np.asarray(weights)
        if w.shape != t.shape:
            raise SketchError("weights must have the shape of ticks")
        if w.size == 0:
            return t, np.zeros(0, np.int64)
        if w.dtype.kind == "f":
            if not np.all(np.isfinite(w)) or np.any(w != np.floor(w)):
                raise SketchError("deterministic wave weights must be integers (§3.3)")
        elif w.dtype.kind not in "iu":
            raise SketchError("deterministic wave weights must be integers (§3.3)")
        if w.min() < 0 or w.max() > self._u:
            raise SketchError(f"weights must lie in [0, max_window_weight={self._u}]")
        return t, np.ascontiguousarray(w, dtype=np.int64)

    def _rebase(self) -> None:
        """Shift partial sums down by a multiple of 2^levels (levels are unchanged)."""
        lv, p, v, z, fp, fz = self._live()
        base = (int(fz) >> self._levels) << self._levels
        sc = self._sc.copy()
        self._clear()
        sc[1] -= base
        sc[2], sc[3] = fp, fz - base
        self._sc = sc
        K.load(self._qp, self._qv, self._qz, self._qn, self._qh, self._caps, lv, p, v, z - base)

    # ----------------------------------------------------------------------- query
    def _suffix(self, lo: int) -> Estimate:
        a, b = K.bracket(self._qp, self._qv, self._qz, self._qn, self._sc, lo)
        return bracket_estimate(float(a), float(b), 1.0 / self._k, self._eta, 0.0, METHOD)

    # ----------------------------------------------------------------------- merge
    def _fold(self, parts: list) -> None:
        """Aggregate the non-empty ``parts``: the one part with events in the window as it
        is, else a new wave fed the logs reconstructed from every part (ECM §5.1)."""
        clock = max(p.clock for p in parts)
        logs = [(p, *p._reconstruct(clock)) for p in parts]
        logs = [x for x in logs if x[1].size]
        overflowed = any(p.overflowed for p in parts)
        if len(logs) <= 1:
            # At most one part has events in the window: it is the aggregate, exactly.
            if logs and logs[0][0] is not self:
                self._adopt(logs[0][0])
            elif not logs:
                self._clear()
                self._eta = 0.0
                self._sc[2] = clock - self._window - 1
                self._sc[4] = 1
        else:
            eta = 0.0
            for p, _, _, rho in logs:
                r = max(1.0 / self._k, rho)
                eta = max(eta, (p._eta + r + p._eta * r) * (1.0 + 4 * UNIT_ROUNDOFF))
            t = np.concatenate([x[1] for x in logs])
            w = np.concatenate([x[2] for x in logs])
            order = np.argsort(t, kind="stable")
            self._clear()
            self._eta = eta
            self._update_sorted(t[order], w[order])
        self._sc[0] = clock
        self._sc[5] |= overflowed

    def _adopt(self, other: "DeterministicWave") -> None:
        for name in ("_qp", "_qv", "_qz", "_qn", "_qh", "_sc"):
            setattr(self, name, getattr(other, name).copy())
        self._eta = other._eta

    def _reconstruct(self, clock: int):
        """Points (tick, weight) of the log read off the wave, and the ratio ρ they cost."""
        lv, p, v, z, fp, fz = self._live(clock)
        if p.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0
        prev_p = np.concatenate([[fp], p[:-1]])
        prev_z = np.concatenate([[fz], z[:-1]])
        gap = z - v - prev_z
        half = gap // 2
        after = self._sc[1] - z + v  # weight known at or after each item
        rho = float(np.max((gap - half) / after)) if gap.any() else 0.0
        rho = float(np.nextafter(rho, math.inf))
        horizon = clock - self._window
        keep = (half > 0) & (prev_p >= horizon)
        pt = np.concatenate([prev_p[keep], p])
        pw = np.concatenate([half[keep], gap - half + v])
        return pt, pw, rho


    def _params(self) -> tuple:
        return (self._eps, self._window, self._u)

    # --------------------------------------------------------------- serialization
    # Payload, little endian (after the 16-byte header of sketches.base):
    #
    #   0      8       16    24      32      40       48       56     64      68
    #   +------+-------+-----+-------+-------+--------+--------+------+-------+-------+
    #   | eps  | window| U   | clock | total | floor  | floor  | eta  | flags | n     |
    #   | f64  | i64   | i64 | i64   | i64   | tick   | sum    | f64  | u32   | u64   |
    #   +------+-------+-----+-------+-------+--------+--------+------+-------+-------+
    #   76: items inside the window sorted by partial sum: i64[n] tick, i64[n] value,
    #       i64[n] partial sum, u8[n] level.
    #
    #   flags bit 0: an event was seen; bit 1: overflowed. Expired items are folded into
    #   the floor (the newest item before the window), which is all a query reads of them.
    def _payload(self) -> bytes:
        lv, p, v, z, fp, fz = self._live()
        sc = self._sc
        flags = int(sc[4]) | (int(sc[5]) << 1)
        return b"".join([
            _FIXED.pack(self._eps, self._window, self._u, sc[0], sc[1], fp, fz, self._eta,
                        flags, p.size),
            p.astype("<i8").tobytes(), v.astype("<i8").tobytes(), z.astype("<i8").tobytes(),
            lv.astype("u1").tobytes(),
        ])

    @classmethod
    def _read(cls, rd: Reader) -> "DeterministicWave":
        eps, window, u, clock, total, fp, fz, eta, flags, n = rd.unpack(_FIXED)
        if rd.left() != 25 * n:
            raise CorruptSketchError("deterministic wave item arrays have the wrong length")
        if (not MIN_EPSILON <= eps < 1.0 or not 0 <= window < TICK_LIMIT
                or not 1 <= u <= MAX_WINDOW_WEIGHT):
            raise CorruptSketchError("deterministic wave parameters out of range")
        if flags > 3 or not (math.isfinite(eta) and eta >= 0.0):
            raise CorruptSketchError("deterministic wave header fields out of range")
        sk = cls(eps, window, u)
        if not flags & 1:
            if clock != NO_CLOCK or total or fp or fz or n or eta or flags:
                raise CorruptSketchError("empty deterministic wave with content")
            return sk
        if not -TICK_LIMIT < clock < TICK_LIMIT or not 0 <= fz <= total < 1 << 62:
            raise CorruptSketchError("deterministic wave clock or sums out of range")
        if not (fp < clock - window or fz == 0):
            raise CorruptSketchError("deterministic wave floor inside the window")
        p, v, z = (rd.array("<i8", n).astype(np.int64) for _ in range(3))
        lv = rd.array("u1", n).astype(np.int64)
        if n and (lv.max() >= sk._levels
                  or np.any(np.bincount(lv, minlength=sk._levels) > sk._caps)):
            raise CorruptSketchError("deterministic wave levels overfull or out of range")
        if not K.check_items(lv, p, v, z, fp, fz, total, clock, clock - window, sk._levels - 1):
            raise CorruptSketchError("deterministic wave items are inconsistent")
        K.load(sk._qp, sk._qv, sk._qz, sk._qn, sk._qh, sk._caps, lv, p, v, z)
        sk._sc[:] = (clock, total, fp, fz, 1, flags >> 1)
        sk._eta = eta
        return sk
