"""The API's tail latency while data moves stays within a ratio of its tail when nothing
moves, measured in the same run (so a loaded machine moves both): a regression test of
the p99 that does not depend on the machine's speed.

The API runs in its own process (``tidemark api``). Moving: a publisher process publishes a
new version of a stream of 100 K events (a ~700 KB blob) every 0.25 s, four times the
worker's pace, and a poster process posts 50 K events of NDJSON (~2.7 MB) every second.
Three kept-alive clients send 150 queries a second on a fixed schedule (open loop: a
query due while the API is stalled waits, and its latency counts from when it was due,
so the share of slow answers is the share of time stalled; back-to-back clients send one
query each into a stall, and a p99 does not see it). Quiet phases (the publisher stopped
with SIGSTOP, the poster paused between posts, so no post is still being taken in) and
moving ones alternate in three pairs; the test fails when in every pair the p99 moving
passes ``RATIO`` x the quiet one (``FLOOR`` at least): a burst of other work on a shared
machine spoils one phase, seldom the moving phase of every pair, while a regression shows
in every pair.

What it catches: work of tens of ms per post or publish on the event loop, or holding the
API's GIL, makes a few % of the queries wait that long. Measured on the shared 2-core
machine (per-pair p99 ratios, moving / quiet): a variant validating the posts on the
event loop failed both runs at load average ~5.7 (120 and 3.8; 38 and 50; at load 13.5
it passed, 5.5 and 2.1); the posts validated in a thread of the API (before issue 23)
failed one run of two (3.9 and 31; then 1.8 and 1.9); this tree passed five of five at
load 3.5-12.5, the closer pair 0.8-2.5 (single pairs reached 4.8-7.6 while others' work
ran: hence more than one pair; a clean CI run's two pairs came to 3.45 and 3.30, the
machine's noise at its edge, hence three). Under a load average far above the two cores
every phase is slow and the test tells little either way. ``TIDEMARK_LATENCY_SRC`` runs it against another
source tree's API and publisher.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import API_KEYS, KEYS, TEST_SECRET, wait_for_api
from tidemark.redis_server import free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

SRC = os.environ.get("TIDEMARK_LATENCY_SRC", str(Path(__file__).resolve().parents[2]))
RATIO, FLOOR = 3.0, 0.003  # p99 moving <= RATIO x max(p99 quiet, FLOOR seconds)
PHASE = 3.5  # seconds of each phase
PAIRS = 3  # of a quiet and a moving phase
WARM = 3.0  # seconds of load before them, not counted
RATE, CLIENTS = 150, 3  # queries a second offered, by that many clients
POST_EVENTS, POST_EVERY = 50_000, 1.0  # events a post, seconds between posts
CONFIG = StreamConfig(max_window=3600.0, value_min=0.0, value_max=1000.0)
QUERIES = ["count?window=600", "sum?window=600", "frequency?window=600&key=k1",
           "quantiles?window=600&q=0.5,0.99", "heavy-hitters?window=600&phi=0.01"]

_PUBLISH = """
import pickle, sys, time
from workers.publish import Publisher
url, path, name = sys.argv[1:]
blobs = pickle.load(open(path, "rb"))
p = Publisher(url)
v = 1
while True:
    v += 1
    p.publish(name, 0, {"version": v, "events": 100000, "late_dropped": 0, "clock": blobs["clock"],
                        "sizes": {}, "failed": None, "failed_events": 0, "updated_at": "t"},
              blobs["blobs"][v % 2], blobs["config"])
    time.sleep(0.25)
"""


_POST = """
import json, os, sys, time
import httpx
import numpy as np
base, key, name, n, every, pause = sys.argv[1:]
rng = np.random.default_rng(2)
bodies = ["\\n".join(json.dumps({"ts": 1e9 + 3600 + rng.uniform(0, 1), "key": f"k{k}", "value": 5.0})
                     for k in rng.integers(0, 100, int(n))).encode() for _ in range(2)]
with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}",
                                                      "content-type": "application/x-ndjson"}) as c:
    i = 0
    while True:
        if os.path.exists(pause):  # paused between posts: none is in flight (say so)
            open(pause + ".ack", "w").close()
            time.sleep(0.01)
            continue
        r = c.post(f"/v1/streams/{name}/events", content=bodies[i % 2])
        assert r.status_code in (202, 429), r.text
        i += 1
        time.sleep(float(every))
"""


def _blobs(path: Path) -> None:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(2):
        n = 100_000
        summary = StreamSummary.create(CONFIG, TEST_SECRET)
        summary.update_table(pa.table({
            "ts": 1e9 + np.sort(rng.uniform(0, 3600, n)),
            "key": pa.array([f"k{k}" for k in rng.zipf(1.3, n) % 3000]),
            "value": np.minimum(rng.lognormal(3, 1, n), 1000.0), "weight": np.ones(n)}))
        out.append(summary.to_bytes())
    path.write_bytes(pickle.dumps({"config": CONFIG.model_dump(), "clock": summary.clock_seconds,
                                   "blobs": out}))


class _Connection:
    """A kept-alive HTTP/1.1 connection on a plain socket: a GET costs the client ~0.1 ms
    of CPU, not httpx's ~1 ms, so the clients do not crowd the API on a 2-core machine."""

    def __init__(self, base: str, key: str):
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = f"HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n"

    def get(self, path: str) -> tuple[int, bytes]:
        self.sock.sendall(f"GET {path} {self.head}".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, body = data.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        while len(body) < length:
            body += self._recv()
        return int(head.split(b" ", 2)[1]), body

    def _recv(self) -> bytes:
        part = self.sock.recv(65536)
        if not part:
            raise ConnectionError("closed")
        return part

    def close(self) -> None:
        self.sock.close()


def _latencies(base: str, name: str, seconds: float) -> list[float]:
    """Latencies of ``RATE`` queries a second from ``CLIENTS`` kept-alive clients for
    ``seconds``, each client on a fixed schedule (open loop), a latency counted from the
    scheduled send: while the API is stalled every query due meanwhile waits, so the
    share of slow answers is the share of time stalled (back-to-back clients would send
    only one query each into a stall, and a p99 would not see it)."""
    latencies: list[float] = []
    period = CLIENTS / RATE

    def client(k: int):
        c = _Connection(base, KEYS["read"])
        try:
            start = time.perf_counter() + k * period / CLIENTS
            for i in range(int(seconds / period)):
                due = start + i * period
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
                status, body = c.get(f"/v1/streams/{name}/{QUERIES[(i + k) % len(QUERIES)]}")
                latencies.append(time.perf_counter() - due)
                assert status == 200, body
        finally:
            c.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


@pytest.fixture
def api_process(redis_url, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "TIDEMARK_API_KEYS": __import__("json").dumps(API_KEYS),
           "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex(), "TIDEMARK_RUN_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis_url,
                             "--port", str(port)], env=env, cwd=SRC,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    wait_for_api(base, proc)
    yield base, env
    proc.terminate()
    proc.wait(30)


def test_p99_while_publishing_and_posting_stays_within_a_ratio_of_the_quiet_p99(api_process, redis_url,
                                                                                 tmp_path):
    base, env = api_process
    name = f"latency-{os.getpid()}-{time.monotonic_ns()}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEYS['admin']}"},
                      timeout=60) as c:
        assert c.put(f"/v1/streams/{name}", json=CONFIG.model_dump(mode="json")).status_code == 201
    _blobs(tmp_path / "blobs.pickle")
    movers = [subprocess.Popen([sys.executable, "-c", _PUBLISH, redis_url, str(tmp_path / "blobs.pickle"), name],
                               env=env)]

    pause = tmp_path / "pause"

    def move(on: bool):
        """Start or stop the publisher (SIGCONT, SIGSTOP) and the poster (between posts, so
        no post is still being taken in when a quiet phase starts)."""
        for mover in movers:
            assert mover.poll() is None, "a publisher or poster stopped"
        movers[0].send_signal(signal.SIGCONT if on else signal.SIGSTOP)
        if on:
            pause.unlink()
            Path(f"{pause}.ack").unlink()
            return
        pause.touch()
        deadline = time.monotonic() + 60
        while not Path(f"{pause}.ack").exists():
            assert time.monotonic() < deadline and movers[1].poll() is None, "the poster did not pause"
            time.sleep(0.01)

    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEYS['read']}"},
                          timeout=30) as c:
            while c.get(f"/v1/streams/{name}/count?window=600").json()["as_of"]["sketch_version"] < 2:
                assert time.monotonic() < deadline, "nothing was published"
                time.sleep(0.1)
            for q in QUERIES:  # the first read of each (the only one that may wait)
                c.get(f"/v1/streams/{name}/{q}")
        movers.append(subprocess.Popen([sys.executable, "-c", _POST, base, KEYS["ingest"], name,
                                        str(POST_EVENTS), str(POST_EVERY), str(pause)], env=env))
        # Not counted: the decoder and ingest processes start in the background, and the
        # API's first seconds load its kernels.
        _latencies(base, name, WARM)
        ratios = []
        for _ in range(PAIRS):
            move(False)
            time.sleep(0.2)
            quiet = float(np.percentile(_latencies(base, name, PHASE), 99))
            move(True)
            moving = float(np.percentile(_latencies(base, name, PHASE), 99))
            ratios.append((moving / max(quiet, FLOOR), moving, quiet))
            print(f"p99 quiet {quiet * 1000:.1f} ms, publishing and posting {moving * 1000:.1f} ms")
    finally:
        for mover in movers:
            mover.kill()
            mover.wait()
    # Every pair must show it: a burst of other work on a shared machine spoils one phase,
    # seldom the moving phase of every pair, while a regression shows in every pair.
    best = min(ratios)
    assert best[0] <= RATIO, (f"p99 {best[1] * 1000:.1f} ms while publishing and posting, "
                              f"{best[2] * 1000:.1f} ms quiet (the closest of {PAIRS} pairs: {ratios})")
