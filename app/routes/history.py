"""A query's history: the window's answers at past instants, from one published summary.

``GET /v1/streams/{name}/{query}/history?window=…&points=…[&at=…]`` answers the query at
``points`` instants spread over the span (``instants``), from the earliest ``at`` whose
window is still kept (``clock - max_window + window``) to ``at`` (default: the stream's
clock). Every answer has
the contract's shape (§6) and is exactly what ``GET /v1/streams/{name}/{query}?at=…`` would
give for the same sketch version: all of them are computed from one read of the summary, in
one pass (``app.ranges``), so a chart opened now shows a full line (and one consistent
version) in a single request.

Tested by: tests/app/test_history.py (each point the plain answer, bad parameters,
refreshed histories), tests/frontend/test_dashboard.py (charts opened with their history).
"""

from __future__ import annotations

import math
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from app.answers import QueryError, parse_window
from app.ranges import answers_at, as_json
from app.deps import READ, MetricsDep, StoreDep
from app.routes.streams import StreamName

__all__ = ["router", "instants", "MAX_POINTS"]

router = APIRouter(tags=["queries"])

MAX_POINTS = 500      # a long line on any screen; bounds the work of one request
DEFAULT_POINTS = 120


def instants(end: float, earliest: float, points: int, span: float | None = None,
             grain: float | None = None) -> list[float]:
    """``points`` instants from ``earliest`` to ``end`` (both included); only ``end`` when
    there is no room before it. The last one is ``end`` exactly, so the newest point of a
    history is the answer a plain query gives.

    The ones between lie on a fixed grid, the multiples of a step just under
    ``span/(points − 1)`` (``span``: the nominal ``end − earliest``, which the rounded
    difference may miss by an ulp; its mantissa cut to 30 bits, so the grid always has
    room): a history asked again a few seconds later over a span as long shares all its
    inner instants but the newest with the one before, and the points kept for an
    unchanged version answer them (``app.ranges``).

    With ``grain`` (the stream's resolution) and room for it, the step is a whole number
    of eighths of it, at most 2 % short: the inner instants then fall at eight offsets
    within their ticks at most, and the windows of one offset share the decay of each
    age (a decayed sum evaluates it once for them: ``AdditiveDecayedSample._row_blocks``)."""
    if points == 1 or not earliest < end:
        return [end]
    if points == 2:
        return [earliest, end]
    raw = (end - earliest if span is None else span) / (points - 1)
    mantissa, exponent = math.frexp(raw)
    step = math.ldexp(math.floor(mantissa * 2**30) / 2**30, exponent)
    if grain and raw * 8 / grain >= 50:
        step = math.floor(raw * 8 / grain) * grain / 8
    top = math.ceil(end / step)  # the grid below end: k·step < end, the newest points - 2 of them
    grid = [k * step for k in range(top - points, top + 1)]
    grid = [t for t in grid if earliest < t < end][-(points - 2):]
    if len(grid) < points - 2:  # (a step below the float grain of these times): evenly
        even = (end - earliest) / (points - 1)
        grid = [earliest + i * even for i in range(1, points - 1)]
    return [earliest, *grid, end]


@router.get("/v1/streams/{name}/{query}/history", dependencies=[READ])
def history(name: StreamName, query: str, request: Request, store: StoreDep, metrics: MetricsDep,
            points: Annotated[int, Query(ge=1, le=MAX_POINTS,
                                         description="number of instants (answers)")] = DEFAULT_POINTS,
            ) -> Response:
    started = time.perf_counter()
    params = {k: v for k, v in request.query_params.items() if k != "points"}
    versions = store.reads.served_versions(name)  # (None for a federated stream: not kept)
    config = store.declarations.config(name)
    summary, status = store.reads.summary(name)  # one read: every answer below is of this version
    clock = status.get("clock")
    last = parse_window(params, config, clock)  # checks window and at (a 422 when wrong)
    earliest = last.at if clock is None else clock - config.max_window + last.seconds
    # Ending at the clock, the span is max_window - window whatever the clock: one grid.
    span = config.max_window - last.seconds if last.at == clock else None
    answers = answers_at(query, name, config, summary, status, params,
                         instants(last.at, earliest, points, span, config.resolution), request.app.state.range_cache,
                         store.summaries.versions_of(name, summary), show=as_json)
    refused = next((a for a in answers if isinstance(a, QueryError)), None)
    if refused is not None:  # every instant is one the stream keeps: a refusal is the query's
        raise refused
    metrics.query_seconds.labels("history").observe(time.perf_counter() - started)
    # Each answer's JSON is made once per point and kept with it; FastAPI's encoder walking
    # 500 answers (a heavy-hitter history holds some 40,000 values) cost more than they did.
    head = JSONResponse({"stream": name, "query": query, "window": last.seconds}).body
    body = head[:-1] + b',"answers":[' + b",".join(answers) + b"]}"
    if versions is not None and store.reads.served_versions(name) == versions:
        # the same request again, while these versions serve, is this body: sent before the
        # middleware stack (``app.answer_cache.FastAnswers``), as a query's answer is
        request.app.state.answer_cache.index(request.scope["path"], request.scope["query_string"], name,
                                             "history", versions, body, ahead=False)
    return Response(body, media_type="application/json")
