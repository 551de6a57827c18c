"""Liveness, readiness and metrics.

Tested by: tests/app/test_readiness.py (/readyz, /metrics), tests/app/test_fast_reads.py
(the fast path answers as these routes do), tests/app/test_tenants.py (/metrics and
/v1/access per key), tests/test_pipeline.py (test_health_readiness_metrics_and_docs).
"""

from __future__ import annotations

import datetime as dt
import re

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import generate_latest

from app.deps import (READ, DeclarationsDep, FederationDep, IngestDep, MetricsDep, ReadsDep, SettingsDep,
                      StoreDep, WorkerHealthDep)
from app.readiness import readiness
from app.store import StreamNotFound
from app.security import principal_of, visible
from tidemark.supervisor import SERVICES_KEY, STATE_FILE, read_state

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict:
    """Liveness: this process answers. Nothing else is checked (a restart would not help)."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(store: StoreDep, settings: SettingsDep):
    """200 only while Redis answers and the worker's query is processing; else 503 with
    the reason per service (see ``app.readiness``)."""
    body = readiness(store, settings.worker_stale_after, settings.ready_max_wait)
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


def _age_seconds(iso: str | None) -> float | None:
    """Seconds since an ISO time with its zone (None when there is none or it does not parse)."""
    try:
        return (dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(iso)).total_seconds()
    except (TypeError, ValueError):
        return None


@router.get("/metrics", dependencies=[READ])
def metrics(declarations: DeclarationsDep, reads: ReadsDep, ingest: IngestDep, health: WorkerHealthDep,
            federation: FederationDep, metrics: MetricsDep, settings: SettingsDep,
            request: Request) -> PlainTextResponse:
    """Prometheus text; a key limited to some streams gets the per-stream series of those
    only (and every series without a stream label)."""
    supervised = read_state(settings.run_path / STATE_FILE)  # under `tidemark up`
    for service, state in (supervised or {}).get(SERVICES_KEY, {}).items():
        metrics.service_restarts.labels(service).set(state.get("restarts", 0))
    principal = principal_of(request)
    if health.ping():
        for name in visible(principal, declarations.names()):
            try:
                status = reads.status(name)
            except StreamNotFound:  # deleted meanwhile
                metrics.forget(name)
                continue
            metrics.sketch_version.labels(name).set(status["sketch_version"])
            metrics.pending_events.labels(name).set(ingest.pending(name))
            for part, size in status["sketch_bytes"].items():
                metrics.sketch_bytes.labels(name, part).set(size)
            age = _age_seconds(status["updated_at"])
            if age is not None:  # one stream's unreadable status never fails the others
                metrics.publish_age_seconds.labels(name).set(age)
        lag = ingest.lag()
        for partition in lag.partitions:
            label = str(partition["partition"])
            metrics.log_pending_events.labels(label).set(partition["pending_events"])
            metrics.log_pending_chunks.labels(label).set(partition["pending_chunks"])
            metrics.log_oldest_age.labels(label).set(partition["oldest_age"])
        metrics.wait_estimate.set(lag.wait_estimate())
        metrics.worker_capacity.set(lag.capacity)
        metrics.standby_workers.set(1 if health.worker_standby() else 0)
        for site, pulled in (federation.pulled.items() if federation is not None else ()):
            metrics.site_pulled_bytes.labels(site).set(pulled["bytes"])
            for result in ("pulls", "not_modified", "deltas", "segments"):
                metrics.site_pulls.labels(site, result).set(pulled.get(result, 0))
        beat = health.worker_heartbeat()
        if beat:
            metrics.batch_seconds.set(beat.get("batch_seconds", 0.0))
    request.app.state.loop_watch.longest()  # sets its gauge
    text = generate_latest(metrics.registry).decode()
    if principal is not None and principal.restricted:
        text = "".join(line for line in text.splitlines(keepends=True)
                       if not (m := _STREAM_LABEL.search(line)) or visible(principal, [m.group(1)]))
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


_STREAM_LABEL = re.compile(r'[{,]stream="([^"]*)"')


@router.get("/v1/access", dependencies=[READ])
def access(request: Request) -> dict:
    """What the presented key may do and where: its scopes (``admin`` implies the others)
    and its stream patterns (null: every stream). The dashboard shows its admin controls
    from this."""
    principal = principal_of(request)
    scopes = sorted({"read", "ingest", "admin"} if "admin" in principal.scopes else principal.scopes)
    return {"scopes": scopes, "streams": list(principal.patterns) if principal.restricted else None}
