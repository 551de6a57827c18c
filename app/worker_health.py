"""What the API knows of Redis and the worker: Redis answers, the worker's heartbeat and a
spare worker's word that it stands by (``/healthz``, ``/readyz``, ``tidemark up``).

Tested by: tests/app/test_readiness.py (/readyz with the worker's heartbeat)."""

from __future__ import annotations

import json
import time

import redis

from tidemark.wire import keys

__all__ = ["WorkerHealth"]


class WorkerHealth:
    def __init__(self, r: redis.Redis):
        self.redis = r

    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False

    def worker_heartbeat(self) -> dict | None:
        raw = self.redis.get(keys.HEARTBEAT)
        return json.loads(raw) if raw else None

    def worker_standby(self) -> dict | None:
        """A spare worker's last word that it stands by (None when none does)."""
        raw = self.redis.get(keys.STANDBY)
        return json.loads(raw) if raw else None

    def worker_alive(self, stale_after: float) -> bool:
        beat = self.worker_heartbeat()
        return bool(beat) and time.time() - beat["time"] <= stale_after

