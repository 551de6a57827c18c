"""``workers.publish.Publisher`` against a real Redis, below Spark: a shard's state is
replaced only by a newer version, its blob and status together, and every publish that
lands is announced."""

from __future__ import annotations

import dataclasses

import itertools
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark import segments
from tidemark.wire import keys
from tidemark.streams import StreamConfig
from workers.publish import Publisher, ShardStatus

_names = (f"pub-{i}" for i in itertools.count())
CONFIG = StreamConfig(max_window=60.0).model_dump()


def _status(version: int) -> ShardStatus:
    return ShardStatus(version=version, events=version, late_dropped=0, clock=float(version),
                       sizes={}, failed=None, updated_at="t")


def _held(p: Publisher, name: str, shard: int):
    """The shard's version and its blob, put back together from the segments its manifest
    names (tidemark/segments.py)."""
    status = p.redis.hget(keys.shard_status(name), shard)
    if status is None:
        return None, None
    status = json.loads(status)
    held = {d.decode(): b for d, b in p.redis.hgetall(keys.shard_segments(name)).items()}
    return status["version"], segments.join(status["segments"], held)


@given(st.lists(st.integers(1, 6), min_size=1, max_size=12))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_older_or_equal_version_never_overwrites(redis_url, versions):
    """Publishes in any order (retries, replays, a late task): what Redis holds is always
    the newest version seen, with that version's own blob."""
    p = Publisher(redis_url)
    name = next(_names)
    newest = 0
    for v in versions:
        took = p.publish(name, 0, _status(v), f"blob-{v}".encode(), CONFIG)
        assert took == (v > newest)
        newest = max(newest, v)
        assert _held(p, name, 0) == (newest, f"blob-{newest}".encode())


def test_shards_are_guarded_independently_and_the_declaration_is_never_replaced(redis_url):
    p = Publisher(redis_url)
    name = next(_names)
    assert p.publish(name, 0, _status(5), b"a5", CONFIG)
    assert p.publish(name, 1, _status(1), b"b1", CONFIG)  # another shard's lower version lands
    assert _held(p, name, 0) == (5, b"a5") and _held(p, name, 1) == (1, b"b1")
    other = StreamConfig(max_window=120.0).model_dump()
    assert p.publish(name, 1, _status(2), b"b2", other)
    assert p.config(name) == StreamConfig(max_window=60.0)


def test_only_a_publish_that_lands_is_announced(redis_url):
    p = Publisher(redis_url)
    name = next(_names)
    sub = p.redis.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(keys.ANNOUNCE)
    while sub.get_message(timeout=0.05) is None and not sub.subscribed:
        pass
    p.publish(name, 3, dataclasses.replace(_status(2), touched="1700000000.25"), b"x", CONFIG)
    p.publish(name, 3, _status(2), b"y", CONFIG)  # refused: not announced
    p.publish(name, 3, _status(1), b"z", CONFIG)  # refused: not announced
    got, deadline = [], time.monotonic() + 2
    while time.monotonic() < deadline:
        m = sub.get_message(timeout=0.1)
        if m:
            got.append(json.loads(m["data"]))
    sub.close()
    # with the generation and the first event time it added (a string: exactly the float)
    generation = p.redis.hget(keys.GENERATIONS, name).decode()
    assert [g for g in got if g["stream"] == name] == [
        {"stream": name, "shard": 3, "version": 2, "generation": generation, "touched": "1700000000.25"}]


def test_a_publisher_that_remembers_segments_redis_lost_sends_them_again(redis_url):
    """The publisher skips the read of what Redis holds and sends only the segments it did
    not publish itself last time; another publisher (an executor the shard moved to) or a
    flush may have changed that, and the script's refusal makes it send them all."""
    from tidemark.summary import StreamSummary
    from tests.conftest import TEST_SECRET

    name = next(_names)
    import numpy as np

    from tidemark.chunks import decode_chunk, encode_chunk

    summary = StreamSummary.create(StreamConfig(max_window=60.0), TEST_SECRET)
    ts = 1000.0 + np.arange(20.0)
    summary.update_table(decode_chunk(encode_chunk(ts, [f"k{i % 3}" for i in range(20)],
                                                   np.full(20, 2.0), np.ones(20))))
    blob, _ = summary.encode()  # as the worker writes it: head and parts
    here, there = Publisher(redis_url), Publisher(redis_url)
    assert here.publish(name, 0, _status(1), blob, CONFIG)
    assert len(segments.split(blob)) > 1  # more than one segment: some are skipped below
    p = here.redis
    p.delete(keys.shard_segments(name))  # lost meanwhile: this publisher does not know
    assert here.publish(name, 0, _status(2), blob, CONFIG)
    assert _held(here, name, 0) == (2, blob)
    assert there.publish(name, 0, _status(3), blob, CONFIG)  # reads what Redis holds
    assert here.publish(name, 0, _status(4), blob, CONFIG)
    assert _held(here, name, 0) == (4, blob)


def test_republish_is_needed_after_redis_loses_the_mark(redis_url):
    p = Publisher(redis_url)
    p.mark_published()
    assert not p.needs_republish()
    p.redis.delete(keys.PUBLISHED)
    assert p.needs_republish()
    p.mark_published()


def test_the_worker_rides_out_a_redis_restart_and_gives_up_on_an_outage(tmp_path):
    """kill -9 of Redis and a restart a second later (what `tidemark up` does): a publish
    sent meanwhile waits and lands, instead of failing the batch and the worker. An outage
    longer than the ride-out still reaches the caller."""
    import threading

    import redis as redis_py

    from tidemark.redis_server import EmbeddedRedis
    from workers.redis_client import worker_redis

    server = EmbeddedRedis(tmp_path / "redis").start()
    restart = threading.Timer(1.0, server.start)
    try:
        p = Publisher(server.url)
        name = next(_names)
        assert p.publish(name, 0, _status(1), b"one", CONFIG)
        server.process.kill()
        server.process.wait()
        restart.start()
        started = time.monotonic()
        assert p.publish(name, 0, _status(2), b"two", CONFIG)  # waits out the restart
        assert time.monotonic() - started > 0.8
        assert _held(p, name, 0) == (2, b"two")
        server.stop()
        brief = worker_redis(server.url, ride_out=0.5)
        started = time.monotonic()
        with pytest.raises(redis_py.ConnectionError):
            brief.ping()
        assert 0.4 < time.monotonic() - started < 5
    finally:
        restart.cancel()
        if restart.is_alive():
            restart.join()  # a restart under way is stopped too, even when the test failed
        server.stop()


def test_a_first_version_is_sent_whole_without_reading_what_redis_holds(redis_url, monkeypatch):
    """A shard whose state is new publishes every segment without a read; should Redis
    hold an earlier manifest of it (a lost checkpoint, an earlier generation), the whole
    blob still lands."""
    name, blob = next(_names), b"a new shard's summary"
    Publisher(redis_url).publish(name, 0, _status(1), b"an earlier run's", CONFIG)
    p = Publisher(redis_url)
    monkeypatch.setattr(p, "_stored_digests", lambda *a: pytest.fail("read what Redis holds"))
    p.redis.delete(keys.shard_segments(name))
    assert p.publish(name, 0, _status(2), blob, CONFIG, first=True)
    assert _held(p, name, 0) == (2, blob)
