"""Server-sent events: one message per published sketch version, for the dashboard."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.deps import SettingsDep
from app.store import announcements

router = APIRouter(tags=["live"])


@router.get("/v1/live")
async def live(request: Request, settings: SettingsDep) -> StreamingResponse:
    async def events():
        yield "retry: 1000\n\n"
        async for note in announcements(request.app.state.redis_url):
            if await request.is_disconnected():
                return
            yield f"data: {json.dumps(note)}\n\n" if note else ": keep-alive\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
