"""Back-pressure below Spark: the decision (pure) and the lag read from a real Redis."""

from __future__ import annotations

import json
import time

import pytest
import redis

from app.backpressure import CEILING, TARGET, LogLag, decide
from app.store import Backpressure, Store
from tidemark.wire import keys
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from workers.publish import Publisher

MAX_WAIT = 10.0


def _lag(pending: int, capacity: float = 100_000.0, oldest: float = 0.5, active: int = 100,
         batch: float = 0.5, seen: bool = True) -> LogLag:
    return LogLag(partitions=[{"partition": 0, "pending_events": pending, "pending_chunks": 10,
                               "oldest_age": oldest, "oldest_stream": "x"}],
                  capacity=capacity, seconds_per_event=1 / capacity, seconds_per_group=1e-4,
                  batch_seconds=batch, active_streams=active, worker_seen=seen)


def _decide(lag, stream_pending, incoming=500):
    return decide(lag, "s", stream_pending, incoming, MAX_WAIT, 2_000_000, 100_000)


def test_a_worker_keeping_up_takes_everything():
    assert _decide(_lag(pending=50_000), stream_pending=50_000) is None  # 1 s of work


def test_past_the_target_a_flood_is_refused_and_trickles_beside_it_are_not():
    lag = _lag(pending=400_000)  # 4.5 s of work waits: past 0.3 × 10 s
    assert lag.wait_estimate() > TARGET * MAX_WAIT
    refused = _decide(lag, stream_pending=390_000)
    assert refused and "fair share" in refused.reason and 1 <= refused.retry_after <= 10
    assert _decide(lag, stream_pending=200) is None  # a trickle: within its share
    assert _decide(lag, stream_pending=0, incoming=20_000) is None  # nothing waiting: one request
    assert _decide(lag, stream_pending=0, incoming=100_000) is not None  # but not a flood's
    assert _decide(lag, stream_pending=20_000) is not None  # share: 5 s / 100 streams of 100 K/s


def test_many_small_streams_are_judged_by_their_chunks_not_only_their_events():
    lag = _lag(pending=10_000)  # 0.6 s of events...
    lag.partitions[0]["pending_chunks"] = 2_000
    lag.seconds_per_group = 0.004  # ...but 2,000 group updates of 4 ms each
    assert lag.wait_estimate(10, 1) == pytest.approx(0.5 + 10_010 * 1e-5 + 2_001 * 0.004)
    assert _decide(lag, stream_pending=0, incoming=10) is not None  # 8.5 s: past 5 s
    lag.partitions[0]["pending_chunks"] = 1_000  # 4.5 s: past 3 s, within its share
    assert _decide(lag, stream_pending=0, incoming=10) is None
    assert _decide(lag, stream_pending=10_000, incoming=10) is not None  # not within it
    lag.partitions[0]["pending_chunks"] = 500
    assert _decide(lag, stream_pending=0, incoming=10) is None


def test_a_batch_running_longer_than_the_recent_ones_is_taken_to_need_as_long_again():
    """The first batch of a thousand new streams ran 11 s after batches of 1 s (bench_scale,
    10,000:1,000): requests taken while it ran waited 25 s. A batch under way for longer
    than the recent ones counts as needing that long again."""
    lag = _lag(pending=1_000, oldest=2.0, batch=1.0)
    lag.batch_elapsed = 2.0  # entries wait since before the last batch ended: it runs since
    assert lag.running_for == 2.0
    assert lag.wait_estimate() == pytest.approx(2.0 + 1_000 * 1e-5 + 10 * 1e-4)
    lag.batch_elapsed = lag.partitions[0]["oldest_age"] = 3.5
    assert _decide(lag, stream_pending=0, incoming=100) is None  # 3.5 s: a fair share still
    lag.batch_elapsed = lag.partitions[0]["oldest_age"] = CEILING * MAX_WAIT - 0.005
    # about 5 s more: past the 5 s ceiling (its age alone is not)
    assert _decide(lag, stream_pending=0, incoming=100) is not None
    idle = _lag(pending=1_000, oldest=0.2, batch=1.0)
    idle.batch_elapsed = 60.0  # idle for a minute, then a request came: the batch is new
    assert idle.running_for == 0.2 and idle.wait_estimate() < 1.0
    assert _decide(idle, stream_pending=0) is None
    slow = _lag(pending=0, oldest=0.0, batch=20.0)  # the last batches were slow, then all was read
    slow.partitions[0]["pending_chunks"] = 0
    slow.batch_elapsed = 30.0
    assert slow.running_for == 0.0 and _decide(slow, stream_pending=0) is None  # never stuck


def test_nothing_is_taken_past_the_ceiling_or_once_an_entry_waited_that_long():
    assert _decide(_lag(pending=900_000), stream_pending=0) is not None  # 9.5 s > 5 s
    stalled = _decide(_lag(pending=10, oldest=MAX_WAIT + 0.1), stream_pending=0)
    assert stalled and "waited" in stalled.reason and stalled.retry_after >= 1
    behind = _lag(pending=400_000, oldest=CEILING * MAX_WAIT + 0.1)
    assert _decide(behind, stream_pending=0) is not None  # past the ceiling: no fair shares
    assert _decide(_lag(pending=400_000, oldest=CEILING * MAX_WAIT - 0.1), stream_pending=0) is None


def test_without_a_worker_ever_seen_only_the_caps_apply():
    assert _decide(_lag(pending=10**9, oldest=1000, seen=False), stream_pending=0) is None
    capped = decide(_lag(pending=0, seen=False), "s", 1_999_900, 500, MAX_WAIT, 2_000_000, 100_000)
    assert capped and "TIDEMARK_MAX_PENDING_EVENTS" in capped.reason


def test_waiting_chunks_cost_one_group_update_per_stream_and_shard():
    lag = _lag(pending=100_000, batch=1.0)
    lag.partitions[0]["pending_chunks"] = 400  # 100 streams, 4 chunks each...
    lag.seconds_per_group = 0.02
    unknown = lag.wait_estimate()
    assert unknown == pytest.approx(1.0 + 100_000 * 1e-5 + 400 * 0.02)  # shards unknown: each a group
    lag.streams_waiting, lag.shards_max = 100, 1  # ...of one shard: 100 group updates
    assert lag.pending_groups == 100
    assert lag.wait_estimate() == pytest.approx(1.0 + 100_000 * 1e-5 + 100 * 0.02)
    assert _decide(lag, stream_pending=1_000) is None  # 4 s: within its share of 8 s
    lag.shards_max = 8  # a stream of 8 shards was declared: up to 400 again
    assert lag.pending_groups == 400 and lag.wait_estimate() == pytest.approx(unknown)
    lag.taken_chunks = 3  # taken by this process since the read: each may be a new group
    assert lag.pending_groups == 403


def test_a_fit_that_puts_no_cost_on_events_is_not_an_unknown_one():
    lag = _lag(pending=100_000, batch=1.0)
    lag.seconds_per_event, lag.seconds_per_group, lag.fixed_seconds = 0.0, 0.014, 0.7
    assert lag.per_event == pytest.approx(1e-6)  # the floor of a fit, not 1/FLOOR_CAPACITY
    lag.seconds_per_group = lag.fixed_seconds = 0.0  # no fit yet: the assumed floor
    assert lag.per_event == pytest.approx(1 / 20_000)


def test_a_fit_that_puts_no_cost_on_group_updates_is_not_an_unknown_one():
    """Requests of one size make events and group updates collinear: a fit that put the
    whole variable cost on events was read as an unknown group cost (20 ms each), and 236
    waiting chunks of 500 events looked like 8 s of work the worker did in about 2."""
    lag = _lag(pending=118_000, batch=1.2)
    lag.partitions[0]["pending_chunks"] = 236
    lag.seconds_per_event, lag.seconds_per_group, lag.fixed_seconds = 12.2e-6, 0.0, 0.52
    assert lag.per_group == pytest.approx(1e-4)  # the floor of a fit, not 1/FLOOR_GROUPS
    assert lag.wait_estimate() == pytest.approx(1.2 + 0.52 + 118_000 * 12.2e-6 + 236 * 1e-4)
    assert _decide(lag, stream_pending=0) is None  # about 3.2 s: a fair share still
    lag.seconds_per_event = lag.fixed_seconds = 0.0  # no fit yet: the assumed floor
    assert lag.per_group == pytest.approx(1 / 50)


def test_the_lag_is_read_per_partition_and_refuses_before_the_promise_breaks(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        store = Store(server.url, log_partitions=2, max_wait=MAX_WAIT, lag_ttl=0.0)
        for name in ("flood", "trickle"):
            store.declarations.declare(name, StreamConfig(max_window=60.0))
        assert store.ingest.partition("flood") != store.ingest.partition("trickle")
        store.ingest.append("trickle", b"t", 10, 0, 1.0, {"accepted": 10})
        lag = store.ingest.lag()
        assert not lag.worker_seen and lag.pending_events == 10 and lag.pending_chunks == 1
        assert lag.partitions[store.ingest.partition("trickle")]["oldest_stream"] == "trickle"
        # The worker read everything so far at 1,000 events/s.
        r = redis.Redis.from_url(server.url)
        read = [[r.hget(keys.log_stats(p), "last").decode() if r.hget(keys.log_stats(p), "last") else "0-0",
                 int(r.hget(keys.log_stats(p), "events") or 0), int(r.hget(keys.log_stats(p), "chunks") or 0)]
                for p in range(2)]
        Publisher(server.url).log_progress({"read": json.dumps(read), "capacity": 1000.0,
                                            "seconds_per_event": 0.001, "seconds_per_group": 1e-4,
                                            "fixed_seconds": 0.0, "batch_seconds": 0.2})
        lag = store.ingest.lag()
        assert lag.worker_seen and lag.pending_events == 0 and lag.oldest_age == 0.0
        for _ in range(2):  # 2.6 s of work at 1,000 events/s: within the target
            store.ingest.append("flood", b"f", 1_300, 0, 2.0, {"accepted": 1_300})
        with pytest.raises(Backpressure, match="fair share") as refused:
            store.ingest.append("flood", b"f", 1_400, 0, 3.0, {"accepted": 1_400})
        assert refused.value.retry_after >= 1
        store.ingest.append("trickle", b"t", 5, 0, 2.0, {"accepted": 5})  # the trickle still flows
        lag = store.ingest.lag()
        assert lag.pending_events == 2_605 and lag.active_streams == 2
        assert lag.partitions[store.ingest.partition("flood")]["pending_chunks"] == 2
        # 3 chunks of 2 streams of one shard each: 2 group updates at most.
        assert lag.shards_max == 1 and lag.streams_waiting == 2 and lag.pending_groups == 2
        # A Redis whose declarations came before the kept count: computed from them, once.
        r.delete(keys.SHARDS_MAX)
        r.hset(keys.STREAMS, "old-sharded", StreamConfig(max_window=60.0, shards=4).model_dump_json())
        r.hset(keys.STREAMS, "not-json", "{")
        assert store.ingest.lag().shards_max == 4 and int(r.get(keys.SHARDS_MAX)) == 4
        time.sleep(0.05)
        assert lag.oldest_age >= 0.0 and store.ingest.lag().oldest_age > 0.0


def test_the_count_read_before_validation_judges_a_post_only_while_fresh(tmp_path):
    """``Store.ahead_of_ingest`` reads the stream's waiting events before its body is
    validated; ``append`` judges by that count only while it is no older than the lag it
    is judged against (the lag's ttl), else reads it again: a stale count never lets a
    flood past its fair share."""
    import dataclasses

    with EmbeddedRedis(tmp_path / "redis") as server:
        store = Store(server.url, log_partitions=2, max_wait=MAX_WAIT, lag_ttl=0.1)
        for name in ("flood", "trickle"):
            store.declarations.declare(name, StreamConfig(max_window=60.0))
        Publisher(server.url).log_progress({"read": json.dumps([["0-0", 0, 0]] * 2), "capacity": 1000.0,
                                            "seconds_per_event": 0.001, "seconds_per_group": 1e-4,
                                            "fixed_seconds": 0.0, "batch_seconds": 0.2})
        store.ingest.append("trickle", b"t", 5, 0, 2.0, {"accepted": 5})
        _, ahead = store.ahead_of_ingest("flood")
        assert ahead.waiting == 0
        for _ in range(2):
            store.ingest.append("flood", b"f", 1_300, 0, 2.0, {"accepted": 1_300})
        now = dataclasses.replace(ahead, at=time.monotonic())
        assert store.ingest._waiting("flood", now) == 0  # fresh: taken as read
        stale = dataclasses.replace(ahead, at=time.monotonic() - 0.2)
        assert store.ingest._waiting("flood", stale) == 2_600  # older than the lag: read again
        time.sleep(0.15)  # the lag read again too (it now sees both streams active)
        with pytest.raises(Backpressure, match="fair share"):
            store.ingest.append("flood", b"f", 1_400, 0, 3.0, {"accepted": 1_400}, ahead=stale)
        _, ahead = store.ahead_of_ingest("flood")
        assert ahead.waiting == 2_600
        with pytest.raises(Backpressure, match="fair share"):
            store.ingest.append("flood", b"f", 1_400, 0, 3.0, {"accepted": 1_400}, ahead=ahead)


def test_the_declaration_read_before_validation_is_never_a_kept_old_one(tmp_path):
    """Another API process deletes the stream and declares it anew with other settings:
    the next post here validates by the new declaration at once (a post reads the stored
    declaration with its waiting count; no copy is kept by time), and a deleted one is 404."""
    from app.store import StreamNotFound

    with EmbeddedRedis(tmp_path / "redis") as server:
        here, there = Store(server.url), Store(server.url)
        here.declarations.declare("s", StreamConfig(max_window=60.0, value_min=0, value_max=10))
        config, _ = here.ahead_of_ingest("s")
        assert config.value_max == 10 and here.declarations.config("s").value_max == 10
        assert here.ahead_of_ingest("s")[0] is config  # parsed once per stored declaration
        there.delete("s")
        there.declarations.declare("s", StreamConfig(max_window=60.0, value_min=0, value_max=1000))
        assert here.ahead_of_ingest("s")[0].value_max == 1000
        there.delete("s")
        with pytest.raises(StreamNotFound):
            here.ahead_of_ingest("s")


def test_a_saturated_worker_admits_no_more_than_half_the_promise():
    """Each of 1,000 streams with one request in flight passes the fair-share rule, so the
    ceiling alone bounds the wait: at 0.8 × max_wait accepted events waited a p95 of 5.4 s
    (bench_scale, 10,000:1,000), at 0.5 × 3.3-3.6 s for as many events."""
    lag = _lag(pending=550_000, active=1_000)  # 6 s: past half the promise, within 0.8 of it
    assert 0.5 * MAX_WAIT < lag.wait_estimate(10, 1) < 0.8 * MAX_WAIT
    assert _decide(lag, stream_pending=0, incoming=10) is not None
    lag.partitions[0]["pending_events"] = 400_000  # 4.5 s
    assert _decide(lag, stream_pending=0, incoming=10) is None


def test_an_idle_worker_after_one_slow_batch_takes_posts_again():
    """Nothing waits, the slowest recent batch took 14 s and the worker reported an idle
    trigger 3 s ago: no batch with events is under way, so a post is taken (it was refused
    for good, and with nothing taken the worker stayed idle)."""
    lag = LogLag(partitions=[{"partition": 0, "pending_events": 0, "pending_chunks": 0,
                              "oldest_age": 0.0, "oldest_stream": None}],
                 batch_seconds=14.4, fixed_seconds=2.8, seconds_per_group=0.075, active_streams=10,
                 worker_seen=True)
    lag.batch_elapsed = 3.0
    assert lag.wait_estimate(1000, 1) < TARGET * MAX_WAIT
    assert _decide(lag, stream_pending=0, incoming=1000) is None


def test_an_idle_worker_is_never_locked_out_by_a_fit_of_slow_batches():
    """Nothing waits but the fit says any batch takes 5.4 s (past the ceiling): the post is
    taken. Refused, nothing would be read, no batch would refit the costs, and every post
    would be refused for good (a clean run's pipeline refused one stream for 90 s)."""
    lag = LogLag(partitions=[{"partition": 0, "pending_events": 0, "pending_chunks": 0,
                              "oldest_age": 0.0, "oldest_stream": None}],
                 batch_seconds=6.0, fixed_seconds=5.4, seconds_per_group=0.05, active_streams=1,
                 worker_seen=True)
    assert lag.wait_estimate(100, 1) > CEILING * MAX_WAIT
    assert _decide(lag, stream_pending=0, incoming=100) is None
    lag.taken_chunks, lag.taken_events = 1, 100  # once one is taken, the estimate judges again
    assert _decide(lag, stream_pending=100, incoming=100) is not None
