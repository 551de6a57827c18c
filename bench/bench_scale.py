"""Scale-out: many declared streams, some active, one worker on ``local[2]``.

For each (declared, active) pair: a real Redis, the API in a subprocess, the Spark job in
this process (its driver), and clients posting ``--rate`` events/s in total, spread evenly
over the active streams, in Arrow requests of up to 500 events (a 429 is retried after its
Retry-After, as ``tidemark ingest`` does). Reports accepted and visible events/s, 429s,
micro-batch duration p50/p95 (Spark's query progress), read tasks and offset-log bytes per
batch (from the checkpoint's offset log), the state rows and bytes the state store wrote per
batch, the driver's RSS (this Python process and its JVM), freshness p50/p95/max (request
accepted -> the first status that counts it, sampled on up to 10 streams) and the bytes per
stream of the published summaries.

    python bench/bench_scale.py [--seconds 40] [--rate 100000] [--compare /work/main] [declared:active ...]

``--compare TREE`` runs each pair on TREE first (``PYTHONPATH=TREE``, its own workers and
API) and then on this tree, in the same run.
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

ROOT = Path(os.environ.get("TIDEMARK_BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from app.store import Store  # noqa: E402
from tidemark.hash_secret import HashSecret  # noqa: E402
from tidemark.redis_server import EmbeddedRedis, free_port  # noqa: E402
from tidemark.wire import keys  # noqa: E402
from _common import run_dir  # noqa: E402
from tidemark.streams import StreamConfig  # noqa: E402
from workers.job import build_spark, start  # noqa: E402

SECRET = HashSecret(b"tidemark-bench-scale-secret")
KEY = "bench-scale-admin-key-0123456789"
RATE = 100_000  # events/s in total, over the active streams
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


def _arrow(ts: np.ndarray, keys: list[str]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"ts": pa.array(ts), "key": pa.array(keys)})
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def offset_log(checkpoint: str) -> tuple[list[int], list[int]]:
    """Per batch: the source offset's bytes and the read tasks it makes (positions that
    moved: partitions in the partitioned log, streams in the per-stream one)."""
    import json

    root = Path(checkpoint, "spark", "offsets")
    files = sorted((f for f in root.glob("[0-9]*")), key=lambda f: int(f.name))
    sizes, tasks, before = [], [], None
    for f in files:
        line = f.read_text().splitlines()[2]
        offset = json.loads(line)
        sizes.append(len(line))
        now = ({i: tuple(p) for i, p in enumerate(offset["log"])} if "log" in offset else offset)
        if before is not None:
            tasks.append(sum(1 for k, v in now.items() if before.get(k) != v))
        before = now
    return sizes, tasks


def run(spark, declared: int, active: int, seconds: float, rate: float) -> dict:
    tmp = run_dir("tm-bench-scale-")
    with EmbeddedRedis(f"{tmp}/redis") as server:
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "api", "--redis", server.url, "--port", str(port)],
            env={**os.environ, "PYTHONPATH": str(ROOT), "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
                 "TIDEMARK_RUN_DIR": tmp, "TIDEMARK_MAX_STREAMS": "100000",
                 "TIDEMARK_API_KEYS": f'[{{"key": "{KEY}", "scopes": ["admin"]}}]'},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        store = Store(server.url, SECRET)
        names = [f"s{i:05d}" for i in range(declared)]
        store.redis.hset(keys.STREAMS, mapping={n: CONFIG.model_dump_json() for n in names})
        while True:
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        checkpoint = f"{tmp}/checkpoint"
        query, driver = start(spark, server.url, checkpoint, "1 second", SECRET)
        rss_before = rss_mb(os.getpid())
        active_names = names[:active]
        sent: dict[str, list[tuple[float, int]]] = {n: [] for n in active_names}
        totals = {n: 0 for n in active_names}
        counts = {"accepted": 0, "refused": 0}
        stop = threading.Event()
        lock = threading.Lock()
        per_stream = rate / active
        size = int(max(1, min(REQUEST, per_stream)))  # events per request
        period = size / per_stream  # seconds between a stream's requests
        keys = [f"k{k}" for k in np.random.default_rng(1).integers(0, 1000, size)]
        t0 = time.time()
        warm = 25.0

        def post(client, name):
            while not stop.is_set():
                now = time.time()
                body = _arrow(now - np.random.default_rng().uniform(0, 5, size), keys)
                r = client.post(f"/v1/streams/{name}/events", content=body,
                                headers={"Content-Type": "application/vnd.apache.arrow.stream"})
                if r.status_code == 202:
                    with lock:
                        totals[name] += r.json()["accepted"]
                        sent[name].append((time.time(), totals[name]))
                        counts["accepted"] += r.json()["accepted"]
                    return
                with lock:
                    counts["refused"] += 1
                time.sleep(float(r.headers.get("Retry-After", 1)))

        def producer(mine):
            with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {KEY}"}) \
                    as client:
                tick = 0
                while not stop.is_set():
                    due = t0 + tick * period
                    time.sleep(max(0.0, due - time.time()))
                    for n in mine:
                        post(client, n)
                    tick += 1

        fresh: list[float] = []

        def watcher():
            sample = active_names[: min(10, active)]
            seen = {n: 0 for n in sample}
            while not stop.is_set():
                for n in sample:
                    events = store.status(n)["events"]
                    now = time.time()
                    with lock:
                        for at, total in sent[n]:
                            if seen[n] < total <= events and at > t0 + warm:
                                fresh.append(now - at)
                    seen[n] = max(seen[n], events)
                time.sleep(0.1)

        clients = min(8, active)
        threads = [threading.Thread(target=producer, args=(active_names[i::clients],))
                   for i in range(clients)] + [threading.Thread(target=watcher)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        accepted_late = counts["accepted"]
        # Steady state: batches that started after the first 25 s (Spark's start-up, the
        # first state store loads) are the ones a running deployment sees.
        progress = [p for p in query.recentProgress if p.get("numInputRows")
                    and _epoch(p["timestamp"]) > t0 + warm]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
        ops = [p["stateOperators"][0] for p in progress if p.get("stateOperators")]
        rows_updated = [o.get("numRowsUpdated", 0) for o in ops]
        written = [o.get("customMetrics", {}).get("rocksdbBytesCopied", 0) for o in ops]
        state_mem = max((o.get("memoryUsedBytes", 0) for o in ops), default=0)
        pid = jvm_pid()
        sizes = [sum(store.status(n)["sketch_bytes"].values()) for n in active_names[:10]]
        offset_bytes, read_tasks = offset_log(checkpoint)
        visible = sum(store.status(n)["events"] for n in active_names)
        out = {
            "declared": declared, "active": active, "batches": len(durations),
            "batch_p50": pct(durations, 50), "batch_p95": pct(durations, 95),
            "read_tasks": statistics.mean(read_tasks[-20:]) if read_tasks else 0,
            "offset_bytes": max(offset_bytes) if offset_bytes else 0,
            "rows_per_batch": statistics.mean(rows_updated) if rows_updated else 0,
            "bytes_written_per_batch": statistics.mean(written) if written else 0,
            "state_memory_mb": state_mem / 2**20,
            "driver_rss_mb": rss_mb(os.getpid()), "driver_rss_growth_mb": rss_mb(os.getpid()) - rss_before,
            "jvm_rss_mb": rss_mb(pid) if pid else float("nan"),
            "fresh_p50": pct(fresh, 50), "fresh_p95": pct(fresh, 95),
            "fresh_max": max(fresh) if fresh else float("nan"),
            "accepted_per_s": accepted_late / seconds, "refused": counts["refused"],
            "visible_per_s": visible / seconds, "offered_per_s": rate,
            "bytes_per_active_stream": statistics.median(sizes) if sizes else 0,
        }
        driver.stop_event.set()
        query.stop()
        api.terminate()
        api.wait(30)
        return out


HEADER = ("| tree | declared | active | offered/s | accepted/s | visible/s | 429s | batch p50 | p95 | "
          "read tasks / batch | offset bytes | state rows / batch | RocksDB bytes / batch | "
          "driver RSS (Python / JVM) | freshness p50 | p95 | max | bytes / stream |")


def row(tree: str, r: dict) -> str:
    return (f"| {tree} | {r['declared']:,} | {r['active']:,} | {r['offered_per_s']:,.0f} | "
            f"{r['accepted_per_s']:,.0f} | {r['visible_per_s']:,.0f} | {r['refused']:,} | "
            f"{r['batch_p50']:.2f} s | {r['batch_p95']:.2f} s | {r['read_tasks']:.1f} | "
            f"{r['offset_bytes']:,} | {r['rows_per_batch']:.0f} | {r['bytes_written_per_batch']:,.0f} | "
            f"{r['driver_rss_mb']:.0f} MB / {r['jvm_rss_mb']:.0f} MB | {r['fresh_p50']:.2f} s | "
            f"{r['fresh_p95']:.2f} s | {r['fresh_max']:.2f} s | {r['bytes_per_active_stream']:,.0f} |")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--rate", type=float, default=RATE)
    ap.add_argument("--compare", help="another tree to run first (e.g. /work/main)")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("pairs", nargs="*")
    args = ap.parse_args()
    pairs = [tuple(map(int, a.split(":"))) for a in args.pairs] or [
        (10, 1), (1000, 100), (10000, 1000)]
    if args.compare:
        print(HEADER)
        print("|---" * (HEADER.count("|") - 1) + "|")
        for declared, active in pairs:
            for tree, label in ((args.compare, Path(args.compare).name), (str(ROOT), args.label)):
                try:
                    subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--rate",
                                    str(args.rate), "--label", label, "--no-header", f"{declared}:{active}"],
                                   env={**os.environ, "PYTHONPATH": tree, "TIDEMARK_BENCH_TREE": tree},
                                   check=False, timeout=4 * args.seconds + 180)
                except subprocess.TimeoutExpired:
                    print(f"| {label} | {declared:,} | {active:,} | (did not finish in time) |", flush=True)
        return
    from tidemark.summary import warm_up

    warm_up()  # as `tidemark worker` does: executors load compiled kernels from the cache
    spark = build_spark("local[2]", 2, "tidemark-bench-scale")
    spark.sparkContext.setLogLevel("ERROR")
    if not args.no_header:
        print(HEADER)
        print("|---" * (HEADER.count("|") - 1) + "|")
    for declared, active in pairs:
        r = run(spark, declared, active, args.seconds, args.rate)
        print(row(args.label, r), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
