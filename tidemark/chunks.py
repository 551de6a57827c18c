"""The ingest chunk: validated events of one request in columnar Arrow IPC form.

The API appends one chunk per request to the stream's Redis Stream; the worker decodes
chunks in bulk. One entry per chunk (not per event) is what makes ingest fast: Redis and
Spark then handle thousands of events per entry.

Tested by: tests/tidemark/test_events.py and tests/tidemark/test_limits.py (encode_chunk,
decode_chunk), tests/workers/test_update.py (ChunkError).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["encode_chunk", "decode_chunk", "ChunkError", "SCHEMA"]

SCHEMA = pa.schema(
    [("ts", pa.float64()), ("key", pa.string()), ("value", pa.float64()), ("weight", pa.float64())]
)


class ChunkError(ValueError):
    """A chunk that cannot be decoded."""


def encode_chunk(ts: np.ndarray, key, value: np.ndarray, weight: np.ndarray) -> bytes:
    """The chunk of these columns; ``key`` a list (None: no key) or an Arrow string array,
    taken as it is (an Arrow body's keys never become Python strings); a NaN value is
    stored as absent (null)."""
    if isinstance(key, (pa.Array, pa.ChunkedArray)):
        key = key.cast(pa.string()) if key.type != pa.string() else key
    else:
        key = pa.array(key, pa.string())
    table = pa.Table.from_arrays(
        [pa.array(ts, pa.float64()), key, pa.array(value, pa.float64(), from_pandas=True),
         pa.array(weight, pa.float64())],
        schema=SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_chunk(blob: bytes) -> pa.Table:
    try:
        table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise ChunkError(f"undecodable ingest chunk: {e}") from None
    if not table.schema.equals(SCHEMA):
        raise ChunkError("ingest chunk has an unexpected schema")
    return table
