"""The worker alone: many streams' chunks appended straight into the ingest log (no API, no
HTTP), the Spark job on ``local[2]`` in this process; per micro-batch its duration and group
updates, and the CPU of the JVM and of its Python workers per group update.

``bench_scale.py`` measures the whole service, where the API takes a third of the two
cores; this isolates the worker's own cost, so a change to the group update shows in a
minute. ``--streams`` streams (the typical small stream of issue #22: 1 h window,
ε = δ = 0.05, one of 1,000 string keys per event) each receive a ``--request``-event chunk
every ``request / (rate / streams)`` seconds at its own phase, appended through the API's
own append script (``app.ingest.Ingest.append``, back-pressure caps lifted).

    python bench/bench_worker.py [--streams 1000] [--rate 60000] [--request 500] [--seconds 30]
        [--spark-conf '{"key": "value"}'] [--fill 3600] [--heavy]

``--fill S`` first gives every stream ``S`` seconds of in-order history at its rate (5,000-event
chunks) and waits until it is counted, so the timed batches run with the window filled (the
steady state); ``--heavy`` streams also carry values and a polynomial decay (every part of a
summary). The RocksDB bytes written per batch (``rocksdbTotalBytesWritten``) are reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE.parent))
os.chdir(ROOT)  # Spark's Python workers start with -m: the working directory comes first

from app.store import Store  # noqa: E402
from bench_scale import SECRET, cpu_of, freshness, jvm_pid, visible_of  # noqa: E402
from tidemark.chunks import encode_chunk  # noqa: E402
from tidemark.redis_server import EmbeddedRedis  # noqa: E402
from tidemark.streams import StreamConfig  # noqa: E402
from tidemark.wire import keys  # noqa: E402
from workers.job import build_spark, start  # noqa: E402

CONFIG = StreamConfig(max_window="1h", epsilon=0.05, delta=0.05)
KEYS = [f"k{k}" for k in range(1000)]


HEAVY = StreamConfig(max_window="1h", epsilon=0.05, delta=0.05, value_min=0, value_max=10_000,
                     decays=[{"kind": "polynomial", "alpha": 1.5}])


def run(spark, streams: int, rate: float, size: int, seconds: float, warm: float = 10.0,
        fill: float = 0.0, config: StreamConfig = CONFIG) -> dict:
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="tm-bench-worker-")
    try:
        with EmbeddedRedis(f"{tmp}/redis") as server:
            store = Store(server.url, SECRET, max_pending_chunks=10**9, max_pending_events=10**12,
                          max_wait=1e9)
            names = [f"s{i:05d}" for i in range(streams)]
            store.redis.hset(keys.STREAMS, mapping={n: config.model_dump_json() for n in names})
            store.redis.set(keys.SHARDS_MAX, config.shards)
            query, driver = start(spark, server.url, f"{tmp}/checkpoint", "1 second", SECRET, 2)
            totals = dict.fromkeys(names, 0)

            def post(name: str, ts=None) -> None:
                ts = time.time() + np.sort(rng.random(size)) * 0.01 if ts is None else ts
                n = ts.size
                values = rng.lognormal(6.0, 1.2, n).clip(0, 10_000) if config.value_max else np.full(n, np.nan)
                chunk = encode_chunk(ts, [KEYS[i] for i in rng.integers(0, len(KEYS), n)], values, np.ones(n))
                store.ingest.append(name, chunk, n, 0, float(ts.max()), {"accepted": n})
                totals[name] += n

            post(names[0])  # the first batch starts Spark's Python workers: not measured
            while visible_of(store.redis, names[:1])[names[0]] < size:
                time.sleep(0.2)
            if fill:  # steady state: each stream's window filled first, in order
                per = rate / streams
                start_at, step = time.time() - fill, 5_000 / per  # 5,000-event chunks
                for lo in np.arange(0.0, fill, step):
                    span = min(fill - lo, step)
                    for name in names:
                        n = max(1, int(per * span))
                        post(name, start_at + lo + np.sort(rng.random(n)) * span)
                while any(v < totals[n] for n, v in visible_of(store.redis, names).items()):
                    time.sleep(1.0)
            period = size / (rate / streams)
            sample = names[:: max(1, streams // 40)]
            accepted = {n: [] for n in sample}
            seen = {n: [] for n in sample}
            stop = threading.Event()

            def feed() -> None:
                t0, k = time.time(), 0
                while not stop.is_set():
                    for i, name in enumerate(names):
                        wait = t0 + k * period + (i / streams) * period - time.time()
                        if wait > 0:
                            time.sleep(wait)
                        if stop.is_set():
                            return
                        post(name)
                        if name in accepted:
                            accepted[name].append((time.time(), totals[name]))
                    k += 1

            def watch() -> None:
                while not stop.is_set():
                    counts, now = visible_of(store.redis, sample), time.time()
                    for name, events in counts.items():
                        seen[name].append((now, events))
                    time.sleep(0.1)

            for target in (feed, watch):
                threading.Thread(target=target, daemon=True).start()
            time.sleep(warm)
            jvm = jvm_pid()
            cpu0, jvm0, w0, b0 = cpu_of([jvm]), cpu_of([jvm], alone=True), time.time(), query.lastProgress["batchId"]
            time.sleep(seconds)
            cpu1, jvm1, w1, b1 = cpu_of([jvm]), cpu_of([jvm], alone=True), time.time(), query.lastProgress["batchId"]
            stop.set()
            progress = [p for p in query.recentProgress if b0 < p["batchId"] <= b1]
            durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
            groups = sum(p["stateOperators"][0]["numRowsUpdated"] for p in progress)
            state_bytes = [p["stateOperators"][0].get("customMetrics", {}).get("rocksdbTotalBytesWritten")
                           for p in progress]
            state_bytes = [b for b in state_bytes if b is not None]
            fresh = freshness({n: [(at, total) for at, total in answers if w0 <= at <= w1 - 5]
                               for n, answers in accepted.items()}, seen)
            wall = w1 - w0
            python = (cpu1 - cpu0) - (jvm1 - jvm0)
            driver.stop_event.set()
            query.stop()
            return {"streams": streams, "rate": rate, "request": size, "batches": len(durations),
                    "batch_p50": float(np.median(durations)), "batch_max": max(durations),
                    "groups_per_batch": groups / max(1, len(progress)),
                    "jvm_cores": (jvm1 - jvm0) / wall, "python_cores": python / wall,
                    "jvm_ms_per_group": 1000 * (jvm1 - jvm0) / max(1, groups),
                    "python_ms_per_group": 1000 * python / max(1, groups),
                    "fresh_p50": float(np.percentile(fresh, 50)) if fresh else float("nan"),
                    "fresh_p95": float(np.percentile(fresh, 95)) if fresh else float("nan"),
                    "state_kb_per_batch": float(np.median(state_bytes)) / 1e3 if state_bytes else float("nan"),
                    "load_avg": os.getloadavg()[0]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=60_000, help="events/s in all")
    ap.add_argument("--request", type=int, default=500, help="events per chunk")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--spark-conf", default="{}", help="a JSON object of Spark settings")
    ap.add_argument("--fill", type=float, default=0.0,
                    help="seconds of in-order history each stream gets first (steady state: 3600 fills the window)")
    ap.add_argument("--heavy", action="store_true",
                    help="streams with values and a polynomial decay (every part), not keys alone")
    args = ap.parse_args()
    from tidemark.summary import warm_up

    warm_up()
    spark = build_spark("local[2]", 2, "tidemark-bench-worker", conf=json.loads(args.spark_conf))
    spark.sparkContext.setLogLevel("ERROR")
    r = run(spark, args.streams, args.rate, args.request, args.seconds, fill=args.fill,
            config=HEAVY if args.heavy else CONFIG)
    print("| streams | events/s | events / chunk | batch p50 / max | group updates / batch | "
          "cores: JVM / Python | CPU ms / group update: JVM / Python | freshness p50 / p95 | RocksDB KB written / batch | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {r['streams']:,} | {r['rate']:,.0f} | {r['request']} | {r['batch_p50']:.2f} / {r['batch_max']:.2f} s | "
          f"{r['groups_per_batch']:.0f} | {r['jvm_cores']:.2f} / {r['python_cores']:.2f} | "
          f"{r['jvm_ms_per_group']:.1f} / {r['python_ms_per_group']:.1f} | "
          f"{r['fresh_p50']:.2f} / {r['fresh_p95']:.2f} s | {r['state_kb_per_batch']:.0f} | {r['load_avg']:.1f} |",
          flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
