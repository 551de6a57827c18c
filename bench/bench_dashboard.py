"""Dashboard: page-ready time (cold and warm), and the delay from a publish to the screen.

Starts a real Redis and two APIs on it (uvicorn subprocesses): "after" serves this tree's
dashboard; "before" serves the dashboard of ``--before`` (a git revision: one script,
the full plotly.js of the ``plotly`` package, no compression, as it was), taken with
``git archive`` and put first on the API's ``sys.path``. Both are fed the same summaries,
published the way the worker does (``workers.publish.Publisher``). Headless Chromium
(Debian's, via Playwright) loads ``/`` and times, from navigation:

* ready — the count tile shows the count of the published version (the page answers);
* charts — the count chart is drawn (plotly.js loaded, the chart created);
* history — the count chart holds the answers across max_window (the "full line").

Cold is a fresh browser context (empty cache), warm a second load in the same context.

    .venv/bin/python bench/bench_dashboard.py --streams 100 --runs 5
"""

from __future__ import annotations


import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import numpy as np
from playwright.sync_api import sync_playwright

from _common import HEADERS, KEY, ROOT, SECRET, api_env, redis_server, run_dir, stop, table_of, wait_healthy
from tidemark.redis_server import free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BEFORE = "93b49dc"  # the last revision with the one-script dashboard and the full plotly.js
EVENTS = 3000       # one a second: the history has something to draw across the hour


def publish(publisher, name, config, n, version):
    summary = StreamSummary.create(config, SECRET)
    summary.update_table(table_of(1e9 + np.arange(float(n))))
    publisher.publish_summary(name, summary, version=version, events=n)


def old_frontend(rev: str) -> Path:
    """``frontend/`` of revision ``rev`` in a directory of its own."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "frontend"], check=True,
                         capture_output=True).stdout
    where = Path(run_dir("tm-bench-dash-before-"))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(where, filter="data")
    return where


# The API under uvicorn; "plain" leaves compression out (the "before" side, as it was).
LAUNCH = """
import sys, uvicorn
if sys.argv[3] == 'plain':
    import starlette.middleware.gzip as gzip_middleware
    class NoGzip:
        def __new__(cls, app, **kwargs):
            return app
    gzip_middleware.GZipMiddleware = NoGzip
from app.main import create_app
from tidemark.settings import Settings

app = create_app(Settings(redis_url=sys.argv[1]), sys.argv[1])
uvicorn.run(app, host='127.0.0.1', port=int(sys.argv[2]), log_level='warning')
"""


def start_api(redis_url: str, cwd: Path, mode: str) -> tuple[subprocess.Popen, str]:
    """The API; ``python -c`` puts ``cwd`` first on sys.path, so its ``frontend`` wins."""
    port = free_port()
    env = api_env(os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), run_dir())
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, redis_url, str(port), mode], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    return proc, base


MILESTONES = {
    "ready": "document.querySelector('#tile-count .tile-meta')?.textContent.endsWith(' v{version}')",
    "charts": "(document.getElementById('count-chart').data || []).length === 3",
    "history": "window.tidemark?.state.backfill === 'done'",
}


def load(page, url: str, version: int) -> dict[str, float]:
    """Navigate and time the milestones, in seconds from the navigation's start. Each is
    stamped in the page, checked at every animation frame (when it would be painted), so
    the time the test harness takes to hear of it does not count."""
    page.goto(url, wait_until="commit")
    marks = {}
    for name, condition in MILESTONES.items():
        marks[name] = page.wait_for_function(
            f"() => (window.__{name} ??= ({condition.format(version=version)}) ? performance.now() : undefined)",
            timeout=60_000, polling="raf").json_value() / 1000
    return marks


def page_ready(browser, base: str, runs: int, version: int, window: str) -> dict[str, dict[str, list[float]]]:
    out = {"cold": {}, "warm": {}}
    for _ in range(runs):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(f"{base}/?key={KEY}")  # signs in (the cookie); the page is loaded again below
        for kind in ("cold", "warm"):
            for k, v in load(page, f"{base}/#stream=s000&window={window}", version).items():
                out[kind].setdefault(k, []).append(v)
            page.goto("about:blank")
        context.close()
    return out


def transfer(base: str) -> tuple[int, int]:
    """Bytes of the page and of every script and stylesheet it names: on the wire, unpacked."""
    import re

    wire = raw = 0
    with httpx.Client(base_url=base, headers={"Accept-Encoding": "gzip"}) as c:
        page = c.get("/")
        for url in ["/", *re.findall(r'(?:src|href)="(/static/[^"]+)"', page.text)]:
            with c.stream("GET", url) as r:
                raw += len(r.read())
                wire += r.num_bytes_downloaded
    return wire, raw


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--window", default="10m", help="the page's window (shorter than max_window 1h: a history to draw)")
    ap.add_argument("--before", default=BEFORE, help="git revision of the 'before' dashboard ('' to skip)")
    ap.add_argument("--before-gzip", action="store_true", help="serve 'before' compressed too (a revision "
                    "that had compression)")
    args = ap.parse_args()
    with redis_server("tm-bench-dash-") as (redis, _):
        servers = {}
        if args.before:
            servers["before"] = start_api(redis.url, old_frontend(args.before), "gzip" if args.before_gzip else "plain")
        servers["after"] = start_api(redis.url, ROOT, "gzip")
        try:
            base = servers["after"][1]
            config = StreamConfig(max_window="1h")
            publisher = Publisher(redis.url)
            for s in range(args.streams):
                httpx.put(f"{base}/v1/streams/s{s:03d}", json={"max_window": "1h"}, headers=HEADERS)
                publish(publisher, f"s{s:03d}", config, EVENTS, 1)
            results = {}
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                # Interleaved, so both sides see the same machine load.
                for _ in range(args.runs):
                    for side in servers:
                        got = page_ready(browser, servers[side][1], 1, 1, args.window)
                        for kind, marks in got.items():
                            for k, v in marks.items():
                                results.setdefault(side, {}).setdefault(kind, {}).setdefault(k, []).extend(v)
                page = browser.new_page()
                page.goto(f"{base}/?key={KEY}")
                load(page, f"{base}/#stream=s000&window={args.window}", 1)
                delays = []
                for i in range(args.updates):
                    started = time.perf_counter()
                    publish(publisher, "s000", config, EVENTS + 1 + i, 2 + i)
                    page.wait_for_function(
                        f"document.querySelector('#tile-count .tile-meta')?.textContent.endsWith(' v{2 + i}')",
                        timeout=10_000)
                    delays.append(time.perf_counter() - started)
                browser.close()
            med = statistics.median
            print(f"{args.streams} streams, median of {args.runs} loads each (seconds from navigation):\n")
            print("| dashboard | bytes on the wire (unpacked) | cold: ready / charts / history | warm: ready / charts / history |")
            print("|---|---|---|---|")
            for side in servers:
                wire, raw = transfer(servers[side][1])
                r = results[side]
                cells = [" / ".join(f"{med(r[kind][k]):.2f}" for k in ("ready", "charts", "history"))
                         for kind in ("cold", "warm")]
                print(f"| {side} | {wire / 1e6:.2f} MB ({raw / 1e6:.2f} MB) | {cells[0]} | {cells[1]} |")
            print(f"\npublish → number on screen: median {med(delays):.2f} s, max {max(delays):.2f} s")
        finally:
            for proc, _ in servers.values():
                stop(proc)


if __name__ == "__main__":
    main()
