"""Streams that already hold an hour, then posts as fast as they are answered (issue #33,
load (c)).

    .venv/bin/python bench/bench_history_load.py [--streams 100] [--history 3600]
        [--history-rate 5] [--seconds 60] [--clients 4] [--batch 500] [--compare TREE]

Per tree (``--compare`` TREE first, then this one, in one invocation): a fresh Redis, the
API and the worker (``tidemark worker``, Spark ``local[2]``) from that tree. ``--streams``
streams are declared (``max_window`` 1 h, ε = δ = 0.05, values 0–10,000) and each is given
``--history`` seconds of in-order history before now at ``--history-rate`` events/s, in
5,000-event NDJSON posts, then waited for until every event is counted: the steady state,
windows full. Then ``--clients`` threads post ``--batch``-event NDJSON requests (keys
Zipf over 10,000, log-normal values, times within the last two seconds) round-robin over
their share of the streams, each as soon as the previous one is answered; a ``429`` waits
its ``Retry-After`` for that stream.

Reported per tree: events/s accepted and counted during the load, the 429s, freshness
(from a ``202`` to the first published status of its stream counting it; statuses read
from Redis on every publish announcement) p50 / p95 / max, the 202s counted after more than
10 s, how long the history took to be counted, the cores each part used during the load
(the worker: Spark's JVM with its Python workers), and the worker's own fit of its batches
(``workers.progress``, what the back-pressure predicts from; medians of one read a second):
its slowest recent batch, a batch's fixed seconds and seconds per group update.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))

from _common import HEADERS, api_env, run_dir, start_api, stop  # noqa: E402
from bench_scale import cpu_of, freshness  # noqa: E402
from tidemark.redis_server import EmbeddedRedis  # noqa: E402
from tidemark.wire import keys  # noqa: E402

CONFIG = {"max_window": "1h", "epsilon": 0.05, "delta": 0.05, "value_min": 0, "value_max": 10_000}
_EVENTS = re.compile(rb'"events":\s*(\d+)')


def body(rng, start: float, end: float, n: int) -> bytes:
    ts = np.sort(rng.uniform(start, end, n))
    keys_ = rng.zipf(1.2, n) % 10_000
    values = np.clip(rng.lognormal(6, 1.2, n), 0, 10_000)
    return "".join(f'{{"ts":{t:.3f},"key":"k{k}","value":{v:.1f}}}\n'
                   for t, k, v in zip(ts.tolist(), keys_.tolist(), values.tolist())).encode()


def counted(r, names: list[str]) -> dict[str, int]:
    """Events each stream's published statuses count (the number read off the JSON: a
    status names every segment, and parsing them all would load this process)."""
    with r.pipeline(transaction=False) as p:
        for n in names:
            p.hvals(keys.shard_status(n))
        raw = p.execute()
    return {n: sum(int(m.group(1)) for v in vals if (m := _EVENTS.search(v)))
            for n, vals in zip(names, raw)}


def post(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return client.post(f"/v1/streams/{name}/events", content=data,
                       headers={"content-type": "application/x-ndjson"})


def run(src: Path, args) -> dict:
    import redis

    tmp = run_dir("tm-history-")
    with EmbeddedRedis(f"{tmp}/redis") as server:
        api, port = start_api(src, server.url, tmp)
        worker = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "worker", "--redis", server.url,
                                   "--checkpoint", f"{tmp}/ckpt"], env=api_env(src, tmp), cwd=str(src),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        r = redis.Redis.from_url(server.url)
        names = [f"h{i:03d}" for i in range(args.streams)]
        try:
            with httpx.Client(base_url=base, timeout=120, headers=HEADERS) as c:
                for n in names:
                    c.put(f"/v1/streams/{n}", json=CONFIG).raise_for_status()
            return measure(base, r, names, args, {"API": api.pid, "worker": worker.pid,
                                                  "Redis": server.process.pid})
        finally:
            stop(worker)
            stop(api)


def measure(base: str, r, names: list[str], args, pids: dict[str, int]) -> dict:
    now = time.time()
    per_post = 5000
    posts = max(1, round(args.history * args.history_rate / per_post))
    span = args.history / posts
    expected = {n: 0 for n in names}
    lock = threading.Lock()

    def fill(mine: list[str], seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=base, timeout=120, headers=HEADERS) as c:
            for j in range(posts):  # in order: every stream's oldest stretch first
                start = now - args.history + j * span
                for n in mine:
                    data = body(rng, start, start + span, per_post)
                    while (resp := post(c, n, data)).status_code == 429:
                        time.sleep(float(resp.headers.get("retry-after", 1)))
                    resp.raise_for_status()
                    with lock:
                        expected[n] += resp.json()["accepted"]

    t_fill = time.monotonic()
    threads = [threading.Thread(target=fill, args=(names[k::args.clients], k)) for k in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while counted(r, names) != expected:
        if time.monotonic() - t_fill > 900:
            raise RuntimeError("the history was not counted within 15 minutes")
        time.sleep(0.5)
    fill_s = time.monotonic() - t_fill
    print(f"  history: {sum(expected.values()):,} events counted in {fill_s:.1f} s", file=sys.stderr)

    seen: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
    accepts: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
    totals = dict(expected)
    refused = [0]
    stop_at = time.monotonic() + args.seconds
    done = threading.Event()
    fits: list[dict] = []  # the worker's own fit of its batches (``keys.LOG_PROGRESS``)

    def watch() -> None:
        sub = r.pubsub(ignore_subscribe_messages=True)
        sub.subscribe(keys.ANNOUNCE)
        polled = 0.0
        while not done.is_set():
            if time.monotonic() - polled > 1.0 and time.monotonic() < stop_at:
                polled = time.monotonic()
                fits.append({k.decode(): v.decode() for k, v in r.hgetall(keys.LOG_PROGRESS).items()})
            msg = sub.get_message(timeout=0.2)
            if msg is None:
                continue
            try:
                name = json.loads(msg["data"]).get("stream")
            except (ValueError, TypeError):
                continue
            if name in seen:
                at = time.monotonic()
                seen[name].append((at, counted(r, [name])[name]))
        sub.close()

    def load(mine: list[str], seed: int) -> None:
        rng = np.random.default_rng(1000 + seed)
        wait_until = {n: 0.0 for n in mine}
        with httpx.Client(base_url=base, timeout=120, headers=HEADERS) as c:
            i = 0
            while time.monotonic() < stop_at:
                n = mine[i % len(mine)]
                i += 1
                if wait_until[n] > time.monotonic():
                    time.sleep(0.01)
                    continue
                t = time.time()
                resp = post(c, n, body(rng, t - 2, t, args.batch))
                if resp.status_code == 429:
                    refused[0] += 1
                    wait_until[n] = time.monotonic() + float(resp.headers.get("retry-after", 1))
                    continue
                resp.raise_for_status()
                at = time.monotonic()
                with lock:
                    totals[n] += resp.json()["accepted"]
                    accepts[n].append((at, totals[n]))

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    cpu0 = {k: cpu_of([p]) for k, p in pids.items()} | {"load": time.process_time()}
    threads = [threading.Thread(target=load, args=(names[k::args.clients], k)) for k in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    cores = {k: (cpu_of([p]) - cpu0[k]) / took for k, p in pids.items()}
    cores["load"] = (time.process_time() - cpu0["load"]) / took
    at_end = sum(counted(r, names).values())
    deadline = time.monotonic() + 120
    while counted(r, names) != totals and time.monotonic() < deadline:
        time.sleep(0.2)
    drained = time.monotonic() - started - took
    done.set()
    watcher.join()
    fresh = np.array(freshness(accepts, seen))
    accepted = sum(totals.values()) - sum(expected.values())
    return {
        "accepted_per_s": accepted / took,
        "counted_per_s": (at_end - sum(expected.values())) / took,
        "refused": refused[0],
        "posts": sum(len(a) for a in accepts.values()),
        "fresh_p50": float(np.percentile(fresh, 50)) if fresh.size else float("nan"),
        "fresh_p95": float(np.percentile(fresh, 95)) if fresh.size else float("nan"),
        "fresh_max": float(fresh.max()) if fresh.size else float("nan"),
        "over_10s": int((fresh > 10).sum()),
        "drained_s": drained,
        "fill_s": fill_s,
        "history": sum(expected.values()),
        "cores": cores,
        "fit": {k: float(np.median([float(f[k]) for f in fits if k in f] or [float("nan")]))
                for k in ("batch_seconds", "fixed_seconds", "seconds_per_group")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--history", type=float, default=3600, help="seconds of history per stream")
    ap.add_argument("--history-rate", type=float, default=5, help="events/s of the history")
    ap.add_argument("--seconds", type=float, default=60, help="duration of the load")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--batch", type=int, default=500, help="events per post")
    ap.add_argument("--compare", help="another tree to run first (e.g. /work/prev)")
    args = ap.parse_args()
    trees = ([(Path(args.compare).resolve(), "compared")] if args.compare else []) + [(HERE.parent, "this tree")]
    print(f"| tree | history counted in | accepted / s | counted / s | posts (429s) | freshness p50 / p95 / max "
          f"| > 10 s | drained after | cores: API / worker / Redis / this load "
          f"| worker's fit: slowest recent batch / fixed / per group |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for src, label in trees:
        if label == "compared":
            label = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True).stdout.strip() or str(src)
        print(f"running {label} ({src})", file=sys.stderr)
        m = run(src, args)
        print(f"| {label} | {m['fill_s']:.0f} s ({m['history']:,} events) | {m['accepted_per_s']:,.0f} "
              f"| {m['counted_per_s']:,.0f} | {m['posts']:,} ({m['refused']:,}) "
              f"| {m['fresh_p50']:.2f} / {m['fresh_p95']:.2f} / {m['fresh_max']:.2f} s | {m['over_10s']} "
              f"| {m['drained_s']:.1f} s | " + " / ".join(f"{m['cores'][k]:.2f}" for k in
                                                        ("API", "worker", "Redis", "load"))
              + f" | {m['fit']['batch_seconds']:.2f} s / {m['fit']['fixed_seconds']:.2f} s / "
              f"{1e3 * m['fit']['seconds_per_group']:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
