"""Back-pressure below Spark: the decision (pure) and the lag read from a real Redis."""

from __future__ import annotations

import json
import time

import pytest
import redis

from app.backpressure import CEILING, TARGET, LogLag, decide
from app.store import Backpressure, Store
from tidemark import keys
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from workers.job import log_progress
from workers.publish import Publisher

MAX_WAIT = 10.0


def _lag(pending: int, capacity: float = 100_000.0, oldest: float = 0.5, active: int = 100,
         batch: float = 0.5, seen: bool = True) -> LogLag:
    return LogLag(partitions=[{"partition": 0, "pending_events": pending, "pending_chunks": 10,
                               "oldest_age": oldest, "oldest_stream": "x"}],
                  capacity=capacity, batch_seconds=batch, active_streams=active, worker_seen=seen)


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
    assert _decide(lag, stream_pending=20_000) is not None  # share: 100 K/s × 3 s / 200


def test_nothing_is_taken_past_the_ceiling_or_once_an_entry_waited_that_long():
    assert _decide(_lag(pending=900_000), stream_pending=0) is not None  # 9.5 s > 8 s
    stalled = _decide(_lag(pending=10, oldest=CEILING * MAX_WAIT + 0.1), stream_pending=0)
    assert stalled and "waited" in stalled.reason and stalled.retry_after >= 1


def test_without_a_worker_ever_seen_only_the_caps_apply():
    assert _decide(_lag(pending=10**9, oldest=1000, seen=False), stream_pending=0) is None
    capped = decide(_lag(pending=0, seen=False), "s", 1_999_900, 500, MAX_WAIT, 2_000_000, 100_000)
    assert capped and "TIDEMARK_MAX_PENDING_EVENTS" in capped.reason


def test_the_worker_measures_its_throughput_from_the_batches_it_ran():
    def progress(start, end, ms):
        return {"sources": [{"startOffset": json.dumps({"log": start}) if start else None,
                             "endOffset": json.dumps({"log": end})}],
                "durationMs": {"triggerExecution": ms}}
    a = [["1-0", 0, 0], ["2-0", 0, 0]]
    b = [["5-0", 60_000, 6], ["6-0", 40_000, 4]]
    c = [["7-0", 60_100, 7], ["6-0", 40_000, 4]]
    out = log_progress([progress(None, a, 100), progress(a, b, 1000), progress(b, c, 500)])
    assert json.loads(out["read"]) == c
    # the largest batches: 100,000 + 100 events in 1.5 s (the first read nothing)
    assert out["capacity"] == pytest.approx(100_100 / 1.5, rel=1e-3)
    assert log_progress([{"sources": [{"startOffset": None, "endOffset": '{"s": "1-0"}'}],
                          "durationMs": {"triggerExecution": 5}}]) is None  # a legacy offset


def test_the_lag_is_read_per_partition_and_refuses_before_the_promise_breaks(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        store = Store(server.url, log_partitions=2, max_wait=MAX_WAIT, lag_ttl=0.0)
        for name in ("flood", "trickle"):
            store.declare(name, StreamConfig(max_window=60.0))
        assert store.partition("flood") != store.partition("trickle")
        store.append("trickle", b"t", 10, 0, 1.0, {"accepted": 10})
        lag = store.lag()
        assert not lag.worker_seen and lag.pending_events == 10 and lag.pending_chunks == 1
        assert lag.partitions[store.partition("trickle")]["oldest_stream"] == "trickle"
        # The worker read everything so far at 1,000 events/s.
        r = redis.Redis.from_url(server.url)
        read = [[r.hget(keys.log_stats(p), "last").decode() if r.hget(keys.log_stats(p), "last") else "0-0",
                 int(r.hget(keys.log_stats(p), "events") or 0), int(r.hget(keys.log_stats(p), "chunks") or 0)]
                for p in range(2)]
        Publisher(server.url).log_progress({"read": json.dumps(read), "capacity": 1000.0,
                                            "batch_seconds": 0.2})
        lag = store.lag()
        assert lag.worker_seen and lag.pending_events == 0 and lag.oldest_age == 0.0
        for _ in range(2):  # 2.8 s of work at 1,000 events/s: within the target
            store.append("flood", b"f", 1_400, 0, 2.0, {"accepted": 1_400})
        with pytest.raises(Backpressure, match="fair share") as refused:
            store.append("flood", b"f", 1_400, 0, 3.0, {"accepted": 1_400})
        assert refused.value.retry_after >= 1
        store.append("trickle", b"t", 5, 0, 2.0, {"accepted": 5})  # the trickle still flows
        lag = store.lag()
        assert lag.pending_events == 2_805 and lag.active_streams == 2
        assert lag.partitions[store.partition("flood")]["pending_chunks"] == 2
        time.sleep(0.05)
        assert lag.oldest_age >= 0.0 and store.lag().oldest_age > 0.0
