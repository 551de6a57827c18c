"""The worker's Redis client: it rides out a short outage instead of failing the batch.

A Redis restart (a crash under ``tidemark up``'s supervisor, a fail-over) takes a second or
two. Without retries the first command that finds no connection fails the micro-batch,
the streaming query and the worker process, and a new worker pays its whole start. So
every command the worker sends (the source's reads and trims, the executors' publishes, the
driver's heartbeat) is retried on a connection error or timeout with an exponential
backoff, 0.2 s doubling to 2 s, for about ``RIDE_OUT_SECONDS`` in all; only a longer outage
reaches Spark. Retrying is safe because every command the worker sends is idempotent:
reads, trims to a bound, ``SET`` of a heartbeat, and the version-guarded publish script.
(The API's ingest append is deliberately not retried: its ``503`` promises "not stored".)

Tested by: tests/workers/test_publish.py (worker_redis).
"""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

__all__ = ["worker_redis", "RIDE_OUT_SECONDS"]

_FIRST, _CAP = 0.2, 2.0
RIDE_OUT_SECONDS = 20.0


def _retries(ride_out: float) -> int:
    waited, n = 0.0, 0
    while waited < ride_out:
        n += 1
        waited += min(_CAP, _FIRST * 2 ** (n - 1))
    return n


def worker_redis(url: str, ride_out: float = RIDE_OUT_SECONDS) -> redis.Redis:
    """A client for ``url`` whose commands are retried through an outage of ``ride_out`` s."""
    return redis.Redis.from_url(
        url, retry=Retry(ExponentialBackoff(cap=_CAP, base=_FIRST / 2), _retries(ride_out)),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError], socket_connect_timeout=2)
