"""DELETE /v1/streams/{name} (contract §4) through the real API and a real Redis: gone at
once from every route, every key of it gone, its alerts gone, stale publishes of its
generation refused, and the name declared again afresh. (The worker's side, under load and
``kill -9``: tests/workers/test_lifecycle.py.)"""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.conftest import TEST_SECRET, ApiServer
from tidemark.wire import keys
from tidemark.ingest_log import partition_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def redis_url(own_redis) -> str:
    """This module's own Redis: what it asserts of the shared log partitions (the pending
    entries of a deleted stream, its tombstone) holds only where no worker consumes them,
    and the suite's worker runs on the shared Redis once any test has started it."""
    return own_redis.url


@pytest.fixture(scope="module")
def api(redis_url):
    server = ApiServer(redis_url).start()
    yield server
    server.stop()


def _summary(config: StreamConfig, n: int) -> StreamSummary:
    import numpy as np
    import pyarrow as pa

    s = StreamSummary.create(config, TEST_SECRET)
    if n:
        s.update_table(pa.table({"ts": pa.array(T0 + np.arange(n, dtype=float)),
                                 "key": pa.array([f"k{i % 3}" for i in range(n)]),
                                 "value": pa.array(np.ones(n)), "weight": pa.array(np.ones(n))}))
    return s


def _stream_keys(r: redis.Redis, name: str) -> dict:
    return {
        "declared": r.hexists(keys.STREAMS, name),
        "generation": r.hget(keys.GENERATIONS, name),
        "stats": r.exists(keys.ingest_stats(name)),
        "sketch": r.exists(keys.shard_segments(name)),
        "status": r.exists(keys.shard_status(name)),
        "idem": list(r.scan_iter(match=keys.idempotency_pattern(name))),
    }


def test_a_deleted_stream_is_gone_at_once_and_its_name_is_free(api, stream_name, redis_url):
    name = stream_name
    r = redis.Redis.from_url(redis_url)
    publisher = Publisher(redis_url)
    config = StreamConfig(max_window=3600, shards=2)
    with api.client() as c:
        assert c.put(f"/v1/streams/{name}", json={"max_window": "1h", "shards": 2}).status_code == 201
        first_gen = int(r.hget(keys.GENERATIONS, name))
        body = [{"ts": T0 + i, "key": "a"} for i in range(10)]
        sent = c.post(f"/v1/streams/{name}/events", json=body, headers={"Idempotency-Key": "k-1"})
        assert sent.status_code == 202
        part = partition_of(name, int(r.get(keys.LOG_PARTITIONS)))
        entry = [f for _, f in r.xrange(keys.log_partition(part)) if f[b"s"] == name.encode()][0]
        assert int(entry[b"g"]) == first_gen  # every chunk carries its stream and generation
        assert publisher.publish_summary(name, _summary(config, 10), version=3, events=10)
        alert = c.post("/v1/alerts", json={
            "stream": name, "query": "count", "params": {"window": "1h"}, "op": ">",
            "threshold": 1e9, "webhook_url": "http://127.0.0.1:9/hook", "secret": "s" * 16}).json()
        assert c.get(f"/v1/streams/{name}/count", params={"window": "1h"}).json()["estimate"] > 0
        old_status = json.loads(r.hget(keys.shard_status(name), 0))

        assert c.delete(f"/v1/streams/{name}").status_code == 204
        for method, path in [("GET", f"/v1/streams/{name}"), ("GET", f"/v1/streams/{name}/count?window=1h"),
                             ("GET", f"/v1/streams/{name}/count/history?window=1h"),
                             ("POST", f"/v1/streams/{name}/events"), ("DELETE", f"/v1/streams/{name}"),
                             ("GET", f"/v1/alerts/{alert['id']}"),
                             ("GET", f"/v1/alerts/{alert['id']}/deliveries")]:
            kw = {"json": body} if method == "POST" else {}
            assert c.request(method, path, **kw).status_code == 404, (method, path)
        assert name not in [s["name"] for s in c.get("/v1/streams").json()["streams"]]
        assert alert["id"] not in [a["id"] for a in c.get("/v1/alerts").json()["alerts"]]
        assert f'stream="{name}"' not in c.get("/metrics").text
        left = _stream_keys(r, name)
        assert left == {"declared": False, "generation": None, "stats": 0, "sketch": 0, "status": 0,
                        "idem": []}
        # Pending entries stay in the shared partition (the worker drops them by their
        # generation), followed by the tombstone the worker removes the state on.
        pending, (tomb_id, tomb) = [(i, f) for i, f in r.xrange(keys.log_partition(part))
                                    if f[b"s"] == name.encode()]
        assert int(pending[1][b"g"]) == first_gen and b"t" not in pending[1]
        assert tomb[b"t"] == b"1" and int(tomb[b"g"]) == first_gen and tomb[b"k"] == b"2"
        assert not r.exists(keys.ingest(name)) and r.zscore(keys.ACTIVE, name) is None
        assert int(r.hget(keys.DELETED, name)) == first_gen

        # A worker that has not heard yet publishes the old generation: refused, and it
        # brings nothing back (not the declaration either).
        assert not publisher.publish(name, 0, {**old_status, "version": 99}, b"stale", config.model_dump())
        assert _stream_keys(r, name)["declared"] is False
        assert c.get(f"/v1/streams/{name}").status_code == 404

        # Declared again at once, with other settings: counters from zero, nothing old.
        assert c.put(f"/v1/streams/{name}", json={"max_window": "2h", "epsilon": 0.1}).status_code == 201
        new_gen = int(r.hget(keys.GENERATIONS, name))
        assert new_gen > first_gen
        fresh = c.get(f"/v1/streams/{name}").json()
        assert fresh["settings"]["max_window"] == 7200.0 and fresh["settings"]["epsilon"] == 0.1
        assert fresh["status"]["received"] == 0 and fresh["status"]["events"] == 0
        assert fresh["status"]["sketch_version"] == 0
        assert not publisher.publish(name, 0, {**old_status, "version": 100}, b"stale", config.model_dump())
        assert c.get(f"/v1/streams/{name}").json()["status"]["events"] == 0
        # The old request's Idempotency-Key is no answer for the new stream: stored afresh.
        again = c.post(f"/v1/streams/{name}/events", json=body[:4], headers={"Idempotency-Key": "k-1"})
        assert again.status_code == 202 and "idempotent-replayed" not in again.headers
        assert again.json()["accepted"] == 4
        assert c.get(f"/v1/streams/{name}").json()["status"]["received"] == 4
        # The new generation's publish is taken, starting from version 1.
        new_config = StreamConfig(max_window=7200, epsilon=0.1)
        assert publisher.publish_summary(name, _summary(new_config, 4), version=1, events=4)
        deadline = time.monotonic() + 10
        while c.get(f"/v1/streams/{name}").json()["status"]["events"] != 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_delete_needs_admin_and_an_absent_stream_is_404(api, stream_name):
    with api.client() as c:
        assert c.delete(f"/v1/streams/{stream_name}").status_code == 404
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
    for scope in ("read", "ingest"):
        with api.client(scope) as c:
            assert c.delete(f"/v1/streams/{stream_name}").status_code == 403
    with api.client() as c:
        assert c.get(f"/v1/streams/{stream_name}").status_code == 200


def test_a_delete_reaches_another_api_process_at_once(api, redis_url, stream_name):
    """Two API processes (here: two apps): the one that did not answer the DELETE stops
    serving the stream as soon as the deletion's announcement arrives."""
    from tests.conftest import ApiServer

    other = ApiServer(redis_url).start()
    try:
        config = StreamConfig(max_window=3600)
        with api.client() as c, other.client() as o:
            c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
            Publisher(redis_url).publish_summary(stream_name, _summary(config, 5), version=1, events=5)
            path = f"/v1/streams/{stream_name}/count?window=1h"
            deadline = time.monotonic() + 10
            while o.get(path).status_code != 200 or o.get(path).json()["estimate"] == 0:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert c.delete(f"/v1/streams/{stream_name}").status_code == 204
            deadline = time.monotonic() + 0.5  # an announcement, not the 1 s the declaration is kept
            while o.get(path).status_code != 404:
                assert time.monotonic() < deadline, "the other process still answers"
                time.sleep(0.01)
    finally:
        other.stop()
