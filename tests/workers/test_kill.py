"""kill -9 of a real worker process under many streams' load: after a restart every event
counts once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import json
import time

import pytest

from tests.conftest import TEST_SECRET, ApiServer
from tidemark.wire import keys
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _worker(redis_url: str, checkpoint: str, log, standby: bool = False) -> subprocess.Popen:
    """``tidemark worker``; with ``standby``, a spare that starts its query when it reads
    ``go`` on its standard input (a pipe) and exits when the pipe closes."""
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark_cli", "worker", *(["--standby"] if standby else []),
         "--redis", redis_url, "--checkpoint", str(checkpoint), "--master", "local[2]", "--partitions", "2"],
        start_new_session=True, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if standby else None,
        env={**os.environ, "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex()},
    )


STREAMS = [f"k{i:03d}" for i in range(200)]  # many streams posting at once, as users run it


def _counted(r) -> dict[str, int]:
    """Events each stream's published shards count (one pipelined read)."""
    with r.pipeline(transaction=False) as p:
        for n in STREAMS:
            p.hvals(keys.shard_status(n))
        raw = p.execute()
    return {n: sum(json.loads(v)["events"] for v in vals) for n, vals in zip(STREAMS, raw)}


def _round(c, sent: dict[str, int], n: int = 20) -> None:
    """Each stream posts ``n`` events; what is accepted is added to ``sent`` (a 429 while
    the worker is down or catching up accepts none)."""
    for name in STREAMS:
        first = sent[name]
        r = c.post(f"/v1/streams/{name}/events",
                   json=[{"ts": T0 + (first + i) * 0.001, "key": f"k{i % 5}"} for i in range(n)])
        assert r.status_code in (202, 429), r.text
        if r.status_code == 202:
            sent[name] += r.json()["accepted"]


def test_kill_9_under_many_streams_then_restart_counts_every_event_once(tmp_path):
    log = tmp_path / "worker.log"
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        r = api.app.state.store.redis
        checkpoint = str(tmp_path / "checkpoint")
        worker = _worker(server.url, checkpoint, log)
        # The restart is a spare's take-over, as under `tidemark up`: it starts once the
        # first worker processes and starts the query from the checkpoint when told, once
        # it stands by (a cold start after the kill cost some 20 s more). Not at once: two JVMs
        # starting together on two cores made Spark's helper for the first worker's source
        # miss its 10 s to connect back, and the query failed.
        spare = None
        sent = {name: 0 for name in STREAMS}
        try:
            r.hset(keys.STREAMS, mapping={n: StreamConfig(max_window="1h").model_dump_json()
                                           for n in STREAMS})
            with api.client() as c:
                deadline = time.monotonic() + 420
                rounds = 0
                # Keep posting until the worker has published some, then kill it mid-load.
                while sum(_counted(r).values()) == 0 or rounds < 3:
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    _round(c, sent)
                    rounds += 1
                spare = _worker(server.url, checkpoint, log, standby=True)  # it processes: now
                _round(c, sent)  # kill while it is working on these
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                _round(c, sent)
                spare.stdin.write(b"go\n")  # read once it stands by
                spare.stdin.flush()
                worker = spare
                _round(c, sent)
                deadline = time.monotonic() + 420
                while (counted := _counted(r)) != sent:
                    assert all(counted[n] <= sent[n] for n in STREAMS), "counted twice"
                    assert time.monotonic() < deadline, (
                        f"{sum(counted.values())} of {sum(sent.values())}: " + log.read_text()[-3000:])
                    time.sleep(0.5)
                time.sleep(2)  # nothing more arrives: every stream exactly once
                assert _counted(r) == sent and min(sent.values()) >= 60
                status = c.get(f"/v1/streams/{STREAMS[7]}").json()["status"]
                assert status["events"] == sent[STREAMS[7]] and status["late_dropped"] == 0
        finally:
            for process in {worker, spare} - {None}:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
            if spare is not None:
                spare.stdin.close()
            api.stop()


def test_a_standby_whose_jvm_dies_exits_instead_of_waiting_to_be_promoted(tmp_path):
    """A spare that would fail the moment it is told to take over must leave, so that
    `tidemark up` replaces it; and it never starts a query (nor touches the checkpoint)
    while it stands by."""
    log = tmp_path / "standby.log"
    checkpoint = tmp_path / "checkpoint"
    with EmbeddedRedis(tmp_path / "redis") as server:
        spare = _worker(server.url, checkpoint, log, standby=True)
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
