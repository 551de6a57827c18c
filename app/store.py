"""The API's one door to Redis: stream declarations, ingest, published summaries, status.

The worker publishes each shard of a stream on its own, as segments named by a manifest in
its status (``tidemark/segments.py``); a query reads the shards' statuses first and, when
a version changed, the segments this process lacks (one script, one coherent set); a
decoder process decodes and merges them (``app/decoder.py``) while queries go on being
answered from the version before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import redis

from app.backpressure import LagReader, LogLag, decide
from app.decoder import Decoder
from tidemark import segments
from tidemark.wire import keys, scripts
from tidemark.wire.records import ShardStatus, read_config, write_config
from tidemark.hash_secret import HashSecret
from tidemark.ingest_log import partition_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

log = logging.getLogger("tidemark.store")

__all__ = ["Store", "StreamNotFound", "StreamConflict", "Backpressure", "Status", "IngestReceipt"]


class StreamNotFound(LookupError):
    def __init__(self, name: str):
        super().__init__(f"stream {name!r} is not declared")


class StreamConflict(ValueError):
    pass


class Backpressure(RuntimeError):
    """Ingest refused for now (429); ``retry_after`` seconds is when to try again."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class Status(dict):
    """The contract's stream status (§4) as a plain dict."""


class IngestReceipt(dict):
    """The answer to one ingest request; the same again for a repeated Idempotency-Key."""


IDEMPOTENCY_TTL = 86400


def _num(raw: bytes | None, kind=int, default=0):
    if raw is None or raw == b"":
        return default
    return kind(raw.decode())


def _shards(raw: dict, generation: bytes | None = None) -> dict[int, ShardStatus]:
    """The published shard statuses of the stream's current ``generation`` only (a status
    of another generation is a stale publish: never served, never counted)."""
    current = None if generation is None else int(generation)
    shards = {int(k): ShardStatus.decode(v) for k, v in raw.items()}
    return {k: s for k, s in shards.items() if s.generation == current}


def _versions(shards: dict[int, ShardStatus]) -> tuple:
    """What identifies the shard summaries served: (shard, (generation, version)) each, so
    a re-declared stream's version 1 is never taken for the old one's."""
    return tuple(sorted((k, (s.generation, s.version)) for k, s in shards.items()))


def _consumed(shards: dict[int, ShardStatus]) -> int:
    """Events the worker has taken from the ingest queue: counted or dropped as late."""
    return sum(s.events + s.late_dropped for s in shards.values())


def _status(shards: dict[int, ShardStatus], ingested: dict) -> Status:
    """A stream's status from its shards' published statuses and the API's counters."""
    consumed = _consumed(shards)
    clocks = [s.clock for s in shards.values() if s.clock is not None]
    sizes: dict[str, int] = {}
    for s in shards.values():
        for part, n in s.sizes.items():
            sizes[part] = sizes.get(part, 0) + n
    failed = {k: s.failed for k, s in sorted(shards.items()) if s.failed}
    status = Status(
        # After a Redis flush the API's counter restarts; what the worker consumed is a floor.
        received=max(_num(ingested.get(b"received")), consumed),
        events=sum(s.events for s in shards.values()),
        clock=max(clocks) if clocks else None,
        late_dropped=sum(s.late_dropped for s in shards.values()),
        rejected=_num(ingested.get(b"rejected")),
        # Each shard's version only grows, so their sum does too.
        sketch_version=sum(s.version for s in shards.values()),
        updated_at=max((s.updated_at for s in shards.values()), default=None),
        sketch_bytes=sizes,
        shards=len(shards),
        state="failed" if failed else "ok",
    )
    if failed:
        status["failed"] = "; ".join(f"shard {k}: {why}" for k, why in failed.items())
    # Accepted events an update failed to take stay named once the shard works again:
    # answers over their times say they are incomplete (app/answers.py).
    lost = sum(s.failed_events for s in shards.values())
    if failed or lost:
        status["failed_events"] = lost
    return status


class Store:
    def __init__(self, redis_url: str, secret: HashSecret | None = None,
                 max_pending_chunks: int = 100_000, max_pending_events: int = 2_000_000,
                 cached_streams: int = 256, config_ttl: float = 1.0, read_ttl: float = 0.25,
                 revalidate_within: float = 2.0, log_partitions: int = 2,
                 max_wait: float = 10.0, lag_ttl: float = 0.1, decoders: int = 1):
        self.redis = redis.Redis.from_url(redis_url, health_check_interval=30)
        self.secret = secret
        self.max_pending_chunks = max_pending_chunks
        self.max_pending_events = max_pending_events
        self.max_wait = max_wait
        self.lag_reader = LagReader(self.redis, log_partitions, max_wait, lag_ttl)
        # The append is never retried by the client: a reply lost after Redis ran it would
        # store the chunk twice. The caller gets a 503 and retries with its Idempotency-Key.
        self._append = redis.Redis.from_url(redis_url, retry=None).register_script(scripts.APPEND)
        self._declare = self.redis.register_script(scripts.DECLARE)
        self._delete = self.redis.register_script(scripts.DELETE)
        # name -> (shard versions, merged summary, their shard statuses): the version served;
        # shard summaries decoded once per version
        self._merged: OrderedDict[str, tuple[tuple, StreamSummary, dict]] = OrderedDict()
        self._segments: dict[str, dict[str, bytes]] = {}  # name -> digest -> segment held
        self._read_segments = self.redis.register_script(scripts.READ)
        self.decoder = Decoder.shared(secret, decoders)
        # What reading published versions cost (bench/bench_query_latency.py reports it):
        # versions decoded, segment bytes read from Redis, bytes of the blobs they made up,
        # decoder CPU seconds.
        self.read_stats = {"decodes": 0, "bytes_read": 0, "bytes_served": 0, "decode_seconds": 0.0}
        # Called with (name, versions served now, new versions, summary, status) of a newly
        # decoded version before it serves: the app renders the answers asked of the version
        # before, so queries after the swap find them (app.routes.queries.render_ahead).
        self.on_decoded = None
        self.cached_streams = cached_streams  # the cache is bounded, not one entry per stream
        self._lock = threading.Lock()
        self._decoding: dict[str, threading.Lock] = {}  # one decode per stream at a time
        self._configs: dict[str, tuple[float, StreamConfig]] = {}
        self._refreshing: set[str] = set()  # streams being decoded in the background
        self._pools: dict[bool, ThreadPoolExecutor] = {}  # fresh=True: the decoder; False: readers
        self.config_ttl, self.read_ttl = config_ttl, read_ttl
        self.revalidate_within = max(revalidate_within, read_ttl, config_ttl)
        self._reads: dict[str, tuple[float, tuple]] = {}
        self._read_at: dict[str, float] = {}  # when each kept read was made (an announcement does not move it)
        self._reading = threading.Lock()
        self._revalidating: set[str] = set()  # streams whose statuses are being read in the background

    # -- declarations --------------------------------------------------------------------
    def declare(self, name: str, config: StreamConfig) -> bool:
        """Declare a stream; True when new. Re-declaring with other settings is a conflict,
        since published sketches were sized from the old ones (delete it first)."""
        new, raw = self._declare(
            keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.ingest_stats(name),
                  keys.shard_segments(name), keys.shard_status(name)],
            args=[name, write_config(config)])
        if new:
            self.forget(name)
            return True
        if read_config(raw) != config:
            raise StreamConflict(
                f"stream {name!r} already exists with other settings; "
                "sketches are sized from them, so they cannot change (delete it, or declare "
                "a new stream)"
            )
        return False

    def delete(self, name: str) -> None:
        """Remove a stream at once (contract §4): see ``tidemark.wire.scripts.DELETE``; its
        idempotency keys go too (a retry of an old request must not be answered as stored). What the
        worker still holds of it is of an ended generation, so nothing of it is ever
        served or counted again (``tidemark.generations``)."""
        part = self.partition(name)
        shards = self._delete(
            keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.log_partition(part),
                  keys.log_stats(part), keys.ingest_stats(name), keys.shard_segments(name),
                  keys.shard_status(name), keys.ACTIVE, keys.ingest(name)],
            args=[name, keys.ANNOUNCE])
        self.forget(name)
        if int(shards) < 0:
            raise StreamNotFound(name)
        batch = []
        for key in self.redis.scan_iter(match=keys.idempotency_pattern(name), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                self.redis.unlink(*batch)
                batch.clear()
        if batch:
            self.redis.unlink(*batch)

    def forget(self, name: str) -> None:
        """Drop everything kept in memory of a stream (it was deleted or declared anew)."""
        with self._lock:
            self._configs.pop(name, None)
            self._reads.pop(name, None)
            self._read_at.pop(name, None)
            self._merged.pop(name, None)
            self._segments.pop(name, None)

    def config(self, name: str) -> StreamConfig:
        """The stream's declaration. A declaration never changes (re-declaring with other
        settings is refused), so it is kept for ``config_ttl`` seconds: only a Redis flush
        can make a kept one wrong, and then only for that long."""
        now = time.monotonic()
        kept = self._configs.get(name)
        if kept and now - kept[0] < self.config_ttl:
            return kept[1]
        raw = self.redis.hget(keys.STREAMS, name)
        if raw is None:
            self._configs.pop(name, None)
            raise StreamNotFound(name)
        config = read_config(raw)
        if len(self._configs) >= 4 * self.cached_streams:
            self._configs.clear()
        self._configs[name] = (now, config)
        return config

    def names(self) -> list[str]:
        return sorted(n.decode() for n in self.redis.hkeys(keys.STREAMS))

    # -- ingest ----------------------------------------------------------------------------
    def check_backpressure(self, name: str, incoming: int = 0) -> None:
        """429 before an event accepted now would wait past ``max_wait``: from the worker's
        lag on the whole log (kept 0.1 s) and this stream's own waiting events, with a fair
        share per stream (``app.backpressure``). One round trip, plus the lag's now and then."""
        with self.redis.pipeline(transaction=False) as p:
            p.hget(keys.ingest_stats(name), "received")
            p.hgetall(keys.shard_status(name))
            p.hget(keys.GENERATIONS, name)
            received, shards, generation = p.execute()
        waiting = max(0, _num(received) - _consumed(_shards(shards, generation)))
        refusal = decide(self.lag_reader.lag(), name, waiting, incoming, self.max_wait,
                         self.max_pending_events, self.max_pending_chunks)
        if refusal:
            raise Backpressure(f"{refusal.reason}; retry in {refusal.retry_after} s",
                               refusal.retry_after)

    def partition(self, name: str) -> int:
        """The log partition of the stream's chunks."""
        return partition_of(name, self.lag_reader.partitions())

    def append(self, name: str, chunk: bytes | None, accepted: int, rejected: int,
               max_ts: float | None, receipt: dict, idempotency_key: str | None = None) -> IngestReceipt:
        """Hand a chunk over durably to the worker, with the stream's clock before it.

        With an ``idempotency_key`` seen in the last 24 h nothing is stored and the first
        request's receipt comes back."""
        idem = ""
        if idempotency_key:
            idem = keys.idempotency(name, hashlib.sha256(idempotency_key.encode()).hexdigest())
        elif chunk is not None:
            self.check_backpressure(name, accepted)
        if idem and chunk is not None:
            first = self.redis.get(idem)
            if first is not None:
                return IngestReceipt(json.loads(first), replayed=True)
            self.check_backpressure(name, accepted)
        part = self.partition(name)
        out = self._append(
            keys=[keys.log_partition(part), keys.log_stats(part), keys.ingest_stats(name),
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
        return IngestReceipt(json.loads(out[1:]), replayed=out[0] == "1")

    def generation(self, name: str) -> int | None:
        raw = self.redis.hget(keys.GENERATIONS, name)
        return None if raw is None else int(raw)

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
            p.hget(keys.ingest_stats(name), "received")
            p.hgetall(keys.shard_status(name))
            p.hget(keys.GENERATIONS, name)
            received, shards, generation = p.execute()
        return max(0, _num(received) - _consumed(_shards(shards, generation)))

    def lag(self) -> LogLag:
        """The worker's lag on the ingest log (``app.backpressure``; kept 0.1 s)."""
        return self.lag_reader.lag()

    # -- published state ---------------------------------------------------------------------
    def _read(self, name: str, max_age: float = 0.0) -> tuple[dict[int, dict], dict, tuple]:
        """The shards' published statuses, the ingest counters and the shard versions, as
        read at most ``max_age`` seconds ago."""
        now = time.monotonic()
        kept = self._reads.get(name)
        if kept and now - kept[0] <= max_age:
            return kept[1]
        if kept and max_age > 0:  # one thread reads again; the others keep the last read
            if not self._reading.acquire(blocking=False):
                return kept[1]
            try:
                return self._fetch(name, now)
            finally:
                self._reading.release()
        return self._fetch(name, now)

    def _fetch(self, name: str, now: float) -> tuple[dict[int, dict], dict, tuple]:
        with self.redis.pipeline(transaction=True) as p:
            p.hgetall(keys.shard_status(name))
            p.hgetall(keys.ingest_stats(name))
            p.hget(keys.GENERATIONS, name)
            raw, ingested, generation = p.execute()
        shards = _shards(raw, generation)
        read = shards, ingested, _versions(shards)
        if len(self._reads) >= 4 * self.cached_streams:
            self._reads.clear()
            self._read_at.clear()
        self._reads[name] = (now, read)
        self._read_at[name] = now
        return read

    def forget_reads(self, name: str) -> None:
        """A new version was announced: the next query reads the statuses again (one
        query; those arriving meanwhile keep the last read)."""
        kept = self._reads.get(name)
        if kept:
            self._reads[name] = (-math.inf, kept[1])

    def served_versions(self, name: str) -> tuple | None:
        """The shard versions answers of this stream come from now (None: none decoded).
        They only move forward, so equal before and after an answer means it is theirs."""
        served = self._merged.get(name)
        return served[0] if served else None

    def in_memory(self, name: str) -> bool:
        """Can a query of this stream be answered now without waiting for Redis? Then it
        may run on the event loop.

        Yes when a version is decoded and the declaration and statuses were read recently
        (``config_ttl``, ``read_ttl``, no announcement since). Also when they were read
        within ``revalidate_within`` seconds but are due again (an announcement came, or
        ``read_ttl`` passed): a stream with a decoded version is answered from that version
        whatever the read says — the read only decides whether to decode a newer one, off
        the request path — so the read starts now in the background and the query does
        not wait for it. Its answer says which version it is (``as_of``).
        """
        now = time.monotonic()
        config, read = self._configs.get(name), self._reads.get(name)
        if not (config and read and name in self._merged):
            return False
        if now - config[0] < self.config_ttl and now - read[0] <= self.read_ttl:
            return True
        if now - config[0] < self.revalidate_within and now - self._read_at.get(name, -math.inf) < self.revalidate_within:
            self._revalidate_later(name)
            return True
        return False

    def _revalidate_later(self, name: str) -> None:
        """Read the declaration and statuses again in the background (one read per stream
        at a time), which starts decoding a newer version if there is one."""
        self._behind(name, fresh=False)

    def status(self, name: str) -> Status:
        """The status of the version the answers come from now (see ``summary``), with the
        ingest counters of this moment: ``events`` are exactly what the answers count."""
        self.config(name)
        shards, ingested, versions = self._read(name)
        served = self._merged.get(name)
        if served and served[0] != versions:
            self._refresh_later(name)
            return _status(served[2], ingested)
        return _status(shards, ingested)

    def summary(self, name: str, fresh: bool = False) -> tuple[StreamSummary | None, Status]:
        """The published summary (None before the first publish) and the status of those
        very shard versions. Shards are decoded once per version and merged once per set
        of versions.

        A new version is decoded off the request path: until it is ready, queries answer
        from the version decoded before it (its own status says which), so no query waits
        for a decode and fifty queries after a publish never decode it fifty times. Only a
        stream with nothing decoded yet, or ``fresh=True`` (alert evaluation), waits.
        """
        self.config(name)
        served = self._merged.get(name)
        # Serving a decoded version, the statuses read ``read_ttl`` ago only decide when to
        # decode the next one (an announcement forgets them at once).
        shards, ingested, versions = self._read(name, self.read_ttl if served and not fresh else 0.0)
        if served and served[0] == versions:
            with self._lock:
                self._merged.move_to_end(name)
            return served[1], _status(shards, ingested)
        if served and not fresh:
            self._refresh_later(name)
            return served[1], _status(served[2], ingested)
        with self._lock:
            decoding = self._decoding.setdefault(name, threading.Lock())
        with decoding:  # one thread decodes a version; the others asking meanwhile wait
            served = self._merged.get(name)
            if served and served[0] == versions:
                return served[1], _status(shards, ingested)
            return self._decode(name, shards, ingested, versions)

    def _refresh_later(self, name: str) -> None:
        """Decode the newest version in the background (one decoder thread)."""
        self._behind(name, fresh=True)

    def _behind(self, name: str, fresh: bool) -> None:
        """``summary(name, fresh)`` in the background, once per stream at a time."""
        pending = self._refreshing if fresh else self._revalidating
        with self._lock:
            if name in pending:
                return
            pending.add(name)
            pool = self._pools.get(fresh)
            if pool is None:
                pool = self._pools[fresh] = ThreadPoolExecutor(
                    1 if fresh else 2, thread_name_prefix="tidemark-decode" if fresh else "tidemark-read")
        pool.submit(self._in_background, name, fresh, pending)

    def _in_background(self, name: str, fresh: bool, pending: set[str]) -> None:
        try:
            self.summary(name, fresh=fresh)
        except Exception as e:  # gone, corrupt or Redis away: the next query goes the full way and says so
            log.warning("%s %s in the background failed: %s", "decoding" if fresh else "reading", name,
                        type(e).__name__)
            with self._lock:
                self._merged.pop(name, None)
        finally:
            with self._lock:
                pending.discard(name)

    def _decode(self, name: str, shards: dict, ingested: dict, versions: tuple):
        """Read the segments of the current shard versions that this process lacks, with
        the statuses naming them, in one script (never a torn set: tidemark/segments.py),
        and have the decoder process decode and merge them."""
        held = self._segments.get(name, {})
        read_at = time.monotonic()
        statuses, ingested_raw, generation, fetched = self._read_segments(
            keys=[keys.shard_status(name), keys.shard_segments(name), keys.ingest_stats(name),
                  keys.GENERATIONS],
            args=[name, *held])
        raw = dict(zip(statuses[::2], statuses[1::2]))
        ingested = dict(zip(ingested_raw[::2], ingested_raw[1::2]))
        shards = _shards(raw, generation)
        versions = _versions(shards)
        with self._lock:  # the freshest read of the statuses too
            self._reads[name] = (read_at, (shards, ingested, versions))
            self._read_at[name] = read_at
        held = {**held, **{d.decode(): b for d, b in zip(fetched[::2], fetched[1::2])}}
        named = {d for s in shards.values() for _, d in s.segments}
        self._segments[name] = {d: b for d, b in held.items() if d in named}
        blobs = [(tuple(d for _, d in shards[k].segments), segments.join(shards[k].segments, held))
                 for k, _ in versions if shards[k].segments]
        if not blobs:
            return None, _status(shards, ingested)
        merged, cpu = self.decoder.decode(blobs)
        if self.on_decoded is not None:  # answers of the new version rendered before it serves
            try:
                serving = self._merged.get(name)
                self.on_decoded(name, serving and serving[0], versions, merged, _status(shards, ingested))
            except Exception as e:  # noqa: BLE001 — best effort: the query renders it then
                log.warning("rendering answers of %s ahead failed: %s", name, type(e).__name__)
        with self._lock:
            self.read_stats["decodes"] += 1
            self.read_stats["bytes_read"] += sum(len(b) for b in fetched[1::2])
            self.read_stats["bytes_served"] += sum(len(b) for _, b in blobs)
            self.read_stats["decode_seconds"] += cpu
            self._merged[name] = (versions, merged, shards)
            self._merged.move_to_end(name)
            while len(self._merged) > self.cached_streams:
                old, _ = self._merged.popitem(last=False)
                self._segments.pop(old, None)
        return merged, _status(shards, ingested)

    def failed_streams(self) -> dict[str, str]:
        """The streams whose current shards say ``failed``, with why (``tidemark up`` says
        so on its terminal)."""
        names = self.names()
        with self.redis.pipeline(transaction=False) as p:
            for name in names:
                p.hgetall(keys.shard_status(name))
                p.hget(keys.GENERATIONS, name)
            replies = p.execute()
        out = {}
        for i, name in enumerate(names):
            shards = _shards(replies[2 * i], replies[2 * i + 1])
            failed = [f"shard {k}: {s.failed}" for k, s in sorted(shards.items()) if s.failed]
            if failed:
                out[name] = "; ".join(failed)
        return out

    # -- health --------------------------------------------------------------------------------
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
