"""The partitioned ingest log: which partition a stream's chunks go to, and the offsets.

After Spark's Kafka source (apache/spark ``connector/kafka-0-10-sql``: a topic's fixed set
of partitions, an offset = one position per partition): the log has a fixed number of
partitions, each a Redis Stream (``keys.log_partition``). A stream's chunks always go to
the partition its name hashes to (CRC-32, stable across processes and versions), so
within a stream the log keeps arrival order, and every chunk still carries the stream's
clock before it: the late rule (contract §3) does not change.

An offset is one position per partition, ``{"log": [[entry id, events, chunks], …]}``:
the id of the last entry read and the partition's cumulative event and chunk counts at
that entry (from ``keys.log_stats``). Its size depends on the number of partitions
only, never on the number of streams. The counts let readiness and back-pressure tell
how many events wait and let the worker measure its own throughput.

The number of partitions is fixed for the life of a run: the first process to need it
stores its setting in Redis (``keys.LOG_PARTITIONS``) and every process uses the stored
value from then on, since moving a stream to another partition could reorder it.

Tested by: tests/workers/test_source.py (partition_of, partition_count, initial_offset),
tests/app/test_lifecycle.py.
"""

from __future__ import annotations

import zlib

from tidemark.wire import keys
from tidemark.wire.records import id_tuple

__all__ = ["partition_of", "partition_count", "initial_offset", "is_legacy", "positions",
           "id_tuple", "ZERO"]

ZERO = "0-0"


def partition_of(stream: str, partitions: int) -> int:
    """The log partition of ``stream``'s chunks (stable: CRC-32 of its UTF-8 name)."""
    return zlib.crc32(stream.encode()) % partitions


def partition_count(r, wanted: int) -> int:
    """The run's number of log partitions: the stored one, else ``wanted`` (now stored)."""
    r.set(keys.LOG_PARTITIONS, int(wanted), nx=True)
    return int(r.get(keys.LOG_PARTITIONS) or wanted)


def initial_offset(partitions: int) -> dict:
    return {"log": [[ZERO, 0, 0] for _ in range(partitions)]}


def is_legacy(offset: dict | None) -> bool:
    """An offset of the per-stream queues of earlier runs (``{stream: entry id}``)."""
    return bool(offset) and "log" not in offset


def positions(offset: dict | None, partitions: int) -> list[list]:
    """``[[entry id, events, chunks], …]`` per partition; the start for none or a legacy
    offset (whose queues ``workers.migrate`` moved into the partitions)."""
    if not offset or is_legacy(offset):
        return initial_offset(partitions)["log"]
    log = offset["log"]
    if len(log) != partitions:
        raise ValueError(
            f"the checkpoint's offsets have {len(log)} log partitions but this run has "
            f"{partitions}: the number is fixed for the life of a checkpoint (set "
            f"TIDEMARK_LOG_PARTITIONS={len(log)}, or start afresh with a new checkpoint)")
    return [[str(i), int(e), int(c)] for i, e, c in log]
