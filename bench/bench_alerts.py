"""Alerts: time from a sketch publish to the last webhook sent, 1,000 rules over 10 streams.

Starts a real Redis, the API (uvicorn, in a subprocess) and a webhook receiver; publishes
summaries the way the worker does (``workers.publish.Publisher``), so every rule crosses
its threshold at once, and measures until the receiver holds every firing message.

    .venv/bin/python bench/bench_alerts.py
"""

from __future__ import annotations

from tidemark.hash_secret import HashSecret
SECRET = HashSecret(b"tidemark-bench-secret")

import statistics
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np

from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

STREAMS, RULES = 10, 1000

# An admin key for this run only (contract §9).
KEY = secrets.token_urlsafe(24)
HEADERS = {"Authorization": f"Bearer {KEY}"}


def main() -> None:
    received: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            received.append(time.perf_counter())
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    class Receiver(ThreadingHTTPServer):
        request_queue_size = 1024  # the default backlog of 5 would refuse a burst

    receiver = Receiver(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_port}/hook"
    tmp = tempfile.mkdtemp(prefix="tm-bench-alerts-")
    with EmbeddedRedis(f"{tmp}/redis") as redis_server:
        port = free_port()
        api = subprocess.Popen([sys.executable, "-m", "tidemark.cli", "api", "--redis", redis_server.url,
                                "--port", str(port)],
                               env={**os.environ, "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
                                    "TIDEMARK_RUN_DIR": tmp,
                                    "TIDEMARK_API_KEYS": json.dumps([{"key": KEY, "scopes": ["admin"]}]),
                                    "TIDEMARK_WEBHOOK_ALLOW_HOSTS": '["127.0.0.1"]'})
        try:
            base = f"http://127.0.0.1:{port}"
            c = httpx.Client(base_url=base, timeout=30, headers=HEADERS)
            while True:
                try:
                    c.get("/healthz")
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            config = StreamConfig(max_window="1h")
            for s in range(STREAMS):
                c.put(f"/v1/streams/b{s}", json={"max_window": "1h"})
            for r in range(RULES):
                c.post("/v1/alerts", json={"stream": f"b{r % STREAMS}", "query": "count",
                                           "params": {"window": "600"}, "op": ">", "threshold": 10 + r % 50,
                                           "webhook_url": hook, "secret": "x" * 16, "mode": "certain"})
            publisher = Publisher(redis_server.url)
            ts = 1e9 + np.arange(1000.0)
            table = decode_chunk(encode_chunk(ts, [None] * ts.size, np.full(ts.size, np.nan), np.ones(ts.size)))
            started = time.perf_counter()
            for s in range(STREAMS):
                summary = StreamSummary.create(config, SECRET)
                summary.update_table(table)
                publisher.publish_summary(f"b{s}", summary, version=1, events=1000)
            deadline = time.perf_counter() + 60
            while len(received) < RULES and time.perf_counter() < deadline:
                time.sleep(0.01)
            lat = [t - started for t in received]
            print("| rules | streams | webhooks | first | median | last |")
            print("|---|---|---|---|---|---|")
            print(f"| {RULES} | {STREAMS} | {len(received)} | {min(lat):.3f} s | "
                  f"{statistics.median(lat):.3f} s | {max(lat):.3f} s |")
        finally:
            api.terminate()
            api.wait(30)
            receiver.shutdown()


if __name__ == "__main__":
    main()
