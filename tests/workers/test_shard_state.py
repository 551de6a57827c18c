"""``workers.shard_state`` without Spark: which state and rows a batch goes on with
(``sort_out_generations``), what ``apply_chunks`` returns when nothing of a batch counts or
the stream is gone, and the status a state publishes."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, strategies as st

from tests.conftest import TEST_SECRET
from tests.workers.frames import apply_chunks
from tidemark.chunks import encode_chunk
from tidemark.streams import StreamConfig
from workers.chunk_rows import ChunkRows
from workers.shard_state import published_generation, shard_status, sort_out_generations

CONFIG = StreamConfig(max_window=1e6, epsilon=0.1)


def _payload(n: int, first: int) -> bytes:
    ts = np.arange(first, first + n, dtype=float)
    return encode_chunk(ts, [None] * n, np.full(n, np.nan), np.ones(n))


def test_a_shards_status_says_the_first_time_its_batch_added():
    """The published status carries ``touched`` of the version just made (the API keeps
    answers at instants before it); a state read back from the store knows none."""
    def declared(name):
        return CONFIG, 1

    rows = pd.DataFrame([{"entry": "1-0", "payload": _payload(3, 40), "clock_before": -np.inf},
                         {"entry": "2-0", "payload": _payload(2, 7), "clock_before": 42.0}])
    state = apply_chunks("s", None, rows, TEST_SECRET, declared)
    assert shard_status(state).touched == repr(7.0)
    again = apply_chunks("s", {k: v for k, v in state.items() if k not in ("touched", "sizes")},
                         rows.iloc[:1].assign(entry="3-0", clock_before=3e6), TEST_SECRET, declared)
    assert shard_status(again).touched == ""  # 40-42 are late behind 3e6: nothing added
    stored = {k: v for k, v in again.items() if k not in ("touched", "sizes")}
    assert shard_status(stored).touched is None  # a republish cannot say


def _rows(*rows) -> ChunkRows:
    """Chunk rows of ``(generation, tombstone)``; payloads are never read by the sorting."""
    return ChunkRows([f"{i + 1}-0" for i in range(len(rows))], [0.0] * len(rows),
                     [b""] * len(rows), np.array([g for g, _ in rows], dtype=np.int64),
                     np.array([t for _, t in rows], dtype=bool))


def _state(generation):
    return {"generation": generation, "blob": b"x", "config": "{}", "version": 3}


def test_a_newer_generation_starts_afresh_and_an_older_one_is_dropped():
    previous = _state(5)
    kept, rows, target = sort_out_generations(previous, _rows((5, False), (0, False), (4, False)))
    assert kept is previous and target == 5
    assert list(rows.generation) == [5, 0]  # the older declaration's chunk is dropped
    kept, rows, target = sort_out_generations(previous, _rows((5, False), (6, False)))
    assert kept is None and target == 6 and list(rows.generation) == [6]


def test_a_tombstone_ends_its_generation_and_every_older_one():
    kept, rows, target = sort_out_generations(_state(5), _rows((5, False), (5, True)))
    assert kept is None and target is None and len(rows) == 0
    kept, rows, target = sort_out_generations(_state(5), _rows((4, True), (5, False)))
    assert kept is not None and target == 5 and list(rows.generation) == [5]  # an older tombstone
    kept, rows, target = sort_out_generations(_state(5), _rows((6, True), (7, False)))
    assert kept is None and target == 7 and list(rows.generation) == [7]


def test_a_state_of_entries_from_before_generations_alone_is_ended_by_any_tombstone():
    legacy = _state(-9)  # looked up as 9 when it started, from entries of generation 0 alone
    assert published_generation(legacy) == 9
    kept, rows, target = sort_out_generations(legacy, _rows((0, False)))
    assert kept is legacy and target == 9 and len(rows) == 1
    kept, rows, target = sort_out_generations(legacy, _rows((3, True)))
    assert kept is None and len(rows) == 0


def test_a_shard_without_state_takes_the_newest_generation_only():
    kept, rows, target = sort_out_generations(None, _rows((2, False), (0, False), (3, False)))
    assert kept is None and target == 3 and list(rows.generation) == [0, 3]
    kept, rows, target = sort_out_generations(None, _rows((0, False)))
    assert target is None and len(rows) == 1  # nothing says which: the current one is looked up


_ROW = st.tuples(st.integers(0, 4), st.booleans())


@given(held=st.one_of(st.none(), st.integers(-4, 4)), rows=st.lists(_ROW, min_size=1, max_size=8))
def test_what_goes_on_is_of_one_generation_and_never_of_an_ended_one(held, rows):
    previous = None if held is None else _state(held)
    kept, out, target = sort_out_generations(previous, _rows(*rows))
    dead = max((g for g, t in rows if t), default=None)
    assert kept is None or kept is previous
    assert not out.tombstone.any()
    assert all(g in (0, target) for g in out.generation)
    if dead is not None:
        assert all(g > dead for g in out.generation)
        assert kept is None or (held > 0 and held > dead)
    if kept is not None:
        assert target == published_generation(kept)
    # Nothing of the generation that goes on, and not ended, is dropped.
    expected = [g for g, t in rows if not t and (dead is None or g > dead)
                and (target is None or g in (0, target))]
    assert list(out.generation) == expected


def test_nothing_of_a_batch_counting_leaves_the_state_object_itself():
    state = apply_chunks("s", None, pd.DataFrame({
        "entry": ["1-0"], "payload": [_payload(2, 1)], "clock_before": [-np.inf], "generation": [2],
        "tombstone": [False]}), TEST_SECRET, lambda name: (CONFIG, 2))
    assert state["events"] == 2 and state["generation"] == 2 and state["version"] == 1
    older = pd.DataFrame({"entry": ["2-0"], "payload": [_payload(1, 5)], "clock_before": [2.0],
                          "generation": [1], "tombstone": [False]})
    assert apply_chunks("s", state, older, TEST_SECRET, lambda name: (CONFIG, 2)) is state


def test_no_state_is_made_for_a_stream_that_is_not_declared_or_declared_again():
    frame = pd.DataFrame({"entry": ["1-0"], "payload": [_payload(2, 1)], "clock_before": [-np.inf],
                          "generation": [2], "tombstone": [False]})
    assert apply_chunks("s", None, frame, TEST_SECRET, lambda name: None) is None  # deleted
    assert apply_chunks("s", None, frame, TEST_SECRET, lambda name: (CONFIG, 3)) is None  # replaced
