"""The worker's pure transform, below Spark: the late rule depends on arrival order only,
never on how chunks were batched or sharded; a backlog posted in order loses nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import TEST_SECRET
from tidemark.chunks import encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.update import Chunk, late_mask, update_shard

CONFIG = StreamConfig(max_window=100.0, epsilon=0.1)


def _chunks(requests: list[list[float]]) -> list[Chunk]:
    """Chunks as the API's append makes them: each carries the clock before it."""
    out, clock = [], -math.inf
    for ts in requests:
        arr = np.array(ts, dtype=float)
        out.append(Chunk(encode_chunk(arr, [None] * len(arr), np.full(len(arr), np.nan),
                                      np.ones(len(arr))), clock))
        clock = max(clock, float(arr.max()))
    return out


def _oracle(requests) -> tuple[int, list[float]]:
    """Late events, and the times of the kept ones, by the contract's rule, one by one."""
    clock, late, kept = -math.inf, 0, []
    for ts in requests:
        for t in ts:
            if t < clock - CONFIG.max_window:
                late += 1
            else:
                kept.append(t)
            clock = max(clock, t)
    return late, kept


requests_st = st.lists(
    st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=20), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(requests_st, st.integers(1, 4), st.data())
def test_late_count_is_independent_of_batches_and_shards(requests, shards, data):
    chunks = _chunks(requests)
    # Spread chunks over shards and cut each shard's sequence into batches at random.
    owner = [data.draw(st.integers(0, shards - 1)) for _ in chunks]
    events = late = 0
    merged = None
    for shard in range(shards):
        mine = [c for c, o in zip(chunks, owner) if o == shard]
        blob = None
        while mine:
            cut = data.draw(st.integers(1, len(mine)))
            result = update_shard(blob, CONFIG, TEST_SECRET, mine[:cut])
            blob, mine = result.blob, mine[cut:]
            events += result.events
            late += result.late_dropped
        if blob is not None:
            part = StreamSummary.from_bytes(blob, TEST_SECRET)
            merged = part if merged is None else merged.merge(part)
    total = sum(len(r) for r in requests)
    true_late, kept = _oracle(requests)
    assert late == true_late and events + late == total
    clock = max(max(r) for r in requests)
    lo, hi = math.floor(clock - CONFIG.max_window), math.floor(clock)
    truth = sum(lo <= math.floor(t) <= hi for t in kept)
    est = merged["count"].query(lo, hi)
    assert est.lower <= truth <= est.upper


def test_a_backlog_posted_in_order_loses_nothing():
    day = 86400.0
    config = StreamConfig(max_window=3600.0)
    requests = [list(np.arange(i * day / 30, (i + 1) * day / 30, 60.0)) for i in range(30)]
    result = update_shard(None, config, TEST_SECRET, _chunks(requests))
    assert result.late_dropped == 0 and result.events == sum(len(r) for r in requests)


def test_late_mask_uses_the_running_maximum_before_each_event():
    ts = np.array([100.0, 10.0, 95.0, 200.0, 120.0, 99.0])
    assert late_mask(ts, -math.inf, 50.0).tolist() == [False, True, False, False, True, True]
    assert late_mask(ts, 300.0, 50.0).all()


def test_summary_from_another_secret_is_refused():
    from sketches.base import IncompatibleSketchError
    from tidemark.hash_secret import HashSecret

    blob = update_shard(None, CONFIG, TEST_SECRET, _chunks([[1.0, 2.0]])).blob
    with pytest.raises(IncompatibleSketchError, match="another hash secret"):
        StreamSummary.from_bytes(blob, HashSecret(b"another-secret-of-16"))


def test_a_failing_stream_keeps_its_state_and_says_why():
    import pandas as pd

    from workers.job import apply_chunks

    good = _chunks([[1.0, 2.0, 3.0]])[0]
    rows = pd.DataFrame({"entry": ["1-0"], "payload": [good.payload], "clock_before": [-math.inf]})
    state = apply_chunks("s", None, rows, TEST_SECRET, lambda name: CONFIG)
    assert state["events"] == 3 and not state["failed"] and state["version"] == 1
    corrupt = pd.DataFrame({"entry": ["2-0"], "payload": [b"not a chunk"], "clock_before": [3.0]})
    after = apply_chunks("s", state, corrupt, TEST_SECRET, lambda name: CONFIG)
    assert after["blob"] == state["blob"] and after["events"] == 3
    assert "ChunkError" in after["failed"] and after["version"] == 2
    # An undeclared stream fails alone, with the reason.
    lost = apply_chunks("gone", None, rows, TEST_SECRET, lambda name: None)
    assert "not declared" in lost["failed"] and lost["failed_events"] == 3 and lost["blob"] is None


def test_settings_that_need_a_huge_summary_are_refused_with_what_fits():
    from tidemark.capacity import CapacityError, check

    with pytest.raises(CapacityError, match="finest epsilon these settings can take is"):
        check(StreamConfig(max_window="7d", epsilon=1e-6))
    assert check(StreamConfig(max_window="7d", epsilon=0.05)) < 256 * 2**20


def test_a_kept_decoded_summary_gives_the_same_bytes_and_never_outlives_its_version():
    import pandas as pd

    from workers.job import DecodedShards, apply_chunks

    batches = [_chunks([[float(10 * b + i) for i in range(5)]])[0] for b in range(4)]
    frames = [pd.DataFrame({"entry": [f"{b + 1}-0"], "payload": [c.payload],
                            "clock_before": [float(10 * b - 1) if b else -math.inf]})
              for b, c in enumerate(batches)]
    kept, plain = DecodedShards(), None
    state = None
    for frame in frames:
        plain = apply_chunks("s", plain, frame, TEST_SECRET, lambda name: CONFIG)
        state = apply_chunks("s", state, frame, TEST_SECRET, lambda name: CONFIG, 0, kept)
        assert state["blob"] == plain["blob"] and state["version"] == plain["version"]
    assert kept.hits == 3 and kept.misses == 1  # decoded once, then kept
    # A replay hands in an older version: it is decoded from its bytes, never the kept one.
    older = apply_chunks("s", None, frames[0], TEST_SECRET, lambda name: CONFIG)
    again = apply_chunks("s", older, frames[1], TEST_SECRET, lambda name: CONFIG, 0, kept)
    assert kept.misses == 2 and again["events"] == 10
    # Same version, other bytes (another writer): decoded too.
    kept.keep("t", 0, 1, b"these bytes", StreamSummary.create(CONFIG, TEST_SECRET))
    assert kept.take("t", 0, 1, b"other bytes") == b"other bytes"
