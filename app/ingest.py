"""Ingest: a chunk handed over durably to the worker (the append script), with the
back-pressure and per-tenant rate checks before it (``app.backpressure``).

Tested by: tests/app/test_ingest_pool.py (Ingest), tests/app/test_backpressure.py and
tests/app/test_store.py (Backpressure, idempotent appends)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Callable

import redis

from app.backpressure import LagReader, LogLag, decide
from app.declarations import StreamNotFound
from app.stream_status import consumed_events, current_shards, read_number
from tidemark.ingest_log import partition_of
from tidemark.wire import keys, scripts

__all__ = ["Ingest", "Ahead", "Backpressure", "IngestReceipt", "IDEMPOTENCY_TTL"]


class Backpressure(RuntimeError):
    """Ingest refused for now (429); ``retry_after`` seconds is when to try again."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Ahead:
    """What one round trip before validating a body reads (``Ingest.ahead``): the
    stream's declaration as stored and its events waiting for the worker, ``at`` then
    (monotonic seconds)."""

    declaration: bytes
    waiting: int
    at: float


class IngestReceipt(dict):
    """The answer to one ingest request; the same again for a repeated Idempotency-Key."""


IDEMPOTENCY_TTL = 86400


def _ask_waiting(p, name: str) -> None:
    """Queue on pipeline ``p`` the reads a stream's waiting count is made of
    (``_waiting_of`` takes their answers): what the API stored, what the worker's current
    generation of shards counted."""
    p.hget(keys.ingest_stats(name), "received")
    p.hgetall(keys.shard_status(name))
    p.hget(keys.GENERATIONS, name)


def _waiting_of(received, shards, generation) -> int:
    return max(0, read_number(received) - consumed_events(current_shards(shards, generation)))


class Ingest:
    """``forget(name)``: drop what the process keeps of a stream found deleted."""

    def __init__(self, redis_url: str, r: redis.Redis, lag_reader: LagReader,
                 forget: Callable[[str], None], max_pending_chunks: int = 100_000,
                 max_pending_events: int = 2_000_000, max_wait: float = 10.0):
        self.redis, self.lag_reader, self.forget = r, lag_reader, forget
        self.max_pending_chunks = max_pending_chunks
        self.max_pending_events = max_pending_events
        self.max_wait = max_wait
        # The append is never retried by the client: a reply lost after Redis ran it would
        # store the chunk twice. The caller gets a 503 and retries with its Idempotency-Key.
        self._append = redis.Redis.from_url(redis_url, retry=None).register_script(scripts.APPEND)

    def ahead(self, name: str) -> Ahead:
        """The stream's declaration and its waiting events, in one round trip before its
        body is validated (the declaration to validate by, read fresh: no kept copy can
        outlive a delete and re-declare elsewhere; the waiting count for ``append``'s
        back-pressure check). ``StreamNotFound`` when it is not declared."""
        with self.redis.pipeline(transaction=False) as p:
            p.hget(keys.STREAMS, name)
            _ask_waiting(p, name)
            declaration, *waiting = p.execute()
        if declaration is None:
            raise StreamNotFound(name)
        return Ahead(declaration, _waiting_of(*waiting), time.monotonic())

    def _waiting(self, name: str, ahead: Ahead | None) -> int:
        """The stream's events waiting for the worker: read ``ahead`` when that read is no
        older than the lag it is judged against (``LagReader.ttl``, 0.1 s: a 500-event body
        is validated in well under that), else read now. Either way the count is as fresh
        as back-pressure's view of the worker, so the 429 comes as early as it did when it
        was always read here."""
        if ahead is not None and time.monotonic() - ahead.at <= self.lag_reader.ttl:
            return ahead.waiting
        return self.pending(name)

    def check_backpressure(self, name: str, incoming: int = 0, ahead: Ahead | None = None) -> None:
        """429 before an event accepted now would wait past ``max_wait``: from the worker's
        lag on the whole log (kept 0.1 s) and this stream's own waiting events, with a fair
        share per stream (``app.backpressure``). One round trip (none with a recent
        ``ahead``), plus the lag's now and then."""
        waiting = self._waiting(name, ahead)
        refusal = decide(self.lag_reader.lag(), name, waiting, incoming, self.max_wait,
                         self.max_pending_events, self.max_pending_chunks)
        if refusal:
            raise Backpressure(f"{refusal.reason}; retry in {refusal.retry_after} s",
                               refusal.retry_after)

    def partition(self, name: str) -> int:
        """The log partition of the stream's chunks."""
        return partition_of(name, self.lag_reader.partitions())

    def append(self, name: str, chunk: bytes | None, accepted: int, rejected: int,
               max_ts: float | None, receipt: dict, idempotency_key: str | None = None,
               ahead: Ahead | None = None) -> IngestReceipt:
        """Hand a chunk over durably to the worker, with the stream's clock before it
        (``ahead``: what ``ahead`` read of the stream before its body was validated).

        With an ``idempotency_key`` seen in the last 24 h nothing is stored and the first
        request's receipt comes back."""
        idem = ""
        if idempotency_key:
            idem = keys.idempotency(name, hashlib.sha256(idempotency_key.encode()).hexdigest())
        elif chunk is not None:
            self.check_backpressure(name, accepted, ahead)
        if idem and chunk is not None:
            first = self.redis.get(idem)
            if first is not None:
                return IngestReceipt(json.loads(first), replayed=True)
            self.check_backpressure(name, accepted, ahead)
        partition = self.partition(name)
        out = self._append(
            keys=[keys.log_partition(partition), keys.log_stats(partition), keys.ingest_stats(name),
                  keys.ACTIVE, idem, keys.GENERATIONS, keys.STREAMS],
            args=[chunk or b"", accepted, rejected, "" if max_ts is None else repr(float(max_ts)),
                  json.dumps(receipt), IDEMPOTENCY_TTL, name],
        )
        out = out.decode() if isinstance(out, bytes) else out
        if out == "x":
            self.forget(name)
            raise StreamNotFound(name)
        if chunk is not None and out[0] == "0":
            self.lag_reader.taken(accepted)
        if out[0] == "0":  # stored: the receipt is the one just sent, no need to parse it back
            return IngestReceipt(receipt, replayed=False)
        return IngestReceipt(json.loads(out[1:]), replayed=True)

    def take_rate(self, tenant: str, events: int, per_second: int) -> None:
        """Count ``events`` against the tenant's events of this wall-clock second (kept in
        Redis, so every API process shares it); ``Backpressure`` (429) beyond ``per_second``,
        with nothing counted."""
        second = int(time.time())
        key = keys.tenant_rate(tenant, second)
        with self.redis.pipeline(transaction=True) as p:
            p.incrby(key, events)
            p.expire(key, 2)
            total, _ = p.execute()
        if total > per_second:
            self.redis.decrby(key, events)
            raise Backpressure(f"your keys' ingest is limited to {per_second} events per second "
                               "(TIDEMARK_TENANT_MAX_EVENTS_PER_SECOND); retry shortly")

    def pending(self, name: str) -> int:
        """Events of this stream accepted but not yet counted by the worker."""
        with self.redis.pipeline(transaction=False) as p:
            _ask_waiting(p, name)
            return _waiting_of(*p.execute())

    def lag(self) -> LogLag:
        """The worker's lag on the ingest log (``app.backpressure``; kept 0.1 s)."""
        return self.lag_reader.lag()
