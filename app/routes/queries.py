"""Queries (contract §6): every answer carries its bound.

Routes come from the table of query kinds (:data:`app.answers.QUERY_KINDS`): one route
answers every kind over one stream, and each kind over several streams has its own URL,
``GET /v1/{kind}?streams=A,B`` (today: ``/v1/inner-product``); ``GET /v1/kinds`` lists the
table, so a client (the dashboard) asks only what this server answers.

Tested by: tests/app/test_kinds.py (test_routes_come_from_the_table,
test_the_kinds_route_lists_exactly_the_table_to_a_reader), tests/app/test_query_path.py
(test_answers_are_rendered_once_per_version_and_anew_for_a_new_one),
tests/app/test_answer_cache.py (render_ahead), tests/test_queries.py (every kind through HTTP).
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from app.answer_cache import AnswerCache
from app.answers import QUERY_KINDS, answer_from_store
from app.kinds import FAMILIES
from app.promql.query import metric_names
from app.deps import READ, MetricsDep, StoreDep
from app.routes.streams import StreamName

router = APIRouter(tags=["queries"], dependencies=[READ])


def _timed(metrics, kind: str, answer):
    started = time.perf_counter()
    body = answer()
    metrics.query_seconds.labels(kind).observe(time.perf_counter() - started)
    return body


def _multi_stream_route(kind: str):
    def route(request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
        params = dict(request.query_params)
        return _timed(metrics, kind, lambda: answer_from_store(store, kind, None, params))

    route.__name__ = kind.replace("-", "_")
    route.__doc__ = f"``{kind}`` over the streams named in ``streams=A,B``."
    return route


for _kind in sorted(k for k, q in QUERY_KINDS.items() if q.streams > 1):
    router.add_api_route(f"/v1/{_kind}", _multi_stream_route(_kind), methods=["GET"])


def _listing() -> dict:
    metrics = {kind: metric for metric, kind in metric_names().items()}
    return {"kinds": [{"name": kind.name, "family": family.name, "streams": kind.streams, "alert": kind.alert,
                       "metric": metrics.get(kind.name), "not_series": kind.not_series}
                      for family in FAMILIES for kind in family.kinds]}


_KINDS = _listing()


@router.get("/v1/kinds")
async def kinds() -> dict:
    """The query kinds this server answers, by family in the registry's order: each one's
    ``name``, ``family``, how many ``streams`` it reads (1: ``/v1/streams/{name}/{kind}``;
    more: ``/v1/{kind}?streams=A,B``), whether an ``alert`` rule may watch it, its
    Prometheus ``metric`` (null when not served as series, ``not_series`` saying why)."""
    return _KINDS


@router.get("/v1/streams/{name}/{query}")
async def query(name: StreamName, query: str, request: Request, store: StoreDep, metrics: MetricsDep) -> Response:
    """Answered on the event loop when no Redis read is needed (a decoded version and a
    recent status read kept): the answer is CPU work either way, and a hop to the thread
    pool costs more than most answers; answered once per version for the same question
    (asked again exactly so, it is answered before routing: ``app.answer_cache``).
    Otherwise in the thread pool."""
    started = time.perf_counter()
    params = dict(request.query_params)
    sent = request.scope["path"], request.scope["query_string"]
    cache: AnswerCache = request.app.state.answer_cache
    if store.reads.in_memory(name):
        rendered = _answer(store, cache, query, name, params, sent)
    else:
        rendered = await run_in_threadpool(_read_and_answer, store, cache, query, name, params, sent)
    metrics.query_seconds.labels(query).observe(time.perf_counter() - started)
    return Response(rendered, media_type="application/json")


def _read_and_answer(store, cache: AnswerCache, query: str, name: str, params: dict, sent: tuple) -> bytes:
    """Read the statuses first (which starts decoding a newer version), then answer."""
    store.reads.summary(name)
    return _answer(store, cache, query, name, params, sent)


def _answer(store, cache: AnswerCache, query: str, name: str, params: dict, sent: tuple) -> bytes:
    versions = store.reads.served_versions(name)
    key = (name, versions, query, tuple(sorted(params.items())))
    rendered = cache.get(key) if versions is not None else None
    if rendered is None:
        rendered = _render(answer_from_store(store, query, name, params, streams=1))
        if versions is None or store.reads.served_versions(name) != versions:
            return rendered  # a newer version came in between: not known to be theirs
        cache.put(key, rendered)
    cache.index(*sent, name, query, versions, rendered)
    return rendered


def render_ahead(cache: AnswerCache, name: str, serving: tuple | None, versions: tuple, summary,
                 status: dict) -> int:
    """Render the answers asked of ``name`` while it served ``serving`` for its newly
    decoded ``versions``, before they serve (``SummaryCache.on_decoded``, in the thread that decoded them): the first queries
    after the swap find their answers kept instead of computing them while others queue.
    Keys are those ``_answer`` uses; a question that fails here is left to the query."""
    from urllib.parse import parse_qsl

    from app.answers import answer

    done = 0
    for query, query_string in cache.asked(name, serving):
        params = dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))
        key = (name, versions, query, tuple(sorted(params.items())))
        if cache.get(key) is not None:
            continue
        try:
            cache.put(key, _render(answer(query, name, summary.config, summary, status, params)))
            done += 1
        except Exception:  # noqa: BLE001 — the query itself says what is wrong
            continue
    return done


def _render(body: dict) -> bytes:
    """The bytes FastAPI would send for ``body``."""
    return JSONResponse(jsonable_encoder(body)).body
