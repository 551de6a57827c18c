"""A stream summary's event columns: a chunk whose every event has a key is read without
filtering (object array of the strings), and feeds the sketches exactly as before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary, spec_of

CONFIG = StreamConfig(max_window=600.0, epsilon=0.1, delta=0.1)
SECRET = HashSecret(b"summary-columns-test-secret-0123")


def _table(ts, keys, values):
    return pa.table({"ts": pa.array(ts, pa.float64()), "key": pa.array(keys, pa.string()),
                     "value": pa.array(values, pa.float64()), "weight": pa.array(np.ones(len(ts)))})


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 500), st.text(max_size=4), st.booleans()), min_size=1, max_size=60),
       st.integers(0, 3))
def test_unfiltered_keys_are_the_filtered_ones(events, chunks):
    """Every event keyed: the same key strings and ids as the filtering path (the former
    only path, which a chunk with a missing key still takes), and the same summary bytes."""
    ts = [1.7e9 + t for t, _, _ in events]
    keys = [k for _, k, _ in events]
    values = [float(i) if v else float("nan") for i, (_, _, v) in enumerate(events)]
    table = _table(ts, keys, values)
    s = StreamSummary.create(CONFIG, SECRET)
    cols = s.columns(table)
    assert list(cols.keys) == keys and cols.keyed.all()
    assert np.array_equal(cols.key_ids, s.key_ids(keys))
    # the same events with one unkeyed event more take the filtering path
    with_null = _table(ts + [ts[0]], keys + [None], values + [1.0])
    assert list(s.columns(with_null).keys) == keys
    assert np.array_equal(s.columns(with_null).key_ids, cols.key_ids)
    # fed through the former filtering path, the summary writes the same bytes
    ref = StreamSummary.create(CONFIG, SECRET)
    old = dataclasses.replace(cols, keys=table.column("key").filter(pa.array(cols.keyed)).to_pylist())
    for name in ref.names:
        if spec_of(name).fed_by(old):
            spec_of(name).feed(ref[name], old)
    ref.clock_seconds = max(ts)
    s.update_table(table)
    assert s.to_bytes() == ref.to_bytes()
