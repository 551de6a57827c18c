"""A Spark streaming source that reads ingest chunks from the partitioned ingest log.

Modelled on Spark's Kafka source (``connector/kafka-0-10-sql``): the log has a fixed
number of partitions (``tidemark.ingest_log``), each a Redis Stream holding the chunks of
the streams whose names hash to it, and an offset is one position per partition. So

* the offset log holds one entry id (and two counts) per partition, whatever the number
  of streams, declared or active;
* finding new chunks is one pipelined read of the partitions' stats hashes;
* a micro-batch has one read task per partition that moved, not one per stream;
* entries are trimmed per partition only after Spark commits the batch that read them
  (``commit``), so nothing is lost across a crash of the worker.

A replayed batch reads the same entries again: an offset names entry ids. Each row is one
chunk: ``stream``, ``shard``, and ``chunk``, its entry id, clock before, payload,
generation and tombstone flag packed in one column (``workers.chunk_rows``); events travel through Spark in columnar blobs, not as one row each. A chunk's shard is a
stable function of its entry id and of the stream's ``shards`` setting. Every entry names
its stream (``s``) and the generation it belongs to (``g``; 0 for an entry from before
generations), so the chunks of a deleted stream still in the shared partitions are
dropped by generation in the worker (``workers.shard_state.sort_out_generations``).

The tombstone entry a DELETE appends to the stream's partition (fields ``t``, ``g``, ``s``,
``k``: the generation it ended, the stream, its shard count) becomes one row per shard with
the tombstone flag set and no payload, so every shard's stateful function is called and removes
its state.

An offset of the per-stream queues of earlier runs (a checkpoint written before the log
had partitions) is read as "nothing of the partitions read yet": ``workers.migrate`` moved
those queues' unread entries into the partitions before the query started, and a replay of
such a batch reads nothing (its entries were either counted or moved).
"""

from __future__ import annotations

import zlib

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from workers.chunk_rows import pack

__all__ = ["RedisChunkSource", "SCHEMA", "shard_of"]

SCHEMA = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("shard", IntegerType(), False),
        # entry id, clock before, payload, generation (0: an entry from before
        # generations), tombstone: one column (``workers.chunk_rows``)
        StructField("chunk", BinaryType(), False),
    ]
)

_PAGE = 512  # entries per XRANGE


def shard_of(entry_id: str, shards: int) -> int:
    return zlib.crc32(entry_id.encode()) % shards


class _Range(InputPartition):
    """Entries ``(start, end]`` of log partition ``log_partition`` (one Spark input
    partition: a range of one log partition)."""

    def __init__(self, log_partition: int, start: str, end: str):
        self.log_partition, self.start, self.end = log_partition, start, end


class RedisChunkSource(DataSource):
    """``spark.readStream.format("tidemark-redis").option("redis_url", …)``
    (``.option("log_partitions", n)``: the setting used when Redis holds none yet)."""

    @classmethod
    def name(cls) -> str:
        return "tidemark-redis"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        return _Reader(self.options)


def read_range(r, partition: int, start: str, end: str):
    """The rows of entries ``(start, end]`` of log partition ``partition``, in log order."""
    from tidemark.wire import keys
    from tidemark.wire.records import Tombstone, declared_shards, decode_entry

    shards: dict[str, int] = {}
    cursor = start
    while cursor != end:
        entries = r.xrange(keys.log_partition(partition), min=f"({cursor}", max=end, count=_PAGE)
        if not entries:
            return
        entries = [(entry_id.decode(), decode_entry(fields)) for entry_id, fields in entries]
        streams = {e.stream for _, e in entries if not isinstance(e, Tombstone)} - shards.keys()
        if streams:
            names = sorted(streams)
            shards.update(zip(names, map(declared_shards, r.hmget(keys.STREAMS, names))))
        for eid, entry in entries:
            cursor = eid
            if isinstance(entry, Tombstone):  # a DELETE's: every shard of the stream hears it
                for shard in range(entry.shards):
                    yield (entry.stream, shard, pack(eid, float("-inf"), b"", entry.generation, True))
                continue
            clock = float("-inf") if entry.clock_before is None else entry.clock_before
            yield (entry.stream, shard_of(eid, shards[entry.stream]),
                   pack(eid, clock, entry.payload, entry.generation, False))


class _Reader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.redis_url = options["redis_url"]
        self.wanted = int(options.get("log_partitions", 2))
        self._n: int | None = None
        self._trimmed: list[str] | None = None  # what commit trimmed last, so idle partitions cost nothing

    def _redis(self):
        from workers.redis_client import worker_redis

        return worker_redis(self.redis_url)  # rides out a Redis restart

    @property
    def partitions_n(self) -> int:
        if self._n is None:
            from tidemark.ingest_log import partition_count

            self._n = partition_count(self._redis(), self.wanted)
        return self._n

    def initialOffset(self) -> dict:
        from tidemark.ingest_log import initial_offset

        return initial_offset(self.partitions_n)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """Each partition's last entry (with its counts), from the stats hashes the
        append writes atomically with the entry."""
        from tidemark.wire import keys
        from tidemark.ingest_log import id_tuple, positions

        n = self.partitions_n
        end = positions(start, n)
        with self._redis().pipeline(transaction=False) as p:
            for partition in range(n):
                p.hmget(keys.log_stats(partition), "last", "events", "chunks")
            for partition, (last, events, chunks) in enumerate(p.execute()):
                if last and id_tuple(last.decode()) > id_tuple(end[partition][0]):
                    end[partition] = [last.decode(), int(events or 0), int(chunks or 0)]
        return {"log": end}

    def partitions(self, start: dict, end: dict):
        from tidemark.ingest_log import id_tuple, is_legacy, positions

        if is_legacy(end):
            return []  # a batch planned on the per-stream queues: its entries were moved
        n = self.partitions_n
        first, last = positions(start, n), positions(end, n)
        return [_Range(partition, a[0], b[0]) for partition, (a, b) in enumerate(zip(first, last))
                if id_tuple(b[0]) > id_tuple(a[0])]

    def read(self, partition: _Range):
        yield from read_range(self._redis(), partition.log_partition, partition.start, partition.end)

    def commit(self, end: dict) -> None:
        """Spark has durably committed every batch up to ``end``: those entries can go."""
        from tidemark.wire import keys
        from tidemark.ingest_log import ZERO, id_tuple, is_legacy, positions

        if is_legacy(end):
            return
        ids = [pos[0] for pos in positions(end, self.partitions_n)]
        trimmed = self._trimmed or [ZERO] * len(ids)
        moved = [(partition, last) for partition, last in enumerate(ids) if last != trimmed[partition]]
        if not moved:
            return
        with self._redis().pipeline(transaction=False) as p:
            for partition, last in moved:
                ms, seq = id_tuple(last)
                # MINID keeps ids >= the bound, so trim strictly past `last`.
                p.xtrim(keys.log_partition(partition), minid=f"{ms}-{seq + 1}", approximate=False)
            p.execute()
        self._trimmed = ids
