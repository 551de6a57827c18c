"""What the derived aggregates (§1.1) read from a sketch at one query time.

A view lists the distinct values the sketch can name (``points``, sorted), the estimated
decayed weight at each (``mass``) and per-point deterministic brackets (``lo``/``hi``;
equal to ``mass`` for the sampling sketch, whose error is a bound on whole sums). The
sketch supplies ``interval(est, lo, hi, tails)``: an interval for the decayed weight of
any selection of points whose sums are ``est``/``lo``/``hi`` (floats or arrays), valid on an event of
probability ``>= confidence`` that already pays for ``tails`` one-sided deviation events
of fixed selections (the caller's union bound).

Tested by: tests/sketches/decayed/test_derived.py (derived aggregates on both sketches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass
class View:
    points: np.ndarray
    mass: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    guarantee: str  # a bound's kind: "relative" | "additive"
    method: str
    interval: Callable[[float, float, float, int], tuple[float, float]]
    confidence: float
    epsilon: Callable[[int], float]  # error of one sum: relative, or additive as a share of S₀

    def select(self, mask, tails: int) -> tuple[float, float, float]:
        est = float(self.mass[mask].sum())
        lower, upper = self.interval(est, float(self.lo[mask].sum()), float(self.hi[mask].sum()), tails)
        return est, float(lower), float(upper)

    def total(self, tails: int) -> tuple[float, float, float]:
        return self.select(slice(None), tails)

    def cumulative(self, tails: int, inclusive: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Brackets of the weight at points ``<= p`` (or ``< p``) for every point ``p``."""
        n = self.points.size
        ce = np.concatenate([[0.0], np.cumsum(self.mass)])
        cl = np.concatenate([[0.0], np.cumsum(self.lo)])
        ch = np.concatenate([[0.0], np.cumsum(self.hi)])
        idx = np.arange(1, n + 1) if inclusive else np.arange(n)
        est = ce[idx]
        lower, upper = self.interval(est, cl[idx], ch[idx], tails)
        return est, np.asarray(lower, np.float64), np.asarray(upper, np.float64)

    def above(self, tails: int, inclusive: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Brackets of the weight at points ``>= p`` (or ``> p``) for every point ``p``,
        summed from the top (not a difference of two large sums)."""
        n = self.points.size

        def suffix(x):
            return np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]])

        se, sl, sh = suffix(self.mass), suffix(self.lo), suffix(self.hi)
        idx = np.arange(n) if inclusive else np.arange(1, n + 1)
        est = se[idx]
        lower, upper = self.interval(est, sl[idx], sh[idx], tails)
        return est, np.asarray(lower, np.float64), np.asarray(upper, np.float64)
