"""Which tick an event time falls in: ``floor(ts / res)`` computed exactly.

Tick ``k`` holds the event times ``ts`` (floats) with ``k·res <= ts < (k + 1)·res`` in
exact arithmetic over the float values of ``ts`` and ``res`` (``Fraction(res)``, not the
decimal the user typed). Every part of Tidemark that turns a time into a tick — the
worker ticking events, the answers deciding which ticks a window covers and how old a
tick's events can be — uses this one rule, so no two float expressions can disagree at a
tick's edge.

``ticks_of`` is the batched form: ``q = floor(fl(ts / res))`` is the exact floor or one
more (a correctly rounded quotient can round up onto an integer, never down past one),
and one exact sign test of ``ts − q·res`` settles it. The product ``q·res`` is split
exactly into ``p + e`` (Dekker's TwoProduct, Veltkamp splitting; exact while nothing
overflows or underflows), and ``sign(ts − p − e)`` is read from ``fl(fl(ts − p) − e)``:
when ``ts`` and ``p`` are within a factor two ``ts − p`` is exact (Sterbenz) and the sign
of a rounded difference of two floats is exact; otherwise ``|ts − p|`` exceeds ``res/2``,
far above ``|e| <= ulp(p)``, and rounding cannot flip the sign.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["ticks_of", "tick_of", "tick_start", "float_at_or_above"]

_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's splitter for float64


def _two_product(a: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """``p + e == a·b`` exactly, ``p = fl(a·b)``."""
    p = a * b
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def ticks_of(ts, res: float) -> np.ndarray:
    """Exact ``floor(ts / res)`` of every float in ``ts`` (int64)."""
    ts = np.asarray(ts, dtype=np.float64)
    res = float(res)
    q = np.floor(ts / res)
    p, e = _two_product(q, res)
    below = ((ts - p) - e) < 0  # ts < q·res exactly: the quotient was rounded up onto q
    return (q - below).astype(np.int64)


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
