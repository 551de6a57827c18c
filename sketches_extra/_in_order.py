"""What the two in-order window sums (:mod:`sketches_extra.exponential_histogram` and
:mod:`sketches_extra.deterministic_wave`) share: the query of a range as a difference of
two suffixes, order-preserving aggregation of many parts (Papapetrou et al. 2012, ECM-sketch,
§5.1), and the relative bracket of a suffix estimate.

A family supplies ``_suffix(lo)`` (the estimate of ``[lo, clock]``), ``epsilon_bound``
and ``_fold(parts)`` (the aggregation of the non-empty parts, ``self`` among them).

Tested by: tests/sketches_extra/test_in_order.py (both in-order sums),
tests/sketches_extra/test_exponential_histogram.py,
tests/sketches_extra/test_deterministic_wave.py.
"""

from __future__ import annotations

import math
import operator
from typing import ClassVar

import numpy as np

from sketches.base import Estimate, Sketch, SketchError, integer_ticks
from sketches_extra._eh_kernels import TICK_LIMIT

NO_CLOCK = -(1 << 63)  # clock of a sketch that has seen no event
UNIT_ROUNDOFF = 2.0**-53  # unit roundoff of float64


class InOrderWindowSum(Sketch):
    """A relative-error sum over a sliding window of an in-order stream."""

    METHOD: ClassVar[str]  #: ``Estimate.method`` of the family's answers
    _eps: float
    _window: int

    @staticmethod
    def _check_window(window) -> int:
        window = as_int(window, "window")
        if not 0 <= window < TICK_LIMIT:
            raise SketchError(f"window must be in [0, 2^62), got {window}")
        return window

    @property
    def epsilon(self) -> float:
        return self._eps

    @property
    def window(self) -> int:
        return self._window

    def query(self, lo: int, hi: int) -> Estimate:
        """Estimated total weight of the events with tick in ``[lo, hi]``.

        ``lo`` must be ``>= clock − window``; ``hi`` above the clock is read as the clock
        (no later event has been seen). See the family's docstring for the bounds.
        """
        lo, hi, empty = _check_query(lo, hi, self.clock_tick, self._window)
        if empty:
            return _exact_zero(self.epsilon_bound, self.METHOD)
        x = self._suffix(lo)
        if hi == self.clock_tick:
            return x
        return _difference(x, self._suffix(hi + 1))

    def _merge(self, other) -> None:
        """Order-preserving aggregation (ECM §5.1), as :meth:`merge_many`."""
        self.merge_many([other])

    def merge_many(self, others):
        """Fold several sketches into ``self`` at the cost of one aggregation level."""
        others = list(others)
        for o in others:
            self.check_mergeable(o)
        parts = [p for p in [self, *others] if not p.is_empty]
        if parts:
            self._fold(parts)
        return self

def as_int(x, name: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        raise SketchError(f"{name} must be an integer tick count, got {x!r}") from None


def coerce_ticks(ticks) -> np.ndarray:
    t = integer_ticks(ticks)
    if t.size and t.dtype.kind == "u" and int(t.max()) >= TICK_LIMIT:
        raise SketchError("ticks must lie in (-2^62, 2^62)")
    return np.ascontiguousarray(t, dtype=np.int64)






def check_in_order(first_tick: int, clock: int) -> None:
    if first_tick < clock:
        raise SketchError(
            f"out-of-order event: tick {first_tick} is older than the clock {clock}; "
            "this sketch takes in-order streams only"
        )


def _check_query(lo, hi, clock: int, window: int):
    """Validated ``(lo, hi, empty)``; ``hi`` is clamped to the clock."""
    lo, hi = as_int(lo, "lo"), as_int(hi, "hi")
    if lo > hi:
        raise SketchError(f"empty query range: lo={lo} > hi={hi}")
    if clock == NO_CLOCK:
        return lo, hi, True
    if lo < clock - window:
        raise SketchError(
            f"query starts at {lo}, before the window the sketch keeps "
            f"[{clock - window}, {clock}]"
        )
    hi = min(hi, clock)
    return lo, hi, lo > hi




def _exact_zero(eps: float, method: str) -> Estimate:
    return Estimate(0.0, 0.0, 0.0, "relative", eps, 1.0, method)


def bracket_estimate(a: float, b: float, eps: float, eta: float, g: float,
                      method: str) -> Estimate:
    """Estimate of ``x`` from a state bracket ``a <= S* <= b`` of a stream ``S*`` with
    ``|S* − x| <= η·x``, sums within ``1 ± g`` of exact, and relative half-width ``<= ε``.

    ``ε`` is raised to the bracket's own half-width when that is larger (a structure
    whose sizing assumption was exceeded), so the reported bound always follows from the
    state.
    """
    if b <= 0.0:
        return Estimate(0.0, 0.0, 0.0, "relative", _compose(eps, eta, g), 1.0, method)
    if b - a <= 2.0 * eps * (1.0 - 2.0**-50) * a:
        e = eps  # the test is conservative, so the exact half-width is below ε too
    elif a <= 0.0:
        e = math.inf
    else:
        e = max(eps, float(np.nextafter((b - a) / (2.0 * a), math.inf)))
    if g > 0.0:
        e *= ((1.0 + g) / (1.0 - g)) ** 2 * (1.0 + 4 * UNIT_ROUNDOFF)
    eps_rep = _compose(e, eta, g)
    if g == 0.0 and eta == 0.0:
        lower, upper = a, b
    else:
        lower = a / ((1.0 + g) * (1.0 + eta)) * (1.0 - 4 * UNIT_ROUNDOFF)
        den = (1.0 - g) * (1.0 - eta)
        upper = b / den * (1.0 + 4 * UNIT_ROUNDOFF) if den > 0.0 else math.inf
    est = min(max(0.5 * (a + b), lower), upper)
    return Estimate(float(est), float(lower), float(upper), "relative", eps_rep, 1.0, method)


def _compose(e: float, eta: float, g: float) -> float:
    """``(1 + e)(1 + η)(1 + g) − 1`` rounded up."""
    if g == 0.0 and eta == 0.0:
        return e
    return ((1.0 + e) * (1.0 + eta) * (1.0 + g) - 1.0) * (1.0 + 4 * UNIT_ROUNDOFF)


def _difference(x: Estimate, y: Estimate) -> Estimate:
    """``[lo, hi]`` as suffix ``[lo, clock]`` minus suffix ``[hi+1, clock]``.

    Truth ``X − Y`` with ``X ∈ [x.lower, x.upper]`` and ``Y ∈ [y.lower, y.upper]``;
    ``|X̂ − X| <= ε_x·X`` and ``|Ŷ − Y| <= ε_y·Y <= ε_y·X``, so the error is additive,
    at most ``(ε_x + ε_y)·X`` with ``X`` the weight of ``[lo, clock]``.
    """
    lower = max(0.0, _round(x.lower - y.upper, x.lower, y.upper, -math.inf))
    upper = _round(x.upper - y.lower, x.upper, y.lower, math.inf)
    est = min(max(x.estimate - y.estimate, lower), upper)
    return Estimate(float(est), float(lower), float(upper), "additive",
                    x.epsilon + y.epsilon, 1.0, x.method)


def _round(d: float, p: float, q: float, toward: float) -> float:
    """``d = p − q`` as computed, moved one ulp ``toward`` unless it is surely exact."""
    if math.isinf(d) or (p.is_integer() and q.is_integer() and max(abs(p), abs(q)) < 2.0**53):
        return d
    return float(np.nextafter(d, toward))
