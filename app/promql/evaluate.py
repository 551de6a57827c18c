"""A selector's answers at instants, as Prometheus series (contract §10).

Every sample is an answer of :func:`app.answers.answer` — the function behind
``GET /v1/streams/{name}/{kind}`` — at ``at`` = the sample's time, so a bound read through
this API is the native bound at the same ``at``. A stream's summary is read once for all
the instants of a request (as the history route does): one decode at most, one version
throughout.

What is refused as a whole (a window beyond ``max_window``, parameters the kind refuses, a
guarantee no summary can give) raises :class:`app.answers.QueryError` before any instant is
answered; an instant with no answer — a refusal at that instant (a window no longer kept),
quantiles of an empty window — simply has no sample.

Tested by: tests/app/promql/test_evaluate.py (ranges of several chunks, in process),
tests/app/test_prometheus_api.py (query and query_range against the real API),
tests/frontend/test_dashboard.py.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from decimal import Decimal

from app.answers import QueryError, answer_streams, lookup
from app.ranges import RangeCache, answers_at
from app.promql.query import SeriesQuery
from app.promql.times import seconds
from app.store import StreamNotFound
from sketches.base import SketchError

log = logging.getLogger(__name__)

__all__ = ["Series", "EvaluationTimeout", "evaluate", "format_value", "window_seconds", "DEFAULT_WINDOW_MS"]

DEFAULT_WINDOW_MS = 300_000
_CHUNK = 500  # instants answered between two looks at the time budget
ITEM_LABELS = ("q", "key", "value")  # what tells the items of a list answer apart


class EvaluationTimeout(RuntimeError):
    """The request's time budget ran out (Prometheus' ``timeout`` error)."""


@dataclass
class Series:
    labels: dict[str, str]
    # each sample as Prometheus writes it: (time in seconds, the value's text)
    values: list[tuple] = field(default_factory=list)


def format_value(x: float) -> str:
    """A sample's value as Prometheus writes it (Go's ``FormatFloat(x, 'f', -1, 64)``)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    text = repr(float(x))
    return format(Decimal(text), "f") if "e" in text else text.removesuffix(".0")


def window_seconds(query: SeriesQuery, config, step_ms: int | None) -> float:
    """The selector's ``window``; by default the query's step (else 5 minutes), at most the
    stream's ``max_window`` (an explicit window beyond it is refused, as natively)."""
    if query.window_ms is not None:
        return seconds(query.window_ms)
    return min(seconds(step_ms or DEFAULT_WINDOW_MS), config.max_window)


def _item_label(item: dict) -> tuple[str, str]:
    for name in ITEM_LABELS:
        if name in item:
            v = item[name]
            return name, format_value(v) if isinstance(v, float) else str(v)
    raise QueryError("this kind's items carry no q, key or value to tell them apart")


def _checked(query: SeriesQuery, kind, configs: list, step_ms: int | None) -> dict:
    """The kind's parameters with the window, or the refusal of the whole query (a window
    beyond a ``max_window``, parameters or a guarantee the kind refuses)."""
    window = min(window_seconds(query, c, step_ms) for c in configs)
    for c in configs:
        if window > c.max_window:
            raise QueryError(f"window {window:g}s exceeds the stream's max_window {c.max_window:g}s")
    params = {**dict(query.params), "window": repr(window)}
    kind.check(configs[0] if kind.streams == 1 else tuple(configs), params)
    return params


def _text(v) -> str | None:
    """``format_value(v)`` (None for a null side): a float's shortest repr, without a
    trailing ``.0``; exponents, infinities and NaN the long way."""
    if v is None:
        return None
    text = repr(float(v))
    if text[-2:] == ".0":
        return text[:-2]
    return format_value(float(v)) if "e" in text or "n" in text else text


def _row(item: dict) -> tuple | None:
    """A list answer's item as its series show it, ``(label, (estimate, lower, upper)
    texts)``; None when it has no estimate (a quantile of an empty window)."""
    bound = item.get("bound")
    if item.get("estimate") is None or bound is None:
        return None
    return _item_label(item), (_text(item["estimate"]), _text(bound["lower"]), _text(bound["upper"]))


def _prometheus_samples(body: dict, seen: dict) -> tuple:
    """An answer as its samples show it, ``(instant, rows)``: a row ``(item label or None,
    (estimate, lower, upper) texts)`` per item (a side an answer does not have, null: a
    federated answer missing a site keeps only the sides that hold, ``app.site_bounds``,
    has no sample, as an instant with no answer has none). Made once per kept point
    (``app.ranges``: tuples of strings, which the garbage collector leaves alone) and
    handed to every later range as it is. The rows of a list answer's items are made once
    per request and shared by every answer listing the same item object (``seen``, by
    ``id``, holding the item so that its id is not reused meanwhile): the answers of
    neighbouring instants share the items their windows read alike (``app.kinds.keyed``),
    and items are never changed once made."""
    items = body.get("items")
    if items is None:
        bound = body["bound"]
        return body.get("at"), ((None, (_text(body["estimate"]), _text(bound["lower"]), _text(bound["upper"]))),)
    rows = []
    for item in items:
        got = seen.get(id(item))
        if got is None:
            got = seen[id(item)] = (item, _row(item))
        if got[1] is not None:
            rows.append(got[1])
    return body.get("at"), tuple(rows)


def _collect(out: dict, query: SeriesQuery, whose, base: dict, times_ms: list[int],
             deadline: float, answers_at) -> None:
    """Each instant's answer (``answers_at(ats, show)``: the native answer objects of those
    instants, shown as their rows, or the ``QueryError`` an instant raises) as samples of
    the series ``(whose, item, bound)``; an instant the answer path refuses has none.
    Instants are answered a chunk at a time, the time budget checked between chunks; each
    item's instants and texts are gathered first, and its series' samples made at the end
    in one pass each (a 500-point heavy-hitter range has 37,000 samples)."""
    wanted = [(b, i) for i, b in enumerate(("estimate", "lower", "upper")) if b in query.bounds]
    shown_of: dict = {}  # item label -> ([instant], [texts])
    seen: dict = {}

    def show(body: dict) -> tuple:  # (kept points are told apart by this name: one rendering)
        return _prometheus_samples(body, seen)

    for first in range(0, len(times_ms), _CHUNK):
        if time.monotonic() > deadline:
            raise EvaluationTimeout("query timed out in expression evaluation")
        ats = [seconds(t) for t in times_ms[first : first + _CHUNK]]
        for at, shown in zip(ats, answers_at(ats, show)):
            if isinstance(shown, QueryError):
                continue  # a refusal at this instant: no sample
            for item, texts in shown[1]:
                got = shown_of.get(item)
                if got is None:
                    got = shown_of[item] = ([], [])
                got[0].append(at)  # (the instant as asked: a kept point says the same one)
                got[1].append(texts)
    for item, (ats, texts) in shown_of.items():
        for bound, i in wanted:
            labels = {**base, **dict([item] if item else []), "bound": bound}
            series = out.setdefault((whose, item, bound), Series(labels))
            series.values.extend([(at, t[i]) for at, t in zip(ats, texts) if t[i] is not None])


def _versions_of(store, name: str, summary):
    summaries = getattr(store, "summaries", None)
    return None if summaries is None else summaries.versions_of(name, summary)


def _shown(show, body):
    return body if isinstance(body, QueryError) else show(body)


def _refusal_or(answer_one, *args):
    try:
        return answer_one(*args)
    except QueryError as e:
        return e


def _one_stream(store, query: SeriesQuery, name: str, times_ms: list[int], step_ms: int | None,
                out: dict, deadline: float, cache: RangeCache | None) -> None:
    config = store.declarations.config(name)
    summary, status = store.reads.summary(name)  # one read: every instant below is of this version
    params = _checked(query, lookup(query.kind, streams=1), [config], step_ms)
    base = {"__name__": query.metric, **dict(query.labels), "stream": name}
    _collect(out, query, name, base, times_ms, deadline,
             lambda ats, show: answers_at(query.kind, name, config, summary, status, params, ats, cache,
                                          _versions_of(store, name, summary), show))


def _together(store, query: SeriesQuery, names: tuple[str, ...], times_ms: list[int],
              step_ms: int | None, out: dict, deadline: float) -> None:
    """A kind over several streams (``tidemark_inner_product{streams="A,B"}``): each stream
    read once, every instant answered by :func:`app.answers.answer_streams` as natively."""
    configs = [store.declarations.config(n) for n in names]
    read = [store.reads.summary(n) for n in names]
    params = _checked(query, lookup(query.kind), configs, step_ms)
    base = {"__name__": query.metric, **dict(query.labels)}
    _collect(out, query, names, base, times_ms, deadline,
             lambda ats, show: [_shown(show, _refusal_or(answer_streams, query.kind, list(names), configs,
                                                         read, {**params, "at": repr(at)})) for at in ats])


def evaluate(store, query: SeriesQuery, names: list[str], times_ms: list[int],
             step_ms: int | None = None, timeout: float = math.inf,
             cache: RangeCache | None = None) -> list[Series]:
    """The series of ``query`` over the streams ``names`` (already matched and allowed; a
    kind over several streams reads them together) at
    ``times_ms``, sorted by their labels; :class:`EvaluationTimeout` after ``timeout``
    seconds (an answer at a past instant costs a millisecond or more: 11,000 of them over
    many streams would hold a worker thread for minutes)."""
    out: dict = {}
    deadline = time.monotonic() + timeout
    if isinstance(query.stream, tuple):
        _together(store, query, query.stream, times_ms, step_ms, out, deadline)
        return sorted((s for s in out.values() if s.values), key=lambda s: sorted(s.labels.items()))
    for name in names:
        try:
            _one_stream(store, query, name, times_ms, step_ms, out, deadline, cache)
        except StreamNotFound:
            if isinstance(query.stream, str):
                raise
            # matched by a regex, deleted since it was listed: as if never listed
        except SketchError:
            if isinstance(query.stream, str):
                raise
            # matched by a regex, its published summary unreadable now (refused whole,
            # app.store): it has no samples, the other streams still answer
            log.warning("stream %r: summary unreadable, left out of a selector", name)
    return sorted((s for s in out.values() if s.values), key=lambda s: sorted(s.labels.items()))
