"""The distinct family's query kind: ``distinct``, the number of distinct keys in a
window, from the randomized wave (Gibbons and Tirthapura 2004, §4.1, §5; part in
``tidemark/families/distinct.py``). A rule may watch it; the Prometheus API serves it as
series (``tidemark_distinct``).

Tested by: tests/app/test_distinct_before_clock.py (against the exact oracle, windows
ending before the clock), tests/app/test_answers_windows.py.
"""

from __future__ import annotations

import numpy as np

from app.kinds.kind import QueryKind, ServedFamily, best_point, exact_zero, window_estimate, window_estimates
from sketches.base import Estimate, EstimateColumns
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


def _distinct_columns(summary, config, windows: list, params) -> EstimateColumns:
    """:func:`_distinct` of every window at once, as columns: the windows that reach the
    clock through ``window_estimates`` (an inside that ends before it reads an exact
    zero, as there), those that end before it from their three readings to the clock;
    every range read once (``RandomizedWave.query_columns``), and the same operations on
    the same operands as :func:`_distinct`."""
    wave = summary["distinct"]
    clock = wave.clock_tick
    before = np.array([not wave.is_empty and w.outer[0] <= w.outer[1] and w.outer[1] < clock for w in windows],
                      bool)
    n = len(windows)
    out = EstimateColumns.zeros(n, "randomized-wave", relative=False)
    reaching = np.flatnonzero(~before)
    if reaching.size:
        got = window_estimates(lambda ranges: _reaching_clock(wave, clock, ranges), [windows[j] for j in reaching])
        _put(out, reaching, got)
    ended = np.flatnonzero(before)
    if ended.size:
        _put(out, ended, _before_clock(wave, clock, [windows[j] for j in ended]))
    return out


def _reaching_clock(wave, clock: int, ranges: list) -> EstimateColumns:
    """The readings of a window that reaches the clock: a range ending before it is the
    inside of such a window, which reads an exact zero (``_distinct``'s ``query``)."""
    live = [j for j, r in enumerate(ranges) if r[1] >= clock]
    got = wave.query_columns([ranges[j] for j in live])
    n = len(ranges)
    cols = EstimateColumns.zeros(n, got.method, relative=True)
    _put(cols, np.asarray(live, np.int64), got)
    return cols


def _before_clock(wave, clock: int, windows: list) -> EstimateColumns:
    """``_distinct`` of windows that end before the clock: ``n(lo)`` over the touching
    ticks, and ``n(lo') − n(hi' + 1)`` over the inside ones, each read to the clock."""
    ups = [(w.outer[0], clock) for w in windows]
    has_inner = [w.inner[0] <= w.inner[1] for w in windows]
    starts = [(w.inner[0], clock) if inner else None for w, inner in zip(windows, has_inner)]
    ends = [(w.inner[1] + 1, clock) if inner and w.inner[1] + 1 <= clock else None
            for w, inner in zip(windows, has_inner)]
    ranges = sorted({r for r in ups + starts + ends if r is not None})
    at = {r: i for i, r in enumerate(ranges)}
    read = wave.query_columns(ranges)
    zero = len(ranges)  # a range past the clock reads an exact zero
    lower_of, upper_of, conf_of = (np.append(c, v) for c, v in ((read.lower, 0.0), (read.upper, 0.0),
                                                                 (read.confidence, 1.0)))
    up = np.array([at[r] for r in ups], np.int64)
    a = np.array([at[r] if r is not None else zero for r in starts], np.int64)
    b = np.array([at[r] if r is not None else zero for r in ends], np.int64)
    inner = np.array(has_inner, bool)
    lower = np.where(inner, np.maximum(0.0, lower_of[a] - upper_of[b]), 0.0)
    upper = np.maximum(upper_of[up], lower)
    # 1 − Σ (1 − confidence) over the readings taken, in their order
    doubt = np.where(inner, ((1.0 - conf_of[up]) + (1.0 - conf_of[a])) + (1.0 - conf_of[b]), 1.0 - conf_of[up])
    n = len(windows)
    cols = EstimateColumns(np.minimum(np.maximum((lower + upper) / 2, lower), upper), lower, upper,
                           np.zeros(n, bool), np.ones(n), np.maximum(0.0, 1.0 - doubt), "randomized-wave", {})
    for j, reads in enumerate(zip(ups, starts, ends)):
        e = next((read.refused[at[r]] for r in reads if r is not None and at[r] in read.refused), None)
        if e is not None:
            cols.refused[j] = e
    return cols


def _put(cols: EstimateColumns, rows: np.ndarray, got: EstimateColumns) -> None:
    """``got``'s rows into ``cols`` at ``rows`` (its refusals too)."""
    for mine, theirs in zip(cols[:6], got[:6]):
        mine[rows] = theirs
    cols.refused.update((int(rows[j]), e) for j, e in got.refused.items())


FAMILY = ServedFamily(core.FAMILY, (
    QueryKind("distinct", _distinct, lambda config, p: exact_zero("randomized-wave"), alert=True, monotone=True,
              # a window ending before the clock is read from its edges to the clock too
              read_ahead=(("distinct", "ranges-to-clock"),), run_columns=_distinct_columns),
))
