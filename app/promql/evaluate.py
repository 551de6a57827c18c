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

import orjson

from app.answers import QueryError, answer_streams, lookup
from app.promql.blocks import Blocks, by_item, render, runs
from app.ranges import RangeCache, answers_at, params_key, refused
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
    # each sample as Prometheus writes it: (time in seconds, the value's text); or all of
    # them written as a JSON array (``evaluate(..., rendered=True)``)
    values: list[tuple] | orjson.Fragment = field(default_factory=list)


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
    and items are never changed once made. Answers listing the same items, in the same
    order, share one rows tuple (``seen`` by the items' ids: one C call, not a Python
    step per item), which ``app.promql.blocks.render`` then takes once for them all."""
    items = body.get("items")
    if items is None:
        bound = body["bound"]
        return body.get("at"), ((None, (_text(body["estimate"]), _text(bound["lower"]), _text(bound["upper"]))),)
    listed = tuple(map(id, items))
    got = seen.get(listed)
    if got is None:
        rows = []
        for item in items:
            row = seen.get(id(item))
            if row is None:
                row = seen[id(item)] = (item, _row(item))
            if row[1] is not None:
                rows.append(row[1])
        got = seen[listed] = (items, tuple(rows))
    return body.get("at"), got[1]


def _answered(times_ms: list[int], todo: list[int], deadline: float, answers_at, show) -> dict:
    """``{index: shown}`` of the instants ``times_ms[i]`` for ``i`` in ``todo``
    (``answers_at(ats, show)``: each answer shown, or the ``QueryError`` that instant
    raises), a chunk at a time, the time budget checked between chunks."""
    shown: dict = {}
    for first in range(0, len(todo), _CHUNK):
        if time.monotonic() > deadline:
            raise EvaluationTimeout("query timed out in expression evaluation")
        chunk = todo[first : first + _CHUNK]
        shown.update(zip(chunk, answers_at([seconds(times_ms[i]) for i in chunk], show)))
    return shown


def _shower():
    """A request's ``show`` (kept points are told apart by its name: one rendering), with
    the rows of the items it has shown (``_prometheus_samples``)."""
    seen: dict = {}

    def show(body: dict) -> tuple:
        return _prometheus_samples(body, seen)

    # an answer of one estimate, shown from the estimate alone (``app.ranges``: no answer
    # object is made for it); the same rows as ``_prometheus_samples`` makes of its answer
    show.estimate = lambda at, e: (at, ((None, (_text(e.estimate), _text(e.lower), _text(e.upper))),))
    # many such answers at once, from their numbers as columns
    show.estimates = lambda ats, columns, about: [
        (at, ((None, texts),))
        for at, texts in zip(ats, zip(_texts(columns.estimate), _texts(columns.lower), _texts(columns.upper)))]
    show.quantiles = _quantile_rows
    return show


def _quantile_rows(ats: list[float], columns, about: dict) -> list[tuple]:
    """The rows ``_prometheus_samples`` makes of each answer of quantile columns
    (``app.kinds.values.QuantileColumns``): an item per q, labelled as ``_item_label``
    labels it, for a window that holds an event; none for one that holds none."""
    labels = [("q", format_value(q)) for q in columns.qs]
    texts = [list(zip(_texts(columns.point[:, k]), _texts(columns.lower[:, k]), _texts(columns.upper[:, k])))
             for k in range(len(labels))]
    rows = [tuple(zip(labels, per)) for per in zip(*texts)] if labels else [()] * len(ats)
    return [(at, row if has else ()) for at, row, has in zip(ats, rows, columns.has.tolist())]


def _texts(values) -> list[str]:
    """``_text`` of each number of a float array."""
    xs = values.tolist()
    return [t[:-2] if t[-2:] == ".0" else (format_value(v) if "e" in t or "n" in t else t)
            for v, t in zip(xs, map(repr, xs))]


def _labels(base: dict, item, bound: str) -> dict:
    return {**base, **dict([item] if item else []), "bound": bound}


def _wanted(query: SeriesQuery) -> list[tuple[str, int]]:
    return [(b, i) for i, b in enumerate(("estimate", "lower", "upper")) if b in query.bounds]


def _collect(out: dict, query: SeriesQuery, whose, base: dict, times_ms: list[int],
             deadline: float, answers_at) -> None:
    """Each instant's answer (``answers_at(ats, show)``: the native answer objects of those
    instants, shown as their rows, or the ``QueryError`` an instant raises) as samples of
    the series ``(whose, item, bound)``, each a pair ``(time, text)``; an instant the
    answer path refuses has none. Each item's instants and texts are gathered first, and
    its series' samples made at the end in one pass each (each at the instant as asked: a
    kept point says the same one)."""
    shown = _answered(times_ms, list(range(len(times_ms))), deadline, answers_at, _shower())
    for item, (ats, texts) in by_item(times_ms, [shown[i] for i in range(len(times_ms))], seconds).items():
        for bound, i in _wanted(query):
            series = out.setdefault((whose, item, bound), Series(_labels(base, item, bound)))
            series.values.extend([(at, t[i]) for at, t in zip(ats, texts) if t[i] is not None])


def _collect_rendered(out: dict, query: SeriesQuery, whose, base: dict, times_ms: list[int],
                      deadline: float, answers_at, step_ms: int | None = None, blocks: Blocks | None = None,
                      usable=None) -> None:
    """:func:`_collect`, each series' samples written as JSON text (``Series.values`` an
    ``orjson.Fragment``), run by run (``app.promql.blocks``): with ``blocks``, the whole
    blocks of a step-aligned range that ``usable(first, end)`` allows are read from those
    kept, and those computed are kept; every other instant is answered (in one call, so
    the answers share their reads) and rendered."""
    cut = runs(times_ms, step_ms if blocks is not None else None, usable or (lambda a, b: True))
    rendered = [None if block is None else blocks.get(block) for _, _, block in cut]
    todo = [i for (first, end, _), got in zip(cut, rendered) if got is None for i in range(first, end)]
    shown = _answered(times_ms, todo, deadline, answers_at, _shower()) if todo else {}
    pieces: dict = {}  # item label -> (estimate, lower, upper) texts of its runs
    for (first, end, block), got in zip(cut, rendered):
        if got is None:
            got = render(times_ms[first:end], [shown[i] for i in range(first, end)])
            if block is not None:
                blocks.put(block, got)
        for item, texts in got:
            acc = pieces.get(item)
            if acc is None:
                acc = pieces[item] = ([], [], [])
            for i, text in enumerate(texts):
                if text:
                    acc[i].append(text)
    for item, texts in pieces.items():
        for bound, i in _wanted(query):
            if texts[i]:
                values = orjson.Fragment("[" + ",".join(texts[i]) + "]")
                out[(whose, item, bound)] = Series(_labels(base, item, bound), values)


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
                out: dict, deadline: float, cache: RangeCache | None, rendered: bool) -> None:
    config = store.declarations.config(name)
    summary, status = store.reads.summary(name)  # one read: every instant below is of this version
    params = _checked(query, lookup(query.kind, streams=1), [config], step_ms)
    base = {"__name__": query.metric, **dict(query.labels), "stream": name}
    versions = _versions_of(store, name, summary)

    def answered(ats, show):
        return answers_at(query.kind, name, config, summary, status, params, ats, cache, versions, show)

    if not rendered:
        return _collect(out, query, name, base, times_ms, deadline, answered)
    points = None if cache is None or summary is None or not step_ms else cache.points_of(name, versions)
    if points is None:
        return _collect_rendered(out, query, name, base, times_ms, deadline, answered)
    # a block is kept only while the clock refuses none of its instants (as a point)
    keep = ~refused(params, config, status.get("clock"), [seconds(t) for t in times_ms])
    blocks = Blocks(cache, name, points, query.kind, params_key(params), step_ms)
    _collect_rendered(out, query, name, base, times_ms, deadline, answered, step_ms, blocks,
                      lambda first, end: bool(keep[first:end].all()))


def _together(store, query: SeriesQuery, names: tuple[str, ...], times_ms: list[int],
              step_ms: int | None, out: dict, deadline: float, rendered: bool) -> None:
    """A kind over several streams (``tidemark_inner_product{streams="A,B"}``): each stream
    read once, every instant answered by :func:`app.answers.answer_streams` as natively."""
    configs = [store.declarations.config(n) for n in names]
    read = [store.reads.summary(n) for n in names]
    params = _checked(query, lookup(query.kind), configs, step_ms)
    base = {"__name__": query.metric, **dict(query.labels)}
    collect = _collect_rendered if rendered else _collect
    collect(out, query, names, base, times_ms, deadline,
            lambda ats, show: [_shown(show, _refusal_or(answer_streams, query.kind, list(names), configs,
                                                        read, {**params, "at": repr(at)})) for at in ats])


def evaluate(store, query: SeriesQuery, names: list[str], times_ms: list[int],
             step_ms: int | None = None, timeout: float = math.inf,
             cache: RangeCache | None = None, rendered: bool = False) -> list[Series]:
    """The series of ``query`` over the streams ``names`` (already matched and allowed; a
    kind over several streams reads them together) at
    ``times_ms``, sorted by their labels; :class:`EvaluationTimeout` after ``timeout``
    seconds (an answer at a past instant costs a millisecond or more: 11,000 of them over
    many streams would hold a worker thread for minutes). ``rendered``: each series'
    samples as JSON text (``_collect_rendered``: a range's, kept per block of steps)."""
    out: dict = {}
    deadline = time.monotonic() + timeout
    if isinstance(query.stream, tuple):
        _together(store, query, query.stream, times_ms, step_ms, out, deadline, rendered)
        return sorted((s for s in out.values() if s.values), key=lambda s: sorted(s.labels.items()))
    for name in names:
        try:
            _one_stream(store, query, name, times_ms, step_ms, out, deadline, cache, rendered)
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
