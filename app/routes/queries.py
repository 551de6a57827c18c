"""Queries (contract §6): every answer carries its bound."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from app.answers import answer_from_store
from app.deps import MetricsDep, StoreDep
from app.routes.streams import StreamName

router = APIRouter(tags=["queries"])


@router.get("/v1/streams/{name}/{query}")
def query(name: StreamName, query: str, request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
    started = time.perf_counter()
    body = answer_from_store(store, query, name, dict(request.query_params))
    metrics.query_seconds.labels(query).observe(time.perf_counter() - started)
    return body
