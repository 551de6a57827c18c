"""One Redis subscription fanned out to every ``/v1/live`` client.

Each dashboard used to hold its own Redis connection; now one background task listens
and hands each announcement to every client's small queue. A client too slow to keep up
loses its oldest notes (the next one brings it up to date: notes carry versions).
"""

from __future__ import annotations

import asyncio
import logging

from app.store import announcements

__all__ = ["LiveHub", "TooManyClients"]

log = logging.getLogger("tidemark.live")


class TooManyClients(RuntimeError):
    pass


class LiveHub:
    def __init__(self, redis_url: str, max_clients: int, queue_size: int = 64, prepare=None):
        self.redis_url, self.max_clients, self.queue_size = redis_url, max_clients, queue_size
        # Called with the stream of each announcement before clients hear of it: the API
        # decodes the announced version first, so a client asking at once gets it.
        self.prepare = prepare
        self._clients: set[asyncio.Queue] = set()
        self._task: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._clients)

    def subscribe(self) -> asyncio.Queue:
        if len(self._clients) >= self.max_clients:
            raise TooManyClients(f"{self.max_clients} live clients already connected "
                                 "(TIDEMARK_MAX_SSE_CLIENTS); retry later")
        queue: asyncio.Queue = asyncio.Queue(self.queue_size)
        self._clients.add(queue)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen())
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._clients.discard(queue)

    def _broadcast(self, note: dict) -> None:
        for queue in list(self._clients):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(note)

    async def _listen(self) -> None:
        # Subscribed from the first client to the app's end: one connection, no race
        # between a last client leaving and a new one arriving.
        while True:
            try:
                async for note in announcements(self.redis_url):
                    if note:
                        await self._prepare(note)
                        self._broadcast(note)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis restarting: subscribe again shortly
                log.warning("live updates paused: %s", type(e).__name__)
                await asyncio.sleep(1.0)

    async def _prepare(self, note: dict) -> None:
        if self.prepare is None or not note.get("stream") or note.get("deleted"):
            return
        try:
            await asyncio.to_thread(self.prepare, note["stream"])
        except Exception as e:  # the client's own query will say what is wrong
            log.warning("decoding %s before announcing it failed: %s", note["stream"], type(e).__name__)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
