"""Liveness, readiness and metrics."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import generate_latest

from app.deps import READ, MetricsDep, SettingsDep, StoreDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(store: StoreDep, settings: SettingsDep):
    redis_ok = store.ping()
    worker_ok = redis_ok and store.worker_alive(settings.worker_stale_after)
    body = {"redis": redis_ok, "worker": worker_ok, "ready": redis_ok and worker_ok}
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/metrics", dependencies=[READ])
def metrics(store: StoreDep, metrics: MetricsDep) -> PlainTextResponse:
    if store.ping():
        for name in store.names():
            status = store.status(name)
            metrics.sketch_version.labels(name).set(status["sketch_version"])
            metrics.pending_chunks.labels(name).set(store.pending(name))
            for part, size in status["sketch_bytes"].items():
                metrics.sketch_bytes.labels(name, part).set(size)
            if status["updated_at"]:
                age = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(status["updated_at"])
                metrics.publish_age_seconds.labels(name).set(age.total_seconds())
        beat = store.worker_heartbeat()
        if beat:
            metrics.batch_seconds.set(beat.get("batch_seconds", 0.0))
    return PlainTextResponse(generate_latest(metrics.registry).decode(),
                             media_type="text/plain; version=0.0.4")
