"""One exact rule for time: which tick an event falls in, and which events are late.

**Ticks.** Tick ``k`` holds the event times ``ts`` (floats) with ``k·res <= ts < (k + 1)·res``
in exact arithmetic over the float values of ``ts`` and ``res`` (``Fraction(res)``, not the
decimal the user typed). Every part of Tidemark that turns a time into a tick — the
worker ticking events, the answers deciding which ticks a window covers and how old a
tick's events can be — uses this one rule, so no two float expressions can disagree at a
tick's edge.

``ticks_of`` is the batched form, exact for every ``|ts/res| < 2^62`` (the declarations
allow ``ts/res < 2^61``: ``tidemark/limits.py``). A float quotient ``fl(ts/res)`` is within
``2^-53·ts/res`` of the truth, which exceeds one tick once ``ts/res > 2^53`` (at present-day
times and a 1e-9 s grain, hundreds of ticks), so it only seeds the search: ``k`` is then
corrected by the exact predicate ``k·res <= ts`` until ``k·res <= ts < (k + 1)·res``. The
predicate is exact: ``k`` (an int64, ``|k| < 2^62``) is split into ``kh + kl`` with
``kh = k`` with its low 31 bits cleared and ``kl`` those bits (each ≤ 31 significant bits, so
both are floats exactly); each product ``kh·res``, ``kl·res`` is split exactly into two
floats by Dekker's TwoProduct (Veltkamp splitting; exact while nothing overflows or
underflows: true for ``res`` in ``[2^-200, 2^200]`` and ``|ts| < 2^500``), so
``ts − k·res`` is exactly a sum of five floats; Shewchuk's Grow-Expansion (TwoSum chains;
*Adaptive Precision Floating-Point Arithmetic*, 1997, Theorem 10) turns it into a
non-overlapping expansion whose largest non-zero component carries the sign of the exact
sum. The seed ``fl(ts/res)`` refined by one rounded remainder step lands within a tick or
two, so the correction loops run once or twice.

Fast path, ``|fl(ts/res)| < 2^52`` (every grain at present-day times down to ~1 µs): every
integer there is a float and rounding is monotone, so the rounded quotient of a true
quotient in ``[k, k + 1)`` lies in ``[k, k + 1]``: its floor ``q`` is ``k`` or ``k + 1``, and
``ts < q·res`` tells which. That test is exact: ``q·res = p + e`` exactly (TwoProduct);
when ``ts`` and ``p`` are within a factor two ``ts − p`` is exact (Sterbenz) and the sign
of the rounded ``(ts − p) − e`` is the exact sign; otherwise ``|ts − p|`` exceeds ``res/2``,
far above ``|e| <= ulp(p)``, and rounding cannot flip the sign.

**Late events** (contract §3). An event is late when it is older than ``max_window``
behind the largest ``ts`` accepted before it: ``before − ts > max_window`` in exact
arithmetic over the three floats. ``late_mask`` decides it with ``d = fl(before − ts)``
and its exact error ``e`` (Knuth's TwoSum: ``before − ts = d + e`` exactly, no overflow
below 2^1023): rounding to nearest is monotone, so ``d > max_window`` implies
``before − ts > max_window`` (were the exact difference ``<= max_window``, a float, its
rounding could not exceed it), ``d < max_window`` implies the reverse, and at
``d == max_window`` the sign of ``e`` decides. ``is_late`` is the same rule on rationals
(the answers' check that a window starts no earlier than ``clock − max_window`` is this
rule on the window's start); a property test holds the two to each other.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numba import njit

__all__ = ["ticks_of", "tick_of", "tick_start", "float_at_or_above", "late_mask", "is_late"]

_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's splitter for float64
_CLAMP = 2**62  # a quotient this large is beyond every declaration: left for the sketches to refuse
_FAST = 2.0**52  # below it, every integer is a float: fl(ts/res) is the floor or one more


@njit(cache=True, inline="always")
def _two_product(a, b):
    """``p + e == a·b`` exactly, ``p = fl(a·b)`` (Dekker, Veltkamp splitting)."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


@njit(cache=True, inline="always")
def _two_sum(a, b):
    """``s + e == a + b`` exactly, ``s = fl(a + b)`` (Knuth)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


@njit(cache=True)
def _at_or_after(ts, k, res, h):
    """Exactly ``ts >= k·res`` (int64 ``k``, ``|k| < 2^62``; ``h``: 5 floats of scratch)."""
    kh = (k >> 31) << 31
    kl = k - kh
    p1, e1 = _two_product(float(kh), res)
    p2, e2 = _two_product(float(kl), res)
    # Grow-Expansion of ts − p1 − e1 − p2 − e2; h[0..n) non-overlapping, increasing.
    h[0] = ts
    n = 1
    for b in (-p1, -e1, -p2, -e2):
        q = b
        for i in range(n):
            q, h[i] = _two_sum(q, h[i])
        h[n] = q
        n += 1
    for i in range(n - 1, -1, -1):
        if h[i] != 0.0:
            return h[i] > 0.0
    return True  # exactly zero: ts == k·res


@njit(cache=True)
def _ticks_kernel(ts, res, out):
    h = np.empty(5)
    for j in range(ts.size):
        t = ts[j]
        q = math.floor(t / res)
        if not q < _CLAMP:
            out[j] = _CLAMP
            continue
        if not q > -_CLAMP:
            out[j] = -_CLAMP
            continue
        p, e = _two_product(q, res)
        r = (t - p) - e  # ≈ t − q·res, off by far less than res
        if -_FAST < q < _FAST:  # the quotient is the floor or one more: one exact test settles it
            out[j] = np.int64(q) - np.int64(r < 0.0)
            continue
        k = np.int64(q) + np.int64(math.floor(r / res))
        while not _at_or_after(t, k, res, h):
            k -= 1
        while _at_or_after(t, k + 1, res, h):
            k += 1
        out[j] = k


def ticks_of(ts, res: float) -> np.ndarray:
    """Exact ``floor(ts / res)`` of every float in ``ts`` (int64; ``±2^62`` for a quotient
    beyond ``2^62`` in size, which every sketch refuses)."""
    ts = np.ascontiguousarray(ts, dtype=np.float64)
    out = np.empty(ts.shape, dtype=np.int64)
    _ticks_kernel(ts.reshape(-1), float(res), out.reshape(-1))
    return out


def tick_of(x, res: float) -> int:
    """Exact ``floor(x / res)`` of a float or a Fraction (the scalar rule)."""
    return math.floor(Fraction(x) / Fraction(res))


def tick_start(k: int, res: float) -> Fraction:
    """The exact time where tick ``k`` begins."""
    return k * Fraction(res)


def float_at_or_above(x: Fraction) -> float:
    """The smallest float ``>= x``: the first event time a real bound ``x`` admits."""
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def is_late(t, before, max_window) -> bool:
    """Exactly ``before − t > max_window`` (floats or Fractions; ``before`` may be
    ``-inf``: nothing came before, nothing is late)."""
    if isinstance(before, float) and math.isinf(before):
        return before > 0
    return Fraction(before) - Fraction(t) > Fraction(max_window)


def late_mask(ts: np.ndarray, clock_before: float, max_window: float) -> np.ndarray:
    """True for events older than ``max_window`` behind the largest ``ts`` before them
    (the running maximum of the events before each one and ``clock_before``), decided
    exactly (module notes).

    >>> late_mask(np.array([100.0, 10.0, 95.0, 200.0, 120.0]), -math.inf, 50.0).tolist()
    [False, True, False, False, True]
    >>> late_mask(np.array([1761000000.0, 1761000000.0 - 60.2]), -math.inf, 60.2).tolist()
    [False, True]
    """
    ts = np.asarray(ts, dtype=np.float64)
    if len(ts) == 0:
        return np.zeros(0, dtype=bool)
    before = np.empty(len(ts))
    before[0] = clock_before
    np.maximum.accumulate(ts[:-1], out=before[1:])
    np.maximum(before, clock_before, out=before)
    mw = float(max_window)
    with np.errstate(invalid="ignore"):  # before = -inf: d = -inf, e = nan; never late
        d = before - ts
        bb = d - before
        e = (before - (d - bb)) + (-ts - bb)
        return (d > mw) | ((d == mw) & (e > 0))
