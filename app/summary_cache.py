"""The decoded-summary cache: each stream's published shard versions, decoded once per
version by the decoder process and merged, served while a newer one decodes.

The worker publishes each shard of a stream on its own, as segments named by a manifest in
its status (``tidemark/segments.py``); a query reads the shards' statuses first and, when
a version changed, the segments this process lacks (one script, one coherent set); a
decoder process decodes and merges them (``app/decoder.py``) while queries go on being
answered from the version before.

The fast answer path (``app/answer_cache.py``) asks it only ``served_versions`` and
``in_memory`` (``Served``).

Tested by: tests/app/test_store.py (shards merged at read, cached by version),
tests/app/test_decoder.py, tests/app/test_answer_cache.py.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import redis

from app.declarations import Declarations
from app.decoder import Decoder
from app.stream_status import Status, current_shards, status_of, versions_served
from tidemark import segments
from tidemark.summary import StreamSummary
from tidemark.wire import keys, scripts

__all__ = ["SummaryCache", "Served"]

log = logging.getLogger("tidemark.store")


class Served(Protocol):
    """What the fast answer path may ask: is this version the one served, without Redis?"""

    def versions_of(self, name: str, summary) -> tuple | None:
        """The shard versions ``summary`` (one this cache handed out) was merged from, while
        it is the one served; None once a newer one is."""
        served = self._merged.get(name)
        return served[0] if served and served[1] is summary else None

    def served_versions(self, name: str) -> tuple | None: ...

    def in_memory(self, name: str) -> bool: ...


class SummaryCache:
    def __init__(self, r: redis.Redis, declarations: Declarations, decoder: Decoder,
                 cached_streams: int = 256, read_ttl: float = 0.25, revalidate_within: float = 2.0):
        self.redis, self.declarations, self.decoder = r, declarations, decoder
        # name -> (shard versions, merged summary, their shard statuses): the version served;
        # shard summaries decoded once per version
        self._merged: OrderedDict[str, tuple[tuple, StreamSummary, dict]] = OrderedDict()
        self._segments: dict[str, dict[str, bytes]] = {}  # name -> digest -> segment held
        self._read_segments = self.redis.register_script(scripts.READ)
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
        self._refreshing: set[str] = set()  # streams being decoded in the background
        self._pools: dict[bool, ThreadPoolExecutor] = {}  # fresh=True: the decoder; False: readers
        self.read_ttl = read_ttl
        self.revalidate_within = max(revalidate_within, read_ttl, declarations.config_ttl)
        self._reads: dict[str, tuple[float, tuple]] = {}
        self._read_at: dict[str, float] = {}  # when each kept read was made (an announcement does not move it)
        self._reading = threading.Lock()
        self._revalidating: set[str] = set()  # streams whose statuses are being read in the background

    def forget(self, name: str) -> None:
        """Drop every version and read kept of a stream (deleted, or declared anew)."""
        with self._lock:
            self._reads.pop(name, None)
            self._read_at.pop(name, None)
            self._merged.pop(name, None)
            self._segments.pop(name, None)
        self.decoder.forget(name)

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
        shards = current_shards(raw, generation)
        read = shards, ingested, versions_served(shards)
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

    def versions_of(self, name: str, summary) -> tuple | None:
        """The shard versions ``summary`` (one this cache handed out) was merged from, while
        it is the one served; None once a newer one is."""
        served = self._merged.get(name)
        return served[0] if served and served[1] is summary else None

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
        config_at, read = self.declarations.kept_at(name), self._reads.get(name)
        if not (config_at is not None and read and name in self._merged):
            return False
        if now - config_at < self.declarations.config_ttl and now - read[0] <= self.read_ttl:
            return True
        if now - config_at < self.revalidate_within and now - self._read_at.get(name, -math.inf) < self.revalidate_within:
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
        self.declarations.config(name)
        shards, ingested, versions = self._read(name)
        served = self._merged.get(name)
        if served and served[0] != versions:
            self._refresh_later(name)
            return status_of(served[2], ingested)
        return status_of(shards, ingested)

    def summary(self, name: str, fresh: bool = False) -> tuple[StreamSummary | None, Status]:
        """The published summary (None before the first publish) and the status of those
        very shard versions. Shards are decoded once per version and merged once per set
        of versions.

        A new version is decoded off the request path: until it is ready, queries answer
        from the version decoded before it (its own status says which), so no query waits
        for a decode and fifty queries after a publish never decode it fifty times. Only a
        stream with nothing decoded yet, or ``fresh=True`` (alert evaluation), waits.
        """
        self.declarations.config(name)
        served = self._merged.get(name)
        # Serving a decoded version, the statuses read ``read_ttl`` ago only decide when to
        # decode the next one (an announcement forgets them at once).
        shards, ingested, versions = self._read(name, self.read_ttl if served and not fresh else 0.0)
        if served and served[0] == versions:
            with self._lock:
                self._merged.move_to_end(name)
            return served[1], status_of(shards, ingested)
        if served and not fresh:
            self._refresh_later(name)
            return served[1], status_of(served[2], ingested)
        with self._lock:
            decoding = self._decoding.setdefault(name, threading.Lock())
        with decoding:  # one thread decodes a version; the others asking meanwhile wait
            served = self._merged.get(name)
            if served and served[0] == versions:
                return served[1], status_of(shards, ingested)
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
        shards = current_shards(raw, generation)
        versions = versions_served(shards)
        with self._lock:  # the freshest read of the statuses too
            self._reads[name] = (read_at, (shards, ingested, versions))
            self._read_at[name] = read_at
        held = {**held, **{d.decode(): b for d, b in zip(fetched[::2], fetched[1::2])}}
        named = {d for s in shards.values() for _, d in s.segments}
        self._segments[name] = {d: b for d, b in held.items() if d in named}
        blobs = [(tuple(d for _, d in shards[k].segments), segments.join(shards[k].segments, held))
                 for k, _ in versions if shards[k].segments]
        if not blobs:
            return None, status_of(shards, ingested)
        merged, cpu = self.decoder.decode(blobs, name)
        if self.on_decoded is not None:  # answers of the new version rendered before it serves
            try:
                serving = self._merged.get(name)
                self.on_decoded(name, serving and serving[0], versions, merged, status_of(shards, ingested))
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
        return merged, status_of(shards, ingested)

    def failed_streams(self) -> dict[str, str]:
        """The streams whose current shards say ``failed``, with why (``tidemark up`` says
        so on its terminal)."""
        names = self.declarations.names()
        with self.redis.pipeline(transaction=False) as p:
            for name in names:
                p.hgetall(keys.shard_status(name))
                p.hget(keys.GENERATIONS, name)
            replies = p.execute()
        out = {}
        for i, name in enumerate(names):
            shards = current_shards(replies[2 * i], replies[2 * i + 1])
            failed = [f"shard {k}: {s.failed}" for k, s in sorted(shards.items()) if s.failed]
            if failed:
                out[name] = "; ".join(failed)
        return out
