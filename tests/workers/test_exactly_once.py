"""Every accepted event is counted exactly once across worker crashes and Redis flushes.

Crashes are injected at the two places that matter, on the shared Spark session: after the
worker saved its state but before Spark committed the batch (the batch is replayed and must
be skipped), and before the state was saved (the replay must apply it). A real kill -9 of a
separate worker process is in ``test_kill.py``.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.conftest import ApiServer
from tidemark.redis_server import EmbeddedRedis
from workers.job import Worker, start

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


class Crash(RuntimeError):
    pass


def crashing_worker(after_save: bool):
    class CrashingWorker(Worker):
        crashed = False

        def apply_batch(self, df, batch_id):
            if df.isEmpty() or CrashingWorker.crashed:
                return super().apply_batch(df, batch_id)
            CrashingWorker.crashed = True
            if after_save:
                save = self.store.save

                def save_then_crash(state):
                    save(state)
                    raise Crash("crash between saving state and Spark's commit")

                self.store.save = save_then_crash
            else:
                raise Crash("crash before anything was saved")
            return super().apply_batch(df, batch_id)

    return CrashingWorker


def _wait(c, stream, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = c.get(f"/v1/streams/{stream}")
        if r.status_code == 200 and r.json()["status"]["events"] >= n:
            return r.json()["status"]
        time.sleep(0.2)
    raise AssertionError(f"stream {stream} did not reach {n} events in {timeout}s: {r.text}")


def _post(c, stream, start, n):
    events = [{"ts": T0 + start + i * 0.01} for i in range(n)]
    assert c.post(f"/v1/streams/{stream}/events", json=events).json()["accepted"] == n


@pytest.mark.parametrize("after_save", [True, False], ids=["crash-after-save", "crash-before-save"])
def test_a_crashed_batch_is_applied_exactly_once(spark, tmp_path, after_save):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        checkpoint = str(tmp_path / "checkpoint")
        try:
            with api.client() as c:
                c.put("/v1/streams/s", json={"max_window": "1h"})
                _post(c, "s", 0, 500)
                query, _, stop = start(spark, server.url, checkpoint, 2, "200 milliseconds",
                                       crashing_worker(after_save))
                with pytest.raises(Exception, match="Crash|crash"):
                    query.awaitTermination(120)
                stop.set()
                _post(c, "s", 10, 300)
                query, _, stop = start(spark, server.url, checkpoint, 2, "200 milliseconds")
                try:
                    status = _wait(c, "s", 800)
                    time.sleep(1.5)  # a double count would show up by now
                    status = c.get("/v1/streams/s").json()["status"]
                    assert status["events"] == 800
                    count = c.get("/v1/streams/s/count", params={"window": 3600}).json()
                    assert count["bound"]["lower"] <= 800 <= count["bound"]["upper"]
                    # Redis flushed: the worker publishes everything again from its state.
                    redis.Redis.from_url(server.url).flushall()
                    status = _wait(c, "s", 800)
                    assert status["events"] == 800 and status["received"] == 800
                    count = c.get("/v1/streams/s/count", params={"window": 3600}).json()
                    assert count["bound"]["lower"] <= 800 <= count["bound"]["upper"]
                finally:
                    stop.set()
                    query.stop()
        finally:
            api.stop()
