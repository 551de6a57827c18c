"""Deleting streams as users do, through a real worker process: under load, re-declared at
once with other settings, with a ``kill -9`` of the worker in between — the other streams
count every event once, a re-declared stream counts exactly its new events, and a deleted
stream's state leaves Spark's state store."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from tests.conftest import ApiServer, post_events
from tests.workers.test_kill import _worker
from tidemark.redis_server import EmbeddedRedis
from tidemark.supervisor import terminate

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0
KEPT = ("keep-a", "keep-b")


class Load:
    """Steady ingest into the streams that stay, counting what was accepted."""

    def __init__(self, client):
        self.client, self.sent = client, {s: 0 for s in KEPT}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.05):
            for s in KEPT:
                first = self.sent[s]
                r = self.client.post(f"/v1/streams/{s}/events",
                                     json=[{"ts": T0 + (first + i) * 0.01, "key": f"k{i % 7}"}
                                           for i in range(200)])
                assert r.status_code in (202, 429, 503), r.text
                if r.status_code == 202:
                    self.sent[s] += r.json()["accepted"]


class Worker:
    """The worker process and ``spares`` spare workers, one standing by at a time, as
    ``tidemark up`` keeps one: when the worker dies (by a ``kill -9``, or on its own: on a
    busy machine Spark's Python helpers may time out), the spare is told ``go`` and starts
    the query from the checkpoint, and the next spare starts; with none left, a new
    worker starts. A thread watches as the supervisor does, so a dead worker is replaced
    within a moment whatever the test is doing meanwhile (a client retrying a 429 while no
    worker reads would wait for nothing)."""

    def __init__(self, redis_url, checkpoint, log, spares: int = 0):
        self.args, self.log, self.spares = (redis_url, checkpoint, log), log, spares
        self._lock = threading.RLock()
        self.process = _worker(*self.args)
        self.spare = None  # the first once the worker processes (``stand_by``), as `up` does
        self._stopped = threading.Event()
        self._watch = threading.Thread(target=self._watching, daemon=True)
        self._watch.start()

    def _watching(self):
        while not self._stopped.wait(0.3):
            self.keep_running()

    def _next_spare(self):
        if self.spares == 0:
            return None
        self.spares -= 1
        return _worker(*self.args, standby=True)

    def stand_by(self):
        """Start the next spare unless one is there (two JVMs starting at once on two cores
        made Spark's Python helpers time out)."""
        with self._lock:
            if self.spare is None:
                self.spare = self._next_spare()

    def kill_9(self):
        with self._lock:
            process = self.process
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def keep_running(self):
        with self._lock:
            if self._stopped.is_set() or self.process.poll() is None:
                return
            if self.spare is not None and self.spare.poll() is None:
                self.spare.stdin.write(b"go\n")
                self.spare.stdin.flush()
                self.process, self.spare = self.spare, self._next_spare()
            else:
                self.process = _worker(*self.args)

    def stop(self):
        """Stop the worker cleanly (its last state committed), then what is left of its
        process group and of any spare's."""
        self._stopped.set()
        self._watch.join()
        if self.process.poll() is None:
            terminate(self.process, 60)
        for process in (self.process, self.spare):
            if process is None:
                continue
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def _status(c, name):
    r = c.get(f"/v1/streams/{name}")
    return r.json()["status"] if r.status_code == 200 else None


def _wait(c, name, events, log, worker, timeout=300.0):
    deadline = time.monotonic() + timeout
    while True:
        worker.keep_running()
        status = _status(c, name)
        if status and status["events"] + status["late_dropped"] >= events:
            return status
        assert time.monotonic() < deadline, f"{name}: {status} of {events}\n" + log.read_text()[-3000:]
        time.sleep(0.3)


def _post(c, name, n, first=0):
    """Post as a client honouring back-pressure does: just after a restart, with the load
    beside it, the worker may be behind, and a 429 then is the contract kept."""
    r = post_events(c, name, json=[{"ts": T0 + (first + i) * 0.01} for i in range(n)])
    assert r.status_code == 202, r.text
    return r.json()["accepted"]


def test_delete_under_load_and_redeclare_with_kill_9_between(tmp_path, request):
    log = tmp_path / "worker.log"
    checkpoint = str(tmp_path / "checkpoint")
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        worker = Worker(server.url, checkpoint, log, spares=2)  # one per kill -9 below
        try:
            with api.client() as c, api.client() as loader:
                for s in KEPT:
                    assert c.put(f"/v1/streams/{s}", json={"max_window": "1h"}).status_code == 201
                assert c.put("/v1/streams/gone", json={"max_window": "1h", "shards": 2}).status_code == 201
                _post(c, "gone", 500)
                load = Load(loader)
                load.thread.start()
                # Each round: the stream has events, is deleted, is declared again with other
                # settings and fed anew; round 1 kills the worker between the delete and the
                # new declaration, round 2 kills it with the old stream's events pending.
                for round_, shards in enumerate((2, 3, 1)):
                    settings = {"max_window": f"{round_ + 1}h", "shards": shards}
                    if round_ == 0:
                        assert c.put("/v1/streams/doomed", json=settings).status_code == 201
                    old = _post(c, "doomed", 300 + round_)
                    _wait(c, "doomed", old, log, worker)
                    worker.stand_by()
                    if round_ == 2:
                        worker.kill_9()
                        _post(c, "doomed", 50, first=old)  # pending when it is deleted
                    assert c.delete("/v1/streams/doomed").status_code == 204
                    for path in ("/v1/streams/doomed", "/v1/streams/doomed/count?window=1h"):
                        assert c.get(path).status_code == 404, path  # at once
                    if round_ == 1:
                        worker.kill_9()
                    if round_ == 0:
                        assert c.delete("/v1/streams/gone").status_code == 204
                    next_settings = {"max_window": f"{round_ + 2}h", "shards": (3, 1, 2)[round_]}
                    assert c.put("/v1/streams/doomed", json=next_settings).status_code == 201
                    fresh = _post(c, "doomed", 100 + round_, first=10_000)
                    status = _wait(c, "doomed", fresh, log, worker)
                    time.sleep(1.5)  # nothing of the old generation arrives later
                    status = _status(c, "doomed")
                    assert status["events"] == fresh and status["late_dropped"] == 0, status
                    assert status["received"] == fresh
                    body = c.get("/v1/streams/doomed").json()
                    assert body["settings"]["max_window"] == float((round_ + 2) * 3600)
                    count = c.get("/v1/streams/doomed/count", params={"window": "1h"}).json()
                    assert count["bound"]["lower"] <= fresh <= count["bound"]["upper"]
                load.stop.set()
                load.thread.join()
                for s in KEPT:  # exactly once for the streams that stayed, across both kills
                    status = _wait(c, s, load.sent[s], log, worker)
                    time.sleep(1)
                    status = _status(c, s)
                    assert status["events"] == load.sent[s] and status["late_dropped"] == 0, (s, status)
                assert c.get("/v1/streams/gone").status_code == 404
                r = redis.Redis.from_url(server.url)  # nothing of a deleted stream is left
                deadline = time.monotonic() + 60
                while r.exists("tm:ingest:{gone}") or r.zscore("tm:active", "gone") is not None:
                    assert time.monotonic() < deadline, "the deleted stream's bookkeeping stayed"
                    time.sleep(0.5)
                assert not [k for k in r.scan_iter() if b"{gone}" in k]
                generation = int(r.hget("tm:generations", "doomed"))
        finally:
            worker.stop()
            api.stop()
    # The state store holds nothing of the deleted stream, and of the re-declared one
    # only its current generation (the tombstones made the stateful function remove them).
    spark = request.getfixturevalue("spark")  # only now: one JVM less while the worker runs
    rows = (spark.read.format("statestore").load(checkpoint + "/spark")
            .selectExpr("key.stream AS stream", "value.groupState.generation AS generation")
            .collect())
    held = {(r.stream, r.generation) for r in rows}
    assert {s for s, _ in held} >= set(KEPT)
    assert not [r for r in held if r[0] == "gone"], held
    assert {g for s, g in held if s == "doomed"} == {generation}, held
