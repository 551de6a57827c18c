"""Stream declarations: declare, delete, and the declaration kept for ``config_ttl``.

Tested by: tests/app/test_store.py (declarations through Store), tests/app/test_lifecycle.py
(delete and re-declare through the API)."""

from __future__ import annotations

import time
from typing import Callable

import redis

from tidemark.streams import StreamConfig
from tidemark.wire import keys, scripts
from tidemark.wire.records import read_config, write_config

__all__ = ["Declarations", "StreamNotFound", "StreamConflict"]


class StreamNotFound(LookupError):
    def __init__(self, name: str):
        super().__init__(f"stream {name!r} is not declared")


class StreamConflict(ValueError):
    pass



class Declarations:
    """``forget(name)`` drops all the API process keeps of a stream (its declaration here
    and the summaries decoded of it); ``partition(name)`` is its log partition."""

    def __init__(self, r: redis.Redis, forget: Callable[[str], None], partition: Callable[[str], int],
                 cached_streams: int = 256, config_ttl: float = 1.0):
        self.redis = r
        self.forget, self.partition = forget, partition
        self.cached_streams, self.config_ttl = cached_streams, config_ttl
        self._declare = self.redis.register_script(scripts.DECLARE)
        self._delete = self.redis.register_script(scripts.DELETE)
        self._configs: dict[str, tuple[float, StreamConfig]] = {}
        self._parsed: dict[str, tuple[bytes, StreamConfig]] = {}  # by the stored bytes

    def declare(self, name: str, config: StreamConfig) -> bool:
        """Declare a stream; True when new. Re-declaring with other settings is a conflict,
        since published sketches were sized from the old ones (delete it first)."""
        new, raw = self._declare(
            keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.ingest_stats(name),
                  keys.shard_segments(name), keys.shard_status(name), keys.SHARDS_MAX],
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
        partition = self.partition(name)
        shards = self._delete(
            keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.log_partition(partition),
                  keys.log_stats(partition), keys.ingest_stats(name), keys.shard_segments(name),
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

    def forget_config(self, name: str) -> None:
        self._configs.pop(name, None)
        self._parsed.pop(name, None)

    def kept_at(self, name: str) -> float | None:
        """When the kept declaration was read (monotonic seconds; None: none kept)."""
        kept = self._configs.get(name)
        return kept[0] if kept else None

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

    def parsed(self, name: str, raw: bytes) -> StreamConfig:
        """The declaration ``raw`` (as just read from Redis) of ``name``, parsed once per
        distinct value: a post reads the stored bytes anyway (``Ingest.ahead``), and
        comparing them costs nothing beside a pydantic parse."""
        kept = self._parsed.get(name)
        if kept is not None and kept[0] == raw:
            return kept[1]
        config = read_config(raw)
        if len(self._parsed) >= 4 * self.cached_streams:
            self._parsed.clear()
        self._parsed[name] = (raw, config)
        return config

    def names(self) -> list[str]:
        return sorted(n.decode() for n in self.redis.hkeys(keys.STREAMS))

    def generation(self, name: str) -> int | None:
        raw = self.redis.hget(keys.GENERATIONS, name)
        return None if raw is None else int(raw)
