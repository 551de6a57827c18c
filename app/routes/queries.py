"""Queries (contract §6): every answer carries its bound."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from app.answers import answer_from_store
from app.kinds.keyed import inner_product_from_store
from app.deps import READ, MetricsDep, StoreDep
from app.routes.streams import StreamName

router = APIRouter(tags=["queries"], dependencies=[READ])


@router.get("/v1/inner-product")
def inner_product(request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
    started = time.perf_counter()
    body = inner_product_from_store(store, dict(request.query_params))
    metrics.query_seconds.labels("inner-product").observe(time.perf_counter() - started)
    return body


@router.get("/v1/streams/{name}/{query}")
def query(name: StreamName, query: str, request: Request, store: StoreDep, metrics: MetricsDep) -> dict:
    started = time.perf_counter()
    body = answer_from_store(store, query, name, dict(request.query_params))
    metrics.query_seconds.labels(query).observe(time.perf_counter() - started)
    return body
