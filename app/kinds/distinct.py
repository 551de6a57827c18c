"""The distinct family's query kind: ``distinct``, the number of distinct keys in a
window, from the randomized wave (Gibbons and Tirthapura 2004, §4.1, §5; part in
``tidemark/families/distinct.py``). A rule may watch it; the Prometheus API serves it as
series (``tidemark_distinct``).

Tested by: tests/app/test_distinct_before_clock.py (against the exact oracle, windows
ending before the clock), tests/app/test_answers_windows.py.
"""

from __future__ import annotations

from app.kinds.kind import QueryKind, ServedFamily, best_point, exact_zero, window_estimate
from sketches.base import Estimate
from tidemark.families import distinct as core

__all__ = ["FAMILY"]


def _distinct(summary, config, window, params) -> Estimate:
    """Distinct keys in the window, from the randomized wave (Gibbons & Tirthapura 2004,
    §4.1, §5), which keeps each sampled key with its *latest* tick ``T(v)`` and answers
    ``n(t) = |{v : T(v) >= t}|`` for any ``t`` back to ``clock − W + 1``, within its
    (ε, δ) bracket (exactly while level 0 covers ``t``).

    * The window reaches the clock: ``n(lo)`` over the ticks touching it (upper) and over
      the ticks inside it (lower).
    * The window ends before the clock (``hi < clock``): the state no longer knows whether
      a key seen after ``hi`` was also seen in ``[lo, hi]`` (only its latest tick is kept),
      so the bracket is what the state proves. Every key with an event in the touching
      ticks ``[lo, hi]`` has ``T(v) >= lo``: ``n ≤ n(lo)``, read at its upper bound. Every
      key whose latest tick lies in the inside ticks ``[lo', hi']`` had an event there:
      ``n ≥ n(lo') − n(hi' + 1)``, read as ``lower(n(lo')) − upper(n(hi' + 1))``. Three
      readings, each holding with its confidence: the bracket holds with
      ``1 − Σ (1 − confidence)`` (1 when each is exact). It is ``additive`` with
      ``epsilon = 1`` (``|estimate − n| ≤ n(lo)``); how wide it is depends on how many keys
      of the window came back after it (``half_width`` says).
    """
    wave = summary["distinct"]
    lo, hi = window.outer
    if wave.is_empty or lo > hi or hi >= wave.clock_tick:
        def query(lo, hi):
            if hi < wave.clock_tick and (lo, hi) == window.inner and window.inner != window.outer:
                return exact_zero("randomized-wave")  # the inside ends before the clock
            return wave.query(lo, hi)

        return window_estimate(query, window, "randomized-wave")
    clock = wave.clock_tick
    up = wave.query(lo, clock)
    readings = [up]
    lower = 0.0
    ilo, ihi = window.inner
    if ilo <= ihi:
        a = wave.query(ilo, clock)
        b = wave.query(ihi + 1, clock) if ihi + 1 <= clock else exact_zero("randomized-wave")
        readings += [a, b]
        lower = max(0.0, a.lower - b.upper)
    upper = max(up.upper, lower)
    confidence = max(0.0, 1.0 - sum(1.0 - r.confidence for r in readings))
    return Estimate(best_point(lower, upper, "additive"), lower, upper, "additive", 1.0, confidence,
                    "randomized-wave")


FAMILY = ServedFamily(core.FAMILY, (
    QueryKind("distinct", _distinct, lambda config, p: exact_zero("randomized-wave"), alert=True, monotone=True,
              # a window ending before the clock is read from its edges to the clock too
              read_ahead=(("distinct", "ranges-to-clock"),)),
))
