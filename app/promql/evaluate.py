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


def _numbers(item: dict):
    """An item's ``(label, (estimate, lower, upper))``, or None when it has no estimate (a
    quantile of an empty window)."""
    if item.get("estimate") is None or item.get("bound") is None:
        return None
    return _item_label(item), (item["estimate"], item["bound"]["lower"], item["bound"]["upper"])


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


_TEXTS: dict[float, str] = {}  # format_value of values met before (a range repeats many)
_TEXTS_KEPT = 200_000


def _text(v) -> str | None:
    """``format_value(v)`` (None for a null side), looked up for a value met before: the
    items of neighbouring instants often carry the same bounds. Zeros (0.0 and -0.0 are
    one key but two texts) and NaN (never equal to itself) are formatted each time."""
    if v is None:
        return None
    got = _TEXTS.get(v) if v else None
    if got is None:
        got = format_value(float(v))
        if v and v == v:
            if len(_TEXTS) >= _TEXTS_KEPT:
                _TEXTS.clear()
            _TEXTS[v] = got
    return got


def _item_texts(item: dict, seen: dict) -> tuple | None:
    """``(label, numbers, texts)`` of a list answer's item, looked up when the same item
    object was shown before in this request (``seen``, holding each item so that its id
    is not reused meanwhile): the answers of neighbouring instants share the items their
    windows read alike (``app.kinds.keyed``), and items are never changed once made."""
    got = seen.get(id(item))
    if got is not None:
        return got[1]
    numbers = _numbers(item)
    row = None if numbers is None else (numbers[0], numbers[1], tuple(_text(v) for v in numbers[1]))
    seen[id(item)] = (item, row)
    return row


def _prometheus_samples(body: dict, seen: dict) -> tuple:
    """An answer's samples, ``(instant, ((item label or None, (estimate, lower, upper),
    their samples), …))``, each sample the pair ``(instant, text)`` a series lists: made
    once per kept point (``app.ranges``: tuples of numbers and strings, which the garbage
    collector leaves alone), formatted once, and handed to every later range as they are
    (a refreshed 500-point heavy-hitter range lists 37,000 samples: made anew, their lists
    set off full collections that took 100 ms). A side an answer does not have (null: a
    federated answer missing a site keeps only the sides that hold, ``app.site_bounds``)
    has no sample, as an instant with no answer has none. ``seen``: the request's items
    shown so far (``_item_texts``)."""
    at = body.get("at")
    items = body.get("items")
    if items is None:
        numbers = (body["estimate"], body["bound"]["lower"], body["bound"]["upper"])
        texts = tuple(_text(v) for v in numbers)
        return at, ((None, numbers, tuple(None if t is None else (at, t) for t in texts)),)
    rows = []
    for item in items:
        got = seen.get(id(item))
        row = got[1] if got is not None else _item_texts(item, seen)
        if row is not None:
            e, lo, up = row[2]
            rows.append((row[0], row[1], (None if e is None else (at, e), None if lo is None else (at, lo),
                                          None if up is None else (at, up))))
    return at, tuple(rows)


def _collect(out: dict, query: SeriesQuery, whose, base: dict, times_ms: list[int],
             deadline: float, answers_at) -> None:
    """Each instant's answer (``answers_at(ats, show)``: the native answer objects of those
    instants, shown as their samples, or the ``QueryError`` an instant raises) as samples
    of the series ``(whose, item, bound)``; an instant the answer path refuses has none.
    Instants are answered a chunk at a time, the time budget checked between chunks."""
    wanted = [(b, i) for i, b in enumerate(("estimate", "lower", "upper")) if b in query.bounds]
    targets: dict = {}  # item -> [(series, index of the bound)] (of ``whose``)
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
            shown_at, rows = shown
            # (an answer names its instant as asked: its pairs are the series' as they are)
            as_asked = shown_at == at
            for item, _, samples in rows:
                to = targets.get(item)
                if to is None:
                    to = targets[item] = []
                    for bound, i in wanted:
                        labels = {**base, **dict([item] if item else []), "bound": bound}
                        to.append((out.setdefault((whose, item, bound), Series(labels)).values.append, i))
                for append, i in to:
                    sample = samples[i]
                    if sample is not None:
                        append(sample if as_asked else (at, sample[1]))


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
