"""An API process's helper processes (ingest and decoder pools) leave when it is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import API_KEYS, KEYS, TEST_SECRET
from tidemark.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


def test_a_helper_process_exits_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", """
import multiprocessing, os, sys, time
from app.child_process import exit_with_parent
def child(parent):
    exit_with_parent(parent, every=0.1)
    time.sleep(600)
if __name__ == "__main__":
    p = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(),))
    p.start()
    print(p.pid, flush=True)
    time.sleep(600)
"""], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive({child})
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    assert not _wait_gone({child}, 5.0), "the child outlived its killed parent"


def test_the_api_leaves_no_ingest_process_behind_when_killed(redis_url, tmp_path):
    # Killed at once, while its ingest process may still be starting (which then must not
    # take init for its parent).
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIDEMARK_API_KEYS": json.dumps(API_KEYS),
           "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex(), "TIDEMARK_RUN_DIR": str(tmp_path),
           "TIDEMARK_INGEST_PROCESSES": "1"}
    api = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis_url,
                            "--port", str(port)], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        helpers: set[int] = set()
        while time.monotonic() < deadline:  # the ingest pool starts beside the app
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    helpers = _children(api.pid) - {api.pid}
                    if helpers:
                        break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert helpers, "the API started no helper process"
        headers = {"Authorization": f"Bearer {KEYS['admin']}"}
        name = f"children-{os.getpid()}"
        assert httpx.put(f"{base}/v1/streams/{name}", json={"max_window": "1h"},
                         headers=headers).status_code in (200, 201)
        r = httpx.post(f"{base}/v1/streams/{name}/events", content=b'{"ts": 1}\n',
                       headers={**headers, "Content-Type": "application/x-ndjson"})
        assert r.status_code == 202, r.text
    finally:
        api.send_signal(signal.SIGKILL)
        api.wait(10)
    assert not _wait_gone(helpers), "helper processes outlived the killed API"
