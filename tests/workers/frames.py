"""Chunk rows built by hand as pandas frames (columns ``entry``, ``payload``,
``clock_before``, and ``generation``/``tombstone``, 0/False when absent), read as the
group function reads the packed rows Spark hands it."""

from __future__ import annotations

import math

import numpy as np

from tests.conftest import TEST_SECRET
from tidemark.chunks import encode_chunk
from tidemark.summary import StreamSummary
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


class ValueStateStandIn:
    """What ``transformWithState`` hands the processor for the group's state row (the
    handle's methods the updater calls; Spark's own is exercised by the worker tests)."""

    def __init__(self):
        self.row = None

    def exists(self):
        return self.row is not None

    def get(self):
        return self.row

    def update(self, row):
        self.row = tuple(row)

    def clear(self):
        self.row = None


class MapStateStandIn:
    """... and for the map of the summary's pieces; counts what it was asked to read and write."""

    def __init__(self):
        self.held, self.reads, self.writes, self.written = {}, 0, 0, []

    def iterator(self):
        self.reads += 1
        return iter([((k,), (v,)) for k, v in self.held.items()])

    def updateValue(self, key, value):
        self.writes += 1
        self.held[key[0]] = value[0]
        self.written.append(key[0])

    def removeKey(self, key):
        del self.held[key[0]]

    def clear(self):
        self.held.clear()


def spark_rows(stream, entry, payload, clock_before, generation=0, tombstone=False):
    """One chunk row as the source hands it to the processor (``SCHEMA``)."""
    from pyspark.sql import Row

    from workers.chunk_rows import pack
    from workers.source import SCHEMA

    row = Row(stream=stream, shard=0, chunk=pack(entry, clock_before, payload, generation, tombstone))
    assert list(row.asDict()) == SCHEMA.names
    return [row]


def summary_of(meta, pieces):
    return StreamSummary.from_bytes(stored_of(meta, pieces).blob(), TEST_SECRET)


def stored_of(meta, pieces):
    """The ``StoredSummary`` a state row and its map hold (read as the worker reads them)."""
    from workers.shard_state import STATE_FIELDS
    from workers.stored import StoredSummary, held_pieces

    row = dict(zip(STATE_FIELDS, meta.row))
    stored = StoredSummary.from_json(row["pieces"], lambda: held_pieces(stored, row["inline"], pieces.iterator))
    return stored
