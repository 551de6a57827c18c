"""Scale-out: many declared streams, some active, one worker on ``local[2]``.

For each declared:active pair: a real Redis, the API in a subprocess, the Spark job in
this process (its driver), and ``--loaders`` load-generator processes (``bench/_load.py``:
asyncio, kept-alive HTTP/1.1 connections, many requests in flight, pre-built Arrow bodies
whose ``ts`` column is patched per request) offering ``--rate`` events/s in total, spread
evenly over the active streams, each stream paced open-loop: one request of ``--request``
events every ``request / (rate / active)`` seconds at its own phase, a ``429`` sent again
after its ``Retry-After``.

Figures are of the steady part (after ``--warm`` seconds): accepted and visible events/s,
429s, freshness p50/p95/max (a 202's answer -> the first published status of its stream
that counts it, every 202 of up to 50 sampled streams), how many of those took more than
10 s (the 202 promise, TIDEMARK_READY_MAX_WAIT), how long after the load everything
accepted was counted ("drained", exactly once: the published total equals the accepted
total), micro-batch duration p50/p95 (Spark's progress), read tasks and offset-log bytes
per batch, state rows and RocksDB bytes per batch, the driver's RSS, the cores each part
used (load generator, API, Redis, Spark = the JVM with its Python workers, and the
driver's Python), the answer latency p95 and the load average during the run.

    python bench/bench_scale.py [--seconds 60] [--rate 100000] [--request N] [--loaders 2]
        [--trigger "1 second"] [--state-partitions 2] [--log-partitions 2] [--api-workers 1]
        [--compare /work/main] [declared:active ...]
    python bench/bench_scale.py --sink --rate 150000 1000:1000   # the generator's own ceiling

``--compare TREE`` runs each pair on TREE first (``PYTHONPATH=TREE``, its own workers and
API) and then on this tree, in the same run, with the same options.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve()  # before the chdir below
ROOT = Path(os.environ.get("TIDEMARK_BENCH_TREE") or HERE.parents[1])
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE.parent))
# Spark's Python workers and the API start with ``-m``, which puts the working directory
# first on their path: run from the tree measured, and name it first, or a comparison of
# two trees measures whichever the shell stood in.
os.chdir(ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)

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


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (children of every thread)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in Path(task, "children").read_text().split()]
            except OSError:
                continue
    return out


def cpu_of(pids: list[int], alone: bool = False) -> float:
    """CPU seconds (user + system) used so far by ``pids`` and their descendants (``alone``:
    not their descendants)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for root in pids:
        for p in ([root] if alone else _tree(root)):
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def start_loaders(port: int, names: list[str], rate: float, size: int, t0: float, seconds: float,
                  loaders: int, conns: int, sample: list[str]) -> list[subprocess.Popen]:
    """``loaders`` processes of ``bench/_load.py`` sharing ``names`` (every stream offered
    ``rate / len(names)`` events/s in requests of ``size`` events, at phases spread evenly
    over a period), answering ``port``."""
    import json

    per_stream = rate / len(names)
    period = size / per_stream
    loaders = max(1, min(loaders, len(names)))  # a loader without a stream has nothing to do
    procs = []
    for i in range(loaders):
        mine = names[i::loaders]
        phases = [((i + loaders * j) / len(names)) * period for j in range(len(mine))]
        conf = {"host": "127.0.0.1", "port": port, "key": KEY, "streams": mine, "phases": phases,
                "size": size, "period": period, "t0": t0, "seconds": seconds, "conns": conns,
                "sample": [n for n in sample if n in set(mine)], "seed": i}
        procs.append(subprocess.Popen([sys.executable, str(HERE.with_name("_load.py")),
                                       json.dumps(conf)], stdout=subprocess.PIPE, text=True))
    return procs


def gather(procs: list[subprocess.Popen]) -> dict:
    """The loaders' results added up (accepts of the sampled streams kept per stream)."""
    import json

    total: dict = {"requests": 0, "offered_events": 0, "held_back": 0, "accepted": 0, "refused": 0, "errors": 0,
                   "unsent": 0, "cpu_seconds": 0.0, "accepts": {}, "other": {}, "retry_after": {}, "reasons": {},
                   "accepted_by_second": None, "late_send_p95": 0.0, "latency_p50": 0.0,
                   "latency_p95": 0.0}
    for p in procs:
        out = json.loads(p.communicate()[0])
        for k in ("requests", "offered_events", "held_back", "accepted", "refused", "errors", "unsent",
                  "cpu_seconds"):
            total[k] += out[k]
        for k in ("late_send_p95", "latency_p50", "latency_p95"):
            total[k] = max(total[k], out[k])  # the worst loader's
        total["accepts"].update(out["accepts"])
        for k in ("other", "retry_after", "reasons"):
            for code, n in out.get(k, {}).items():
                total[k][code] = total[k].get(code, 0) + n
        by = np.array(out["accepted_by_second"])
        total["accepted_by_second"] = by if total["accepted_by_second"] is None else total["accepted_by_second"] + by
    return total


def visible_of(r, names: list[str]) -> dict[str, int]:
    """Events each stream's published shards count now (one pipelined read)."""
    import json

    with r.pipeline(transaction=False) as p:
        for n in names:
            p.hvals(keys.shard_status(n))
        raw = p.execute()
    return {n: sum(json.loads(v).get("events", 0) for v in vals) for n, vals in zip(names, raw)}


def freshness(accepts: dict, seen: dict) -> list[float]:
    """Per sampled 202: seconds from its answer until the stream's published count first
    covered it (``seen``: per stream, the watcher's ``(time, events)`` polls, in order);
    a 202 never covered counts from its answer to the last poll (a lower bound)."""
    out = []
    for name, acc in accepts.items():
        polls = seen.get(name, [])
        times = np.array([t for t, _ in polls])
        events = np.array([e for _, e in polls])
        # the running maximum: a count never goes back
        events = np.maximum.accumulate(events) if len(events) else events
        for at, total in acc:
            after = np.nonzero((times >= at) & (events >= total))[0]
            out.append(times[after[0]] - at if len(after) else (times[-1] - at if len(times) else float("nan")))
    return out


def sink_run(rate: float, active: int, size: int, seconds: float, loaders: int, conns: int) -> dict:
    """The load generator against a trivial HTTP sink: what it can offer, at what CPU."""
    port = free_port()
    sink = subprocess.Popen([sys.executable, str(HERE.with_name("_load.py")), "--sink",
                             str(port), str(size)])
    try:
        deadline = time.time() + 10
        while True:
            try:
                import socket

                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert time.time() < deadline, "the sink did not start"
                time.sleep(0.05)
        names = [f"s{i:05d}" for i in range(active)]
        t0 = time.time() + 1.0
        cpu0 = cpu_of([sink.pid])
        procs = start_loaders(port, names, rate, size, t0, seconds, loaders, conns, [])
        out = gather(procs)
        sink_cpu = cpu_of([sink.pid]) - cpu0
    finally:
        sink.terminate()
        sink.wait()
    return {"declared": active, "active": active, "size": size, "offered_per_s": rate,
            "requests_per_s": out["requests"] / seconds, "accepted_per_s": out["accepted"] / seconds,
            "loader_cores": out["cpu_seconds"] / seconds, "sink_cores": sink_cpu / seconds,
            "late_send_p95": out["late_send_p95"], "latency_p95": out["latency_p95"],
            "errors": out["errors"], "unsent": out["unsent"]}


def run(spark, declared: int, active: int, seconds: float, rate: float, size: int, loaders: int,
        conns: int, warm: float, trigger: str, log_partitions: int, api_workers: int) -> dict:
    tmp = run_dir("tm-bench-scale-")
    with EmbeddedRedis(f"{tmp}/redis") as server:
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "api", "--redis", server.url, "--port", str(port)], cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT), "TIDEMARK_HASH_SECRET": SECRET.secret.hex(),
                 "TIDEMARK_RUN_DIR": tmp, "TIDEMARK_MAX_STREAMS": "100000",
                 "TIDEMARK_API_WORKERS": str(api_workers),
                 "TIDEMARK_LOG_PARTITIONS": str(log_partitions),
                 "TIDEMARK_API_KEYS": f'[{{"key": "{KEY}", "scopes": ["admin"]}}]'},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        store = Store(server.url, SECRET)
        names = [f"s{i:05d}" for i in range(declared)]
        store.redis.hset(keys.STREAMS, mapping={n: CONFIG.model_dump_json() for n in names})
        store.redis.set(keys.SHARDS_MAX, CONFIG.shards)  # as the declare script keeps it
        while True:
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        checkpoint = f"{tmp}/checkpoint"
        query, driver = start(spark, server.url, checkpoint, trigger, SECRET, log_partitions)
        # The load starts once the worker has run a batch (a deployment's steady state, not
        # Spark's start, which back-pressure cannot judge before the worker's first progress).
        warmup = "warm-up"
        store.redis.hset(keys.STREAMS, warmup, CONFIG.model_dump_json())
        httpx.post(f"{base}/v1/streams/{warmup}/events", json=[{"ts": time.time()}],
                   headers={"Authorization": f"Bearer {KEY}"}).raise_for_status()
        deadline = time.time() + 300
        while visible_of(store.redis, [warmup])[warmup] < 1 and time.time() < deadline:
            time.sleep(0.2)
        rss_before = rss_mb(os.getpid())
        active_names = names[:active]
        sample = active_names[:: max(1, active // 50)][:50]
        t0 = time.time() + 1.0
        procs = start_loaders(port, active_names, rate, size, t0, seconds, loaders, conns, sample)

        seen: dict[str, list[tuple[float, int]]] = {n: [] for n in sample}
        stop = threading.Event()

        def watcher():
            while not stop.is_set():
                counts = visible_of(store.redis, sample)
                now = time.time()
                for n, e in counts.items():
                    seen[n].append((now, e))
                time.sleep(0.1)

        watch = threading.Thread(target=watcher, daemon=True)
        watch.start()
        # Steady state: from ``warm`` seconds after the start (Spark's first batches, the
        # first state-store loads) to the end of the load.
        time.sleep(max(0.0, t0 + warm - time.time()))
        pids = {"loaders": [p.pid for p in procs], "api": [api.pid], "redis": [server.process.pid],
                "spark": [jvm_pid() or os.getpid()], "driver": []}
        cpu0 = {k: cpu_of(v) for k, v in pids.items()}
        jvm0 = cpu_of(pids["spark"], alone=True)
        driver_cpu0 = time.process_time()
        visible0, at0 = sum(visible_of(store.redis, active_names).values()), time.time()
        load0 = os.getloadavg()[0]
        lags = []  # what back-pressure judged from, every 2 s (GET /readyz)
        while time.time() < t0 + seconds:
            try:
                lags.append(httpx.get(base + "/readyz", timeout=5).json().get("lag"))
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(min(2.0, max(0.0, t0 + seconds - time.time())))
        steady = time.time() - (t0 + warm)
        cores = {k: (cpu_of(v) - cpu0[k]) / steady for k, v in pids.items()}
        cores["jvm"] = (cpu_of(pids["spark"], alone=True) - jvm0) / steady  # of "spark": the JVM alone
        cores["driver"] = (time.process_time() - driver_cpu0) / steady  # this process: Spark's driver (Python)
        visible1, at1 = sum(visible_of(store.redis, active_names).values()), time.time()
        load1 = os.getloadavg()[0]
        out_load = gather(procs)
        # Drained: every accepted event counted (exactly once), how long after the load.
        load_end, drained = time.time(), float("nan")
        while time.time() < load_end + 60:
            if sum(visible_of(store.redis, active_names).values()) >= out_load["accepted"]:
                drained = time.time() - (t0 + seconds)
                break
            time.sleep(0.2)
        visible_final = sum(visible_of(store.redis, active_names).values())
        time.sleep(0.5)
        stop.set()
        watch.join()
        fresh = freshness({n: [(a, t) for a, t in acc if a > t0 + warm]
                           for n, acc in out_load["accepts"].items()}, seen)
        by = out_load["accepted_by_second"]
        progress = [p for p in query.recentProgress if p.get("numInputRows")
                    and _epoch(p["timestamp"]) > t0 + warm]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
        ops = [p["stateOperators"][0] for p in progress if p.get("stateOperators")]
        rows_updated = [o.get("numRowsUpdated", 0) for o in ops]
        written = [o.get("customMetrics", {}).get("rocksdbBytesCopied", 0) for o in ops]
        state_mem = max((o.get("memoryUsedBytes", 0) for o in ops), default=0)
        phases = {}
        for p in progress:
            for k, v in p["durationMs"].items():
                phases.setdefault(k, []).append(v / 1000)
        pid = jvm_pid()
        sizes = [sum(store.reads.status(n)["sketch_bytes"].values()) for n in active_names[:10]]
        offset_bytes, read_tasks = offset_log(checkpoint)
        out = {
            "declared": declared, "active": active, "size": size, "batches": len(durations),
            "requests_per_s": rate / size, "batch_p50": pct(durations, 50), "batch_p95": pct(durations, 95),
            "phases_p50": {k: pct(v, 50) for k, v in phases.items()},
            "read_tasks": statistics.mean(read_tasks[-20:]) if read_tasks else 0,
            "offset_bytes": max(offset_bytes) if offset_bytes else 0,
            "rows_per_batch": statistics.mean(rows_updated) if rows_updated else 0,
            "bytes_written_per_batch": statistics.mean(written) if written else 0,
            "state_memory_mb": state_mem / 2**20,
            "driver_rss_mb": rss_mb(os.getpid()), "driver_rss_growth_mb": rss_mb(os.getpid()) - rss_before,
            "jvm_rss_mb": rss_mb(pid) if pid else float("nan"),
            "fresh_n": len(fresh), "fresh_p50": pct(fresh, 50), "fresh_p95": pct(fresh, 95),
            "fresh_max": max(fresh) if fresh else float("nan"),
            "fresh_over_10s": sum(1 for f in fresh if f > 10.0),
            "accepted_per_s": float(by[int(warm) + 1:int(seconds)].mean()) if seconds > warm + 2 else out_load["accepted"] / seconds,
            "accepted_total": out_load["accepted"], "refused": out_load["refused"],
            "retry_after": out_load["retry_after"], "reasons": out_load.get("reasons", {}), "lags": lags, "other": out_load["other"], "errors": out_load["errors"],
            "visible_per_s": (visible1 - visible0) / max(1e-9, at1 - at0),
            "visible_total": visible_final, "drained_s": drained,
            "offered_per_s": rate, "held_back_per_s": out_load["held_back"] / seconds,
            "late_send_p95": out_load["late_send_p95"], "latency_p50": out_load["latency_p50"],
            "latency_p95": out_load["latency_p95"], "cores": cores,
            "load_avg": (load0 + load1) / 2,
            # per-unit CPU, for the capacity model: the API's per answered request, Spark's
            # (JVM and its Python workers) per chunk counted
            "api_ms_per_request": 1000 * cores["api"] / max(
                1e-9, (out_load["accepted"] / size + out_load["refused"]) / seconds),
            "spark_ms_per_chunk": 1000 * cores["spark"] / max(1e-9, (visible1 - visible0) / size / max(1e-9, at1 - at0)),
            "bytes_per_active_stream": statistics.median(sizes) if sizes else 0,
        }
        driver.stop_event.set()
        query.stop()
        api.terminate()
        api.wait(30)
        return out


HEADER = ("| tree | declared | active | events / request | requests/s | offered/s | accepted/s | "
          "visible/s | held back/s | 429s | freshness p50 | p95 | max | > 10 s | drained | batch p50 | p95 | "
          "read tasks / batch | offset bytes | state rows / batch | RocksDB bytes / batch | "
          "driver RSS (Python / JVM) | cores: load gen / API / Redis / Spark (of it JVM) / driver | "
          "API CPU ms / request | Spark CPU ms / chunk | answer p95 | load avg |")


def row(tree: str, r: dict) -> str:
    c = r["cores"]
    return (f"| {tree} | {r['declared']:,} | {r['active']:,} | {r['size']:,} | {r['requests_per_s']:,.0f} | "
            f"{r['offered_per_s']:,.0f} | {r['accepted_per_s']:,.0f} | {r['visible_per_s']:,.0f} | "
            f"{r['held_back_per_s']:,.0f} | {r['refused']:,} | {r['fresh_p50']:.2f} s | {r['fresh_p95']:.2f} s | {r['fresh_max']:.2f} s | "
            f"{r['fresh_over_10s']} of {r['fresh_n']} | {r['drained_s']:.1f} s | "
            f"{r['batch_p50']:.2f} s | {r['batch_p95']:.2f} s | {r['read_tasks']:.1f} | "
            f"{r['offset_bytes']:,} | {r['rows_per_batch']:.0f} | {r['bytes_written_per_batch']:,.0f} | "
            f"{r['driver_rss_mb']:.0f} MB / {r['jvm_rss_mb']:.0f} MB | "
            f"{c['loaders']:.2f} / {c['api']:.2f} / {c['redis']:.2f} / {c['spark']:.2f} ({c['jvm']:.2f}) / "
            f"{c['driver']:.2f} | "
            f"{r['api_ms_per_request']:.2f} | {r['spark_ms_per_chunk']:.1f} | "
            f"{r['latency_p95']:.3f} s | {r['load_avg']:.1f} |")


SINK_HEADER = ("| load generator vs trivial sink | streams | events / request | offered/s | requests/s sent | "
               "events/s answered | load gen cores | sink cores | send lateness p95 | answer p95 | errors |")


def sink_row(r: dict) -> str:
    return (f"| sink | {r['active']:,} | {r['size']:,} | {r['offered_per_s']:,.0f} | {r['requests_per_s']:,.0f} | "
            f"{r['accepted_per_s']:,.0f} | {r['loader_cores']:.2f} | {r['sink_cores']:.2f} | "
            f"{r['late_send_p95']:.3f} s | {r['latency_p95']:.3f} s | {r['errors']} |")


def request_size(rate: float, active: int, wanted: int | None) -> int:
    """Events per request: ``wanted``, else a stream's events of one second (at most 500)."""
    return int(wanted or max(1, min(REQUEST, rate / active)))


def main() -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60, help="load duration (default 60)")
    ap.add_argument("--warm", type=float, default=10,
                    help="seconds of the load left out of the steady figures (the load starts after the worker's first batch)")
    ap.add_argument("--rate", type=float, default=RATE, help="events/s offered in all")
    ap.add_argument("--request", type=int, default=None,
                    help="events per request (default: one second of a stream's events, at most "
                         "500; larger means fewer, bigger requests, as `tidemark ingest` batches)")
    ap.add_argument("--loaders", type=int, default=2, help="load-generator processes")
    ap.add_argument("--conns", type=int, default=32, help="kept-alive connections per loader")
    ap.add_argument("--trigger", default="1 second", help="the worker's trigger")
    ap.add_argument("--state-partitions", type=int, default=2, help="Spark state (shuffle) partitions")
    ap.add_argument("--log-partitions", type=int, default=2, help="TIDEMARK_LOG_PARTITIONS")
    ap.add_argument("--api-workers", type=int, default=1, help="TIDEMARK_API_WORKERS")
    ap.add_argument("--sink", action="store_true",
                    help="measure the load generator alone against a trivial HTTP sink")
    ap.add_argument("--json", help="append every result as a JSON line to this file")
    ap.add_argument("--compare", help="another tree to run first (e.g. /work/main)")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--no-header", action="store_true")
    ap.add_argument("pairs", nargs="*", help="declared:active pairs (default 10:1 1000:100 10000:1000)")
    args = ap.parse_args()
    pairs = [tuple(map(int, a.split(":"))) for a in args.pairs] or [
        (10, 1), (1000, 100), (10000, 1000)]
    if args.sink:
        print(SINK_HEADER)
        print("|---" * (SINK_HEADER.count("|") - 1) + "|")
        for _, active in pairs:
            r = sink_run(args.rate, active, request_size(args.rate, active, args.request), args.seconds,
                         args.loaders, args.conns)
            print(sink_row(r), flush=True)
        return
    if args.compare:
        print(HEADER)
        print("|---" * (HEADER.count("|") - 1) + "|")
        passed = [a for a in sys.argv[1:] if a not in args.pairs]
        i = passed.index("--compare")
        passed = passed[:i] + passed[i + 2:]
        for declared, active in pairs:
            for tree, label in ((args.compare, Path(args.compare).name), (str(ROOT), args.label)):
                try:
                    subprocess.run([sys.executable, str(HERE), *passed, "--label", label, "--no-header",
                                    f"{declared}:{active}"],
                                   env={**os.environ, "PYTHONPATH": tree, "TIDEMARK_BENCH_TREE": tree}, cwd=tree,
                                   check=False, timeout=2 * args.seconds + 300)
                except subprocess.TimeoutExpired:
                    print(f"| {label} | {declared:,} | {active:,} | (did not finish in time) |", flush=True)
        return
    from tidemark.summary import warm_up

    warm_up()  # as `tidemark worker` does: executors load compiled kernels from the cache
    spark = build_spark("local[2]", args.state_partitions, "tidemark-bench-scale")
    spark.sparkContext.setLogLevel("ERROR")
    if not args.no_header:
        print(HEADER)
        print("|---" * (HEADER.count("|") - 1) + "|")
    for declared, active in pairs:
        size = request_size(args.rate, active, args.request)
        r = run(spark, declared, active, args.seconds, args.rate, size, args.loaders, args.conns,
                args.warm, args.trigger, args.log_partitions, args.api_workers)
        print(row(args.label, r), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"label": args.label, "trigger": args.trigger,
                                    "state_partitions": args.state_partitions,
                                    "log_partitions": args.log_partitions, **r}, default=str) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
