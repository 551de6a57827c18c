"""The worker's durable state: every shard summary, as of the last applied micro-batch.

Why not Spark's state store: a micro-batch here touches every (stream, shard) at once and
the publisher needs all shard summaries of a stream to merge them, including shards with
no new events. Keeping the whole map in one checkpoint file written after each batch gives
exactly-once with one rule: a batch whose id is not above the saved ``batch_id`` has
already been applied and is skipped. The file is written to a temporary name and renamed,
so a crash leaves either the old state or the new one, never a mix; a CRC guards it.

The location is any ``pyarrow.fs`` URI (a local path, ``hdfs://…``, ``s3://…``), so a
driver on another machine of a cluster keeps its state by configuration alone.

File layout::

    b"TMWS" | u32 crc32(body) | body
    body = u32 len(meta json) | meta json | blob 0 | blob 1 | …

``meta`` holds the batch id and, per stream, its config, counters and the (offset, length)
of each shard's blob.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field

import pyarrow.fs as pafs

__all__ = ["StreamState", "WorkerState", "StateStore", "StateError"]

_MAGIC = b"TMWS"


class StateError(RuntimeError):
    """The checkpointed state cannot be read; refusing to start rather than lose events."""


@dataclass
class StreamState:
    config: dict
    shards: dict[int, bytes] = field(default_factory=dict)
    events: int = 0
    late_dropped: int = 0
    clock: float | None = None
    version: int = 0
    updated_at: str | None = None


@dataclass
class WorkerState:
    batch_id: int = -1
    streams: dict[str, StreamState] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        blobs: list[bytes] = []
        offset = 0
        meta = {"batch_id": self.batch_id, "streams": {}}
        for name, s in self.streams.items():
            shards = {}
            for shard, blob in s.shards.items():
                shards[str(shard)] = [offset, len(blob)]
                blobs.append(blob)
                offset += len(blob)
            meta["streams"][name] = {
                "config": s.config, "shards": shards, "events": s.events,
                "late_dropped": s.late_dropped, "clock": s.clock, "version": s.version,
                "updated_at": s.updated_at,
            }
        meta_bytes = json.dumps(meta).encode()
        body = struct.pack("<I", len(meta_bytes)) + meta_bytes + b"".join(blobs)
        return _MAGIC + struct.pack("<I", zlib.crc32(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes) -> "WorkerState":
        if len(data) < 12 or data[:4] != _MAGIC:
            raise StateError("worker state file is not a Tidemark state file")
        (crc,) = struct.unpack_from("<I", data, 4)
        body = data[8:]
        if zlib.crc32(body) != crc:
            raise StateError("worker state file is corrupt (CRC mismatch)")
        (n,) = struct.unpack_from("<I", body, 0)
        meta = json.loads(body[4 : 4 + n])
        blobs = body[4 + n :]
        state = cls(batch_id=meta["batch_id"])
        for name, m in meta["streams"].items():
            shards = {int(k): bytes(blobs[o : o + ln]) for k, (o, ln) in m["shards"].items()}
            state.streams[name] = StreamState(
                m["config"], shards, m["events"], m["late_dropped"], m["clock"], m["version"],
                m["updated_at"],
            )
        return state


class StateStore:
    """Reads and atomically replaces the state file under a ``pyarrow.fs`` URI."""

    def __init__(self, uri: str):
        if "://" not in uri:
            import os

            os.makedirs(uri, exist_ok=True)
            uri = os.path.abspath(uri)
        self.fs, self.root = pafs.FileSystem.from_uri(uri)
        self.fs.create_dir(self.root, recursive=True)
        self.path = f"{self.root}/worker-state.bin"

    def load(self) -> WorkerState:
        if self.fs.get_file_info(self.path).type == pafs.FileType.NotFound:
            return WorkerState()
        with self.fs.open_input_stream(self.path) as f:
            return WorkerState.from_bytes(f.read())

    def save(self, state: WorkerState) -> None:
        tmp = self.path + ".tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(state.to_bytes())
        self.fs.move(tmp, self.path)
