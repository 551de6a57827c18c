"""Chunk rows built by hand as pandas frames (columns ``entry``, ``payload``,
``clock_before``, and ``generation``/``tombstone``, 0/False when absent), read as the
group function reads the packed rows Spark hands it."""

from __future__ import annotations

import math

import numpy as np

from tidemark.chunks import encode_chunk
from workers.chunk_rows import ChunkRows
from workers.update import Chunk
from workers.shard_state import apply_chunks as _apply_chunks


def rows_of(frame) -> ChunkRows:
    n = len(frame)
    return ChunkRows(list(frame["entry"]), [float(c) for c in frame["clock_before"]],
                     list(frame["payload"]),
                     np.asarray(frame["generation"] if "generation" in frame else np.zeros(n), dtype=np.int64),
                     np.asarray(frame["tombstone"] if "tombstone" in frame else np.zeros(n), dtype=bool))


def apply_chunks(stream, previous, frame, *args, **kwargs):
    """``workers.shard_state.apply_chunks`` of a frame's rows."""
    return _apply_chunks(stream, previous, rows_of(frame), *args, **kwargs)


def chunks_of(requests: list[list[float]]) -> list[Chunk]:
    """Chunks as the API's append makes them: each carries the clock before it."""
    out, clock = [], -math.inf
    for ts in requests:
        arr = np.array(ts, dtype=float)
        out.append(Chunk(encode_chunk(arr, [None] * len(arr), np.full(len(arr), np.nan),
                                      np.ones(len(arr))), clock))
        clock = max(clock, float(arr.max()))
    return out
