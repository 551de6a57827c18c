"""Dashboard: page-ready time, and the delay from a sketch publish to the number on screen.

Starts a real Redis and the API (uvicorn subprocess), declares ``--streams`` streams, and
publishes summaries the way the worker does (``workers.publish.Publisher``); headless
Chromium (Debian's, via Playwright) loads ``/`` and watches the count tile.

    .venv/bin/python bench/bench_dashboard.py --streams 100
"""

from __future__ import annotations

import argparse
import statistics
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
from playwright.sync_api import sync_playwright

from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher
from workers.state import StreamState

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# An admin key for this run only (contract §9).
KEY = secrets.token_urlsafe(24)
HEADERS = {"Authorization": f"Bearer {KEY}"}


def publish(publisher, name, config, n, version):
    ts = 1e9 + np.arange(float(n))
    table = decode_chunk(encode_chunk(ts, [None] * n, np.full(n, np.nan), np.ones(n)))
    summary = StreamSummary.create(config, 1)
    summary.update_table(table)
    state = StreamState(config.model_dump(), events=n, clock=float(ts.max()), version=version)
    publisher.publish(name, state, summary.to_bytes(), summary.sizes())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--updates", type=int, default=10)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tm-bench-dash-")
    with EmbeddedRedis(f"{tmp}/redis") as redis_server:
        port = free_port()
        api = subprocess.Popen([sys.executable, "-m", "tidemark.cli", "api", "--redis", redis_server.url,
                                "--port", str(port)],
                               env={**os.environ, "TIDEMARK_RUN_DIR": tmp, "TIDEMARK_API_KEYS": json.dumps([{"key": KEY, "scopes": ["admin"]}])})
        base = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    httpx.get(f"{base}/healthz")
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            config = StreamConfig(max_window="1h")
            publisher = Publisher(redis_server.url)
            for s in range(args.streams):
                httpx.put(f"{base}/v1/streams/s{s:03d}", json={"max_window": "1h"}, headers=HEADERS)
                publish(publisher, f"s{s:03d}", config, 100, 1)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(f"{base}/?key={KEY}")  # signs in (cookie), then the page
                page.goto(f"{base}/#stream=s000")
                page.wait_for_function("document.querySelector('#tile-count')?.textContent.includes('100')")
                ready = time.perf_counter() - started
                delays = []
                for i in range(args.updates):
                    n = 200 + i
                    started = time.perf_counter()
                    publish(publisher, "s000", config, n, 2 + i)
                    page.wait_for_function(
                        f"document.querySelector('#tile-count')?.textContent.includes('{n}')", timeout=10_000)
                    delays.append(time.perf_counter() - started)
                browser.close()
            print("| streams | page ready | publish → screen, median | max |")
            print("|---|---|---|---|")
            print(f"| {args.streams} | {ready:.2f} s | {statistics.median(delays):.2f} s | {max(delays):.2f} s |")
        finally:
            api.terminate()
            api.wait(30)


if __name__ == "__main__":
    main()
