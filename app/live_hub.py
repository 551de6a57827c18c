"""The API process's one Redis subscription to publish announcements (``keys.ANNOUNCE``),
fanned out to the alert engine and to every ``/v1/live`` client.

One background task listens from the app's start, so a process holds one Redis connection
for this however many dashboards are open and whatever the alert engine waits on. It hands each announcement at once to
its listeners (``listen``: the alert engine forgets what it kept of the stream and
evaluates), then, from the first live client on, decodes the announced version and puts
the note in every client's small queue. A client too slow to keep up loses its oldest
notes (the next one brings it up to date: notes carry versions).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from tidemark.wire import keys

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
        self._serving: asyncio.Task | None = None  # from the first client on: prepare, broadcast
        self._notes: asyncio.Queue = asyncio.Queue(4096)  # heard, not yet broadcast
        self._heard: list[Callable[[dict], None]] = []
        self._paused: list[Callable[[], None]] = []

    def listen(self, heard: Callable[[dict], None], paused: Callable[[], None]) -> None:
        """Call ``heard(note)`` on each announcement as it arrives (on the event loop: it
        must not block), and ``paused()`` when the subscription broke (some were missed)."""
        self._heard.append(heard)
        self._paused.append(paused)

    def start(self) -> None:
        """Subscribe (from the app's start to its end: one connection, no race between a
        last client leaving and a new one arriving)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen())

    def __len__(self) -> int:
        return len(self._clients)

    def subscribe(self) -> asyncio.Queue:
        if len(self._clients) >= self.max_clients:
            raise TooManyClients(f"{self.max_clients} live clients already connected "
                                 "(TIDEMARK_MAX_SSE_CLIENTS); retry later")
        queue: asyncio.Queue = asyncio.Queue(self.queue_size)
        self._clients.add(queue)
        self.start()
        if self._serving is None or self._serving.done():
            self._serving = asyncio.create_task(self._serve())
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._clients.discard(queue)

    def _broadcast(self, note: dict) -> None:
        for queue in list(self._clients):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(note)

    async def _listen(self) -> None:
        while True:
            try:
                async for note in announcements(self.redis_url):
                    if note:
                        for heard in self._heard:
                            heard(note)
                        if self._serving is not None:
                            if self._notes.full():  # decoding lags the publishes: the oldest go
                                self._notes.get_nowait()
                            self._notes.put_nowait(note)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis restarting: subscribe again shortly
                log.warning("live updates paused: %s", type(e).__name__)
                for paused in self._paused:
                    paused()
                await asyncio.sleep(1.0)

    async def _serve(self) -> None:
        """Each note in turn, from the first live client to the app's end: the announced
        version decoded first, then the note to every client."""
        while True:
            note = await self._notes.get()
            await self._prepare(note)
            self._broadcast(note)

    async def _prepare(self, note: dict) -> None:
        if self.prepare is None or not note.get("stream") or note.get("deleted"):
            return
        try:
            await asyncio.to_thread(self.prepare, note["stream"])
        except Exception as e:  # the client's own query will say what is wrong
            log.warning("decoding %s before announcing it failed: %s", note["stream"], type(e).__name__)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._serving) if t]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def announcements(redis_url: str):
    """Yield each publish announcement ``{"stream", "sketch_version"}`` as it happens."""
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    await pubsub.subscribe(keys.ANNOUNCE)
    try:
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
            yield json.loads(message["data"]) if message else None  # None: keep-alive tick
    finally:
        await pubsub.aclose()
        await client.aclose()
