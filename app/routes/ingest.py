"""Event ingest (contract §5): validate each event, keep the good, report the bad.

Tested by: tests/app/test_security.py (media types, body caps, hostile events, Arrow
bodies), tests/app/test_fast_ingest.py (the fast path answers as this route does),
tests/test_pipeline.py (malformed events rejected, the good counted),
tests/app/test_tenants.py (quotas).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.responses import JSONResponse

from app.deps import INGEST
from app.metrics import Metrics
from app.ingest_pool import IngestPool, IngestUnavailable, Prepared
from app.routes.streams import StreamName
from app.security import Principal, principal_of
from tidemark.events import ARROW_STREAM, BodyError
from tidemark.settings import Settings

router = APIRouter(prefix="/v1/streams", tags=["ingest"])

# Only types a cross-site HTML form cannot send without a CORS preflight (contract §9).
BODY_TYPES = ("application/json", "application/x-ndjson", ARROW_STREAM)


def _ingest(name: str, body: bytes, store, pool: IngestPool, max_future: float, media: str,
            idempotency_key: str | None, tenant: str | None = None,
            tenant_rate: int = 0) -> tuple[Prepared, dict]:
    """Validate and encode in an ingest process (``app.ingest_pool``), then store here:
    two round trips to Redis, the declaration and back-pressure's count before
    (``Store.ahead_of_ingest``), the append after."""
    config, ahead = store.ahead_of_ingest(name)
    try:
        prepared = pool.prepare(body, config, max_future, media)
    except BodyError as e:
        raise HTTPException(400, str(e)) from None
    except IngestUnavailable as e:
        raise HTTPException(503, f"not stored: {e}", headers={"Retry-After": "1"}) from None
    if tenant is not None and prepared.accepted:  # one tenant's flood never starves the others
        store.ingest.take_rate(tenant, prepared.accepted, tenant_rate)
    receipt = {"accepted": prepared.accepted, "rejected": prepared.rejects}
    first = store.ingest.append(name, prepared.chunk, prepared.accepted, len(prepared.rejects),
                                prepared.max_ts, receipt, idempotency_key, ahead)
    return prepared, first


def _media_type(request: Request) -> str:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in BODY_TYPES:
        raise HTTPException(415, "send events as application/json (an array), "
                                 "application/x-ndjson (one object per line) or "
                                 f"{ARROW_STREAM} (columns ts, key, value, weight)")
    return media


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit``: from its
    ``Content-Length`` before reading anything, else while counting the bytes streamed."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPException(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise HTTPException(413, f"body larger than {limit} bytes; split it")
    pieces, size = [], 0
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise HTTPException(413, f"body larger than {limit} bytes; split it")
        pieces.append(piece)
    return b"".join(pieces)


@router.post("/{name}/events", status_code=202, dependencies=[INGEST],
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
                 "application/x-ndjson": {"schema": {"type": "string"}},
                 ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}}}})
async def ingest(name: StreamName, request: Request,
                 idempotency_key: Annotated[str | None, Header(
                     max_length=255, description="a retry with the same key within 24 h is "
                     "answered with the first answer and stores nothing again")] = None) -> JSONResponse:
    return await take(request.app.state, request, name, principal_of(request), idempotency_key)


async def take(state, request: Request, name: str, principal: Principal,
               idempotency_key: str | None) -> JSONResponse:
    """The ingest of one request the access check let through (``principal``), by the route
    and by ``app.fast_ingest`` alike. The app's components are read from its ``state``, not
    declared as dependencies, and the receipt is rendered here: at hundreds of posts a
    second FastAPI's solving of each dependency and its serialization of the answer cost
    more than the rest of the route."""
    settings: Settings = state.settings
    media = _media_type(request)
    body = await read_body(request, settings.max_body_bytes)
    # Validation and encoding are CPU work: off the event loop (in this thread for a small
    # Arrow body, else in an ingest process, off the API's GIL); the thread then stores.
    prepared, receipt = await asyncio.to_thread(
        _ingest, name, body, state.store, state.ingest_pool, settings.max_future, media,
        idempotency_key, principal.tenant, settings.tenant_max_events_per_second)
    headers = None
    if receipt.pop("replayed", False):
        headers = {"Idempotent-Replayed": "true"}
    else:
        metrics: Metrics = state.metrics
        metrics.events_accepted.labels(name).inc(prepared.accepted)
        metrics.events_rejected.labels(name).inc(len(prepared.rejects))
    return JSONResponse(receipt, status_code=202, headers=headers)
