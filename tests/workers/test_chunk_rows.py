"""The chunk row as it travels through Spark: packed by the source, unpacked by the group
function, nothing changed on the way (below Spark)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from tests.workers.frames import rows_of
from workers.chunk_rows import ChunkRows, pack

_ids = st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)).map(lambda t: f"{t[0]}-{t[1]}")
_rows = st.lists(st.tuples(_ids, st.floats(allow_nan=False) | st.just(-math.inf), st.binary(max_size=300),
                           st.integers(0, 2**63 - 1), st.booleans()), max_size=20)


@settings(max_examples=200, deadline=None)
@given(_rows)
def test_what_the_source_packs_the_group_function_reads_back_unchanged(rows):
    got = ChunkRows.unpack(pack(*r) for r in rows)
    assert len(got) == len(rows)
    assert got.entry == [r[0] for r in rows]
    assert got.clock_before == [r[1] for r in rows]
    assert [bytes(p) for p in got.payload] == [r[2] for r in rows]
    assert got.generation.tolist() == [r[3] for r in rows] and got.generation.dtype == np.int64
    assert got.tombstone.tolist() == [r[4] for r in rows] and got.tombstone.dtype == bool
    keep = np.array([i % 2 == 0 for i in range(len(rows))], dtype=bool)
    half = got.where(keep)
    assert half.entry == [r[0] for r in rows[::2]] and half.generation.tolist() == [r[3] for r in rows[::2]]


def test_rows_built_by_hand_read_as_the_packed_ones():
    frame = pd.DataFrame({"entry": ["1-0", "2-0"], "payload": [b"a", b"bc"], "clock_before": [-math.inf, 3.5]})
    plain = rows_of(frame)  # no generation, no tombstone: 0 and False
    packed = ChunkRows.unpack([pack("1-0", -math.inf, b"a", 0, False), pack("2-0", 3.5, b"bc", 0, False)])
    assert (plain.entry, plain.clock_before, plain.generation.tolist(), plain.tombstone.tolist()) == \
        (packed.entry, packed.clock_before, packed.generation.tolist(), packed.tombstone.tolist())
    assert [bytes(p) for p in plain.payload] == [bytes(p) for p in packed.payload]
