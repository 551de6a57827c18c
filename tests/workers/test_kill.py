"""kill -9 of a real worker process mid-stream: after a restart every event counts once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ApiServer
from tidemark.redis_server import EmbeddedRedis

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _worker(redis_url: str, checkpoint: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli", "worker", "--redis", redis_url,
         "--checkpoint", checkpoint, "--master", "local[1]", "--shards", "2"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _events(c, n):
    r = c.get("/v1/streams/k")
    return r.json()["status"]["events"] if r.status_code == 200 else 0


def test_kill_9_mid_stream_then_restart_counts_every_event_once(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        checkpoint = str(tmp_path / "checkpoint")
        worker = _worker(server.url, checkpoint)
        sent = 0
        try:
            with api.client() as c:
                c.put("/v1/streams/k", json={"max_window": "1h"})
                deadline = time.monotonic() + 180
                # Keep sending until the worker has published some, then kill it mid-stream.
                while _events(c, sent) == 0 or sent < 20_000:
                    assert time.monotonic() < deadline, "worker never published"
                    batch = [{"ts": T0 + (sent + i) * 0.001} for i in range(1000)]
                    c.post("/v1/streams/k/events", json=batch)
                    sent += 1000
                    time.sleep(0.05)
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                for _ in range(5):
                    c.post("/v1/streams/k/events", json=[{"ts": T0 + (sent + i) * 0.001} for i in range(1000)])
                    sent += 1000
                worker = _worker(server.url, checkpoint)
                deadline = time.monotonic() + 180
                while _events(c, sent) < sent:
                    assert time.monotonic() < deadline, f"{_events(c, sent)} of {sent} events"
                    time.sleep(0.5)
                time.sleep(2)
                assert _events(c, sent) == sent
        finally:
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            api.stop()
