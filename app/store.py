"""The API's one door to Redis: stream declarations, ingest, published summaries, status.

Summaries are deserialized once per ``sketch_version`` and cached; a query reads the
version first and only fetches the blob when it changed.
"""

from __future__ import annotations

import json
import threading
import time

import redis

from tidemark import keys
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

__all__ = ["Store", "StreamNotFound", "StreamConflict", "Backpressure", "Status"]


class StreamNotFound(LookupError):
    def __init__(self, name: str):
        super().__init__(f"stream {name!r} is not declared")


class StreamConflict(ValueError):
    pass


class Backpressure(RuntimeError):
    pass


class Status(dict):
    """The contract's stream status (§4) as a plain dict."""


def _num(raw: bytes | None, kind=int, default=0):
    if raw is None or raw == b"":
        return default
    return kind(raw.decode())


def _status(published: dict, ingested: dict) -> Status:
    consumed = _num(published.get(b"consumed"))
    clock = published.get(b"clock")
    return Status(
        # After a Redis flush the API's counter restarts; the worker's count of consumed
        # events is a floor for it.
        received=max(_num(ingested.get(b"received")), consumed),
        events=_num(published.get(b"events")),
        clock=float(clock) if clock else None,
        late_dropped=_num(published.get(b"late_dropped")),
        rejected=_num(ingested.get(b"rejected")),
        sketch_version=_num(published.get(b"sketch_version")),
        updated_at=(published.get(b"updated_at") or b"").decode() or None,
        sketch_bytes=json.loads(published.get(b"sketch_bytes") or b"{}"),
    )


class Store:
    def __init__(self, redis_url: str, max_pending_chunks: int = 1000):
        self.redis = redis.Redis.from_url(redis_url, health_check_interval=30)
        self.max_pending_chunks = max_pending_chunks
        self._cache: dict[str, tuple[int, StreamSummary]] = {}
        self._lock = threading.Lock()

    # -- declarations --------------------------------------------------------------------
    def declare(self, name: str, config: StreamConfig) -> bool:
        """Declare a stream; True when new. Re-declaring with other settings is a conflict,
        since published sketches were sized from the old ones."""
        raw = json.dumps(config.model_dump())
        if self.redis.hsetnx(keys.STREAMS, name, raw):
            return True
        current = StreamConfig.model_validate_json(self.redis.hget(keys.STREAMS, name))
        if current != config:
            raise StreamConflict(
                f"stream {name!r} already exists with other settings; "
                "sketches are sized from them, so they cannot change (declare a new stream)"
            )
        return False

    def config(self, name: str) -> StreamConfig:
        raw = self.redis.hget(keys.STREAMS, name)
        if raw is None:
            raise StreamNotFound(name)
        return StreamConfig.model_validate_json(raw)

    def names(self) -> list[str]:
        return sorted(n.decode() for n in self.redis.hkeys(keys.STREAMS))

    # -- ingest ----------------------------------------------------------------------------
    def append(self, name: str, chunk: bytes | None, accepted: int, rejected: int) -> None:
        """Hand a chunk over durably to the worker and count what was received."""
        if chunk is not None and self.redis.xlen(keys.ingest(name)) >= self.max_pending_chunks:
            raise Backpressure(
                f"stream {name!r} has {self.max_pending_chunks} chunks waiting for the worker; "
                "retry shortly"
            )
        with self.redis.pipeline(transaction=True) as p:
            if chunk is not None:
                p.xadd(keys.ingest(name), {"d": chunk, "n": accepted})
            p.hincrby(keys.ingest_stats(name), "received", accepted)
            p.hincrby(keys.ingest_stats(name), "rejected", rejected)
            p.execute()

    def pending(self, name: str) -> int:
        return int(self.redis.xlen(keys.ingest(name)))

    # -- published state ---------------------------------------------------------------------
    def status(self, name: str) -> Status:
        self.config(name)
        with self.redis.pipeline(transaction=True) as p:
            p.hgetall(keys.status(name))
            p.hgetall(keys.ingest_stats(name))
            return _status(*p.execute())

    def summary(self, name: str) -> tuple[StreamSummary | None, Status]:
        """The published summary (None before the first publish) and the status of
        that very version (both read in one transaction)."""
        status = self.status(name)
        cached = self._cache.get(name)
        if status["sketch_version"] == 0:
            return None, status
        if cached and cached[0] == status["sketch_version"]:
            return cached[1], status
        with self.redis.pipeline(transaction=True) as p:
            p.get(keys.sketch(name))
            p.hgetall(keys.status(name))
            p.hgetall(keys.ingest_stats(name))
            blob, published, ingested = p.execute()
        status = _status(published, ingested)
        if blob is None:
            return None, status
        summary = StreamSummary.from_bytes(blob)
        with self._lock:
            self._cache[name] = (status["sketch_version"], summary)
        return summary, status

    # -- health --------------------------------------------------------------------------------
    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False

    def worker_heartbeat(self) -> dict | None:
        raw = self.redis.get(keys.HEARTBEAT)
        return json.loads(raw) if raw else None

    def worker_alive(self, stale_after: float) -> bool:
        beat = self.worker_heartbeat()
        return bool(beat) and time.time() - beat["time"] <= stale_after


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
