"""Soak: does the memory of every process of ``tidemark up`` stay flat under a steady load?

``tidemark up`` (defaults, its real Spark worker) of this tree, and of ``--compare TREE``
after it in the same invocation, with ``--streams`` streams of 2-minute windows (so every
summary is full after the first minutes) taking ``--rate`` events/s in all (1,000-event
NDJSON posts, round robin) and ``--queries`` queries/s over count, sum, frequency, heavy
hitters and quantiles of every stream. Sampling starts after ``--warm-up`` seconds (by
default a window and a minute: every window is full before the first sample); then the
resident memory (RSS) and proportional share (PSS) of every process of the tree are
read every ``--every`` seconds for ``--minutes``.

A process fails the soak when its RSS at the end is more than ``--limit`` (5 %) above its
first sample; the exit status is 1 when one does. Printed: each process's first, largest
and last RSS, its growth, and the API service's processes together (RSS and PSS) at the
first and the last sample, this tree beside the compared one.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--compare /work/prev] [--streams 10]
        [--rate 5000] [--queries 40] [--every 30] [--warm-up 180]
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from _common import KEY, ROOT, api_env, run_dir, stop_up
from _up_scenario import _body, _ready, _tree, _wait, api_pids, memory
from tidemark.redis_server import free_port

QUERIES = ["count?window=120", "sum?window=120", "frequency?window=120&key=k1",
           "heavy-hitters?window=120&phi=0.01", "quantiles?window=120&q=0.5,0.99"]


def _start(src: str, streams: int) -> tuple[int, subprocess.Popen]:
    tmp = run_dir("tm-bench-soak-")
    config = Path(tmp, "streams.yaml")
    config.write_text("streams:\n" + "".join(f"  s{i}:\n    max_window: 2m\n" for i in range(streams)))
    port = free_port()
    env = api_env(src, tmp, TIDEMARK_CHECKPOINT=f"{tmp}/checkpoint")
    env.pop("REDIS_URL", None)
    up = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "up", "--config", str(config), "--port", str(port)],
                          env=env, cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    threading.Thread(target=lambda: [None for _ in up.stdout], daemon=True).start()
    return port, up


def _load(port: int, key: str, streams: int, rate: float, queries: float, stop, counts) -> None:
    """In its own process: the posts (round robin over the streams) and the queries."""
    rng = np.random.default_rng(5)
    every = 1000 / rate
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        next_post = next_query = time.monotonic()
        i = j = 0
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_post:
                t = time.time()
                r = c.post(f"/v1/streams/s{i % streams}/events", content=_body(rng, 1000, t - 1, t),
                           headers={"content-type": "application/x-ndjson"})
                counts[0] += r.json().get("accepted", 0) if r.status_code == 202 else 0
                counts[1] += r.status_code != 202
                i += 1
                next_post += every
            elif queries and now >= next_query:
                r = c.get(f"/v1/streams/s{j % streams}/{QUERIES[(j // streams) % len(QUERIES)]}")
                counts[2] += r.status_code != 200
                j += 1
                next_query += 1 / queries
            else:
                stop.wait(max(0.0, min(next_post, next_query if queries else next_post) - time.monotonic()))


def _label(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(cmd).decode(errors="replace")
    for needle, name in (("redis-server", "redis"), ("tidemark_cli api", "api"), ("tidemark_cli worker", "worker"),
                         ("java", "worker JVM"), ("pyspark.daemon", "spark python"), ("pyspark/worker", "spark python"),
                         ("spawn_main", "api helper"), ("tidemark_cli up", "up"), ("warm_up", "kernel warm-up")):
        if needle in text:
            return name
    return cmd[0].decode(errors="replace").rsplit("/", 1)[-1]


def _rss(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def soak(src: str, args) -> dict:
    ctx = multiprocessing.get_context("spawn")
    port, up = _start(src, args.streams)
    base = f"http://127.0.0.1:{port}"
    stop, counts = ctx.Event(), ctx.Array("q", 3)
    loader = None
    try:
        _wait("ready", lambda: _ready(base), 300)
        loader = ctx.Process(target=_load, args=(port, KEY, args.streams, args.rate, args.queries, stop, counts))
        loader.start()
        print(f"{src}: load started; first sample in {args.warm_up:.0f} s", flush=True)
        time.sleep(args.warm_up)
        samples: dict[int, list[float]] = {}
        labels: dict[int, str] = {}
        api_total = []
        started = time.monotonic()
        while True:
            for pid in _tree(up.pid):
                rss = _rss(pid)
                if rss is not None:
                    samples.setdefault(pid, []).append(rss)
                    labels.setdefault(pid, _label(pid))
            api_total.append(memory(api_pids(up.pid)))
            done = time.monotonic() - started
            print(f"  {done / 60:5.1f} min: API processes RSS {api_total[-1][0]:,.0f} MB, PSS "
                  f"{api_total[-1][1]:,.0f} MB; {counts[0]:,} events accepted, {counts[1]} posts and "
                  f"{counts[2]} queries refused", flush=True)
            if done >= args.minutes * 60:
                break
            time.sleep(args.every)
        n = len(api_total)
        return {"samples": {p: s for p, s in samples.items() if len(s) == n}, "labels": labels,
                "api": api_total, "accepted": counts[0], "refused": (counts[1], counts[2])}
    finally:
        stop.set()
        if loader is not None:
            loader.join(30)
        stop_up(up)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--compare", help="another source tree, soaked after this one in the same invocation")
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000.0, help="events/s, all streams together")
    ap.add_argument("--queries", type=float, default=40.0, help="queries/s")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--warm-up", type=float, default=180.0, help="seconds before the first sample")
    ap.add_argument("--limit", type=float, default=0.05, help="largest growth of a process's RSS")
    args = ap.parse_args()
    failed = False
    totals = []
    for src in [str(ROOT)] + ([args.compare] if args.compare else []):
        r = soak(src, args)
        label = "this tree" if src == str(ROOT) else src
        print(f"\n{label}: {r['accepted']:,} events accepted; posts / queries refused: {r['refused']}")
        print("| process | pid | RSS first | largest | last (MB) | growth |")
        print("|---|---|---|---|---|---|")
        for pid, s in sorted(r["samples"].items(), key=lambda kv: r["labels"][kv[0]]):
            growth = s[-1] / s[0] - 1
            bad = growth > args.limit and src == str(ROOT)
            failed |= bad
            print(f"| {r['labels'][pid]} | {pid} | {s[0]:,.0f} | {max(s):,.0f} | {s[-1]:,.0f} | "
                  f"{growth * 100:+.1f} %{' **over the limit**' if bad else ''} |")
        totals.append((label, r["api"][0], r["api"][-1], max(a[0] for a in r["api"]), max(a[1] for a in r["api"])))
    print(f"\n{' '.join(sys.argv)}\n\n| tree | API processes RSS first / last / largest (MB) | PSS first / last / largest (MB) |")
    print("|---|---|---|")
    for label, first, last, rss_max, pss_max in totals:
        print(f"| {label} | {first[0]:,.0f} / {last[0]:,.0f} / {rss_max:,.0f} | {first[1]:,.0f} / {last[1]:,.0f} / {pss_max:,.0f} |")
    print("\nthis tree: " + ("FAILED: a process grew past the limit" if failed else "every process within the limit"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
