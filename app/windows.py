"""Which ticks a window covers and how old a tick's events can be: one exact rule for
every query kind.

An event with time ``ts`` (a float) lies in tick ``k = floor(ts / res)``, computed exactly
(:mod:`tidemark.ticks`, the rule the worker ticks events with). A query window is the real
interval ``[at − window, at]`` (the contract, §6), with its start ``at − window`` computed
as an exact rational, never rounded.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np

from tidemark.ticks import float_at_or_above, tick_of

__all__ = ["Window", "make_window", "TickRange", "EMPTY_RANGE", "age_decays", "ROUNDING"]

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

    def older(a, rows):
        return f(np.maximum(np.asarray(a, np.float64), 0.0) * res + offsets[rows, None])

    def younger(a, rows):
        return f(np.maximum((np.asarray(a, np.float64) - 1) * res + offsets[rows, None], 0.0))

    return older, younger
