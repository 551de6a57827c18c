"""End-to-end throughput and freshness on this machine (local[2]).

Starts a real Redis, the API (uvicorn, in a subprocess) and the worker (Spark local[2],
in a subprocess), then for ``--seconds`` posts NDJSON batches from several client threads
and measures: events/s accepted over HTTP, events/s visible in answers (the stream's
``events``), and freshness (POST accepted -> first publish that reflects it), p50/p95.

    .venv/bin/python bench/bench_pipeline.py --seconds 60 [--format arrow]

``--format arrow`` posts the same events as Arrow IPC streams
(``application/vnd.apache.arrow.stream``, the ingest client's binary format).
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import secrets
import subprocess
import sys
import threading
import time

import httpx
import numpy as np

from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark_cli.ingest_client import _ndjson_as_arrow
from _common import run_dir

T0 = 1_700_000_000.0

# An admin key for this run only (contract §9).
KEY = secrets.token_urlsafe(24)
HEADERS = {"Authorization": f"Bearer {KEY}"}


def _body(rng, start: float, n: int) -> bytes:
    ts = start + rng.uniform(0, 60, n)
    keys = rng.zipf(1.2, n) % 10_000
    lines = [f'{{"ts":{t:.3f},"key":"k{k}","weight":{w:.2f}}}'
             for t, k, w in zip(ts, keys, rng.exponential(2.0, n))]
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--warmup", type=float, default=15, help="seconds left out of freshness (Spark's first batch)")
    ap.add_argument("--rate", type=float, default=0, help="offered events/s (0 = as fast as accepted)")
    ap.add_argument("--format", choices=["ndjson", "arrow"], default="ndjson", help="request body format")
    args = ap.parse_args()
    tmp = run_dir("tm-bench-")
    with EmbeddedRedis(f"{tmp}/redis") as redis_server:
        port = free_port()
        api = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis_server.url,
                                "--port", str(port)],
                               env={**os.environ, "TIDEMARK_RUN_DIR": tmp, "TIDEMARK_API_KEYS": json.dumps([{"key": KEY, "scopes": ["admin"]}])})
        worker = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "worker", "--redis",
                                   redis_server.url, "--checkpoint", f"{tmp}/ckpt"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            run(base, args)
        finally:
            for p in (api, worker):
                p.terminate()
                p.wait(60)


def run(base: str, args) -> None:
    client = httpx.Client(base_url=base, timeout=60, headers=HEADERS)
    deadline = time.monotonic() + 120
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "pipeline did not become ready"
        time.sleep(0.5)
    client.put("/v1/streams/bench", json={"max_window": "1h", "epsilon": 0.05})
    sent_log: list[tuple[float, int]] = []  # (time accepted, cumulative events)
    lock = threading.Lock()
    total = [0]
    stop_at = time.monotonic() + args.seconds

    def post_loop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        bodies = [_body(rng, T0 + i * 60, args.batch) for i in range(8)]
        content_type = "application/x-ndjson"
        if args.format == "arrow":
            bodies = [_ndjson_as_arrow(b) for b in bodies]
            content_type = "application/vnd.apache.arrow.stream"
        with httpx.Client(base_url=base, timeout=60, headers=HEADERS) as c:
            i = 0
            t_start = time.monotonic()
            while time.monotonic() < stop_at:
                if args.rate:  # pace this client to its share of the offered rate
                    due = t_start + i * args.batch * args.clients / args.rate
                    time.sleep(max(0.0, due - time.monotonic()))
                r = c.post("/v1/streams/bench/events", content=bodies[i % len(bodies)],
                           headers={"content-type": content_type})
                i += 1
                if r.status_code == 429:
                    time.sleep(0.2)
                    continue
                with lock:
                    total[0] += r.json()["accepted"]
                    sent_log.append((time.monotonic(), total[0]))

    seen_log: list[tuple[float, int]] = []

    def watch() -> None:
        with httpx.Client(base_url=base, timeout=60, headers=HEADERS) as c:
            while time.monotonic() < stop_at + 60:
                ev = c.get("/v1/streams/bench").json()["status"]["events"]
                seen_log.append((time.monotonic(), ev))
                if time.monotonic() > stop_at and ev >= total[0]:
                    return
                time.sleep(0.05)

    started = time.monotonic()
    threads = [threading.Thread(target=post_loop, args=(s,)) for s in range(args.clients)]
    watcher = threading.Thread(target=watch)
    for t in threads + [watcher]:
        t.start()
    for t in threads:
        t.join()
    accepted_rate = total[0] / (time.monotonic() - started)
    watcher.join()
    visible_at = seen_log[-1][0]
    fresh = []
    j = 0
    for t_sent, cum in sent_log:
        if t_sent - started < args.warmup:
            continue
        while j < len(seen_log) and seen_log[j][1] < cum:
            j += 1
        if j < len(seen_log):
            fresh.append(seen_log[j][0] - t_sent)
    result = {
        "events": total[0],
        "accepted_per_s": round(accepted_rate),
        "visible_per_s": round(total[0] / (visible_at - started)),
        "freshness_p50_s": round(statistics.median(fresh), 3),
        "freshness_p95_s": round(float(np.percentile(fresh, 95)), 3),
    }
    print(json.dumps(result))
    print("| offered/s | events | accepted/s | visible/s | freshness p50 | p95 |")
    print("|---|---|---|---|---|---|")
    offered = f"{args.rate:,.0f}" if args.rate else "max"
    print(f"| {offered} | {result['events']} | {result['accepted_per_s']:,} | {result['visible_per_s']:,} | "
          f"{result['freshness_p50_s']} s | {result['freshness_p95_s']} s |")


if __name__ == "__main__":
    main()
