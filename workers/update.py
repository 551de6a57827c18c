"""Pure transforms of the worker: one shard's ingest chunks -> that shard's new summary.

Nothing here talks to Redis or Spark; tests call these functions directly.

A shard summary is only ever updated with raw events: the shard's previous state is loaded
and the batch's chunks are inserted into it in arrival order. Summaries of different shards
are merged only to answer (one aggregation level), never fed back into a shard.

The late rule (contract §3) is decided by arrival order alone: every chunk carries the
stream's clock as the API saw it just before the chunk (the largest ``ts`` accepted before
it, recorded atomically with the append), and within a chunk the running maximum of the
events before each one. An event is late when its ``ts`` is older than ``max_window``
behind that clock, ``before − ts > max_window`` decided exactly (``tidemark.ticks.late_mask``,
the rule the answers apply to a window's start), so batching, sharding and replays never
change which events are late and no rounding can count an event the answers call late.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.chunks import decode_chunk
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.ticks import late_mask  # the one exact late rule (tidemark/ticks.py)

__all__ = ["Chunk", "ShardUpdate", "late_mask", "update_shard"]


@dataclass(frozen=True)
class Chunk:
    """One ingest request's events, as the source reads it from Redis."""

    payload: bytes
    clock_before: float  # the stream's clock before this chunk; -inf for the first


@dataclass
class ShardUpdate:
    blob: bytes  # the shard's new summary
    segments: list  # the same bytes cut into its published segments [(name, bytes), ...]
    events: int  # events inserted by this batch
    late_dropped: int  # events of this batch too old to matter on arrival
    clock: float | None  # largest event time inserted into this shard so far
    sizes: dict  # bytes of each part
    summary: StreamSummary | None = None  # the decoded new summary (``blob`` is its bytes)
    touched: str = ""  # repr of the smallest event time inserted ("" for none): ShardStatus.touched


def update_shard(previous: bytes | StreamSummary | None, config: StreamConfig, secret: HashSecret,
                 chunks: list[Chunk]) -> ShardUpdate:
    """Insert the on-time events of ``chunks`` (in arrival order) into the shard's summary
    (``previous``: its bytes, or the summary already decoded from exactly those bytes,
    which is updated in place)."""
    if isinstance(previous, StreamSummary):
        summary = previous
    else:
        summary = (StreamSummary.from_bytes(previous, secret, resume=True) if previous
                   else StreamSummary.create(config, secret))
    kept, late = [], 0
    for chunk in chunks:
        table = decode_chunk(chunk.payload)
        mask = late_mask(table.column("ts").to_numpy(), chunk.clock_before, config.max_window)
        n_late = int(mask.sum())
        if n_late:
            table = table.filter(pa.array(~mask))
        late += n_late
        kept.append(table)
    table = pa.concat_tables(kept) if kept else None
    events, touched = 0, ""
    if table is not None and table.num_rows:
        summary.update_table(table)
        events = table.num_rows
        touched = repr(float(pc.min(table.column("ts")).as_py()))
    segments, sizes = summary.encode_segments()
    blob = b"".join(b for _, b in segments)
    return ShardUpdate(blob, segments, events, late, summary.clock_seconds, sizes, summary, touched)
