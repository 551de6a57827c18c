"""A Spark streaming source that reads ingest chunks from Redis Streams.

Offsets are Redis stream ids, one per Tidemark stream, so Spark's offset log records exactly
which chunks each micro-batch holds; a replayed batch reads the same chunks again. Entries
are trimmed only after Spark commits the batch that read them (``commit``), so nothing is
lost across a crash of the worker.

Each row is one chunk (``stream``, ``shard``, ``entry``, ``payload``): events travel through
Spark in columnar blobs, not as one row each, which keeps the engine's per-row cost off the
hot path. A chunk's shard is a stable function of its entry id.
"""

from __future__ import annotations

import zlib

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

__all__ = ["RedisChunkSource", "SCHEMA", "shard_of"]

SCHEMA = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("shard", IntegerType(), False),
        StructField("entry", StringType(), False),
        StructField("events", LongType(), False),
        StructField("payload", BinaryType(), False),
    ]
)

_ZERO = "0-0"


def shard_of(entry_id: str, shards: int) -> int:
    return zlib.crc32(entry_id.encode()) % shards


def _id_tuple(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


class _Range(InputPartition):
    def __init__(self, stream: str, start: str, end: str):
        self.stream, self.start, self.end = stream, start, end


class RedisChunkSource(DataSource):
    """``spark.readStream.format("tidemark-redis").option("redis_url", …).option("shards", n)``."""

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
        self.shards = int(options.get("shards", 2))

    def _redis(self):
        import redis

        return redis.Redis.from_url(self.redis_url)

    def _streams(self, r) -> list[str]:
        from tidemark import keys

        return sorted(s.decode() for s in r.hkeys(keys.STREAMS))

    def initialOffset(self) -> dict:
        return {}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """The last entry id of every stream (one cheap XREVRANGE each). A batch's size is
        bounded by the API's back-pressure on the number of waiting chunks."""
        from tidemark import keys

        end = dict(start or {})
        r = self._redis()
        with r.pipeline(transaction=False) as p:
            streams = self._streams(r)
            for stream in streams:
                p.xrevrange(keys.ingest(stream), count=1)
            for stream, last in zip(streams, p.execute()):
                if last and _id_tuple(last[0][0].decode()) > _id_tuple(end.get(stream, _ZERO)):
                    end[stream] = last[0][0].decode()
        return end

    def partitions(self, start: dict, end: dict):
        parts = []
        for stream, last in sorted(end.items()):
            first = start.get(stream, _ZERO)
            if _id_tuple(last) > _id_tuple(first):
                parts.append(_Range(stream, first, last))
        return parts

    def read(self, partition: _Range):
        from tidemark import keys

        r = self._redis()
        cursor = partition.start
        while True:
            entries = r.xrange(keys.ingest(partition.stream), min=f"({cursor}", max=partition.end, count=256)
            if not entries:
                return
            for entry_id, fields in entries:
                eid = entry_id.decode()
                yield (
                    partition.stream,
                    shard_of(eid, self.shards),
                    eid,
                    int(fields[b"n"]),
                    fields[b"d"],
                )
                cursor = eid
            if cursor == partition.end:
                return

    def commit(self, end: dict) -> None:
        """Spark has durably committed every batch up to ``end``: those entries can go."""
        from tidemark import keys

        r = self._redis()
        for stream, last in end.items():
            ms, seq = _id_tuple(last)
            # MINID keeps ids >= the bound, so trim strictly past `last`.
            r.xtrim(keys.ingest(stream), minid=f"{ms}-{seq + 1}", approximate=False)
