"""Event ingest (contract §5): validate each event, keep the good, report the bad."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from app.deps import MetricsDep, SettingsDep, StoreDep
from app.routes.streams import StreamName
from tidemark.chunks import encode_chunk
from tidemark.events import BodyError, parse_body, validate_events

router = APIRouter(prefix="/v1/streams", tags=["ingest"])


@router.post("/{name}/events", status_code=202)
async def ingest(name: StreamName, request: Request, store: StoreDep, settings: SettingsDep,
                 metrics: MetricsDep) -> dict:
    config = store.config(name)
    body = await request.body()
    if len(body) > settings.max_body_bytes:
        raise HTTPException(413, f"body larger than {settings.max_body_bytes} bytes; split it")
    try:
        items = parse_body(body, request.headers.get("content-type"))
    except (BodyError, UnicodeDecodeError) as e:
        raise HTTPException(400, str(e)) from None
    batch = validate_events(items, config)
    chunk = encode_chunk(batch.ts, batch.key, batch.value, batch.weight) if len(batch) else None
    store.append(name, chunk, len(batch), len(batch.rejects))
    metrics.events_accepted.labels(name).inc(len(batch))
    metrics.events_rejected.labels(name).inc(len(batch.rejects))
    return {
        "accepted": len(batch),
        "rejected": [{"index": r.index, "error": r.error} for r in batch.rejects],
    }
