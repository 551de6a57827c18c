"""A chunk as it travels through Spark: the grouping key (stream, shard) in columns of its
own and everything else packed into one binary column, ``chunk``.

For every group update PySpark turns each column of the group's rows into a pandas
Series (~40 µs a column) and joins them into a frame (~350 µs for five): with the
entry id, clock, payload, generation and tombstone flag in separate columns that was
~0.65 ms of Python per group update, a tenth of a small stream's whole update, and most
of it is gone with one column (``bench_worker.py``, 1,000 streams). The packing is private
to the worker: the source packs (``workers.source.read_range``), the group function
unpacks (``workers.job.shard_updater``).

Layout: ``<d q ? H`` (clock before the chunk, generation, tombstone, entry id length),
the entry id (ASCII), the payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

import numpy as np

__all__ = ["ChunkRows", "pack"]

_HEAD = struct.Struct("<dq?H")


def pack(entry: str, clock_before: float, payload: bytes, generation: int, tombstone: bool) -> bytes:
    """One chunk row's ``chunk`` column."""
    eid = entry.encode("ascii")
    return b"".join((_HEAD.pack(clock_before, generation, tombstone, len(eid)), eid, payload))


@dataclass
class ChunkRows:
    """One group's chunk rows, column by column (in the order given, not yet in log order)."""

    entry: list[str]
    clock_before: list[float]
    payload: list
    generation: np.ndarray  # int64; 0: an entry from before generations
    tombstone: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.entry)

    @classmethod
    def unpack(cls, packed: Iterable[bytes]) -> "ChunkRows":
        entry, clock, payload, generation, tombstone = [], [], [], [], []
        for raw in packed:
            view = memoryview(raw)
            c, g, t, n = _HEAD.unpack_from(view)
            start = _HEAD.size + n
            entry.append(bytes(view[_HEAD.size:start]).decode("ascii"))
            clock.append(c)
            generation.append(g)
            tombstone.append(t)
            payload.append(view[start:])
        return cls(entry, clock, payload, np.array(generation, dtype=np.int64),
                   np.array(tombstone, dtype=bool))

    def where(self, mask: np.ndarray) -> "ChunkRows":
        keep = np.flatnonzero(mask).tolist()
        return ChunkRows([self.entry[i] for i in keep], [self.clock_before[i] for i in keep],
                         [self.payload[i] for i in keep], self.generation[mask], self.tombstone[mask])
