"""The worker's pure transform, below Spark: the late rule depends on arrival order only,
never on how chunks were batched or sharded; a backlog posted in order loses nothing."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import TEST_SECRET
from tidemark.chunks import encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.update import Chunk, late_mask, update_shard

from tests.workers.frames import chunks_of  # noqa: E402

CONFIG = StreamConfig(max_window=100.0, epsilon=0.1)


def _oracle(requests) -> tuple[int, list[float]]:
    """Late events, and the times of the kept ones, by the contract's rule, one by one."""
    clock, late, kept = -math.inf, 0, []
    for ts in requests:
        for t in ts:
            if clock - Fraction(t) > Fraction(CONFIG.max_window):  # exactly (tidemark/ticks.py)
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
    chunks = chunks_of(requests)
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
    result = update_shard(None, config, TEST_SECRET, chunks_of(requests))
    assert result.late_dropped == 0 and result.events == sum(len(r) for r in requests)


def test_late_mask_uses_the_running_maximum_before_each_event():
    ts = np.array([100.0, 10.0, 95.0, 200.0, 120.0, 99.0])
    assert late_mask(ts, -math.inf, 50.0).tolist() == [False, True, False, False, True, True]
    assert late_mask(ts, 300.0, 50.0).all()


def test_summary_from_another_secret_is_refused():
    from sketches.base import IncompatibleSketchError
    from tidemark.hash_secret import HashSecret

    blob = update_shard(None, CONFIG, TEST_SECRET, chunks_of([[1.0, 2.0]])).blob
    with pytest.raises(IncompatibleSketchError, match="another hash secret"):
        StreamSummary.from_bytes(blob, HashSecret(b"another-secret-of-16"))


def test_a_failing_stream_keeps_its_state_and_says_why():
    import pandas as pd

    from tests.workers.frames import apply_chunks

    good = chunks_of([[1.0, 2.0, 3.0]])[0]
    rows = pd.DataFrame({"entry": ["1-0"], "payload": [good.payload], "clock_before": [-math.inf]})
    state = apply_chunks("s", None, rows, TEST_SECRET, lambda name: (CONFIG, 7))
    assert state["events"] == 3 and not state["failed"] and state["version"] == 1
    corrupt = pd.DataFrame({"entry": ["2-0"], "payload": [b"not a chunk"], "clock_before": [3.0]})
    after = apply_chunks("s", state, corrupt, TEST_SECRET, lambda name: (CONFIG, 7))
    assert after["blob"] == state["blob"] and after["events"] == 3
    assert "ChunkError" in after["failed"] and after["version"] == 2
    # A stream no longer declared (deleted) gets no state at all.
    assert apply_chunks("gone", None, rows, TEST_SECRET, lambda name: None) is None


# -- issue 21: every accepted event is counted, on one exact rule for time ----------------------
from app.answers import answer  # noqa: E402
from tests import in_process  # noqa: E402
from tidemark import limits  # noqa: E402


def test_a_heavy_event_never_loses_its_batch():
    """Issue 21, failure 1: one event of weight 3e14 (accepted) made the shard's update fail
    and lost every event of the micro-batch, and count answered [0, 0] for a truth of 101."""
    config = StreamConfig(max_window=600)
    heavy = [{"ts": 1760000000.5, "key": "a", "weight": 3e14}, {"ts": 1760000001.5, "key": "b", "weight": 1}]
    ones = [{"ts": 1760000001.0 + i / 100, "key": "c"} for i in range(99)]
    r = in_process.run(config, [heavy, ones], owner=[0], cuts=[2], shards=1)
    assert not r.rejects and r.events == 101 and r.late_dropped == 0
    for kind, truth in (("count", 101), ("sum", 3e14 + 100)):
        b = answer(kind, "s", config, r.summary, r.status(), {})["bound"]
        assert b["lower"] <= truth <= b["upper"] and b["confidence"] == 1.0


def _grain(draw) -> float:
    return draw(st.sampled_from([limits.FINEST_RESOLUTION, 1e-6, 1e-3, 0.3, 1.0, 60.2, 3600.0]))


@st.composite
def streams(draw):
    """Requests of events at present-day or extreme times, extreme weights, backlogs and
    bursts, with the late edge hit on purpose; shards 1-64, any batching, merges in any order."""
    res = _grain(draw)
    max_window = res * draw(st.sampled_from([1, 7, 100, 1000]))
    base = draw(st.sampled_from([0.0, 1761000000.0, 2.0**37, limits.TIME_HORIZON - max_window * 3]))
    requests, top = [], base
    for _ in range(draw(st.integers(1, 8))):
        items = []
        for _ in range(draw(st.integers(1, 12))):
            how = draw(st.sampled_from(["new", "edge", "old", "beyond"]))
            if how == "new":
                t = top + draw(st.floats(0, max_window / 2))
            elif how == "edge":  # within ulps of clock − max_window: the rounding edge
                t = top - max_window
                for _ in range(draw(st.integers(0, 2))):
                    t = math.nextafter(t, draw(st.sampled_from([-math.inf, math.inf])))
            elif how == "old":
                t = top - draw(st.floats(0, 3 * max_window))
            else:
                t = draw(st.sampled_from([2.0**40, limits.TIME_HORIZON * 2]))
            t = max(0.0, t)
            w = draw(st.sampled_from([1.0, 0.0, 0.5, 3e14, limits.MAX_WEIGHT, limits.MAX_WEIGHT * 2]))
            items.append({"ts": t, "weight": w})
            if t <= limits.TIME_HORIZON:
                top = max(top, t)
        requests.append(items)
    config = StreamConfig(max_window=max_window, resolution=res, epsilon=draw(st.sampled_from([0.01, 0.1])))
    shards = draw(st.integers(1, 64))
    owner = draw(st.lists(st.integers(0, 63), min_size=1, max_size=8))
    cuts = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    merge_order = draw(st.permutations(range(64)))
    return config, requests, owner, cuts, shards, merge_order


@settings(max_examples=60, deadline=None)
@given(streams(), st.data())
def test_accepted_events_are_counted_on_one_exact_rule(stream, data):
    """Ingest, shards, batches, merge and answers in process against the exact oracle:
    rejects are only what ingest can see (with a reason), no update fails, the late count
    is the exact rule's, and count and sum bracket the truth at the clock and before it."""
    config, requests, owner, cuts, shards, merge_order = stream
    r = in_process.run(config, requests, owner, cuts, shards, merge_order)
    for req, i, why in r.rejects:
        e = requests[req][i]
        assert (e["ts"] > limits.TIME_HORIZON and "9999-12-31" in why) or \
            (e["weight"] > limits.MAX_WEIGHT and "weight" in why)
    kept = r.kept()
    assert r.events == len(kept) and r.late_dropped == len(r.accepted) - len(kept)
    if r.summary is None:
        return
    clock = r.clock
    for window, at in ((config.max_window, clock),
                       (config.max_window / 3, clock - config.max_window / 2),
                       (data.draw(st.floats(config.resolution / 10, config.max_window)), clock)):
        at = max(at, 0.0)
        if Fraction(clock) - (Fraction(at) - Fraction(window)) > Fraction(config.max_window):
            continue
        count, total = r.truth(window, at)
        params = {"window": repr(window), "at": repr(at)}
        c = answer("count", "s", config, r.summary, r.status(), params)["bound"]
        s = answer("sum", "s", config, r.summary, r.status(), params)["bound"]
        assert c["lower"] <= count <= c["upper"]
        assert Fraction(s["lower"]) <= total <= Fraction(s["upper"])


def test_events_a_failed_update_could_not_take_are_named_and_answers_say_incomplete():
    """Should an update still fail (here a chunk that bypassed ingest, with a value outside
    the declared range), the shard keeps its sketches, its status names what it could not
    take, and every answer whose window may hold those events says it is incomplete
    (confidence 0), while answers elsewhere keep their full confidence."""
    import pandas as pd

    from tests.workers.frames import apply_chunks

    config = StreamConfig(max_window=100, value_min=0, value_max=10)

    def rows(entry, ts, values, weights, clock):
        payload = encode_chunk(np.array(ts), [None] * len(ts), np.array(values, float), np.array(weights, float))
        return pd.DataFrame({"entry": [entry], "payload": [payload], "clock_before": [clock]})

    state = apply_chunks("s", None, rows("1-0", [1000.0, 1001.0], [1.0, 2.0], [1.0, 1.0], -math.inf),
                         TEST_SECRET, lambda name: (config, 7))
    before = StreamSummary.from_bytes(state["blob"], TEST_SECRET)
    failed = apply_chunks("s", state, rows("2-0", [1050.0, 1060.0], [5.0, 99.0], [2.0, 3.0], 1001.0),
                          TEST_SECRET, lambda name: (config, 7))
    assert failed["failed_events"] == 2 and "2 event(s) with ts in [1050.0, 1060.0] not counted" in failed["failed"]
    after = StreamSummary.from_bytes(failed["blob"], TEST_SECRET)
    assert {n: p.to_bytes() for n, p in after.parts.items()} == {n: p.to_bytes() for n, p in before.parts.items()}
    assert after.lost == {"events": 2, "weight": 5.0, "ts_min": 1050.0, "ts_max": 1060.0, "why": after.lost["why"]}
    # The next batch works again; the record stays, and merges carry it.
    ok = apply_chunks("s", failed, rows("3-0", [1070.0], [3.0], [1.0], 1001.0), TEST_SECRET, lambda name: (config, 7))
    assert not ok["failed"] and ok["failed_events"] == 2
    summary = StreamSummary.from_bytes(ok["blob"], TEST_SECRET)
    merged = StreamSummary.create(config, TEST_SECRET).merge(summary)
    status = {"clock": 1070.0, "sketch_version": 3, "updated_at": "t", "events": 3, "late_dropped": 0}
    for kind, params in (("count", {}), ("sum", {"window": "30"}), ("quantiles", {"q": "0.5"}),
                         ("decayed-sum", {"tau": "0", "decay": "none", "at": "1055", "window": "10"})):
        body = answer(kind, "s", config, merged, status, params)
        bounds = [body["bound"]] if "bound" in body else [i["bound"] for i in body["items"]]
        assert body["incomplete"]["events"] == 2 and all(b["confidence"] == 0.0 for b in bounds), kind
    clean = answer("count", "s", config, merged, status, {"window": "5", "at": "1070"})
    assert "incomplete" not in clean and clean["bound"]["confidence"] == 1.0
    early = answer("decayed-sum", "s", config, merged, status, {"tau": "0", "decay": "none", "at": "1040", "window": "10"})
    assert "incomplete" not in early


def test_lost_events_no_record_places_in_time_make_every_answer_incomplete():
    """A shard whose update failed before it had a readable state (here: nothing but the
    status knows of its events) leaves every answer of the stream incomplete."""
    config = StreamConfig(max_window=100)
    status = {"clock": None, "sketch_version": 1, "updated_at": "t", "events": 0, "late_dropped": 0,
              "failed_events": 3, "failed": "shard 0: SketchError: boom"}
    body = answer("count", "s", config, None, status, {})
    assert body["incomplete"]["events"] == 3 and body["bound"]["confidence"] == 0.0
    assert "at unknown times" in body["incomplete"]["detail"]
    assert "incomplete" not in answer("count", "s", config, None, {**status, "failed_events": 0}, {})


class _GroupState:
    """What ``applyInPandasWithState`` hands the group function: the state row, if any."""

    def __init__(self, row=None):
        self.row = row

    @property
    def exists(self):
        return self.row is not None

    @property
    def get(self):
        return self.row

    def update(self, row):
        self.row = row

    def remove(self):
        self.row = None


def _spark_frame(stream, entry, payload, clock_before, generation=0, tombstone=False):
    """One chunk row as the source hands it to the group function (``SCHEMA``)."""
    import pandas as pd

    from workers.chunk_rows import pack
    from workers.source import SCHEMA

    frame = pd.DataFrame({"stream": [stream], "shard": [0],
                          "chunk": [pack(entry, clock_before, payload, generation, tombstone)]})
    assert list(frame.columns) == SCHEMA.names
    return frame


def test_the_kept_summaries_survive_from_task_to_task_as_spark_ships_the_function(redis_url):
    """Spark ships the group function to every task by value (cloudpickle), and with it a
    copy of whatever module-level object it names: the process's kept summaries must be
    reached by reference, or each task starts with none and every group decodes."""
    from pyspark import cloudpickle

    from tidemark.wire import keys
    from workers.decoded import decoded_shards
    from workers.job import shard_updater
    import redis

    name = "kept-across-tasks"
    redis.Redis.from_url(redis_url).hset(keys.STREAMS, name, CONFIG.model_dump_json())
    shipped = cloudpickle.dumps(shard_updater(redis_url, TEST_SECRET))
    state = _GroupState()
    kept = decoded_shards()
    hits = kept.hits
    for b in range(3):  # three batches, each a new task with a freshly unpickled function
        chunk = chunks_of([[float(10 * b + i) for i in range(5)]])[0]
        frame = _spark_frame(name, f"{b + 1}-0", chunk.payload, float(10 * b - 1) if b else -math.inf)
        assert list(cloudpickle.loads(shipped)((name, 0), iter([frame]), state)) == []
    assert kept.hits - hits == 2  # decoded once, then kept from task to task
    assert StreamSummary.from_bytes(state.row[0], TEST_SECRET)["count"].clock is not None


def test_a_python_worker_freezes_what_its_first_update_leaves_so_each_task_end_collection_is_cheap(
        redis_url, monkeypatch):
    """PySpark's daemon runs a full garbage collection after every task: what the worker's
    imports and first update leave alive is frozen once, so those walks skip it."""
    import gc
    import weakref

    import redis

    from tidemark.wire import keys
    from workers import job

    monkeypatch.setattr(job, "_FROZEN", [])
    name = "frozen-after-first-update"
    redis.Redis.from_url(redis_url).hset(keys.STREAMS, name, CONFIG.model_dump_json())
    update, state = job.shard_updater(redis_url, TEST_SECRET), _GroupState()
    gc.unfreeze()
    try:
        for b in range(2):
            chunk = chunks_of([[float(10 * b + i) for i in range(5)]])[0]
            frame = _spark_frame(name, f"{b + 1}-0", chunk.payload, float(10 * b - 1) if b else -math.inf)
            list(update((name, 0), iter([frame]), state))
            if b == 0:
                frozen = gc.get_freeze_count()
                assert frozen > 1000  # the imports' objects, not only this update's
        assert gc.get_freeze_count() <= frozen  # once per process, not once per update

        class Cycle:
            pass

        made_after = Cycle()
        made_after.me = made_after
        probe = weakref.ref(made_after)
        del made_after
        gc.collect()
        assert probe() is None  # what later tasks make is still collected
    finally:
        gc.unfreeze()


@given(st.lists(st.lists(st.floats(0, 400, allow_nan=False), min_size=1, max_size=8), min_size=1, max_size=6))
@settings(max_examples=100, deadline=None)
def test_an_update_says_the_first_time_it_added(requests):
    """``touched``: the smallest time among the events inserted (late ones are not), exactly
    as a float's repr; empty when every event was late."""
    late, kept = _oracle(requests)
    result = update_shard(None, CONFIG, TEST_SECRET, chunks_of(requests))
    assert result.touched == (repr(min(kept)) if kept else "")
    if kept:
        assert float(result.touched) == min(kept)


def test_an_update_of_late_events_only_touches_nothing():
    blob = update_shard(None, CONFIG, TEST_SECRET, chunks_of([[500.0]])).blob
    result = update_shard(blob, CONFIG, TEST_SECRET, [Chunk(chunks_of([[1.0, 2.0]])[0].payload, 500.0)])
    assert result.events == 0 and result.late_dropped == 2 and result.touched == ""
