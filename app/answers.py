"""Answers to queries, computed from a published summary: one implementation for the
HTTP endpoints, the dashboard and the alerts.

Windows are in seconds; sketches count in ticks of the stream's ``resolution``. Which
ticks a window covers is decided exactly in :mod:`tidemark.ticks`: a tick is *inside*
``[at - window, at]`` when all of its events are, and *touches* it when some may be. The
lower bound comes from the ticks inside, the upper from the ticks that touch, so the time
grain can only widen an interval, never make it wrong — and every bound says how wide it
is (``half_width``, ``half_width_relative``) beside the structure's ``epsilon``.

Tested by: tests/app/test_answers_windows.py and tests/app/test_answers_decayed.py (against
exact oracles), tests/app/test_query_path.py (window_estimate, bound_of),
tests/app/test_kinds.py, tests/app/test_exact_time.py (parse_window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from app.site_bounds import mark_sites
from sketches.base import Estimate, SketchError
from tidemark.streams import StreamConfig, parse_duration
from tidemark.summary import StreamSummary
from tidemark.ticks import Window, is_late, make_window

__all__ = ["QueryError", "Window", "answer", "too_old", "answer_from_store", "QUERY_KINDS", "QueryKind", "register",
           "lookup", "streams_of", "alert_kinds", "parse_window", "bound_of"]


class QueryError(ValueError):
    """The caller asked for something this stream cannot answer (a 4xx)."""


def parse_window(params: dict, config: StreamConfig, clock: float | None) -> Window:
    raw = params.get("window")
    seconds = config.max_window if raw in (None, "") else _duration(raw, "window")
    if seconds > config.max_window:
        raise QueryError(
            f"window {seconds:g}s exceeds the stream's max_window {config.max_window:g}s"
        )
    at_raw = params.get("at")
    if at_raw in (None, ""):
        at = clock if clock is not None else 0.0
    else:
        try:
            at = float(at_raw)
        except ValueError:
            raise QueryError(f"at {at_raw!r} is not a number (Unix seconds)") from None
        if not math.isfinite(at):
            raise QueryError("at must be finite")
    # The window's start must be a time the worker still counts: the late rule, exactly.
    if clock is not None and is_late(Fraction(at) - Fraction(seconds), clock, config.max_window):
        raise too_old(at, seconds, clock, config.max_window)
    return make_window(seconds, at, config.resolution, clock)


def too_old(at: float, seconds: float, clock: float, max_window: float) -> QueryError:
    """The refusal of a window that starts before ``clock − max_window`` (``parse_window``
    decides it; ``app.ranges`` for many instants at once)."""
    return QueryError(f"window start {at - seconds:g} is before clock - max_window = "
                      f"{clock - max_window:g}: events that old are no longer kept")


def _duration(raw, name: str) -> float:
    try:
        return parse_duration(raw, name)
    except ValueError as e:
        raise QueryError(str(e)) from None


def _exact_zero(method: str) -> Estimate:
    return Estimate(0.0, 0.0, 0.0, "relative", 0.0, 1.0, method)


def window_estimate(query: Callable[[int, int], Estimate], window: Window, method: str) -> Estimate:
    """A monotone query (a count that can only grow with the range) over the window: the
    ticks inside give the lower bound, the ticks that touch it the upper bound, so the
    time grain at the window's edges widens the interval and never breaks it."""
    outer = query(*window.outer) if window.outer[0] <= window.outer[1] else _exact_zero(method)
    if window.inner == window.outer:
        return outer
    inner = query(*window.inner) if window.inner[0] <= window.inner[1] else _exact_zero(method)
    return bracket(inner, outer)


def best_point(lower: float, upper: float, kind: str) -> float:
    """The point of ``[lower, upper]`` nearest the truth in the worst case: the middle for
    an additive bound, ``2·lower·upper/(lower + upper)`` for a relative one (its relative
    error is at most ``(upper − lower)/(upper + lower)`` wherever the truth lies)."""
    if kind == "relative" and lower >= 0 and upper > 0:
        return min(max(2 * lower * upper / (lower + upper), lower), upper)
    return min(max((lower + upper) / 2, lower), upper)


def bracket(low: Estimate, high: Estimate) -> Estimate:
    """The lower bound of ``low`` and the upper bound of ``high``, two readings that sandwich
    the truth (a smaller and a larger range, an older and a younger age). Both intervals
    must hold: the union bound on their failure probabilities."""
    lower, upper = low.lower, max(high.upper, low.lower)
    confidence = max(0.0, low.confidence + high.confidence - 1.0)
    return Estimate(best_point(lower, upper, high.kind), lower, upper, high.kind, high.epsilon,
                    confidence, high.method)


def bound_of(e: Estimate) -> dict:
    """The contract's ``bound`` object, with how wide the interval really is:
    ``half_width = (upper − lower)/2`` and ``half_width_relative = half_width/estimate``
    (0 for a point, null when the estimate is 0 but the interval is not). ``epsilon``
    stays the structure's guarantee; these describe this answer."""
    d = e.bound()
    half = (e.upper - e.lower) / 2
    d["half_width"] = half
    d["half_width_relative"] = 0.0 if half == 0 else (half / abs(e.estimate) if e.estimate else None)
    return d


@dataclass(frozen=True)
class QueryKind:
    """One query of §6: how to check its parameters, answer it, and answer it empty.

    A kind over one stream (``streams == 1``, ``GET /v1/streams/{name}/{kind}``) gets the
    stream's summary and config; a kind over several (``GET /v1/{kind}?streams=A,B``)
    gets tuples of them, a summary ``None`` for a stream with nothing published yet, and
    answers that case itself. ``alert``: a rule may watch it (it answers one estimate).
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


QUERY_KINDS: dict[str, QueryKind] = {}


def register(kind: QueryKind) -> QueryKind:
    QUERY_KINDS[kind.name] = kind
    return kind


def lookup(kind: str, streams: int | None = None) -> QueryKind:
    """The registered kind, or the caller's mistake naming the kinds that exist."""
    query = QUERY_KINDS.get(kind)
    if query is not None and streams in (None, query.streams):
        return query
    if query is not None:
        raise QueryError(f"{kind} is a query over {query.streams} streams: "
                         f"GET /v1/{kind}?streams={','.join('ABCDEFGH'[:query.streams])}")
    known = sorted(n for n, q in QUERY_KINDS.items() if streams in (None, q.streams))
    raise QueryError(f"unknown query {kind!r}; known: {', '.join(known)}")


def alert_kinds() -> tuple[str, ...]:
    return tuple(sorted(n for n, q in QUERY_KINDS.items() if q.alert))


def streams_of(kind: QueryKind, stream: str | None, params: dict) -> list[str]:
    """The streams a query reads: its own, or the ``streams=A,B`` of a multi-stream kind."""
    if kind.streams == 1:
        return [stream]
    names = [n.strip() for n in str(params.get("streams", "")).split(",") if n.strip()]
    if len(names) != kind.streams:
        raise QueryError(f"{kind.name} needs streams=A,B ({kind.streams} stream names)")
    return names


def run(query: QueryKind, *args):
    """The one place a sketch's refusal (a range it no longer keeps, sketches of two
    shapes) becomes the caller's mistake, a 422."""
    try:
        return query.run(*args)
    except SketchError as e:
        raise QueryError(str(e)) from None


def _windowed(part: str, method: str) -> QueryKind:
    return QueryKind(
        part,
        run=lambda summary, config, window, p: window_estimate(summary[part].query, window, method),
        empty=lambda config, p: _exact_zero(method),
        alert=True,
    )


register(_windowed("count", "splittable-histogram"))
register(_windowed("sum", "splittable-histogram"))


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
    if wave.is_empty or lo > hi or hi >= wave.clock:
        def query(lo, hi):
            if hi < wave.clock and (lo, hi) == window.inner and window.inner != window.outer:
                return _exact_zero("randomized-wave")  # the inside ends before the clock
            return wave.query(lo, hi)

        return window_estimate(query, window, "randomized-wave")
    clock = wave.clock
    up = wave.query(lo, clock)
    readings = [up]
    lower = 0.0
    ilo, ihi = window.inner
    if ilo <= ihi:
        a = wave.query(ilo, clock)
        b = wave.query(ihi + 1, clock) if ihi + 1 <= clock else _exact_zero("randomized-wave")
        readings += [a, b]
        lower = max(0.0, a.lower - b.upper)
    upper = max(up.upper, lower)
    confidence = max(0.0, 1.0 - sum(1.0 - r.confidence for r in readings))
    return Estimate(best_point(lower, upper, "additive"), lower, upper, "additive", 1.0, confidence,
                    "randomized-wave")


register(QueryKind("distinct", _distinct, lambda config, p: _exact_zero("randomized-wave"), alert=True))


def as_of(status: dict) -> dict:
    out = {
        "sketch_version": status["sketch_version"],
        "updated_at": status["updated_at"],
        "events": status["events"],
        "late_dropped": status["late_dropped"],
    }
    if "sites" in status:  # a federated stream: each site's own (contract §11)
        out["sites"] = status["sites"]
    return out


def shape(result: Estimate | list, **outer) -> dict:
    """The contract's answer object: ``estimate`` + ``bound``, or ``items``."""
    if isinstance(result, Estimate):
        body = {"estimate": result.estimate, "bound": bound_of(result)}
    else:
        body = {"items": list(result), **getattr(result, "extra", {})}
    body.update(outer)
    return body


def answer(kind: str, name: str, config: StreamConfig, summary: StreamSummary | None,
           status: dict, params: dict, window: Window | None = None, result=None) -> dict:
    """The contract's answer object (§6) for one query over one stream; ``window``: what
    ``parse_window`` makes of ``params`` (``app.ranges`` makes many at once), ``result``:
    what the kind's ``run`` gives for it when known already (its ``run_many``)."""
    query = lookup(kind, streams=1)
    if window is None:
        window = parse_window(params, config, status.get("clock"))
    checked = query.check(config, params)
    if summary is None:  # nothing published yet: no event, exactly
        result = query.empty(config, checked)
    elif isinstance(result, SketchError):
        raise QueryError(str(result))
    elif result is None:
        result = run(query, summary, config, window, checked)
    body = shape(result, stream=name, query=kind, window=window.seconds, at=window.at,
                 as_of=as_of(status))
    body = mark_incomplete(body, summary, kind, window, status)
    return mark_sites(body, kind, status.get("incomplete_sites"))


def lost_in_window(summary: StreamSummary | None, kind: str, window: Window) -> dict | None:
    """The summary's record of accepted events an update failed to take, when one of them
    may lie in what the query counts: ``[at − window, at]``, or any time up to ``at`` for a
    decayed kind (which has no start)."""
    lost = getattr(summary, "lost", None)
    if not lost or Fraction(lost["ts_min"]) > Fraction(window.at):
        return None
    if not kind.startswith("decayed") and \
            Fraction(lost["ts_max"]) < Fraction(window.at) - Fraction(window.seconds):
        return None
    return lost


def _unrecorded(summary: StreamSummary | None, status: dict | None) -> dict | None:
    """Lost events the status counts but no summary record places in time (a shard whose
    state could not be read when its update failed): they may lie in any window."""
    lost = getattr(summary, "lost", None)
    n = int((status or {}).get("failed_events") or 0) - (lost["events"] if lost else 0)
    if n <= 0:
        return None
    return {"events": n, "weight": None, "ts_min": None, "ts_max": None,
            "why": (status or {}).get("failed") or "a shard's update failed"}


def mark_incomplete(body: dict, summary: StreamSummary | None, kind: str, window: Window,
                    status: dict | None = None) -> dict:
    """An answer that may miss accepted events says so: ``incomplete`` names them and every
    bound's ``confidence`` drops to 0 (its bracket is of the events counted, not of all)."""
    lost = lost_in_window(summary, kind, window) or _unrecorded(summary, status)
    if lost is None:
        return body
    when = ("at unknown times" if lost["ts_min"] is None
            else f"with ts in [{lost['ts_min']!r}, {lost['ts_max']!r}]")
    body["incomplete"] = {**lost, "detail": (
        f"{lost['events']} accepted event(s) {when} could not be counted ({lost['why']}); "
        "this answer leaves them out")}
    for b in [body.get("bound")] + [item.get("bound") for item in body.get("items", [])
                                    if isinstance(item, dict)]:
        if isinstance(b, dict):
            b["confidence"] = 0.0
    if "complete" in body:  # heavy hitters: a lost event could be a listed key's or a new one
        body["complete"] = False
    return body


def answer_streams(kind: str, names: list[str], configs: list[StreamConfig], read: list[tuple],
                   params: dict) -> dict:
    """The answer of a query over several streams (``read``: their ``(summary, status)``).

    ``at`` defaults to the latest clock; the window must be kept by every stream. The ticks
    are those of the window read at the latest clock: a stream whose clock is earlier holds
    nothing after it, while a range cut at the earliest clock would drop the later
    stream's events inside the window."""
    query = lookup(kind)
    clocks = [status["clock"] for _, status in read if status["clock"] is not None]
    params = dict(params)
    if params.get("at") in (None, "") and clocks:
        params["at"] = repr(max(clocks))
    windows = [parse_window(params, c, status["clock"]) for c, (_, status) in zip(configs, read)]
    window = max(windows, key=lambda w: -math.inf if w.clock is None else w.clock)
    checked = query.check(tuple(configs), params)
    result = run(query, tuple(s for s, _ in read), tuple(configs), window, checked)
    body = shape(result, streams=names, query=kind, window=window.seconds, at=window.at,
                 as_of={"sketch_versions": {n: st["sketch_version"] for n, (_, st) in zip(names, read)},
                        "events": {n: st["events"] for n, (_, st) in zip(names, read)}})
    for n, (summary, status) in zip(names, read):
        body = mark_incomplete(body, summary, kind, window, status)
        if "sites" in status:
            body["as_of"].setdefault("sites", {})[n] = status["sites"]
        missing = status.get("incomplete_sites")
        if missing:  # a stream's sites named as stream/site
            body = mark_sites(body, kind, {f"{n}/{site}": why for site, why in missing.items()})
    return body


def answer_from_store(store, kind: str, name: str | None, params: dict, streams: int | None = None) -> dict:
    """Read what the query needs from the store and answer it (queries, dashboard, alerts);
    a multi-stream kind reads the streams named in ``params["streams"]``. ``streams``: the
    number of streams the caller's route serves (None: any)."""
    query = lookup(kind, streams)
    names = streams_of(query, name, params)
    configs = [store.declarations.config(n) for n in names]
    read = [store.reads.summary(n) for n in names]
    if query.streams == 1:
        return answer(kind, name, configs[0], *read[0], params)
    return answer_streams(kind, names, configs, read, params)
