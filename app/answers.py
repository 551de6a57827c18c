"""Answers to queries, computed from a published summary: one implementation for the
HTTP endpoints, the dashboard and the alerts. The query kinds (their parameters and
answers) are declared by the query families, one module a family in ``app/kinds/``, whose
registry builds :data:`QUERY_KINDS`; this module reads the window, looks the kind up, runs
it and shapes the contract's answer object.

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
from fractions import Fraction

from app.kinds import QUERY_KINDS
from app.kinds.kind import QueryError, QueryKind, best_point, bracket, own_items, window_estimate  # noqa: F401
from app.site_bounds import mark_sites
from sketches.base import Estimate, SketchError
from tidemark.streams import StreamConfig, parse_duration
from tidemark.summary import StreamSummary
from tidemark.ticks import Window, is_late, make_window

__all__ = ["QueryError", "Window", "answer", "too_old", "answer_from_store", "QUERY_KINDS", "QueryKind",
           "lookup", "streams_of", "alert_kinds", "parse_window", "bound_of", "window_estimate", "bracket",
           "best_point"]


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
           status: dict, params: dict, window: Window | None = None, result=None,
           checked: dict | None = None) -> dict:
    """The contract's answer object (§6) for one query over one stream; ``window``: what
    ``parse_window`` makes of ``params`` (``app.ranges`` makes many at once), ``result``:
    what the kind's ``run`` gives for it when known already (its ``run_many``),
    ``checked``: what the kind's ``check`` makes of ``params`` when known already."""
    query = lookup(kind, streams=1)
    if window is None:
        window = parse_window(params, config, status.get("clock"))
    if checked is None:
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
    decayed kind (``QueryKind.decayed``: it has no start)."""
    lost = getattr(summary, "lost", None)
    if not lost or Fraction(lost["ts_min"]) > Fraction(window.at):
        return None
    query = QUERY_KINDS.get(kind)
    if not (query is not None and query.decayed) and \
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


def nothing_lost(summary: StreamSummary | None, status: dict | None) -> bool:
    """No answer read from ``summary`` can miss an accepted event: ``mark_incomplete``
    leaves every one as it is."""
    return not getattr(summary, "lost", None) and _unrecorded(summary, status) is None


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
    for b in [body.get("bound")] + [item.get("bound") for item in own_items(body) if isinstance(item, dict)]:
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
