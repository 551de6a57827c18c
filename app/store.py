"""The API's one door to Redis, by job: stream declarations (``app.declarations``),
ingest and back-pressure (``app.ingest``), the decoded-summary cache
(``app.summary_cache``) and worker health (``app.worker_health``). ``Store`` holds one of
each over one Redis client, as attributes named by job (``store.declarations.declare``,
``store.ingest.append``, ``store.health.ping``), and does what spans several of them:
deleting a stream, reading a stream's declaration ahead of its ingest, forgetting what is
kept of a stream. A stream's summary and status are read through ``store.reads``: the
summary cache, or once federated (``Store.federate``) the federation, which answers a
stream that is not federated from that same cache. What crosses to the worker is
``tidemark.wire``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from app.backpressure import LagReader
from app.declarations import Declarations, StreamConflict, StreamNotFound
from app.decoder import Decoder
from app.ingest import Ahead, Backpressure, Ingest, IngestReceipt
from app.stream_status import Status
from app.summary_cache import SummaryCache
from app.worker_health import WorkerHealth
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig

if TYPE_CHECKING:
    from app.federation import Federation

__all__ = ["Store", "StreamNotFound", "StreamConflict", "Backpressure", "Status", "IngestReceipt"]


class Store:
    def __init__(self, redis_url: str, secret: HashSecret | None = None,
                 max_pending_chunks: int = 100_000, max_pending_events: int = 2_000_000,
                 cached_streams: int = 256, config_ttl: float = 1.0, read_ttl: float = 0.25,
                 revalidate_within: float = 2.0, log_partitions: int = 2,
                 max_wait: float = 10.0, lag_ttl: float = 0.1, decoders: int = 1):
        self.redis = redis.Redis.from_url(redis_url, health_check_interval=30)
        self.secret = secret
        self.lag_reader = LagReader(self.redis, log_partitions, max_wait, lag_ttl)
        self.decoder = Decoder.shared(secret, decoders)
        self.ingest = Ingest(redis_url, self.redis, self.lag_reader, self.forget,
                             max_pending_chunks, max_pending_events, max_wait)
        self.declarations = Declarations(self.redis, self.forget, self.ingest.partition,
                                         cached_streams, config_ttl)
        self.summaries = SummaryCache(self.redis, self.declarations, self.decoder,
                                      cached_streams, read_ttl, revalidate_within)
        self.health = WorkerHealth(self.redis)
        self.reads: SummaryCache | Federation = self.summaries
        self.federation = None

    def federate(self, federation) -> None:
        """Route reads through ``federation`` (``app.federation.Federation``): a federated
        stream's summary and status are its sites' merged; every other stream's are its own."""
        self.federation = federation
        self.reads = federation

    def delete(self, name: str) -> None:
        """``Declarations.delete``, with the stream's federation if it has one (never a
        site's stream)."""
        if self.federation is not None:
            self.federation.delete(name)
        self.declarations.delete(name)

    def ahead_of_ingest(self, name: str) -> tuple[StreamConfig, Ahead]:
        """The stream's declaration (parsed) and what back-pressure needs of it, in one
        round trip before its body is validated (``Ingest.ahead``); ``StreamNotFound``."""
        if self.federation is not None:
            self.federation.refuse_ingest(name)
        ahead = self.ingest.ahead(name)
        return self.declarations.parsed(name, ahead.declaration), ahead

    def forget(self, name: str) -> None:
        """Drop everything kept in memory of a stream (it was deleted or declared anew)."""
        self.declarations.forget_config(name)
        self.summaries.forget(name)
        if self.federation is not None:
            self.federation.forget(name)
