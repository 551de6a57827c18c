"""The read side of the Prometheus HTTP API (contract §10), so Grafana's Prometheus data
source, promtool and other PromQL clients chart Tidemark's answers with their bounds.

``/api/v1/query``, ``/query_range``, ``/labels``, ``/label/<name>/values``, ``/series``,
``/metadata`` and ``/status/buildinfo``, in Prometheus' envelope (``web/api/v1/api.go``):
``{"status": "success", "data": …}``, or ``{"status": "error", "errorType", "error"}`` with
``bad_data`` (400) for what is not in the language, ``execution`` (422) for a query
Tidemark refuses as a whole and ``timeout`` (422; Prometheus says 503, but a 5xx is a bug
here) past the request's ``timeout``. Parameters come from the query string and from form-encoded bodies (Grafana
POSTs them), the body first, as Prometheus' ``FormValue`` reads them. Access is the
``read`` scope (a Bearer key, or the key as the password of HTTP Basic, as Grafana sends it).

Tested by: tests/app/test_prometheus_api.py (every route against the native answers),
tests/app/test_promtool.py (Prometheus' own client), tests/app/test_tenants.py (streams a
key may see).
"""

from __future__ import annotations

import functools
import re
import time
from urllib.parse import parse_qsl

import orjson

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app.answers import QueryError
from app.deps import READ
from app.security import HIDDEN, principal_of, visible
from app.promql.evaluate import EvaluationTimeout, Series, evaluate, format_value
from app.promql.parser import ParseError, parse
from app.promql.query import BOUNDS, BadQuery, Scalar, SeriesQuery, metric_names, plan
from app.promql.times import BadParameter, parse_duration, parse_time, seconds
from app.store import StreamNotFound
from sketches.base import SketchError
from tidemark import __version__

__all__ = ["router", "visible_streams", "MAX_POINTS", "PROMETHEUS_API_VERSION"]

router = APIRouter(prefix="/api/v1", tags=["prometheus"], dependencies=[READ])

MAX_POINTS = 11_000          # per series, as Prometheus refuses beyond
MAX_BODY = 1 << 20           # a form body larger than any query Grafana writes
DEFAULT_TIMEOUT = 30.0       # seconds of evaluation a request may take (``timeout``) ...
MAX_TIMEOUT = 120.0          # ... and the most it may ask for (Prometheus' default is 2m)
# The Prometheus release whose HTTP API this answers as (and whose promtool the tests run).
PROMETHEUS_API_VERSION = "2.42.0"
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABELS = ("__name__", "bound", "key", "q", "stream", "value", "window")


class PromError(Exception):
    def __init__(self, error_type: str, message: str, status: int):
        super().__init__(message)
        self.error_type, self.status = error_type, status


def bad_data(message: str) -> PromError:
    return PromError("bad_data", message, 400)


def execution(message: str) -> PromError:
    return PromError("execution", message, 422)


def visible_streams(request: Request, names: list[str]) -> list[str]:
    """The streams of ``names`` the request's key may see (contract §9): THE one place this
    API decides it — every listing is filtered here, and a stream named outright that is
    not returned is answered as absent, exactly as the native routes do (``app.security``)."""
    return visible(principal_of(request), names)


def _ok(data) -> Response:
    """Prometheus' envelope, rendered by orjson: a 500-point heavy-hitter range holds some
    40,000 samples, which ``json.dumps`` took 25-35 ms to write, orjson 3-6 ms."""
    return Response(orjson.dumps({"status": "success", "data": data}), media_type="application/json")


def _error(e: PromError) -> JSONResponse:
    return JSONResponse({"status": "error", "errorType": e.error_type, "error": str(e)},
                        status_code=e.status)


async def _form(request: Request) -> list[tuple[str, str]]:
    """Body parameters (form-encoded POST) before the query string's, as Go's ParseForm."""
    pairs: list[tuple[str, str]] = []
    if request.method == "POST":
        body = await request.body()
        if len(body) > MAX_BODY:
            raise bad_data(f"request body larger than {MAX_BODY} bytes")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if body and ctype not in ("", "application/x-www-form-urlencoded"):
            raise bad_data(f"unsupported body type {ctype!r}: send application/x-www-form-urlencoded")
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise bad_data("the form body is not UTF-8") from None
    return pairs + list(request.query_params.multi_items())


def _first(form, name: str) -> str | None:
    return next((v for k, v in form if k == name), None)


def _time(form, name: str, default_ms: int) -> int:
    raw = _first(form, name)
    try:
        return default_ms if raw in (None, "") else parse_time(raw, name)
    except BadParameter as e:
        raise bad_data(str(e)) from None


def _query(form):
    text = _first(form, "query")
    if text is None or text.strip() == "":
        raise bad_data('invalid parameter "query": no query given; '
                       'e.g. tidemark_count{stream="web", window="5m"}')
    try:
        return _planned(text) if len(text) <= _KEPT_TEXT else plan(parse(text))
    except (ParseError, BadQuery) as e:
        raise bad_data(f'invalid parameter "query": {e}') from None


_KEPT_TEXT = 4096  # characters: a query text longer than any panel's is planned each time


@functools.lru_cache(maxsize=1024)
def _planned(text: str) -> Scalar | SeriesQuery:
    """``plan(parse(text))``, kept: a panel asks the same text at every refresh, and the
    plan is immutable (a text refused raises each time: nothing is kept of it)."""
    return plan(parse(text))


def _now_ms() -> int:
    return round(time.time() * 1000)


def _streams(request: Request, store, query: SeriesQuery) -> list[str]:
    """The streams a selector reads: the one it names (absent, or not visible: a refusal
    of the whole query), or every visible stream its regex matches."""
    if isinstance(query.stream, (str, tuple)):
        named = [query.stream] if isinstance(query.stream, str) else list(query.stream)
        seen = visible_streams(request, named)
        hidden = [n for n in named if n not in seen]
        if hidden:
            raise StreamNotFound(hidden[0])  # as if it did not exist
        return named
    return [n for n in visible_streams(request, store.declarations.names()) if query.selects(n)]


def _timeout(form) -> float:
    raw = _first(form, "timeout")
    if raw in (None, ""):
        return DEFAULT_TIMEOUT
    try:
        return min(parse_duration(raw, "timeout") / 1000, MAX_TIMEOUT)
    except BadParameter as e:
        raise bad_data(str(e)) from None


def _run(request: Request, query: SeriesQuery, times_ms: list[int], step_ms: int | None,
         timeout: float = DEFAULT_TIMEOUT, rendered: bool = False) -> list[Series]:
    store = request.app.state.store
    started = time.perf_counter()
    try:
        names = _streams(request, store, query)
        series = evaluate(store, query, names, times_ms, step_ms, timeout,
                          getattr(request.app.state, "range_cache", None), rendered)
    except EvaluationTimeout as e:
        # Prometheus answers 503; here a 5xx is a bug (contract §8) and asking more than the
        # budget is the caller's to change (fewer points or streams, a longer ``timeout``).
        raise PromError("timeout", str(e), 422) from None
    except StreamNotFound as e:
        # A key limited to some streams is told of no stream by name (as the native routes).
        principal = principal_of(request)
        raise execution(HIDDEN if principal is not None and principal.restricted else str(e)) from None
    except QueryError as e:
        raise execution(str(e)) from None
    except SketchError as e:  # a published summary refused whole (as the native 503 says)
        raise PromError("unavailable", f"the stream's published summary cannot be read now "
                        f"({type(e).__name__}); it is answered again once the worker publishes "
                        "a readable one", 503) from None
    request.app.state.metrics.query_seconds.labels("prometheus").observe(time.perf_counter() - started)
    return series


async def _answer(request: Request, work) -> Response:
    try:
        return _ok(await work(await _form(request)))
    except PromError as e:
        return _error(e)


@router.get("/query")
@router.post("/query", operation_id="query_post")
async def query(request: Request) -> JSONResponse:
    """An instant query: ``query``, ``time`` (default: now)."""

    async def work(form):
        q = _query(form)
        t = _time(form, "time", _now_ms())
        if isinstance(q, Scalar):
            return {"resultType": "scalar", "result": [seconds(t), format_value(q.value)]}
        series = await run_in_threadpool(_run, request, q, [t], None, _timeout(form))
        return {"resultType": "vector",
                "result": [{"metric": s.labels, "value": value} for s in series for value in s.values]}

    return await _answer(request, work)


def _range(form) -> tuple[int, int, int]:
    for name in ("start", "end", "step"):
        if _first(form, name) in (None, ""):
            raise bad_data(f'invalid parameter "{name}": missing')
    start, end = _time(form, "start", 0), _time(form, "end", 0)
    try:
        step = parse_duration(_first(form, "step"), "step")
    except BadParameter as e:
        raise bad_data(str(e)) from None
    if end < start:
        raise bad_data('invalid parameter "end": end timestamp must not be before start time')
    if step <= 0:
        raise bad_data('invalid parameter "step": zero or negative query resolution step widths '
                       "are not accepted. Try a positive integer")
    if (end - start) // step + 1 > MAX_POINTS:
        raise bad_data(f"exceeded maximum resolution of {MAX_POINTS:,} points per timeseries. "
                       "Try decreasing the query resolution (?step=XX)")
    return start, end, step


@router.get("/query_range")
@router.post("/query_range", operation_id="query_range_post")
async def query_range(request: Request) -> JSONResponse:
    """A range query: ``query``, ``start``, ``end``, ``step``; every step answered from one
    read of each stream's summary."""

    async def work(form):
        q = _query(form)
        start, end, step = _range(form)
        times = list(range(start, end + 1, step))
        if isinstance(q, Scalar):
            value = format_value(q.value)
            return {"resultType": "matrix",
                    "result": [{"metric": {}, "values": [[seconds(t), value] for t in times]}]}
        # (each series' samples come written as JSON text: ``evaluate``'s ``rendered``)
        series = await run_in_threadpool(_run, request, q, times, step, _timeout(form), True)
        return {"resultType": "matrix",
                "result": [{"metric": s.labels, "values": s.values} for s in series]}

    return await _answer(request, work)


# -- metadata ----------------------------------------------------------------------------------
def _matched(request: Request, form) -> list[dict[str, str]] | None:
    """The label sets of the series ``match[]`` selects (None when none is given): those
    with a sample at ``end`` (default: now), as Prometheus lists the series with data. A
    ``match[]`` without ``stream`` reads every stream the key may see."""
    selectors = [v for k, v in form if k == "match[]"]
    if not selectors:
        return None
    at = _time(form, "end", _now_ms())
    found: dict[tuple, dict] = {}
    for text in selectors:
        try:
            q = plan(parse(text), every_stream=True)
        except (ParseError, BadQuery) as e:
            raise bad_data(f'invalid parameter "match[]": {e}') from None
        if isinstance(q, Scalar):
            raise bad_data('invalid parameter "match[]": a match[] is a selector, not a number')
        try:
            _streams(request, request.app.state.store, q)
        except StreamNotFound:  # a selector of a stream absent (or hidden) matches no series
            continue
        for s in _run(request, q, [at], None):
            found[tuple(sorted(s.labels.items()))] = s.labels
    return sorted(found.values(), key=lambda d: sorted(d.items()))


@router.get("/series")
@router.post("/series", operation_id="series_post")
async def series(request: Request) -> JSONResponse:
    async def work(form):
        if not any(k == "match[]" for k, _ in form):
            raise bad_data("no match[] parameter provided")
        return await run_in_threadpool(_matched, request, form)

    return await _answer(request, work)


@router.get("/labels")
@router.post("/labels", operation_id="labels_post")
async def labels(request: Request) -> JSONResponse:
    async def work(form):
        matched = await run_in_threadpool(_matched, request, form)
        if matched is None:
            return list(_LABELS)
        return sorted({k for labels in matched for k in labels})

    return await _answer(request, work)


@router.get("/label/{label_name}/values")  # not {name}: that path parameter names a stream
async def label_values(label_name: str, request: Request) -> JSONResponse:
    """``__name__``: the metric names; ``stream``: the streams the key may see; ``bound``:
    estimate, lower, upper; any label: its values among the ``match[]`` series."""

    async def work(form):
        if not _LABEL_NAME.fullmatch(label_name):
            raise bad_data(f'invalid label name: "{label_name}"')
        matched = await run_in_threadpool(_matched, request, form)
        if matched is not None:
            return sorted({labels[label_name] for labels in matched if label_name in labels})
        if label_name == "__name__":
            return sorted(metric_names())
        if label_name == "stream":
            store = request.app.state.store
            return sorted(await run_in_threadpool(lambda: visible_streams(request, store.declarations.names())))
        if label_name == "bound":
            return list(BOUNDS)
        return []

    return await _answer(request, work)


@router.get("/metadata")
async def metadata() -> JSONResponse:
    """Each metric's type and help, as Prometheus answers it (Grafana's query editor shows them)."""
    return _ok({metric: [{"type": "gauge", "unit": "",
                          "help": f"Tidemark {kind} answers over the window, with their bounds "
                                  '(label bound="estimate|lower|upper")'}]
                for metric, kind in metric_names().items()})


@router.get("/query_exemplars")
@router.post("/query_exemplars", operation_id="query_exemplars_post")
async def query_exemplars() -> JSONResponse:
    """Tidemark keeps no exemplars (Grafana asks when its exemplar toggle is on)."""
    return _ok([])


@router.get("/status/buildinfo")
async def buildinfo() -> JSONResponse:
    """As Prometheus answers it; ``version`` is the Prometheus HTTP API this speaks (what
    Grafana reads to choose its features), ``application`` says who answers."""
    return _ok({"version": PROMETHEUS_API_VERSION, "revision": f"tidemark-{__version__}",
                "branch": "tidemark", "buildUser": "tidemark", "buildDate": "",
                "goVersion": "none", "application": f"Tidemark {__version__}"})
