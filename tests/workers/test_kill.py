"""kill -9 of a real worker process mid-stream: after a restart every event counts once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import TEST_SECRET, ApiServer
from tidemark.redis_server import EmbeddedRedis

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _worker(redis_url: str, checkpoint: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark_cli", "worker", "--redis", redis_url,
         "--checkpoint", checkpoint, "--master", "local[2]", "--partitions", "2"],
        start_new_session=True, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
        env={**os.environ, "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex()},
    )


def _events(c) -> int:
    r = c.get("/v1/streams/k")
    return r.json()["status"]["events"] if r.status_code == 200 else 0


def _post(c, first: int, n: int = 1000) -> int:
    """Events accepted (a 429 while the worker catches up accepts none)."""
    r = c.post("/v1/streams/k/events", json=[{"ts": T0 + (first + i) * 0.001} for i in range(n)])
    return r.json()["accepted"] if r.status_code == 202 else 0


def test_kill_9_mid_stream_then_restart_counts_every_event_once(tmp_path):
    log = tmp_path / "worker.log"
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        checkpoint = str(tmp_path / "checkpoint")
        worker = _worker(server.url, checkpoint, log)
        sent = 0
        try:
            with api.client() as c:
                c.put("/v1/streams/k", json={"max_window": "1h"})
                deadline = time.monotonic() + 420
                # Keep sending until the worker has published some, then kill it mid-stream.
                while _events(c) == 0 or sent < 20_000:
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    sent += _post(c, sent)
                    time.sleep(0.05)
                for _ in range(5):  # kill while it is working on these
                    sent += _post(c, sent)
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                for _ in range(5):
                    sent += _post(c, sent)
                worker = _worker(server.url, checkpoint, log)
                deadline = time.monotonic() + 420
                while _events(c) < sent:
                    assert time.monotonic() < deadline, f"{_events(c)} of {sent}: " + log.read_text()[-3000:]
                    time.sleep(0.5)
                time.sleep(2)
                status = c.get("/v1/streams/k").json()["status"]
                assert status["events"] == sent and status["late_dropped"] == 0
        finally:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            api.stop()


def test_a_standby_whose_jvm_dies_exits_instead_of_waiting_to_be_promoted(tmp_path):
    """A spare that would fail the moment it is told to take over must leave, so that
    `tidemark up` replaces it; and it never starts a query (nor touches the checkpoint)
    while it stands by."""
    log = tmp_path / "standby.log"
    checkpoint = tmp_path / "checkpoint"
    with EmbeddedRedis(tmp_path / "redis") as server:
        spare = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "worker", "--standby", "--redis", server.url,
             "--checkpoint", str(checkpoint), "--master", "local[2]", "--partitions", "2"],
            start_new_session=True, stdin=subprocess.PIPE, stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex()})
        try:
            deadline = time.monotonic() + 300
            while "standing by" not in log.read_text():
                assert spare.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            assert not (checkpoint / "spark").exists()  # planned, not started
            jvm = subprocess.run(["pgrep", "-P", str(spare.pid), "java"], capture_output=True,
                                 text=True).stdout.split()
            os.kill(int(jvm[0]), signal.SIGKILL)
            assert spare.wait(30) != 0, log.read_text()[-3000:]
        finally:
            if spare.poll() is None:
                os.killpg(spare.pid, signal.SIGKILL)
                spare.wait()
            spare.stdin.close()
