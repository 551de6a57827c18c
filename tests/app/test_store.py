"""``app.store.Store`` against a real Redis, below Spark: shards merged at read, caching by
version, declarations, idempotent appends and back-pressure."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings

from app.store import Backpressure, Store, StreamConflict, StreamNotFound
from tests import strategies as S
from tidemark import segments
from tidemark.wire import keys
from tidemark.streams import StreamConfig
from workers.publish import Publisher

_names = (f"store-{i}" for i in itertools.count())
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def store(redis_url):
    return Store(redis_url, S.secret_of(S.SEED))


@pytest.fixture(scope="module")
def publisher(redis_url):
    return Publisher(redis_url)


def _publish_case(publisher, name, case, version=1):
    for shard, summary in S.shard_summaries(case).items():
        n = sum(1 for s in case.shards if s == shard)
        assert publisher.publish_summary(name, summary, version=version, events=n, shard=shard)


@given(S.cases(max_events=30))
@FEW
def test_shards_are_merged_at_read_exactly_as_one_summary_of_all(store, publisher, case):
    name = next(_names)
    store.declarations.declare(name, case.config)
    _publish_case(publisher, name, case)
    summary, status = store.reads.summary(name)
    whole = S.summarize(case)
    if whole is None:
        assert summary is None and status["events"] == 0 and status["clock"] is None
        return
    assert summary.parts.keys() == whole.parts.keys()
    for part, sketch in summary.parts.items():
        if part == "decayed":  # samples with its own random stream: the same events, not bits
            assert sketch.total_weight == whole[part].total_weight
        else:
            assert sketch.to_bytes() == whole[part].to_bytes(), part
    assert status["events"] == len(case.ts) and status["shards"] == len(set(case.shards))
    assert status["sketch_version"] == len(set(case.shards))  # the sum of the shard versions
    assert status["clock"] == summary.clock_seconds


def test_a_summary_is_decoded_once_per_version_and_merged_once_per_set(store, publisher):
    name = next(_names)
    config = StreamConfig(max_window=60.0)
    store.declarations.declare(name, config)
    case = S.Case(config, [1.0, 2.0, 3.0, 4.0], ["a", "b", None, "a"], [1.0] * 4, [1.0] * 4, [0, 1, 0, 1])
    _publish_case(publisher, name, case)
    first, _ = store.reads.summary(name)
    again, _ = store.reads.summary(name)
    assert again is first  # same versions: the cached merge
    newer = S.Case(config, [2.0, 5.0], ["b", "c"], [1.0, 1.0], [1.0, 1.0], [1, 1])
    newest = S.shard_summaries(newer)[1]
    before = dict(store.summaries.read_stats)
    assert publisher.publish_summary(name, newest, version=2, events=2, shard=1)
    # A query meanwhile may still be answered from the version before (it is decoded off
    # the request path); fresh=True waits for the new one, as alert evaluation does.
    merged, status = store.reads.summary(name, fresh=True)
    assert merged is not first and status["sketch_version"] == 3
    # Only the segments of shard 1's new version that this process lacked were read
    # (shard 0's were held; the head and the parts whose bytes changed come new).
    held_before = set(store.summaries._segments[name])
    changed = [b for _, b in segments.split(newest.to_bytes())]
    assert store.summaries.read_stats["bytes_read"] - before["bytes_read"] <= sum(len(b) for b in changed)
    assert store.summaries.read_stats["decodes"] == before["decodes"] + 1
    assert held_before == {d for s in status_segments(publisher, name) for _, d in s}
    assert merged["count"].query(*_all(merged)).estimate == 4.0  # shard 0: 2 events, shard 1 now 2


def status_segments(publisher, name):
    return [json.loads(raw)["segments"] for raw in publisher.redis.hvals(keys.shard_status(name))]


def _all(summary):
    clock = summary["count"].clock
    return clock - summary["count"].window + 1, clock


def test_the_cache_holds_at_most_cached_streams(redis_url, publisher):
    small = Store(redis_url, S.secret_of(S.SEED), cached_streams=1)
    config = StreamConfig(max_window=60.0)
    names = [next(_names) for _ in range(3)]
    for name in names:
        small.declarations.declare(name, config)
        case = S.Case(config, [1.0], ["a"], [1.0], [1.0], [0])
        _publish_case(publisher, name, case)
        assert small.reads.summary(name)[0] is not None
    assert list(small.summaries._merged) == names[-1:]
    assert set(small.summaries._segments) == {names[-1]}


def test_declarations_are_kept_and_never_changed(store):
    name = next(_names)
    config = StreamConfig(max_window=60.0)
    assert store.declarations.declare(name, config) is True
    assert store.declarations.declare(name, config) is False
    with pytest.raises(StreamConflict):
        store.declarations.declare(name, StreamConfig(max_window=120.0))
    assert store.declarations.config(name) == config and name in store.declarations.names()
    with pytest.raises(StreamNotFound):
        store.declarations.config(next(_names))
    with pytest.raises(StreamNotFound):
        store.reads.summary(next(_names))


def test_an_append_with_a_seen_idempotency_key_stores_nothing_and_returns_the_first_receipt(store):
    name = next(_names)
    store.declarations.declare(name, StreamConfig(max_window=60.0))
    first = store.ingest.append(name, b"chunk-1", 3, 1, 10.0, {"accepted": 3, "rejected": 1}, "key-1")
    again = store.ingest.append(name, b"chunk-2", 5, 0, 20.0, {"accepted": 5, "rejected": 0}, "key-1")
    assert first == {"accepted": 3, "rejected": 1, "replayed": False}
    assert again == {"accepted": 3, "rejected": 1, "replayed": True}
    assert store.ingest.pending(name) == 3
    status = store.reads.status(name)
    assert status["received"] == 3 and status["rejected"] == 1
    other = store.ingest.append(name, b"chunk-3", 2, 0, 5.0, {"accepted": 2, "rejected": 0}, "key-2")
    assert not other["replayed"] and store.ingest.pending(name) == 5
    assert float(store.redis.hget(f"{_stats_key(name)}", "clock")) == 10.0  # the clock never falls


def _stats_key(name):
    from tidemark.wire import keys

    return keys.ingest_stats(name)


def test_back_pressure_refuses_once_too_many_chunks_or_events_wait(tmp_path):
    from tidemark.redis_server import EmbeddedRedis

    with EmbeddedRedis(tmp_path / "redis") as server:  # its own log: the chunk cap is a total
        tight = Store(server.url, max_pending_chunks=2, max_pending_events=100, lag_ttl=0.0)
        name = next(_names)
        tight.declarations.declare(name, StreamConfig(max_window=60.0))
        for i in range(2):
            tight.ingest.append(name, b"c", 1, 0, float(i), {"accepted": 1})
        with pytest.raises(Backpressure, match="2 requests") as refused:
            tight.ingest.append(name, b"c", 1, 0, 3.0, {"accepted": 1})
        assert refused.value.retry_after >= 1
        roomy = Store(server.url, max_pending_events=100, lag_ttl=0.0)
        events = next(_names)
        roomy.declarations.declare(events, StreamConfig(max_window=60.0))
        roomy.ingest.append(events, b"c", 100, 0, 1.0, {"accepted": 100})
        with pytest.raises(Backpressure, match="100 events"):
            roomy.ingest.append(events, b"c", 1, 0, 2.0, {"accepted": 1})
