"""A Spark streaming source that reads ingest chunks from Redis Streams.

Offsets are Redis stream ids, one per Tidemark stream that ever had events, so Spark's
offset log records exactly which chunks each micro-batch holds; a replayed batch reads the
same chunks again. Entries are trimmed only after Spark commits the batch that read them
(``commit``), so nothing is lost across a crash of the worker.

Finding new chunks costs in proportion to the streams that received some, not to every
declared stream: the API's append scores the stream in the sorted set ``tm:active`` with
its entry's time, and ``latestOffset`` only looks at streams scored since its last look
(with a margin, and a full look now and then).

Each row is one chunk (``stream``, ``shard``, ``entry``, ``clock_before``, ``payload``,
``generation``): events travel through Spark in columnar blobs, not as one row each. A
chunk's shard is a stable function of its entry id and of the stream's ``shards`` setting.
The tombstone entry a DELETE appends (fields ``t``, ``g``, ``s``: the generation it ended
and the stream's shard count) becomes one row per shard with ``tombstone`` set and no
payload, so every shard's stateful function is called and removes its state.
"""

from __future__ import annotations

import json
import time
import zlib

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (BinaryType, BooleanType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType)

__all__ = ["RedisChunkSource", "SCHEMA", "shard_of"]

SCHEMA = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("shard", IntegerType(), False),
        StructField("entry", StringType(), False),
        StructField("clock_before", DoubleType(), False),
        StructField("payload", BinaryType(), False),
        StructField("generation", LongType(), False),  # 0: an entry from before generations
        StructField("tombstone", BooleanType(), False),
    ]
)

_ZERO = "0-0"
_MARGIN_MS = 10_000  # streams scored this long before the last look are looked at again
_FULL_LOOK_EVERY = 60.0  # seconds


# KEYS: ingest stream, active set. ARGV: name, declarations hash.
_FORGET = """
if redis.call('HEXISTS', ARGV[2], ARGV[1]) == 0 and redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
"""


def shard_of(entry_id: str, shards: int) -> int:
    return zlib.crc32(entry_id.encode()) % shards


def _id_tuple(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


class _Range(InputPartition):
    def __init__(self, stream: str, start: str, end: str, shards: int):
        self.stream, self.start, self.end, self.shards = stream, start, end, shards


class RedisChunkSource(DataSource):
    """``spark.readStream.format("tidemark-redis").option("redis_url", …)``."""

    @classmethod
    def name(cls) -> str:
        return "tidemark-redis"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        return _Reader(self.options)


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.redis_url = options["redis_url"]
        self._since_ms = 0
        self._full_look_at = 0.0
        self._trimmed: dict[str, str] = {}  # what commit trimmed last, so idle streams cost nothing

    def _redis(self):
        from workers.redis_client import worker_redis

        return worker_redis(self.redis_url)  # rides out a Redis restart

    def initialOffset(self) -> dict:
        return {}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """The last entry id of every stream that received chunks since the last look."""
        from tidemark import keys

        end = dict(start or {})
        r = self._redis()
        now = time.monotonic()
        low = 0 if now >= self._full_look_at else max(0, self._since_ms - _MARGIN_MS)
        if low == 0:
            self._full_look_at = now + _FULL_LOOK_EVERY
        scored = r.zrangebyscore(keys.ACTIVE, low, "+inf", withscores=True)
        if not scored:
            return end
        self._since_ms = max(self._since_ms, int(max(score for _, score in scored)))
        streams = [s.decode() for s, _ in scored]
        with r.pipeline(transaction=False) as p:
            for stream in streams:
                p.xrevrange(keys.ingest(stream), count=1)
            for stream, last in zip(streams, p.execute()):
                if last and _id_tuple(last[0][0].decode()) > _id_tuple(end.get(stream, _ZERO)):
                    end[stream] = last[0][0].decode()
        return end

    def partitions(self, start: dict, end: dict):
        from tidemark import keys

        moved = [(s, start.get(s, _ZERO), last) for s, last in sorted(end.items())
                 if _id_tuple(last) > _id_tuple(start.get(s, _ZERO))]
        if not moved:
            return []
        raw = self._redis().hmget(keys.STREAMS, [s for s, _, _ in moved])
        parts = []
        for (stream, first, last), config in zip(moved, raw):
            shards = int(json.loads(config).get("shards", 1)) if config else 1
            parts.append(_Range(stream, first, last, shards))
        return parts

    def read(self, partition: _Range):
        from tidemark import keys

        r = self._redis()
        cursor = partition.start
        while True:
            entries = r.xrange(keys.ingest(partition.stream), min=f"({cursor}", max=partition.end,
                               count=256)
            if not entries:
                return
            for entry_id, fields in entries:
                eid = entry_id.decode()
                generation = int(fields.get(b"g", b"0"))
                cursor = eid
                if b"t" in fields:  # a DELETE's tombstone: every shard of the stream hears it
                    for shard in range(int(fields.get(b"s", b"1"))):
                        yield (partition.stream, shard, eid, float("-inf"), b"", generation, True)
                    continue
                clock = fields.get(b"c", b"")
                yield (
                    partition.stream,
                    shard_of(eid, partition.shards),
                    eid,
                    float(clock) if clock else float("-inf"),
                    fields[b"d"],
                    generation,
                    False,
                )
            if cursor == partition.end:
                return

    def commit(self, end: dict) -> None:
        """Spark has durably committed every batch up to ``end``: those entries can go."""
        from tidemark import keys

        moved = {s: last for s, last in end.items() if self._trimmed.get(s) != last}
        if not moved:
            return
        r = self._redis()
        with r.pipeline(transaction=False) as p:
            for stream, last in moved.items():
                ms, seq = _id_tuple(last)
                # MINID keeps ids >= the bound, so trim strictly past `last`.
                p.xtrim(keys.ingest(stream), minid=f"{ms}-{seq + 1}", approximate=False)
            p.hmget(keys.STREAMS, list(moved))
            declared = p.execute()[-1]
        # A deleted stream whose tombstone is read and committed leaves no key behind (one
        # script: a declaration or an entry that came meanwhile keeps them).
        for stream, config in zip(moved, declared):
            if config is None:
                r.eval(_FORGET, 2, keys.ingest(stream), keys.ACTIVE, stream, keys.STREAMS)
        self._trimmed.update(moved)
