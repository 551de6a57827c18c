"""/readyz against a real Redis, with the worker's heartbeat written as the driver writes it."""

from __future__ import annotations

import datetime as dt
import os
import time

from tests.conftest import ApiServer
from tidemark.redis_server import EmbeddedRedis
from workers.publish import Publisher


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _beat(pub: Publisher, **fields) -> None:
    pub.heartbeat({"run_id": "run-1", "active": True, "batch_id": 7,
                   "progress_at": _iso(time.time()), **fields})


def test_readyz_is_200_only_while_redis_answers_and_the_worker_processes(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url, worker_stale_after=2.0, ready_max_wait=1.0).start()
        pub = Publisher(server.url)
        try:
            with api.client() as c, api.client(None) as anonymous:
                r = anonymous.get("/readyz")
                assert r.status_code == 503
                assert r.json()["why"] == {"worker": "no heartbeat: the worker is not running"}
                _beat(pub)
                r = anonymous.get("/readyz")
                assert r.status_code == 200, r.text
                assert r.json()["heartbeat"]["run_id"] == "run-1" and "why" not in r.json()
                # A heartbeat a dead worker left behind: still in Redis, no longer fresh.
                _beat(pub, time=time.time() - 2.5)
                r = anonymous.get("/readyz")
                assert r.status_code == 503 and "last heartbeat 2.5 s ago" in r.json()["why"]["worker"]
                _beat(pub, active=False)
                assert "no running streaming query" in anonymous.get("/readyz").json()["why"]["worker"]

                # Events appended after the last batch started, unread for longer than 1 s.
                c.put("/v1/streams/s", json={"max_window": "1h"})
                started = time.time()
                time.sleep(0.01)
                assert c.post("/v1/streams/s/events", json=[{"ts": 1000.0}] * 3).status_code == 202
                _beat(pub, progress_at=_iso(started))
                assert anonymous.get("/readyz").status_code == 200  # not waiting long yet
                time.sleep(1.2)
                _beat(pub, progress_at=_iso(started))
                r = anonymous.get("/readyz")
                assert r.status_code == 503
                assert r.json()["why"]["worker"].startswith("3 events of a stream waiting 1 s and "
                                                            "no batch has finished since")
                # A batch that started after the append finished: they were read.
                _beat(pub, progress_at=_iso(time.time()))
                assert anonymous.get("/readyz").status_code == 200
                # Read and counted, not yet trimmed: not waiting either.
                _beat(pub, progress_at=None)
                assert anonymous.get("/readyz").status_code == 503  # a new query, nothing read
                pub.publish("s", 0, {"version": 1, "events": 3, "late_dropped": 0}, b"", {})
                _beat(pub, progress_at=None)
                assert anonymous.get("/readyz").status_code == 200

                server.stop()
                r = anonymous.get("/readyz")
                assert r.status_code == 503 and r.json()["redis"] is False
                assert r.json()["why"]["redis"].startswith("Redis does not answer")
                assert anonymous.get("/healthz").status_code == 200  # liveness only
        finally:
            api.stop()


def test_metrics_answer_whatever_one_stream_status_holds(redis_url):
    """A shard status with an unreadable time (an old or foreign writer) costs that stream
    its publish-age gauge, never /metrics itself."""
    from app.store import Store
    from tidemark.streams import StreamConfig

    api = ApiServer(redis_url).start()
    pub = Publisher(redis_url)
    good, odd = f"m-good-{time.time_ns()}", f"m-odd-{time.time_ns()}"
    try:
        for name, updated_at in ((good, _iso(time.time() - 5)), (odd, "t")):
            config = StreamConfig(max_window=60.0)
            Store(redis_url).declarations.declare(name, config)
            pub.publish(name, 0, {"version": 1, "events": 0, "late_dropped": 0, "clock": 0.0,
                                  "sizes": {}, "failed": None, "updated_at": updated_at}, b"",
                        config.model_dump())
        with api.client("read") as c:
            r = c.get("/metrics")
        assert r.status_code == 200, r.text
        ages = {line.split('"')[1]: float(line.split()[-1]) for line in r.text.splitlines()
                if line.startswith("tidemark_publish_age_seconds{")}
        assert 4 < ages[good] < 60 and odd not in ages
    finally:
        api.stop()


def test_a_standing_spare_shows_in_readyz_and_metrics_without_making_anything_ready(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        pub = Publisher(server.url)
        try:
            with api.client() as c, api.client(None) as anonymous:
                assert "tidemark_standby_workers 0.0" in c.get("/metrics").text
                pub.standby_beat(since=time.time() - 42)
                r = anonymous.get("/readyz")
                assert r.status_code == 503  # a spare is no worker
                assert r.json()["standby"]["pid"] == os.getpid()
                assert 41 < r.json()["standby"]["standing_seconds"] < 60
                assert "tidemark_standby_workers 1.0" in c.get("/metrics").text
                pub.standby_gone()  # it took over
                assert "standby" not in anonymous.get("/readyz").json()
                assert "tidemark_standby_workers 0.0" in c.get("/metrics").text
        finally:
            api.stop()
