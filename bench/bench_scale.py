"""Scale-out: many declared streams, some active, one worker on ``local[2]``.

For each (declared, active) pair: a real Redis, the API in a subprocess, the Spark job in
this process (its driver), and a client posting 1,000 events/s to each active stream in
500-event requests. Reports micro-batch duration p50/p95 (Spark's query progress), the
state rows and bytes the state store wrote per batch, the driver's RSS (this Python
process and its JVM), freshness p95 (request accepted -> first publish that counts it)
and the bytes per stream of the published summaries.

    python bench/bench_scale.py [seconds] [declared:active ...]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import Store  # noqa: E402
from tidemark.hash_secret import HashSecret  # noqa: E402
from tidemark.redis_server import EmbeddedRedis, free_port  # noqa: E402
from _common import run_dir  # noqa: E402
from tidemark.streams import StreamConfig  # noqa: E402
from workers.job import build_spark, start  # noqa: E402

SECRET = HashSecret(b"tidemark-bench-scale-secret")
KEY = "bench-scale-admin-key-0123456789"
RATE = 1000  # events/s per active stream
REQUEST = 500
CONFIG = StreamConfig(max_window="1h", epsilon=0.05, delta=0.05)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def jvm_pid() -> int | None:
    out = subprocess.run(["pgrep", "-P", str(os.getpid()), "java"], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.stdout.strip() else None


def _epoch(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def pct(xs, q):
    return float(np.percentile(xs, q)) if xs else float("nan")


def run(spark, declared: int, active: int, seconds: float) -> dict:
    tmp = run_dir("tm-bench-scale-")
    with EmbeddedRedis(f"{tmp}/redis") as server:
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "api", "--redis", server.url, "--port", str(port)],
            env={**os.environ, "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
                 "TIDEMARK_MAX_PENDING_CHUNKS": "100000", "TIDEMARK_RUN_DIR": tmp,
                 "TIDEMARK_MAX_STREAMS": "100000",
                 "TIDEMARK_API_KEYS": f'[{{"key": "{KEY}", "scopes": ["admin"]}}]'},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        store = Store(server.url, SECRET)
        names = [f"s{i:05d}" for i in range(declared)]
        for n in names:
            store.declare(n, CONFIG)
        while True:
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        query, driver = start(spark, server.url, f"{tmp}/checkpoint", "1 second", SECRET)
        rss_before = rss_mb(os.getpid())
        sent: dict[str, list[tuple[float, int]]] = {n: [] for n in names[:active]}
        totals = {n: 0 for n in names[:active]}
        stop = threading.Event()
        lock = threading.Lock()
        rng = np.random.default_rng(1)
        t0 = time.time()

        def post(client, name):
            ts = t0 + (time.time() - t0) - rng.uniform(0, 5, REQUEST)
            body = "\n".join(f'{{"ts":{t:.3f},"key":"k{k}"}}' for t, k in
                             zip(ts, rng.integers(0, 1000, REQUEST)))
            r = client.post(f"/v1/streams/{name}/events", content=body,
                            headers={"Content-Type": "application/x-ndjson"})
            if r.status_code == 202:
                with lock:
                    totals[name] += r.json()["accepted"]
                    sent[name].append((time.time(), totals[name]))

        def producer():
            with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {KEY}"}) \
                    as client, ThreadPoolExecutor(8) as pool:
                tick = 0
                while not stop.is_set():
                    due = t0 + tick * REQUEST / RATE
                    time.sleep(max(0.0, due - time.time()))
                    list(pool.map(lambda n: post(client, n), list(sent)))
                    tick += 1

        fresh: list[float] = []

        def watcher():
            sample = list(sent)[: min(10, active)]
            seen = {n: 0 for n in sample}
            while not stop.is_set():
                for n in sample:
                    events = store.status(n)["events"]
                    now = time.time()
                    with lock:
                        for at, total in sent[n]:
                            if seen[n] < total <= events and at > t0 + 15:
                                fresh.append(now - at)
                    seen[n] = max(seen[n], events)
                time.sleep(0.1)

        threads = [threading.Thread(target=producer), threading.Thread(target=watcher)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        # Steady state: batches that started after the first 15 s (Spark's start-up, the
        # first state store loads) are the ones a running deployment sees.
        progress = [p for p in query.recentProgress if p.get("numInputRows")
                    and _epoch(p["timestamp"]) > t0 + 15]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
        ops = [p["stateOperators"][0] for p in progress if p.get("stateOperators")]
        rows_updated = [o.get("numRowsUpdated", 0) for o in ops]
        written = [o.get("customMetrics", {}).get("rocksdbBytesCopied", 0) for o in ops]
        state_mem = max((o.get("memoryUsedBytes", 0) for o in ops), default=0)
        pid = jvm_pid()
        sizes = [sum(store.status(n)["sketch_bytes"].values()) for n in list(sent)[:10]]
        out = {
            "declared": declared, "active": active, "batches": len(durations),
            "batch_p50": pct(durations, 50), "batch_p95": pct(durations, 95),
            "rows_per_batch": statistics.mean(rows_updated) if rows_updated else 0,
            "bytes_written_per_batch": statistics.mean(written) if written else 0,
            "state_memory_mb": state_mem / 2**20,
            "driver_rss_mb": rss_mb(os.getpid()), "driver_rss_growth_mb": rss_mb(os.getpid()) - rss_before,
            "jvm_rss_mb": rss_mb(pid) if pid else float("nan"),
            "fresh_p50": pct(fresh, 50), "fresh_p95": pct(fresh, 95),
            "visible_per_s": sum(store.status(n)["events"] for n in sent) / seconds,
            "offered_per_s": active * RATE,
            "bytes_per_active_stream": statistics.median(sizes) if sizes else 0,
        }
        driver.stop_event.set()
        query.stop()
        api.terminate()
        api.wait(30)
        return out


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    pairs = [tuple(map(int, a.split(":"))) for a in sys.argv[2:]] or [
        (10, 1), (100, 10), (1000, 100), (10000, 100)]
    from tidemark.summary import warm_up

    warm_up()  # as `tidemark worker` does: executors load compiled kernels from the cache
    spark = build_spark("local[2]", 4, "tidemark-bench-scale")
    spark.sparkContext.setLogLevel("ERROR")
    print("| declared | active | offered/s | visible/s | batch p50 | p95 | state rows / batch | "
          "RocksDB bytes / batch | driver RSS (Python / JVM) | freshness p50 | p95 | bytes / stream |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for declared, active in pairs:
        r = run(spark, declared, active, seconds)
        print(f"| {declared:,} | {active:,} | {r['offered_per_s']:,} | {r['visible_per_s']:,.0f} | "
              f"{r['batch_p50']:.2f} s | {r['batch_p95']:.2f} s | {r['rows_per_batch']:.0f} | "
              f"{r['bytes_written_per_batch']:,.0f} | {r['driver_rss_mb']:.0f} MB / "
              f"{r['jvm_rss_mb']:.0f} MB | {r['fresh_p50']:.2f} s | {r['fresh_p95']:.2f} s | "
              f"{r['bytes_per_active_stream']:,.0f} |", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
