"""Alerts: time from a sketch publish to the last webhook sent, 1,000 rules over 10 streams.

Starts a real Redis, the API (uvicorn, in a subprocess) and a webhook receiver that takes
50 ms to answer each POST (threaded, HTTP/1.1 keep-alive); publishes summaries the way the
worker does (``workers.publish.Publisher.publish_summary``), so every rule crosses its
threshold at once, and measures until the receiver holds every firing message.

Side by side: ``--src DIR`` (repeatable) runs the API from another source tree as well
(e.g. ``git archive <rev> | tar -x -C DIR``), one fresh Redis and API per run, runs
interleaved, so both meet the same machine load. "API CPU" is the CPU time the API process
spent from the publish to the last webhook: on a loaded machine it says more than the
wall-clock figures, which include waiting for a core.

    .venv/bin/python bench/bench_alerts.py [--src /tmp/before] [--runs 2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np

from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.hash_secret import HashSecret
from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

SECRET = HashSecret(b"tidemark-bench-secret")
STREAMS, RULES, ANSWER_SECONDS = 10, 1000, 0.05
HERE = str(Path(__file__).resolve().parents[1])

# An admin key for this run only (contract §9).
KEY = secrets.token_urlsafe(24)
HEADERS = {"Authorization": f"Bearer {KEY}"}


class Receiver:
    """A webhook receiver that takes ``ANSWER_SECONDS`` to answer, one thread per
    connection, connections kept alive (HTTP/1.1)."""

    def __init__(self):
        self.received: list[float] = []
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                outer.connections += 1

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(ANSWER_SECONDS)
                outer.received.append(time.perf_counter())
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the default backlog of 5 would refuse a burst
            daemon_threads = True

        self.server = Server(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _profile(pid: int, seconds: float, out: str) -> subprocess.Popen:
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100",
                             "-f", "raw", "-o", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(src: str, profile: str | None = None) -> dict:
    receiver = Receiver()
    tmp = tempfile.mkdtemp(prefix="tm-bench-alerts-")
    try:
        with EmbeddedRedis(f"{tmp}/redis") as redis_server:
            port = free_port()
            env = {**os.environ, "PYTHONPATH": src, "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
                   "TIDEMARK_RUN_DIR": tmp,
                   "TIDEMARK_API_KEYS": json.dumps([{"key": KEY, "scopes": ["admin"]}]),
                   "TIDEMARK_WEBHOOK_ALLOW_HOSTS": '["127.0.0.1"]'}
            api = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis",
                                    redis_server.url, "--port", str(port)], env=env, cwd=src,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                return _measure(api, port, redis_server.url, receiver, profile)
            finally:
                api.terminate()
                api.wait(30)
    finally:
        receiver.close()


def _measure(api, port: int, redis_url: str, receiver: Receiver, profile: str | None) -> dict:
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=HEADERS)
    while True:
        try:
            c.get("/healthz")
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    config = StreamConfig(max_window="1h")
    for s in range(STREAMS):
        c.put(f"/v1/streams/b{s}", json={"max_window": "1h"})
    for r in range(RULES):  # 10 streams × one window: 10 distinct queries, 50 thresholds
        c.post("/v1/alerts", json={"stream": f"b{r % STREAMS}", "query": "count",
                                   "params": {"window": "600"}, "op": ">", "threshold": 10 + r % 50,
                                   "webhook_url": receiver.url, "secret": "x" * 16, "mode": "certain"})
    publisher = Publisher(redis_url)
    ts = 1e9 + np.arange(1000.0)
    table = decode_chunk(encode_chunk(ts, [None] * ts.size, np.full(ts.size, np.nan), np.ones(ts.size)))
    summaries = []
    for s in range(STREAMS):
        summary = StreamSummary.create(config, SECRET)
        summary.update_table(table)
        summaries.append(summary)
    time.sleep(1.0)  # let the API settle after the rules were created
    spy = _profile(api.pid, 12, profile) if profile else None
    cpu = cpu_seconds(api.pid)
    started = time.perf_counter()
    for s, summary in enumerate(summaries):
        publisher.publish_summary(f"b{s}", summary, version=1, events=1000)
    published = time.perf_counter() - started
    deadline = time.perf_counter() + 60
    while len(receiver.received) < RULES and time.perf_counter() < deadline:
        time.sleep(0.01)
    cpu = cpu_seconds(api.pid) - cpu
    if spy:
        spy.wait()
    lat = [t - started for t in receiver.received]
    return {"webhooks": len(lat), "publish": published, "first": min(lat, default=float("nan")),
            "median": statistics.median(lat) if lat else float("nan"),
            "last": max(lat, default=float("nan")), "connections": receiver.connections, "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", default=[], help="another source tree to run beside this one")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--profile", help="directory for py-spy raw profiles of each run's API")
    args = ap.parse_args()
    sources = [("this tree", HERE)] + [(s, s) for s in args.src]
    print("| API | rules | streams | webhooks | connections | first | median | last | API CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(args.runs):
        for label, src in sources:
            out = None
            if args.profile:
                os.makedirs(args.profile, exist_ok=True)
                out = f"{args.profile}/{label.replace('/', '_').replace(' ', '_')}-{i}.txt"
            r = run(src, out)
            print(f"| {label} | {RULES} | {STREAMS} | {r['webhooks']} | {r['connections']} | "
                  f"{r['first']:.3f} s | {r['median']:.3f} s | {r['last']:.3f} s | {r['cpu']:.2f} s |",
                  flush=True)


if __name__ == "__main__":
    main()
