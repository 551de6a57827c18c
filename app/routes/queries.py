"""Queries (contract §6): every answer carries its bound.

Routes come from the table of query kinds (:data:`app.answers.QUERY_KINDS`): one route
answers every kind over one stream, and each kind over several streams has its own URL,
``GET /v1/{kind}?streams=A,B`` (today: ``/v1/inner-product``).
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

import app.kinds  # noqa: F401  (registers the kinds)
from app.answers import QUERY_KINDS, answer_from_store
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


@router.get("/v1/streams/{name}/{query}")
def query(name: StreamName, query: str, request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
    params = dict(request.query_params)
    return _timed(metrics, query, lambda: answer_from_store(store, query, name, params, streams=1))
