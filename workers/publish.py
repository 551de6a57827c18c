"""Publishing shard summaries to Redis, the serving layer (runs on the executors).

Each (stream, shard) is published on its own, by the task that updated it: one Lua script
writes the summary's changed segments and the status naming them all
(``tidemark/segments.py``) and announces them, only when the version is newer than the
one Redis holds. Segments the shard's current manifest already names are not sent again. A replayed micro-batch recomputes the same state with the
same version from the same offsets, so publishing it again changes nothing; a task
retried late can never put an older state back. The API merges a stream's shards when it
reads them. Redis holds nothing the worker could not rebuild: after a flush the driver
republishes every shard from Spark's state store (``workers.job.republish_all``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time

from tidemark import segments
from tidemark.wire import keys, scripts
from tidemark.wire.records import ShardStatus, read_config
from tidemark.streams import StreamConfig
from workers.redis_client import worker_redis

__all__ = ["Publisher", "ShardStatus"]

# Digests are remembered for shards of at least this many segments (a small summary hashes
# in microseconds), for at most this many shards (their bytes are held until the next publish).
_MEMO_SEGMENTS, _MEMO_SHARDS = 16, 64


class Publisher:
    def __init__(self, redis_url: str):
        self.redis = worker_redis(redis_url)  # rides out a Redis restart
        self._publish = self.redis.register_script(scripts.PUBLISH)
        self._ensure = self.redis.register_script(scripts.ENSURE)
        # The digests this process last published per (stream, shard): what Redis most
        # likely holds, so a publish needs no read first. A wrong guess costs one retry
        # (the script refuses a manifest naming a segment it lacks: -1), never a bad write.
        self._published: dict[tuple[str, int], set[str]] = {}
        # Each big shard's last segments and their digests: a page no batch touched comes
        # back as equal bytes, whose digest is then reused, not hashed again (a compare
        # costs a tenth of a hash; hashing every page of an hour's summary was 2 ms a batch).
        self._digested: dict[tuple[str, int], dict[tuple, tuple[bytes, str]]] = {}

    def config(self, name: str) -> StreamConfig | None:
        raw = self.redis.hget(keys.STREAMS, name)
        return None if raw is None else read_config(raw)

    def declaration(self, name: str) -> tuple[StreamConfig, int] | None:
        """The stream's settings and current generation, read together (None: not declared)."""
        with self.redis.pipeline(transaction=True) as p:
            p.hget(keys.STREAMS, name)
            p.hget(keys.GENERATIONS, name)
            raw, gen = p.execute()
        if raw is None:
            return None
        return read_config(raw), int(gen) if gen is not None else 0

    def current_generation(self, name: str, config: dict) -> int:
        """The stream's current generation (declared with ``config`` if it is not)."""
        return int(self._ensure(keys=[keys.STREAMS, keys.GENERATIONS], args=[name, json.dumps(config)]))

    def publish(self, name: str, shard: int, status: ShardStatus | dict, blob: bytes,
                config: dict, cut: list[tuple[str, bytes]] | None = None, first: bool = False) -> bool:
        """True when Redis took it (False: it already had this version or a newer one of
        the generation, or the generation is not the stream's current one). A status
        without a generation is published as of the current one (declaring the stream with
        ``config`` if it is not: benches and tests that publish without Spark, which may
        hand the status's fields as a dict). ``first``: the shard's state is new, so what
        Redis holds of it is not read and every segment is sent (one round trip less for
        each new stream: a thousand new streams' batches waited on three each)."""
        if not isinstance(status, ShardStatus):
            status = ShardStatus(**status)
        if status.generation is None:
            status = dataclasses.replace(status, generation=self.current_generation(name, config))
        # ``cut``: the blob already cut into its segments (``StreamSummary.encode_segments``)
        parts = cut if cut is not None else (segments.split(blob) if blob else [])
        status = dataclasses.replace(status, segments=self._digests((name, shard), parts))
        stored = self._published.pop((name, shard), None)
        if stored is None:
            stored = set() if first else self._stored_digests(name, shard)
        for attempt in (0, 1):
            sent = [x for (_, d), (_, b) in zip(status.segments, parts)
                    if attempt or d not in stored for x in (d, b)]
            done = int(self._publish(
                keys=[keys.shard_status(name), keys.shard_segments(name), keys.STREAMS,
                      keys.GENERATIONS, keys.DELETED],
                args=[shard, status.version, status.encode(), name, json.dumps(config),
                      keys.ANNOUNCE, int(status.generation), *sent],
            ))
            if done >= 0:
                if done:
                    while len(self._published) >= 8192:  # bounded: oldest first out
                        self._published.pop(next(iter(self._published)))
                    self._published[(name, shard)] = {d for _, d in status.segments}
                return bool(done)
        raise RuntimeError("publish script refused every segment it was sent")  # cannot happen

    def _digests(self, shard: tuple[str, int], parts: list[tuple[str, bytes]]) -> list[list[str]]:
        """``[[segment name, digest], ...]`` of ``parts``; a segment whose bytes equal one
        the shard published last takes that one's digest (equality checked whole)."""
        before = self._digested.pop(shard, {})
        now, out = {}, []
        for name, b in parts:
            probe = (len(b), b[:16], b[-16:])
            seen = before.get(probe)
            d = seen[1] if seen is not None and seen[0] == b else segments.digest(b)
            now[probe] = (b, d)
            out.append([name, d])
        if len(parts) >= _MEMO_SEGMENTS:
            while len(self._digested) >= _MEMO_SHARDS:  # bounded: oldest first out
                self._digested.pop(next(iter(self._digested)))
            self._digested[shard] = now
        return out

    def _stored_digests(self, name: str, shard: int) -> set[str]:
        """The digests the shard's published manifest names (sent only when they changed;
        should one be collected meanwhile, the script says so and all are sent)."""
        raw = self.redis.hget(keys.shard_status(name), shard)
        try:
            return {d for _, d in ShardStatus.decode(raw).segments} if raw else set()
        except (ValueError, TypeError, KeyError):
            return set()

    def publish_summary(self, name: str, summary, version: int, events: int,
                        late_dropped: int = 0, shard: int = 0) -> bool:
        """Publish a whole summary as one shard (benches and tests that build summaries
        without Spark publish them the way the worker does)."""
        import datetime as dt

        config = summary.config.model_dump()
        status = ShardStatus(version=version, events=events,
                             late_dropped=late_dropped,
                             clock=summary.clock_seconds, sizes=summary.sizes(), failed=None,
                             failed_events=0,
                             updated_at=dt.datetime.now(dt.timezone.utc).isoformat())
        return self.publish(name, shard, status, summary.to_bytes(), config)

    def heartbeat(self, beat: dict, ttl: int = 15) -> None:
        beat = {"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(), **beat}
        self.redis.set(keys.HEARTBEAT, json.dumps(beat), ex=ttl)

    def log_progress(self, progress: dict) -> None:
        """What the last finished batch read, per log partition, and the worker's
        throughput (``workers.progress.log_progress``; read by ``app.backpressure``)."""
        self.redis.hset(keys.LOG_PROGRESS, mapping={**progress, "at": time.time()})

    def standby_beat(self, since: float, ttl: int = 10) -> None:
        """A spare worker stands by (``/readyz`` shows it, ``/metrics`` counts it)."""
        beat = {"host": socket.gethostname(), "pid": os.getpid(), "since": since,
                "time": time.time()}
        self.redis.set(keys.STANDBY, json.dumps(beat), ex=ttl)

    def standby_gone(self) -> None:
        self.redis.delete(keys.STANDBY)

    def mark_published(self) -> None:
        self.redis.set(keys.PUBLISHED, "1")

    def needs_republish(self) -> bool:
        """True after Redis lost our publications (flushed, or restarted without them)."""
        return not self.redis.exists(keys.PUBLISHED)
