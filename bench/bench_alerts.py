"""Alerts: time from a sketch publish to the last webhook sent, 1,000 rules over 10 streams.

Starts a real Redis, the API (uvicorn, in a subprocess) and a webhook receiver that takes
50 ms to answer each POST (threaded, HTTP/1.1 keep-alive); publishes summaries the way the
worker does (``workers.publish.Publisher.publish_summary``), so every rule crosses its
threshold at once, and measures until the receiver holds every firing message.

``--workers N`` (repeatable) runs the API with N processes (``tidemark api --workers``),
which share the deliveries through Redis. Side by side: ``--src DIR`` (repeatable) runs the
API from another source tree as well
(e.g. ``git archive <rev> | tar -x -C DIR``), one fresh Redis and API per run, runs
interleaved, so both meet the same machine load. "API CPU" is the CPU time the API process
spent from the publish to the last webhook: on a loaded machine it says more than the
wall-clock figures, which include waiting for a core.

    .venv/bin/python bench/bench_alerts.py [--src /tmp/before] [--runs 2] [--workers 1 --workers 2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np

from _common import HEADERS, ROOT, SECRET, cpu_seconds, profile, profile_path, redis_server, start_api, stop, table_of
from tidemark.redis_server import free_port
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

STREAMS, RULES, ANSWER_SECONDS = 10, 1000, 0.05


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


def run(src: str, workers: int = 1, profile_to: str | None = None) -> dict:
    receiver = Receiver()
    try:
        with redis_server("tm-bench-alerts-") as (redis, tmp):
            extra = ("--workers", str(workers)) if workers > 1 else ()
            api, port = start_api(src, redis.url, tmp, *extra, TIDEMARK_WEBHOOK_ALLOW_HOSTS='["127.0.0.1"]')
            try:
                return _measure(api, port, redis.url, receiver, profile_to)
            finally:
                stop(api)
    finally:
        receiver.close()


def _measure(api, port: int, redis_url: str, receiver: Receiver, profile_to: str | None) -> dict:
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=HEADERS)
    config = StreamConfig(max_window="1h")
    for s in range(STREAMS):
        c.put(f"/v1/streams/b{s}", json={"max_window": "1h"})
    for r in range(RULES):  # 10 streams × one window: 10 distinct queries, 50 thresholds
        c.post("/v1/alerts", json={"stream": f"b{r % STREAMS}", "query": "count",
                                   "params": {"window": "600"}, "op": ">", "threshold": 10 + r % 50,
                                   "webhook_url": receiver.url, "secret": "x" * 16, "mode": "certain"})
    publisher = Publisher(redis_url)
    table = table_of(1e9 + np.arange(1000.0))
    summaries = []
    for s in range(STREAMS):
        summary = StreamSummary.create(config, SECRET)
        summary.update_table(table)
        summaries.append(summary)
    time.sleep(1.0)  # let the API settle after the rules were created
    spy = profile(api.pid, 12, profile_to) if profile_to else None
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
    ap.add_argument("--workers", type=int, action="append", help="API processes (repeatable; default 1)")
    ap.add_argument("--profile", help="directory for py-spy raw profiles of each run's API")
    args = ap.parse_args()
    sources = []
    for label, src in [("this tree", str(ROOT))] + [(s, s) for s in args.src]:
        for w in args.workers or [1]:
            if w == 1 or "--workers" in open(f"{src}/tidemark_cli/main.py").read():
                sources.append((label if w == 1 else f"{label}, {w} workers", src, w))
    print("| API | rules | streams | webhooks | connections | first | median | last | API CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(args.runs):
        for label, src, workers in sources:
            r = run(src, workers, profile_path(args.profile, label, i))
            print(f"| {label} | {RULES} | {STREAMS} | {r['webhooks']} | {r['connections']} | "
                  f"{r['first']:.3f} s | {r['median']:.3f} s | {r['last']:.3f} s | {r['cpu']:.2f} s |",
                  flush=True)


if __name__ == "__main__":
    main()
