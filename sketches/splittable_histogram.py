"""Splittable histogram: deterministic ε-relative count and sum over a sliding window of an
asynchronous (out-of-order) stream.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2 (basic counting: levels S_0..S_M,
splitting, Algorithms 1-3, the D_j/D_{j+1} interval pair), §3 (sum: batched insertion of
Algorithm 4).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from sketches._splittable_kernels import choose_level, insert_batch, range_mass
from sketches.base import (
    CorruptSketchError,
    Estimate,
    Family,
    IncompatibleSketchError,
    SketchError,
    pack_header,
    unpack_header,
)

__all__ = ["SplittableHistogram", "suggest_alpha"]

METHOD = "splittable-histogram"
_MAX_LEVELS = 62


def _pow2_at_least(w: int) -> int:
    return 1 << max(0, (int(w) - 1).bit_length())


def suggest_alpha(epsilon: float, window: int) -> int:
    """Buckets kept per level: α = ⌈(1 + log W)(2 + ε)/ε⌉ (§2.1, W rounded up to 2^k)."""
    log_w = _pow2_at_least(window).bit_length() - 1
    return int(math.ceil((1 + log_w) * (2 + epsilon) / epsilon))


class _Interval:
    """The data structure D_k of one interval [k·Wp, (k+1)·Wp − 1] (§2.1)."""

    def __init__(self, k: int, alpha: int, log_w: int, levels: int = 1):
        self.k = k
        # Levels are trimmed back to alpha when they reach 2·alpha; one insertion adds at
        # most log W buckets before that check.
        self.cap = 2 * alpha + log_w + 2
        self.L = np.zeros((levels, self.cap), np.int64)
        self.R = np.zeros((levels, self.cap), np.int64)
        self.M = np.zeros((levels, self.cap), np.float64)
        self.n = np.zeros(levels, np.int64)
        self.T = np.full(levels, -1, np.int64)
        self.total = 0.0
        self.wp = 1 << log_w
        for i in range(1, levels):
            self._init_root(i, 0.0)

    @property
    def levels(self) -> int:
        return self.L.shape[0]

    def _init_root(self, i: int, mass: float) -> None:
        # Algorithm 1: level i starts as one bucket <0, 0, W-1>.
        self.L[i, 0], self.R[i, 0], self.M[i, 0], self.n[i], self.T[i] = 0, self.wp - 1, mass, 1, -1

    def ensure_levels(self, total: float) -> None:
        """Grow to M levels with 2^(M+1) > total, so the top level never splits (Lemma 2).

        A level that never split holds one root bucket with all the mass so far, so a
        level added now is exactly the level that would have been there from the start.
        """
        need = 2 if total < 4 else int(math.floor(math.log2(total))) + 2
        need = min(max(need, 2), _MAX_LEVELS)
        if need <= self.levels:
            return
        old = self.levels
        grow = need - old
        self.L = np.vstack([self.L, np.zeros((grow, self.cap), np.int64)])
        self.R = np.vstack([self.R, np.zeros((grow, self.cap), np.int64)])
        self.M = np.vstack([self.M, np.zeros((grow, self.cap), np.float64)])
        self.n = np.concatenate([self.n, np.zeros(grow, np.int64)])
        self.T = np.concatenate([self.T, np.full(grow, -1, np.int64)])
        for i in range(max(old, 1), need):
            self._init_root(i, self.total)

    def insert(self, local_ticks: np.ndarray, masses: np.ndarray, alpha: int) -> None:
        self.ensure_levels(self.total + float(masses.sum()))
        insert_batch(self.L, self.R, self.M, self.n, self.T, self.levels, local_ticks, masses, alpha)
        self.total += float(masses.sum())

    def range(self, a: int, b: int, local_clock: int, log_w: int) -> tuple[float, float]:
        """(estimate, error bound) of the mass at local ticks in [a, b].

        It is e_a − e_(b+1) at the level Algorithm 3 picks for a; each suffix obeys
        |s_t − e_t| ≤ 2^ℓ (1 + log W) (Lemma 1), is exact at level 0 (singletons), and is
        exactly 0 past the clock, where there is nothing.
        """
        level = choose_level(self.T, self.levels, a)
        # Up to the clock, the range is s_a itself: read every bucket from a on, including
        # any split-off mass placed past the clock (Lemma 1 bounds e_a as a whole).
        e = range_mass(self.L, self.M, self.n, level, a, b if b < local_clock else self.wp)
        if level == 0:
            return e, 0.0
        per_suffix = (2.0**level) * (1 + log_w)
        return e, per_suffix * (1 + (b + 1 <= local_clock))


class _Part:
    """One unmerged splittable histogram: the interval pair D_j, D_{j+1} and its clock."""

    def __init__(self, alpha: int, log_w: int):
        self.alpha, self.log_w = alpha, log_w
        self.clock = None
        self.ops = 0  # insertions so far, for the float64 rounding allowance
        self.old: _Interval | None = None
        self.new: _Interval | None = None

    def update(self, ticks: np.ndarray, masses: np.ndarray) -> None:
        wp = 1 << self.log_w
        ks = ticks // wp
        top = int(ks[-1])  # ticks come sorted
        if self.new is None or top > self.new.k:
            if self.new is not None and top == self.new.k + 1:
                self.old, self.new = self.new, _Interval(top, self.alpha, self.log_w)
            else:
                self.old = _Interval(top - 1, self.alpha, self.log_w)
                self.new = _Interval(top, self.alpha, self.log_w)
        for d in (self.old, self.new):
            lo, hi = np.searchsorted(ks, [d.k, d.k + 1])
            if hi > lo:
                d.insert(ticks[lo:hi] - d.k * wp, masses[lo:hi], self.alpha)
        self.ops += int(ticks.size)
        latest = int(ticks[-1])
        self.clock = latest if self.clock is None else max(self.clock, latest)

    def query(self, lo: int, hi: int) -> tuple[float, float]:
        if self.new is None:
            return 0.0, 0.0
        wp = 1 << self.log_w
        est = err = 0.0
        for d in (self.old, self.new):
            start, end = d.k * wp, d.k * wp + wp - 1
            a, b = max(lo, start), min(hi, end, self.clock)
            if a > b:
                continue
            e, r = d.range(a - start, b - start, min(self.clock, end) - start, self.log_w)
            est += e
            err += r
        return est, err


class SplittableHistogram:
    """Deterministic sliding-window count and sum for out-of-order arrivals.

    For a window ``[lo, clock]`` of at most ``window`` ticks the estimate X of the true
    total S satisfies (Theorem 1 for counts, Theorem 3 for sums)::

        |X − S| ≤ ε · S

    and the returned interval is tighter still: it is ``X ∓ Σ 2^ℓ (1 + log W)`` over the
    levels ℓ the query reads (Lemma 1), which Lemma 3 bounds by ε·S. For a range
    ``[lo, hi]`` ending before the clock the same lemma bounds each of its two suffixes,
    so the interval (twice as wide) still always holds, but ε no longer describes it.

    Weights are real masses ≥ 0: Algorithm 4 treats weight v as v unit elements, and the
    proof of Lemma 1 only counts mass assigned to buckets (at most 2^(i+1) to a root, 2^i
    to each later node of a path), so the interval holds unchanged for real-valued mass.
    The ε-relative guarantee (Lemma 3) also needs every level-0 bucket to weigh at least
    1, i.e. weights of 0 or ≥ 1; with smaller weights the interval still holds but may be
    wider than ε.

    Merging (not in the paper) keeps the parts side by side: the merged sketch answers the
    sum of its parts' answers, and since each part's error is at most ε times its own
    total, the sum's error is at most ε times the sum — the bound composes with no loss at
    any depth of merge tree, for space equal to the sum of the parts'. New events go into
    the first part.

    Parameters
    ----------
    epsilon : float
        Relative error target in (0, 1).
    window : int
        Longest window W in ticks (rounded up to a power of two internally).

    Examples
    --------
    >>> import numpy as np
    >>> sh = SplittableHistogram(0.1, window=64)
    >>> sh.update(np.array([5, 3, 9, 9, 1]))
    >>> e = sh.query(0, sh.clock)
    >>> e.lower <= 5 <= e.upper
    True
    """

    def __init__(self, epsilon: float, window: int):
        if not 0 < epsilon < 1:
            raise SketchError("epsilon must be in (0, 1)")
        if not 1 <= int(window) <= 2**40:
            raise SketchError("window must be between 1 and 2^40 ticks")
        self.epsilon = float(epsilon)
        self.window = int(window)
        self.log_w = _pow2_at_least(self.window).bit_length() - 1
        self.alpha = suggest_alpha(self.epsilon, self.window)
        self._parts = [_Part(self.alpha, self.log_w)]

    # -- updates -----------------------------------------------------------------------
    def update(self, ticks: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Insert a batch of events (any order, duplicates allowed); weights default to 1."""
        ticks = np.asarray(ticks, dtype=np.int64)
        if ticks.size == 0:
            return
        if weights is None:
            weights = np.ones(ticks.size, np.float64)
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != ticks.shape:
            raise SketchError("ticks and weights must have the same length")
        if not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise SketchError("weights must be finite and >= 0")
        if ticks.min() < 0:
            raise SketchError("ticks must be >= 0")
        # Equal ticks are one batched insertion (Algorithm 4, Theorem 3).
        unique, inverse = np.unique(ticks, return_inverse=True)
        masses = np.bincount(inverse, weights=weights, minlength=unique.size)
        self._parts[0].update(unique, masses)

    @property
    def clock(self) -> int:
        clocks = [p.clock for p in self._parts if p.clock is not None]
        return max(clocks) if clocks else -(2**62)

    # -- queries -------------------------------------------------------------------------
    def query(self, lo: int, hi: int) -> Estimate:
        """Total weight of the events with a tick in ``[lo, hi]`` (inclusive)."""
        lo, hi = int(lo), int(hi)
        if hi < lo:
            raise SketchError("empty range: hi < lo")
        if hi - lo + 1 > self.window:
            raise SketchError(f"range of {hi - lo + 1} ticks exceeds the window of {self.window}")
        if self.is_empty:
            return Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
        if lo <= self.clock - self.window:
            raise SketchError(
                f"range starts at {lo}, before clock - window + 1 = {self.clock - self.window + 1}"
            )
        est = err = 0.0
        for part in self._parts:
            e, r = part.query(lo, hi)
            est, err = est + e, err + r
        est = max(est, 0.0)
        # float64 rounding: each addition into a bucket and each term of the final sum
        # errs by at most one unit in the last place of a positive running total.
        ops = sum(p.ops for p in self._parts) + self.alpha * 64
        err += 4.5e-16 * ops * est
        return Estimate(est, max(0.0, est - err), est + err, "relative", self.epsilon, 1.0, METHOD)

    # -- merging ---------------------------------------------------------------------------
    def merge(self, other: "SplittableHistogram") -> "SplittableHistogram":
        if other is self:
            raise IncompatibleSketchError("cannot merge a sketch with itself")
        if not isinstance(other, SplittableHistogram):
            raise IncompatibleSketchError("can only merge a SplittableHistogram")
        if (other.epsilon, other.window) != (self.epsilon, self.window):
            raise IncompatibleSketchError("cannot merge splittable histograms with different epsilon or window")
        self._parts.extend(p for p in other.copy()._parts if p.clock is not None)
        return self

    def copy(self) -> "SplittableHistogram":
        return SplittableHistogram.from_bytes(self.to_bytes())

    @property
    def is_empty(self) -> bool:
        return all(p.clock is None for p in self._parts)

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())

    def __repr__(self) -> str:
        return (f"SplittableHistogram(epsilon={self.epsilon}, window={self.window}, "
                f"parts={len(self._parts)}, clock={None if self.is_empty else self.clock})")

    # -- bytes ---------------------------------------------------------------------------------
    # payload: f64 epsilon | i64 window | u32 parts
    #   per part:  u8 has_data | [i64 clock | i64 ops | interval old | interval new]
    #   interval:  i64 k | f64 total | u32 levels | levels × (i64 T | u32 n | n × (i64 L, i64 R, f64 M))
    _HEAD = struct.Struct("<dqI")

    def to_bytes(self) -> bytes:
        out = [self._HEAD.pack(self.epsilon, self.window, len(self._parts))]
        for p in self._parts:
            if p.clock is None:
                out.append(b"\x00")
                continue
            out.append(b"\x01" + struct.pack("<qq", p.clock, p.ops))
            for d in (p.old, p.new):
                out.append(struct.pack("<qdI", d.k, d.total, d.levels))
                for i in range(d.levels):
                    # Stored levels keep only the alpha most recent buckets: the discard
                    # that the in-memory form defers (Algorithm 4, lines 39-45).
                    end = int(d.n[i])
                    first = max(0, end - self.alpha)
                    T = d.T[i] if first == 0 else d.R[i, first - 1]
                    n = end - first
                    out.append(struct.pack("<qI", T, n))
                    rows = np.empty((n, 3), np.int64)
                    rows[:, 0], rows[:, 1] = d.L[i, first:end], d.R[i, first:end]
                    rows[:, 2] = d.M[i, first:end].view(np.int64)
                    out.append(rows.tobytes())
        payload = b"".join(out)
        return pack_header(Family.SPLITTABLE_HISTOGRAM, len(payload)) + payload

    @classmethod
    def from_bytes(cls, data) -> "SplittableHistogram":
        _, payload = unpack_header(data, Family.SPLITTABLE_HISTOGRAM)
        reader = _Reader(bytes(payload))
        epsilon, window, nparts = reader.unpack(cls._HEAD)
        if not (0 < epsilon < 1) or not (1 <= window <= 2**40) or nparts > 1 << 20:
            raise CorruptSketchError("splittable histogram parameters out of range")
        sk = cls(epsilon, window)
        sk._parts = []
        for _ in range(nparts):
            part = _Part(sk.alpha, sk.log_w)
            (has,) = reader.unpack(_U8)
            if has not in (0, 1):
                raise CorruptSketchError("bad part flag in splittable histogram")
            if has:
                part.clock, part.ops = reader.unpack(_CLOCK_OPS)
                if part.ops < 0:
                    raise CorruptSketchError("splittable histogram operation count is negative")
                part.old, part.new = (cls._read_interval(reader, sk) for _ in range(2))
                if part.new.k != part.old.k + 1 or part.clock // (1 << sk.log_w) != part.new.k:
                    raise CorruptSketchError("splittable histogram intervals are inconsistent")
            sk._parts.append(part)
        if reader.left():
            raise CorruptSketchError("trailing bytes after splittable histogram")
        if not sk._parts:
            sk._parts = [_Part(sk.alpha, sk.log_w)]
        return sk

    @staticmethod
    def _read_interval(reader: "_Reader", sk: "SplittableHistogram") -> _Interval:
        k, total, levels = reader.unpack(_INTERVAL)
        if not (1 <= levels <= _MAX_LEVELS) or not math.isfinite(total) or total < 0:
            raise CorruptSketchError("splittable histogram interval header out of range")
        d = _Interval(k, sk.alpha, sk.log_w, levels)
        d.total = total
        wp = 1 << sk.log_w
        for i in range(levels):
            T, n = reader.unpack(_LEVEL)
            if n > sk.alpha or (i > 0 and n < 1):
                raise CorruptSketchError("splittable histogram level has a bad bucket count")
            rows = np.frombuffer(reader.take(24 * n), np.int64).reshape(n, 3)
            L, R, M = rows[:, 0], rows[:, 1], rows[:, 2].view(np.float64)
            if n and (L.min() < 0 or R.max() >= wp or np.any(L > R) or np.any(L[1:] <= R[:-1])
                      or not np.all(np.isfinite(M)) or np.any(M < 0) or T >= L[0]):
                raise CorruptSketchError("splittable histogram buckets are not valid")
            if not -1 <= T < wp:
                raise CorruptSketchError("splittable histogram discard mark out of range")
            d.L[i, :n], d.R[i, :n], d.M[i, :n], d.n[i], d.T[i] = L, R, M, n, T
        return d


_U8 = struct.Struct("<B")
_CLOCK_OPS = struct.Struct("<qq")
_INTERVAL = struct.Struct("<qdI")
_LEVEL = struct.Struct("<qI")


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptSketchError("splittable histogram blob truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> tuple:
        return s.unpack(self.take(s.size))

    def left(self) -> int:
        return len(self.data) - self.pos
