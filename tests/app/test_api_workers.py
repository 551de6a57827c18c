"""``tidemark api --workers N``: N processes answer on one port, each correct on its own —
every connection, whichever process takes it, gets the answer of a published version that
says which version it is, and each process moves to a new version by itself; the files all
of them read (API key, hash secret, webhook-secret key) are made once, before they start;
connections are spread over the processes; a process that dies is replaced; and how many
processes there are by default follows the machine (``tidemark_cli.serve``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import API_KEYS, KEYS, wait_for_api
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.hash_secret import HashSecret, load_or_create
from tidemark.redis_server import free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def _summary(n: int, secret: HashSecret) -> StreamSummary:
    ts = T0 + np.arange(float(n))
    summary = StreamSummary.create(StreamConfig(max_window=600), secret)
    summary.update_table(decode_chunk(encode_chunk(ts, [None] * n, np.full(n, np.nan), np.ones(n))))
    return summary


def _children(pid: int) -> list[int]:
    """The API processes the parent forked (their command line is the parent's)."""
    try:
        found = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    out = []
    for c in found:
        try:
            if b"tidemark_cli" in Path(f"/proc/{c}/cmdline").read_bytes():
                out.append(c)
        except OSError:
            continue
    return out


@pytest.fixture
def two_workers(redis_url, tmp_path):
    port = free_port()
    # No hash secret in the environment: the parent makes the checkpoint's, once.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIDEMARK_RUN_DIR": str(tmp_path / "run"),
           "TIDEMARK_CHECKPOINT": str(tmp_path / "checkpoint"), "TIDEMARK_API_KEYS": json.dumps(API_KEYS)}
    env.pop("TIDEMARK_HASH_SECRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis_url, "--port", str(port),
                             "--workers", "2"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_api(base, proc, "the API with two workers", ready=lambda: len(_children(proc.pid)) >= 2)
        yield proc, base, tmp_path
    finally:
        proc.terminate()  # uvicorn's parent stops its workers and waits for them
        assert proc.wait(30) is not None


def _answers(base: str, name: str, connections: int = 24) -> list[dict]:
    out = []
    for _ in range(connections):  # a new connection each: the kernel spreads them over the processes
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEYS['read']}"}) as c:
            for _ in range(2):  # the second one of a connection is the kept answer
                r = c.get(f"/v1/streams/{name}/count", params={"window": "600"})
                assert r.status_code == 200, r.text
                out.append(r.json())
    return out


def test_every_process_answers_each_version_and_says_which(two_workers, redis_url):
    proc, base, tmp = two_workers
    assert len(_children(proc.pid)) == 2
    secret = load_or_create(str(tmp / "checkpoint"))  # the parent made it: read, not made again
    name = f"workers-{os.getpid()}-{time.monotonic_ns()}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEYS['admin']}"}) as c:
        assert c.put(f"/v1/streams/{name}", json={"max_window": 600}).status_code == 201
    publisher = Publisher(redis_url)
    publisher.publish_summary(name, _summary(10, secret), version=1, events=10)
    for body in _answers(base, name):
        assert body["estimate"] == 10 and body["as_of"]["sketch_version"] == 1
    publisher.publish_summary(name, _summary(25, secret), version=2, events=25)
    deadline = time.monotonic() + 20
    while True:
        answers = _answers(base, name)
        for body in answers:  # each answer is its own version's, whichever that is
            assert (body["estimate"], body["as_of"]["sketch_version"]) in {(10, 1), (25, 2)}
        if all(b["as_of"]["sketch_version"] == 2 for b in answers):
            break
        assert time.monotonic() < deadline, "a process never moved to the new version"
        time.sleep(0.2)


def _pids_answering(base: str, connections: int = 16) -> set[int]:
    """The processes holding ``connections`` new connections (each asked once, kept open
    meanwhile), read as the server's side of each connection's port."""
    import socket

    port = int(base.rsplit(":", 1)[1])
    socks = []
    try:
        for _ in range(connections):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert b"200 OK" in s.recv(4096)
            socks.append(s)
        local = {s.getsockname()[1] for s in socks}
        owners = set()
        for pid in _all_pids():
            for fd in Path(f"/proc/{pid}/fd").glob("*"):
                try:
                    link = os.readlink(fd)
                except OSError:
                    continue
                # the server's side of one of ours: its local port is the server's and its
                # peer port one of ours (a peer port alone can be any other process's
                # connection that happens to use the same number, as in one clean run)
                if link.startswith("socket:") and _ports(pid, link[8:-1]) in {(port, p) for p in local}:
                    owners.add(pid)
        return owners
    finally:
        for s in socks:
            s.close()


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _ports(pid: int, inode: str) -> tuple[int, int] | None:
    """The (local, remote) ports of the TCP socket ``inode`` seen from ``pid``."""
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] == inode:
                return int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)
    return None


def test_connections_are_spread_and_a_dead_process_is_replaced(two_workers):
    proc, base, _ = two_workers
    first = _children(proc.pid)
    assert len(first) == 2
    assert _pids_answering(base) == set(first)  # SO_REUSEPORT: both take connections
    os.kill(first[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        now = _children(proc.pid)
        if len(now) == 2 and first[0] not in now:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200 and \
                        _pids_answering(base) == set(now):
                    break
            except httpx.HTTPError:
                pass
        assert time.monotonic() < deadline, "the killed process was not replaced"
        time.sleep(0.2)


def test_the_number_of_processes_follows_the_machine():
    from tidemark_cli.serve import api_processes

    assert [api_processes(None, cores) for cores in (1, 2, 3, 4, 8)] == [1, 2, 2, 3, 7]
    assert api_processes(5, 2) == 5  # a configured number is kept
