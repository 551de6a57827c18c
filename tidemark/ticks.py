"""One exact rule for time: which tick an event falls in, which events are late, and
which ticks a query window covers and how old a tick's events can be.

**Ticks.** Tick ``k`` holds the event times ``ts`` (floats) with ``k·res <= ts < (k + 1)·res``
in exact arithmetic over the float values of ``ts`` and ``res`` (``Fraction(res)``, not the
decimal the user typed). Everything in Tidemark that turns a time into a tick — the
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

**Windows** (the answers' rule for every query kind). An event with time ``ts`` (a float)
lies in tick ``k = floor(ts / res)``, computed exactly (``tick_of``; the worker ticks events
by the same rule, ``ticks_of``). A query window is the real interval ``[at − window, at]``
(the contract, §6), with its start ``at − window`` computed as an exact rational, never
rounded.

* A tick is **inside** the window when every float time it holds is in the window, and
  **touches** it when some may be. ``inner``/``outer`` are those tick ranges. Because the
  tick of a float is monotone in the float, they are read off the ticks of four floats:
  the first time the window admits (``first``), the float just before it, ``at`` and the
  float just after ``at``. No event later than the stream's ``clock`` exists, so when
  ``clock <= at`` the tick holding ``clock`` is inside on that side.
* An event of tick ``k`` at or before ``at`` has age ``at − ts`` in
  ``(at − (k + 1)·res, at − k·res] ∩ [0, ∞)``. With ``at = now·res + offset``
  (``0 <= offset < res``, exact), its age in whole ticks ``a = now − k`` bounds it:
  ``(a − 1)·res + offset < age <= a·res + offset``. :func:`age_decays` turns a decay of
  seconds into the pair of tick decays that read every event as old as, and as young as,
  it can be.

Which events count is decided only here; counts, sums, keys, distinct counts and decayed
sums all take their tick ranges and ages from a :class:`Window`.

Tested by: tests/app/test_answers_windows.py (test_ticks_are_the_exact_floor, windows at
every edge), tests/tidemark/test_limits.py (every grain exact, the late rule on its edge),
tests/app/test_exact_time.py (the late edge), tests/app/test_ranges.py
(test_windows_in_one_pass_are_parse_window), tests/app/test_answers_decayed.py (ages).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np
from numba import njit

__all__ = ["ticks_of", "tick_of", "tick_start", "float_at_or_above", "late_mask", "is_late",
           "Window", "make_window", "TickRange", "EMPTY_RANGE", "age_decays", "age_decays_rows", "ROUNDING"]

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


# -- windows ------------------------------------------------------------------------------
# Relative error allowed for evaluating a continuous decay at a float age: the age is
# a·res + offset rounded twice (≤ 2^-52 relative) and f is evaluated to a few ulps; for
# f = 2^(-x/h) with x/h <= 1100 (below that f underflows to 0) and (x+1)^-α with
# α <= 4000 the result moves by less than 1e-12 relative.
ROUNDING = 1e-12

TickRange = tuple[int, int]  # inclusive; empty when lo > hi
EMPTY_RANGE: TickRange = (0, -1)


@dataclass(frozen=True)
class Window:
    """``[at − seconds, at]`` and the ticks it covers.

    ``inner``: ticks all of whose events are in the window; ``outer``: ticks some of whose
    events may be. ``last``: (the last tick all of whose events are at or before ``at``,
    the last that may hold one) — what a decayed query, which has no start, may count.
    ``now``/``offset``: ``at = now·res + offset`` exactly, ``0 <= offset < res``.
    """

    seconds: float
    at: float
    inner: TickRange
    outer: TickRange
    last: tuple[int, int]
    now: int
    offset: float
    clock: float | None = None
    resolution: float = 1.0

    def covering(self, seconds: float) -> tuple[TickRange, TickRange]:
        """(inner, outer) ticks of ``[at − seconds, at]``: a sliding decay's window."""
        return covered_ticks(Fraction(self.at) - Fraction(seconds), self.at, self.resolution, self.clock)

    @property
    def exact(self) -> bool:
        """The tick grain adds nothing: the ticks inside are the ticks touching."""
        return self.inner == self.outer


def last_ticks(at: float, res: float, clock: float | None) -> tuple[int, int]:
    """(last tick wholly at or before ``at``, last tick touching ``(−∞, at]``)."""
    if clock is not None and clock <= at:  # nothing after ``at`` exists: the top is exact
        top = tick_of(clock, res)
        return top, top
    # A tick after at's that no float reaches holds no event: never past at's own tick.
    top = tick_of(at, res)
    return min(tick_of(math.nextafter(at, math.inf), res) - 1, top), top


def covered_ticks(start: Fraction, at: float, res: float, clock: float | None) -> tuple[TickRange, TickRange]:
    """(inner, outer) tick ranges of the real interval ``[start, at]``."""
    first = float_at_or_above(start)  # the earliest event time in the window
    if first > at or (clock is not None and clock < first):
        return EMPTY_RANGE, EMPTY_RANGE
    top_in, top_out = last_ticks(at, res, clock)
    outer = (tick_of(first, res), top_out)
    # Ticks between the float before ``first`` and ``first``'s own hold no float (when a
    # float step spans several ticks): the inside starts no earlier than ``first``'s tick,
    # so the range never outgrows the ticks touching the window.
    inner = (max(tick_of(math.nextafter(first, -math.inf), res) + 1, outer[0]), top_in)
    return (inner if inner[0] <= inner[1] else EMPTY_RANGE,
            outer if outer[0] <= outer[1] else EMPTY_RANGE)


def make_window(seconds: float, at: float, res: float, clock: float | None) -> Window:
    inner, outer = covered_ticks(Fraction(at) - Fraction(seconds), at, res, clock)
    now = tick_of(at, res)
    offset = float(Fraction(at) - now * Fraction(res))
    return Window(seconds, at, inner, outer, last_ticks(at, res, clock), now, offset, clock, res)


def age_decays(f: Callable[[np.ndarray], np.ndarray], window: Window, res: float):
    """``(older, younger)``: decays of whole-tick ages ``a = now − k`` that give every event
    of tick ``k`` (at or before ``at``) at most, and at least, its true weight
    ``f(at − ts)`` (``f`` non-increasing, ages in seconds)."""
    offset = window.offset

    def older(a):
        return f(np.maximum(np.asarray(a, np.float64), 0.0) * res + offset)

    def younger(a):
        return f(np.maximum((np.asarray(a, np.float64) - 1) * res + offset, 0.0))

    return older, younger


def age_decays_rows(f: Callable[[np.ndarray], np.ndarray], offsets: np.ndarray, res: float):
    """:func:`age_decays` of many windows at once: ``(older, younger)`` as functions of
    ``(ages, rows)`` whose row ``i`` is window ``rows[i]``'s (its ``offset`` of
    ``offsets``), with the same float operations element by element."""

    def older_at(o, a):  # the decay of ages ``a`` (floats) at offset ``o``
        return f(np.maximum(a, 0.0) * res + o)

    def younger_at(o, a):
        return f(np.maximum((a - 1) * res + o, 0.0))

    def older(a, rows):
        return older_at(offsets[rows, None], np.asarray(a, np.float64))

    def younger(a, rows):
        return younger_at(offsets[rows, None], np.asarray(a, np.float64))

    # Windows of one offset share the decay of an age (their rows, shifted): the key each
    # row has, and the decay of a key on ages (the rows' own operations).
    older.shared, younger.shared = (offsets, older_at), (offsets, younger_at)
    return older, younger
