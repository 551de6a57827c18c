"""Pure transforms of the worker: ingest chunks of one shard -> that shard's new summary.

Nothing here talks to Redis or Spark; tests call these functions directly.

A shard summary is only ever updated with raw events: the previous state of the same
shard is loaded and the batch's events are inserted into it. Sketches of different shards
are merged only for publishing (one aggregation level), never fed back into a shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from tidemark.summary import StreamSummary
from tidemark.chunks import SCHEMA, decode_chunk
from tidemark.streams import StreamConfig

__all__ = ["ShardResult", "decode_events", "update_shard", "SHARD_RESULT_SCHEMA"]

SHARD_RESULT_SCHEMA = (
    "stream string, shard int, state binary, events long, late_dropped long, clock double"
)


@dataclass
class ShardResult:
    stream: str
    shard: int
    state: bytes
    events: int  # events inserted by this batch
    late_dropped: int  # events of this batch too old to matter
    clock: float  # largest event time inserted into this shard so far


def decode_events(payloads) -> pa.Table:
    """Concatenate the events of many chunks, in entry order."""
    tables = [decode_chunk(bytes(p)) for p in payloads]
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def update_shard(
    stream: str,
    shard: int,
    previous: bytes | None,
    previous_clock: float,
    config: StreamConfig,
    seed: int,
    payloads,
) -> ShardResult:
    """Insert the events of ``payloads`` into the shard's previous summary.

    An event older than ``clock - max_window`` on arrival is dropped and counted, where
    ``clock`` is the largest event time the stream has seen, this batch included
    (``previous_clock`` is the stream's clock before the batch).
    """
    summary = StreamSummary.from_bytes(previous) if previous else StreamSummary.create(config, seed)
    table = decode_events(payloads)
    ts = table.column("ts").to_numpy()
    clock = max(previous_clock, float(ts.max())) if len(ts) else previous_clock
    keep = ts >= clock - config.max_window
    late = int(len(ts) - keep.sum())
    if late:
        table = table.filter(pa.array(keep))
    summary.update_table(table)
    return ShardResult(stream, shard, summary.to_bytes(), table.num_rows, late, summary.clock_seconds)


def shard_frame(result: ShardResult) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "stream": [result.stream],
            "shard": np.array([result.shard], dtype=np.int32),
            "state": [result.state],
            "events": np.array([result.events], dtype=np.int64),
            "late_dropped": np.array([result.late_dropped], dtype=np.int64),
            "clock": np.array([result.clock], dtype=np.float64),
        }
    )
