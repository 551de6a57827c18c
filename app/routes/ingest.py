"""Event ingest (contract §5): validate each event, keep the good, report the bad."""

from __future__ import annotations

import asyncio

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response

from app.deps import MetricsDep, SettingsDep, StoreDep
from app.routes.streams import StreamName
from tidemark.chunks import encode_chunk
from tidemark.events import BodyError, EventBatch, parse_body, validate_events, validate_ndjson_fast

router = APIRouter(prefix="/v1/streams", tags=["ingest"])


def _validate(body: bytes, config) -> EventBatch:
    batch = validate_ndjson_fast(body, config)
    if batch is not None:
        return batch
    # Irregular NDJSON or a JSON array: event by event, naming each bad one.
    try:
        items = parse_body(body, None)
    except (BodyError, UnicodeDecodeError) as e:
        raise HTTPException(400, str(e)) from None
    return validate_events(items, config)


def _ingest(name: str, body: bytes, store, idempotency_key: str | None) -> tuple[EventBatch, dict]:
    batch = _validate(body, store.config(name))
    chunk = encode_chunk(batch.ts, batch.key, batch.value, batch.weight) if len(batch) else None
    receipt = {
        "accepted": len(batch),
        "rejected": [{"index": r.index, "error": r.error} for r in batch.rejects],
    }
    max_ts = float(batch.ts.max()) if len(batch) else None
    first = store.append(name, chunk, len(batch), len(batch.rejects), max_ts, receipt,
                         idempotency_key)
    return batch, first


@router.post("/{name}/events", status_code=202)
async def ingest(name: StreamName, request: Request, response: Response, store: StoreDep,
                 settings: SettingsDep, metrics: MetricsDep,
                 idempotency_key: Annotated[str | None, Header(
                     max_length=255, description="a retry with the same key within 24 h is "
                     "answered with the first answer and stores nothing again")] = None) -> dict:
    body = await request.body()
    if len(body) > settings.max_body_bytes:
        raise HTTPException(413, f"body larger than {settings.max_body_bytes} bytes; split it")
    # Validation and encoding are CPU work: off the event loop.
    batch, receipt = await asyncio.to_thread(_ingest, name, body, store, idempotency_key)
    if receipt.pop("replayed", False):
        response.headers["Idempotent-Replayed"] = "true"
    else:
        metrics.events_accepted.labels(name).inc(len(batch))
        metrics.events_rejected.labels(name).inc(len(batch.rejects))
    return receipt
