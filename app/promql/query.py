"""What a parsed query asks of Tidemark (contract §10): a number, or one query kind's
answers as series.

``tidemark_<kind>{stream="web", window="5m", <params>, bound="upper"}``: ``<kind>`` is a
query kind of the registry of query families (:data:`app.kinds.QUERY_KINDS`; a kind that
says why it is not served as series, ``QueryKind.not_series``, is not) with ``-`` written
``_``; ``stream`` is
matched with ``=`` or ``=~``, every other label with ``=``; the labels other than
``stream``, ``window`` and ``bound`` are the kind's parameters, passed to it as the native
route passes its query string. Numbers and sums of numbers are folded into one scalar
(Grafana's "Save & test" asks ``1+1``).

Tested by: tests/app/promql/test_parser.py (what a query asks),
tests/app/test_grafana_provisioning.py (read_query).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from app.kinds import QUERY_KINDS
from app.promql import regex
from app.promql.parser import SUPPORTED, Binary, Expr, Number, Selector, Unary, parse
from app.promql.times import BadParameter, parse_duration

__all__ = ["BadQuery", "Scalar", "SeriesQuery", "plan", "read_query", "metric_names", "kind_of",
           "BOUNDS", "PREFIX"]

PREFIX = "tidemark_"
BOUNDS = ("estimate", "lower", "upper")
_RESERVED = {"at": "the instant is the query's time (or start, end and step)"}


class BadQuery(ValueError):
    """A query outside the language (the caller's ``bad_data``)."""


@dataclass(frozen=True)
class Scalar:
    value: float


@dataclass(frozen=True)
class SeriesQuery:
    """One selector: the kind, which streams, its parameters and which bounds to answer."""

    metric: str
    kind: str
    stream: str | regex.Pattern | tuple[str, ...]  # one, those matching, or a kind's several
    params: tuple[tuple[str, str], ...]  # the kind's parameters, as the selector names them
    labels: tuple[tuple[str, str], ...]  # every "=" label but bound (carried by the series)
    bounds: tuple[str, ...]
    window_ms: int | None

    def selects(self, name: str) -> bool:
        if isinstance(self.stream, str):
            return name == self.stream
        if isinstance(self.stream, tuple):
            return name in self.stream
        return self.stream.fullmatch(name)


def metric_names() -> dict[str, str]:
    """``tidemark_<kind>`` → kind, for every kind answered as series."""
    return {PREFIX + name.replace("-", "_"): name for name in sorted(QUERY_KINDS)
            if QUERY_KINDS[name].not_series is None}


def kind_of(metric: str) -> str:
    kinds = metric_names()
    if metric in kinds:
        return kinds[metric]
    kind = QUERY_KINDS.get(metric.removeprefix(PREFIX).replace("_", "-"))
    if metric.startswith(PREFIX) and kind is not None and kind.not_series is not None:
        raise BadQuery(f"{metric} is not served as series: {kind.not_series}")
    raise BadQuery(f"unknown metric {metric!r}; Tidemark's metrics: {', '.join(kinds)}")


_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _divide(a: float, b: float) -> float:
    """IEEE division, as PromQL's: x/0 is ±Inf, 0/0 NaN."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fold(expr: Expr) -> float | None:
    """The number an expression of numbers is; None when it holds a selector."""
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Unary):
        x = _fold(expr.operand)
        return None if x is None else (-x if expr.op == "-" else x)
    if isinstance(expr, Binary):
        a, b = _fold(expr.left), _fold(expr.right)
        if a is None or b is None:
            return None
        return _divide(a, b) if expr.op == "/" else _FOLD[expr.op](a, b)
    return None


_EVERY_STREAM = regex.compile(".*")


def _selector(s: Selector, every_stream: bool) -> SeriesQuery:
    seen: dict[str, object] = {}
    name = s.name
    for m in s.matchers:
        if m.label in seen:
            raise BadQuery(f"label {m.label!r} is matched twice")
        if m.op not in ("=", "=~") or (m.op == "=~" and m.label != "stream"):
            raise BadQuery(f"{m.label}{m.op}… is not supported: every label is matched with =, "
                           'and stream also with =~ (e.g. stream=~"(web|api)")')
        if m.label == "__name__":
            if name is not None:
                raise BadQuery("the metric name is given twice (before { and as __name__)")
            name = m.value
        seen[m.label] = m
    if name is None:
        raise BadQuery(f"a selector needs a metric name; {SUPPORTED}")
    kind = kind_of(name)
    if QUERY_KINDS[kind].streams > 1:
        picked = _several(name, QUERY_KINDS[kind].streams, seen)
    else:
        picked = _streams(name, seen, every_stream)
    for label, why in _RESERVED.items():
        if label in seen:
            raise BadQuery(f"label {label!r} is not a parameter here: {why}")
    bound = seen.get("bound")
    if bound is not None and bound.value not in BOUNDS:
        raise BadQuery(f'bound="{bound.value}" is not one of {", ".join(BOUNDS)}')
    window = seen.get("window")
    try:
        window_ms = None if window is None else parse_duration(window.value, "window")
    except BadParameter as e:
        raise BadQuery(str(e)) from None
    if window_ms is not None and window_ms <= 0:
        raise BadQuery("window must be positive")
    equal = tuple((m.label, m.value) for m in s.matchers
                  if m.op == "=" and m.label not in ("__name__", "stream", "bound"))
    params = tuple((k, v) for k, v in equal if k not in ("window", "streams"))
    return SeriesQuery(name, kind, picked, params, equal,
                       (bound.value,) if bound is not None else BOUNDS, window_ms)


def _several(metric: str, count: int, seen: dict) -> tuple[str, ...]:
    """The streams of a kind over several (``streams="A,B"``, as natively)."""
    if "stream" in seen:
        raise BadQuery(f'{metric} reads {count} streams: name them with streams="A,B", not stream')
    given = seen.get("streams")
    names = tuple(n.strip() for n in given.value.split(",") if n.strip()) if given else ()
    if len(names) != count:
        raise BadQuery(f'{metric} needs streams="A,B" ({count} stream names)')
    return names


def _streams(metric: str, seen: dict, every_stream: bool) -> str | regex.Pattern:
    if "streams" in seen:
        raise BadQuery('label "streams" is not a parameter here: a selector reads one stream '
                       "(stream=, or stream=~ for several)")
    stream = seen.get("stream")
    if stream is None and not every_stream:
        raise BadQuery(f'{metric} needs stream="…" (or stream=~"a|b" for several streams)')
    try:
        if stream is None:
            picked = _EVERY_STREAM
        else:
            picked = regex.compile(stream.value) if stream.op == "=~" else stream.value
    except regex.BadRegex as e:
        raise BadQuery(str(e)) from None
    return picked


def plan(expr: Expr, every_stream: bool = False) -> Scalar | SeriesQuery:
    """A scalar for arithmetic on numbers, the selector's query, or :class:`BadQuery`.
    ``every_stream``: a selector without ``stream`` reads every stream (a ``match[]`` of
    the metadata routes: Grafana's ``label_values(tidemark_count, stream)``); a query
    names its streams."""
    value = _fold(expr)
    if value is not None:
        return Scalar(value)
    if isinstance(expr, Selector):
        return _selector(expr, every_stream)
    raise BadQuery(f"operators on series are not supported; {SUPPORTED}")


def read_query(text: str) -> Scalar | SeriesQuery:
    """Parse and plan (``ParseError`` and ``BadQuery`` are both the caller's ``bad_data``)."""
    return plan(parse(text))
