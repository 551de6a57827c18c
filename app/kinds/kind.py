"""What a query family's serving half declares: its query kinds (:class:`QueryKind`: how
to check a kind's parameters, answer it, answer it empty, and whether and how the
Prometheus API serves it), gathered in a :class:`ServedFamily` beside the family's core
half (``tidemark.families``: its parts); and the arithmetic every kind's answer shares
(``window_estimate``, ``bracket``, ``best_point``, ``exact_zero``) and the caller's mistake
(:class:`QueryError`).

Windows are in seconds; sketches count in ticks of the stream's ``resolution``. Which
ticks a window covers is decided exactly in :mod:`tidemark.ticks`: the lower bound comes
from the ticks inside the window, the upper from the ticks that touch it, so the time
grain can only widen an interval, never make it wrong.

Tested by: tests/app/test_query_path.py (window_estimate), tests/app/test_answers_windows.py,
tests/app/test_answers_decayed.py (best_point, bracket), tests/app/test_kinds.py (the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from sketches.base import Estimate, EstimateColumns
from tidemark.families.parts import QueryFamily
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.ticks import Window

__all__ = ["QueryError", "QueryKind", "ServedFamily", "Window", "exact_zero", "window_estimate",
           "best_point", "bracket", "READ_AHEAD", "own_items", "window_estimates"]

# How the range path (``app.ranges``: one query at hundreds of instants) reads a part ahead
# of the instants, in one pass, for ``QueryKind.read_ahead``.
READ_AHEAD = {
    "ranges": "every instant's inner and outer tick ranges at once (a histogram's query_many)",
    "ranges-to-clock": "those ranges, and from each one's edges to the clock (query_many)",
    "rank-tables": "the rank tables of every instant's (outer, inner) pair in one sweep",
    "buckets": "each read once per set of time buckets the ranges cover (an ECM part)",
}


class QueryError(ValueError):
    """The caller asked for something this stream cannot answer (a 4xx)."""


def exact_zero(method: str) -> Estimate:
    """An exact 0 (nothing in the range)."""
    return Estimate(0.0, 0.0, 0.0, "relative", 0.0, 1.0, method)


def window_estimate(query: Callable[[int, int], Estimate], window: Window, method: str) -> Estimate:
    """A monotone query (a count that can only grow with the range) over the window: the
    ticks inside give the lower bound, the ticks that touch it the upper bound, so the
    time grain at the window's edges widens the interval and never breaks it."""
    outer = query(*window.outer) if window.outer[0] <= window.outer[1] else exact_zero(method)
    if window.inner == window.outer:
        return outer
    inner = query(*window.inner) if window.inner[0] <= window.inner[1] else exact_zero(method)
    return bracket(inner, outer)


def window_estimates(read_columns: Callable[[list], EstimateColumns], windows: list) -> EstimateColumns:
    """:func:`window_estimate` of every window at once, as columns (``refused``: the error
    the window's own reading raises first, outer before inner). ``read_columns(ranges)``
    reads the ranges' monotone query as columns (``SplittableHistogram.query_columns``).
    The same floats as the one-window functions: the same IEEE operations, in the same
    order, on the same operands (``bracket``, ``best_point``, ``exact_zero``)."""
    ranges = sorted({r for w in windows for r in (w.inner, w.outer) if r[0] <= r[1]})
    at = {r: i for i, r in enumerate(ranges)}
    read = read_columns(ranges)
    # an empty range reads an exact zero (relative, ε 0, certain): one more row
    est, lo, up, eps, conf = (np.append(c, v) for c, v in zip(read[:3] + read[4:6], (0.0, 0.0, 0.0, 0.0, 1.0)))
    relative = np.append(read.relative, True)
    zero = len(ranges)
    outer = np.array([at.get(w.outer, zero) for w in windows], np.int64)
    inner = np.array([at.get(w.inner, zero) for w in windows], np.int64)
    same = np.array([w.inner == w.outer for w in windows], bool)
    # bracket(inner, outer): the inner's lower bound, the outer's upper bound and guarantee
    lower = lo[inner]
    upper = np.maximum(up[outer], lower)
    with np.errstate(divide="ignore", invalid="ignore"):
        harmonic = 2 * lower * upper / (lower + upper)
    middle = np.where(relative[outer] & (lower >= 0) & (upper > 0), harmonic, (lower + upper) / 2)
    best = np.minimum(np.maximum(middle, lower), upper)
    both = np.maximum(0.0, conf[inner] + conf[outer] - 1.0)
    failed = {}
    if read.refused:
        for j, w in enumerate(windows):
            e = read.refused.get(at.get(w.outer, -1)) or (None if same[j] else read.refused.get(at.get(w.inner, -1)))
            if e is not None:
                failed[j] = e
    return EstimateColumns(np.where(same, est[outer], best), np.where(same, lo[outer], lower),
                           np.where(same, up[outer], upper), relative[outer], eps[outer],
                           np.where(same, conf[outer], both), read.method, failed)


def own_items(body: dict) -> list:
    """The answer's items, each (with its bound) copied into the answer, to be marked: a
    range's answers share the items their windows read alike (``app.kinds.keyed``)."""
    items = body.get("items")
    if not isinstance(items, list):
        return []
    body["items"] = items = [
        {**item, "bound": dict(item["bound"])} if isinstance(item, dict) and isinstance(item.get("bound"), dict)
        else dict(item) if isinstance(item, dict) else item for item in items]
    return items


def best_point(lower: float, upper: float, guarantee: str) -> float:
    """The point of ``[lower, upper]`` nearest the truth in the worst case: the middle for
    an additive bound, ``2·lower·upper/(lower + upper)`` for a relative one (its relative
    error is at most ``(upper − lower)/(upper + lower)`` wherever the truth lies)."""
    if guarantee == "relative" and lower >= 0 and upper > 0:
        return min(max(2 * lower * upper / (lower + upper), lower), upper)
    return min(max((lower + upper) / 2, lower), upper)


def bracket(low: Estimate, high: Estimate) -> Estimate:
    """The lower bound of ``low`` and the upper bound of ``high``, two readings that sandwich
    the truth (a smaller and a larger range, an older and a younger age). Both intervals
    must hold: the union bound on their failure probabilities."""
    lower, upper = low.lower, max(high.upper, low.lower)
    confidence = max(0.0, low.confidence + high.confidence - 1.0)
    return Estimate(best_point(lower, upper, high.guarantee), lower, upper, high.guarantee, high.epsilon,
                    confidence, high.method)


@dataclass(frozen=True)
class QueryKind:
    """One query of §6: how to check its parameters, answer it, and answer it empty.

    A kind over one stream (``streams == 1``, ``GET /v1/streams/{name}/{kind}``) gets the
    stream's summary and config; a kind over several (``GET /v1/{kind}?streams=A,B``)
    gets tuples of them, a summary ``None`` for a stream with nothing published yet, and
    answers that case itself. ``alert``: a rule may watch it (it answers one estimate).
    A kind's family module declares it (``app/kinds/<family>.py``).
    """

    name: str
    run: Callable[[StreamSummary, StreamConfig, Window, dict], Estimate | list]
    empty: Callable[[StreamConfig, dict], Estimate | list] | None = None
    check: Callable[[StreamConfig, dict], dict] = lambda config, params: params
    streams: int = 1
    alert: bool = False
    # ``run`` of many windows at once (answers over time, ``app.ranges``): a list with
    # each window's result or the SketchError its ``run`` raises, or None (run each)
    run_many: Callable[[StreamSummary, StreamConfig, list, dict], list | None] | None = None
    # ``run``'s estimates of many windows at once, as columns (``EstimateColumns``), for a
    # kind whose result is one estimate (answers over time, ``app.ranges``)
    run_columns: Callable[[StreamSummary, StreamConfig, list, dict], EstimateColumns] | None = None
    # the show that writes out what ``run_columns`` gives (``app.ranges``): ``estimates`` for
    # ``EstimateColumns``, another name for a kind's own columns (``quantiles``)
    columns_shown_by: str = "estimates"
    # The Prometheus API (``app.promql``) serves every kind as ``tidemark_<kind>`` series
    # (``-`` written ``_``), its parameters as labels; a kind whose answer is no set of
    # estimates with bounds per instant says here why it is not served, and where to read it.
    not_series: str | None = None
    # The answer can only grow when events are added (weights, decays, counts ≥ 0): a
    # federated answer missing a site keeps its lower bound (``app.site_bounds``).
    monotone: bool = False
    # The answer counts every kept event up to ``at``, weighted by its age, not the events
    # of ``[at − window, at]``: a lost event before the window still concerns it
    # (``answers.lost_in_window``).
    decayed: bool = False
    # The parts the range path reads ahead for this kind, as ``(part, how)`` pairs (``how``
    # a key of ``READ_AHEAD``); a part not named is read instant by instant.
    read_ahead: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        unknown = [how for _, how in self.read_ahead if how not in READ_AHEAD]
        if unknown:
            raise ValueError(f"{self.name}: no read-ahead {unknown} (known: {', '.join(READ_AHEAD)})")


@dataclass(frozen=True)
class ServedFamily:
    """The serving half of a query family: its core half (``family``, from
    ``tidemark.families``: the parts its kinds read) and its query kinds, in order."""

    family: QueryFamily
    kinds: tuple[QueryKind, ...]

    @property
    def name(self) -> str:
        return self.family.name
