"""Server-sent events: one message per published sketch version, for the dashboard.

Tested by: tests/app/test_live_hub.py, tests/app/test_security.py
(test_live_clients_are_capped_and_share_one_redis_subscription), tests/app/test_tenants.py
(test_live_updates_carry_only_visible_streams).
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse

from app.deps import READ
from app.live_hub import TooManyClients
from app.security import may_see, principal_of

router = APIRouter(tags=["live"])

KEEP_ALIVE = 5.0  # seconds between comment lines, so a dead connection is noticed


@router.get("/v1/live", dependencies=[READ])
async def live(request: Request) -> StreamingResponse:
    hub = request.app.state.live_hub
    principal = principal_of(request)
    try:
        queue = hub.subscribe()
    except TooManyClients as e:
        raise HTTPException(429, str(e), headers={"Retry-After": "10"}) from None

    async def events():
        # A client that leaves cancels this generator (Starlette listens for the
        # disconnect; a keep-alive to a closed socket fails), which frees its slot.
        try:
            yield "retry: 1000\n\n"
            while True:
                try:
                    note = await asyncio.wait_for(queue.get(), KEEP_ALIVE)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
                else:
                    if may_see(principal, note.get("stream", "")):  # only its own streams' news
                        yield f"data: {json.dumps(note)}\n\n"
        finally:
            hub.unsubscribe(queue)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
