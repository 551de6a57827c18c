"""Generations below Spark (``workers.job.apply_chunks``): whatever the interleaving of
appends, deletes and re-declarations, however the log is cut into micro-batches and
whenever each batch looks the declaration up, a shard ends with exactly the events of the
stream's current declaration — nothing of an older one — and with no state at all once the
stream is deleted. Checked against the obvious oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import assume, example, given, settings, strategies as st

from tests.conftest import TEST_SECRET
from tidemark.chunks import encode_chunk
from tidemark.streams import StreamConfig
from tests.workers.frames import apply_chunks
from workers.job import DecodedShards, published_generation

CONFIG = StreamConfig(max_window=1e6, epsilon=0.1)
_OPS = st.lists(st.one_of(st.tuples(st.just("events"), st.integers(1, 5)),
                          st.just(("delete",)), st.just(("declare",))), min_size=1, max_size=14)


def _payload(n: int, first: int) -> bytes:
    ts = np.arange(first, first + n, dtype=float)
    return encode_chunk(ts, [None] * n, np.full(n, np.nan), np.ones(n))


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, cuts=st.lists(st.booleans(), min_size=14, max_size=14),
       looks=st.lists(st.integers(0, 2), min_size=14, max_size=14),
       legacy=st.booleans(), lose_tombstones=st.booleans())
@example(ops=[("events", 2), ("delete",), ("declare",), ("events", 3)], cuts=[True] + [False] * 13,
         looks=[0] * 14, legacy=False, lose_tombstones=True)  # a newer generation starts afresh
@example(ops=[("events", 2), ("delete",), ("declare",), ("events", 3)], cuts=[True] + [False] * 13,
         looks=[2] + [0] * 13, legacy=False, lose_tombstones=False)  # state only for the generation looked up
@example(ops=[("events", 1), ("delete",), ("declare",), ("events", 1)], cuts=[True] + [False] * 13,
         looks=[2] + [0] * 13, legacy=True, lose_tombstones=False)  # entries from before generations
# looked up after a re-declaration: the tombstone of the declaration they belonged to ends them
def test_a_shard_counts_exactly_the_current_declaration(ops, cuts, looks, legacy, lose_tombstones):
    """``lose_tombstones``: the log lost the deletes' tombstones (a log rewritten, say):
    generations alone must still keep every old event out. ``legacy``: the first
    declaration's entries were appended before generations existed (generation 0); they
    count with whatever generation the shard takes (an upgrade must lose nothing), which
    is sound as long as the delete that ended them is in the log, as a delete always
    appends its tombstone after the entries it ends."""
    assume(not (legacy and lose_tombstones))
    # The log as the append and delete scripts write it, and the declaration after each op.
    generation, declared, log, history, next_ts = 1, True, [], [], 0
    for op in ops:
        if op[0] == "events" and declared:
            g = 0 if legacy and generation == 1 else generation  # an entry from before generations
            log.append(dict(generation=g, tombstone=False, payload=_payload(op[1], next_ts), n=op[1]))
            next_ts += op[1]
        elif op[0] == "delete" and declared:
            if not lose_tombstones:
                log.append(dict(generation=generation, tombstone=True, payload=b"", n=0))
            declared = False
        elif op[0] == "declare" and not declared:
            generation += 1
            declared = True
        history.append((declared, generation, len(log)))
    # Batches: consecutive runs of the log (cut after entry i when cuts[i]); each looks the
    # declaration up at some moment after its last entry was appended (never before),
    # ``looks`` ops later at most, moments in order.
    bounds = [i + 1 for i in range(len(log) - 1) if cuts[i]] + [len(log)]
    # ``cached``: the same batches through the worker's decoded-summary cache, which must
    # never hand a re-declared stream a summary of its old generation: the same bytes.
    state, cached, decoded, start, moment = None, None, DecodedShards(), 0, 0
    for end in bounds:
        if end == start:
            continue
        rows = pd.DataFrame([{"entry": f"{i + 1}-0", "payload": e["payload"], "clock_before": -np.inf,
                              "generation": e["generation"], "tombstone": e["tombstone"]}
                             for i, e in enumerate(log[start:end], start)])
        earliest = next(i for i, (_, _, n) in enumerate(history) if n >= end)
        moment = max(moment, earliest + looks[end - 1])
        moment = min(moment, len(history) - 1)
        is_declared, current, _ = history[moment]

        def declaration_of(name, is_declared=is_declared, current=current):
            return (CONFIG, current) if is_declared else None

        result = apply_chunks("s", state, rows, TEST_SECRET, declaration_of)
        cached = apply_chunks("s", cached, rows, TEST_SECRET, declaration_of, 0, decoded)
        assert (cached is None) == (result is None)
        if result is not None:
            assert (cached["blob"], cached["generation"], cached["events"]) == \
                (result["blob"], result["generation"], result["events"])
        state = result
        start = end
    # The oracle: the events appended under the declaration current at the end.
    final_declared, final_generation, _ = history[-1]
    current = [e for e in log if not e["tombstone"]
               and (e["generation"] == final_generation or (e["generation"] == 0 and final_generation == 1))]
    if not final_declared:
        if not lose_tombstones:
            assert state is None  # a deleted stream's shard holds nothing
        return  # (without its tombstone the state stays, of an ended generation: never served)
    expected = sum(e["n"] for e in current)
    # What may be served: a state of the current generation (publish and the API refuse
    # any other; one of an ended generation stays only when its tombstone was lost).
    served = state if state is not None and published_generation(state) == final_generation else None
    if not lose_tombstones:
        assert state is served
    if expected == 0:
        assert served is None or served["events"] == 0
    else:
        assert served is not None and served["events"] == expected, (state, expected)
        assert not served["failed"]


def test_a_shards_status_says_the_first_time_its_batch_added():
    """The published status carries ``touched`` of the version just made (the API keeps
    answers at instants before it); a state read back from the store knows none."""
    from workers.job import shard_status

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
