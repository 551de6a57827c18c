"""What the API benches share: a real Redis on a free port, the API in a subprocess with a
key of this run, waiting for ``/healthz``, the API's CPU time, py-spy profiles and where
they go, and the summaries the benches publish."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.hash_secret import HashSecret
from tidemark.redis_server import EmbeddedRedis, free_port

__all__ = ["ROOT", "SECRET", "KEY", "HEADERS", "redis_server", "api_env", "start_api", "start_up", "wait_healthy",
           "stop", "cpu_seconds", "cpu_of", "profile", "profile_path", "table_of", "run_label"]

ROOT = Path(__file__).resolve().parents[1]
SECRET = HashSecret(b"tidemark-bench-secret")
KEY = secrets.token_urlsafe(24)  # an admin key for this run only (contract §9)
HEADERS = {"Authorization": f"Bearer {KEY}"}


def run_dir(prefix: str = "tm-bench-") -> str:
    """A fresh directory for one run's Redis, checkpoint and files, removed at the bench's exit."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


@contextlib.contextmanager
def redis_server(prefix: str):
    """A fresh real Redis on a free port, in a directory of its own: ``(server, directory)``."""
    tmp = run_dir(prefix)
    with EmbeddedRedis(f"{tmp}/redis") as server:
        yield server, tmp


def api_env(src: str | Path, run_dir: str, **extra: str) -> dict:
    """The environment of an API run from source tree ``src``: its code first on the path,
    the bench's hash secret and key, its own run directory."""
    return {**os.environ, "PYTHONPATH": str(src), "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
            "TIDEMARK_RUN_DIR": run_dir, "TIDEMARK_API_KEYS": json.dumps([{"key": KEY, "scopes": ["admin"]}]),
            **extra}


def start_api(src: str | Path, redis_url: str, run_dir: str, *args: str, **extra: str) -> tuple[subprocess.Popen, int]:
    """``tidemark api`` from ``src`` on a free port (extra ``args`` after it), answering
    ``/healthz``: ``(process, port)``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis_url,
                             "--port", str(port), *args], env=api_env(src, run_dir, **extra), cwd=str(src),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
    except BaseException:
        stop(proc)
        raise
    return proc, port


def _verbose(src: str | Path) -> list[str]:
    """``--verbose`` where ``up`` has it: the benches read the worker's own lines."""
    main = Path(src, "tidemark_cli", "main.py")
    return ["--verbose"] if main.is_file() and '"--verbose"' in main.read_text() else []


def start_up(src: str | Path, stream: str, prefix: str,
             extra_env: dict[str, str] | None = None) -> tuple[str, int, subprocess.Popen]:
    """``tidemark up`` from ``src`` on a free port, in a fresh run directory, with one
    declared stream (max_window 1h) and its own embedded Redis; its log lines on the
    process's ``stdout`` (text). Returns ``(run directory, port, process)`` at once."""
    tmp = run_dir(prefix)
    config = Path(tmp, "streams.yaml")
    config.write_text(f"streams:\n  {stream}:\n    max_window: 1h\n")
    port = free_port()
    env = api_env(src, tmp, TIDEMARK_CHECKPOINT=f"{tmp}/checkpoint", **(extra_env or {}))
    env.pop("REDIS_URL", None)
    up = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "up", "--config", str(config),
                           "--port", str(port), *_verbose(src)], env=env, cwd=str(src), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return tmp, port, up


def stop_up(up: subprocess.Popen, timeout: float = 90.0) -> None:
    """Stop ``tidemark up`` as Ctrl-C does (its parts stop cleanly), then its whole group if
    it has not within ``timeout`` seconds."""
    os.killpg(up.pid, signal.SIGINT)
    try:
        up.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()


def wait_healthy(base: str, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    """Until ``base`` answers ``/healthz`` (RuntimeError if ``proc`` ends or time runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            raise RuntimeError(f"the API at {base} did not start")
        time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    # imported here: bench_scale runs this module beside older trees' tidemark packages
    from tidemark.supervisor import terminate

    terminate(proc, 30)


def _children(pid: int) -> list[int]:
    found = []  # children of every thread (the API starts its decoder processes from one)
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += Path(task, "children").read_text().split()
        except OSError:
            continue
    return [int(c) for c in found]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its live children so far (Linux): an
    API with several worker processes counts them all."""
    return cpu_of([pid, *_children(pid)])


def cpu_of(pids: list[int]) -> float:
    """User + system CPU seconds of the live processes ``pids`` so far (Linux)."""
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def profile_path(directory: str | None, label: str, run: int) -> str | None:
    """Where the py-spy profile of ``label``'s ``run`` goes (None: no profile)."""
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    return f"{directory}/{label.replace('/', '_').replace(' ', '_')}-{run}.txt"


def profile(pid: int, seconds: float, out: str) -> subprocess.Popen:
    """py-spy, sampling ``pid`` and its worker processes 100 times a second for ``seconds``,
    raw (collapsed) stacks into ``out``."""
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(max(int(seconds), 1)), "-r", "100",
                             "-f", "raw", "-o", out, "--nonblocking", "--subprocesses"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def table_of(ts: np.ndarray, keys=None, values=None):
    """An ingest table of events at ``ts`` (keys and values optional), as the worker reads it."""
    n = ts.size
    return decode_chunk(encode_chunk(ts, [None] * n if keys is None else keys,
                                     np.full(n, np.nan) if values is None else values, np.ones(n)))


def run_label(src: str | Path) -> str:
    return "this tree" if Path(src).resolve() == ROOT else str(src)
