"""Every accepted event is counted exactly once across query restarts and Redis flushes.

State lives in Spark's state store, so a restart of the query on the same checkpoint
continues from the last committed batch; a Redis flush makes the driver publish every
shard again from that state. A real ``kill -9`` of a worker process is in ``test_kill.py``.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.conftest import TEST_SECRET, ApiServer, post_events
from tidemark.redis_server import EmbeddedRedis
from workers.job import start

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _wait(c, stream, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = c.get(f"/v1/streams/{stream}")
        if r.status_code == 200 and r.json()["status"]["events"] >= n:
            return r.json()["status"]
        time.sleep(0.2)
    raise AssertionError(f"stream {stream} did not reach {n} events in {timeout}s: {r.text}")


def _post(c, stream, start_at, n, **headers):
    events = [{"ts": T0 + start_at + i * 0.01} for i in range(n)]
    r = post_events(c, stream, json=events, headers=headers)  # a 429 is retried, as clients do
    assert r.status_code == 202 and r.json()["accepted"] == n, r.text
    return r


def test_restart_and_flush_count_every_event_once(spark, tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        checkpoint = str(tmp_path / "checkpoint")
        try:
            with api.client() as c:
                c.put("/v1/streams/s", json={"max_window": "1h", "shards": 3})
                _post(c, "s", 0, 500)
                query, driver = start(spark, server.url, checkpoint, "200 milliseconds", TEST_SECRET)
                _wait(c, "s", 500)
                query.stop()
                driver.stop_event.set()
                _post(c, "s", 10, 300)
                # A retried request with the same Idempotency-Key is stored once.
                first = _post(c, "s", 20, 200, **{"Idempotency-Key": "req-1"})
                again = _post(c, "s", 20, 200, **{"Idempotency-Key": "req-1"})
                assert again.json() == first.json()
                assert again.headers.get("Idempotent-Replayed") == "true"
                query, driver = start(spark, server.url, checkpoint, "200 milliseconds", TEST_SECRET)
                try:
                    status = _wait(c, "s", 1000)
                    time.sleep(1.5)  # a double count would show up by now
                    status = c.get("/v1/streams/s").json()["status"]
                    assert status["events"] == 1000 and 1 <= status["shards"] <= 3
                    count = c.get("/v1/streams/s/count", params={"window": 3600}).json()
                    assert count["bound"]["lower"] <= 1000 <= count["bound"]["upper"]
                    # Redis flushed: the driver publishes every shard again from the state store.
                    redis.Redis.from_url(server.url).flushall()
                    status = _wait(c, "s", 1000)
                    assert status["events"] == 1000 and status["received"] == 1000
                    count = c.get("/v1/streams/s/count", params={"window": 3600}).json()
                    assert count["bound"]["lower"] <= 1000 <= count["bound"]["upper"]
                finally:
                    driver.stop_event.set()
                    query.stop()
        finally:
            api.stop()
