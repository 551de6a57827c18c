"""Publishing merged stream summaries to Redis, the serving layer.

Everything of one publish goes in one MULTI/EXEC transaction: readers see the sketch and
the status of the same version or of the previous one, never a mix. Redis holds nothing
the worker could not rebuild: after a flush the worker publishes again from its state.
"""

from __future__ import annotations

import json
import os
import socket
import time

import redis

from tidemark import keys
from tidemark.streams import StreamConfig
from workers.state import StreamState

__all__ = ["Publisher"]


class Publisher:
    def __init__(self, redis_url: str):
        self.redis = redis.Redis.from_url(redis_url)

    def configs(self) -> dict[str, StreamConfig]:
        """Stream settings as declared through the API (or a config file)."""
        out = {}
        for name, raw in self.redis.hgetall(keys.STREAMS).items():
            out[name.decode()] = StreamConfig.model_validate_json(raw)
        return out

    def publish(self, name: str, stream: StreamState, merged: bytes, sizes: dict) -> None:
        status = {
            "events": stream.events,
            "late_dropped": stream.late_dropped,
            "clock": "" if stream.clock is None else repr(stream.clock),
            "sketch_version": stream.version,
            "updated_at": stream.updated_at or "",
            "sketch_bytes": json.dumps(sizes),
            "consumed": stream.events + stream.late_dropped,
        }
        with self.redis.pipeline(transaction=True) as p:
            # Restore the declaration after a flush; never overwrite a newer one.
            p.hsetnx(keys.STREAMS, name, json.dumps(stream.config))
            p.set(keys.sketch(name), merged)
            p.delete(keys.status(name))
            p.hset(keys.status(name), mapping=status)
            p.set(keys.PUBLISHED, "1")
            p.publish(keys.ANNOUNCE, json.dumps({"stream": name, "sketch_version": stream.version}))
            p.execute()

    def heartbeat(self, batch_id: int, batch_seconds: float = 0.0, ttl: int = 15) -> None:
        beat = {"host": socket.gethostname(), "pid": os.getpid(), "batch_id": batch_id,
                "batch_seconds": round(batch_seconds, 4), "time": time.time()}
        self.redis.set(keys.HEARTBEAT, json.dumps(beat), ex=ttl)

    def mark_published(self) -> None:
        self.redis.set(keys.PUBLISHED, "1")

    def needs_republish(self) -> bool:
        """True after Redis lost our publications (flushed, or restarted without them)."""
        return not self.redis.exists(keys.PUBLISHED)
