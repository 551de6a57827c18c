"""Answers over time: ``query_range`` (contract §10) and the native history route, cold and
refreshed, over a stream holding an hour at ``--rate`` events/s; ``--compare TREE`` runs
another source tree's API beside this one in the same invocation, on the same Redis and
the same published summary, requests interleaved.

Builds the summary of the hour the way the worker does and publishes it (no Spark). Then,
one request at a time on a kept-alive connection, for every kind of one stream:

* **cold**: ``/api/v1/query_range`` as Grafana posts it (form body, HTTP Basic with the key
  as the password), ``--points`` steps, ``window="5m"``, each request ending at another
  instant so that no point of it was computed before; and
  ``GET /v1/streams/{name}/{kind}/history?points=…&window=300`` at another ``at`` each time;
* **refresh**: the same panel one step later, as Grafana asks it on a refresh (start and
  end aligned to the step and moved by one step: all points but one shared with the
  request before; the version unchanged). On a live stream a publish between the two
  makes a refresh cold (the points are kept per version);
* **11,000 points** (``--big``): one cold ``query_range`` of the most points a series may
  have, per kind.

Latency is from sending the request to the last byte of the answer.

    .venv/bin/python bench/bench_prometheus.py [--rate 1000] [--seconds 3600] [--points 500]
        [--repeats 7] [--compare /work/prev] [--big]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import httpx
import numpy as np

from _common import KEY, ROOT, SECRET, redis_server, run_label, start_api, stop, table_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

STREAM = "prom"
T0 = 1_700_000_000.0
WINDOW = 300
KINDS = {  # kind: (PromQL labels, native parameters)
    "count": ("", {}),
    "sum": ("", {}),
    "distinct": ("", {}),
    "frequency": (', key="k1"', {"key": "k1"}),
    "self-join": ("", {}),
    "quantiles": (', q="0.5,0.99"', {"q": "0.5,0.99"}),
    "heavy-hitters": (', phi="0.01"', {"phi": "0.01"}),
    "decayed-sum": (', tau="0", decay="polynomial", alpha="1.5", guarantee="additive"',
                    {"tau": "0", "decay": "polynomial", "alpha": "1.5", "guarantee": "additive"}),
}


def build(rate: float, seconds: float) -> StreamSummary:
    """The summary of ``rate × seconds`` events: Zipf keys, lognormal values, in order."""
    rng = np.random.default_rng(7)
    config = StreamConfig(max_window=seconds, value_min=0, value_max=1000)
    summary = StreamSummary.create(config, SECRET)
    n, chunk = int(rate * seconds), 200_000
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        ts = T0 + np.sort(rng.uniform(i / n * seconds, (i + m) / n * seconds, m))
        keys = [f"k{k}" for k in rng.zipf(1.3, m) % 5000]
        values = np.minimum(rng.lognormal(3, 1, m), 1000.0)
        summary.update_table(table_of(ts, keys, values))
    return summary


def timed(send) -> float:
    started = time.perf_counter()
    r = send()
    took = time.perf_counter() - started
    assert r.status_code == 200, r.text[:300]
    return took


class Panel:
    """One kind's requests against one API."""

    def __init__(self, client: httpx.Client, kind: str, clock: float, span: float, points: int):
        labels, self.params = KINDS[kind]
        metric = "tidemark_" + kind.replace("-", "_")
        self.client, self.kind, self.clock, self.points = client, kind, clock, points
        self.query = f'{metric}{{stream="{STREAM}", window="5m"{labels}}}'
        self.step = math.floor(span / (points - 1) * 1000) / 1000  # whole ms, as Grafana's

    def prom(self, end: float, points: int | None = None):
        start = end - self.step * ((points or self.points) - 1)
        form = {"query": self.query, "start": repr(start), "end": repr(end), "step": repr(self.step)}
        return self.client.post("/api/v1/query_range", data=form, auth=("grafana", KEY))

    def native(self, at: float):
        return self.client.get(f"/v1/streams/{STREAM}/{self.kind}/history",
                               params={**self.params, "window": WINDOW, "points": self.points, "at": repr(at)},
                               headers={"Authorization": f"Bearer {KEY}"})

    def aligned_end(self) -> float:
        """An end on the step's grid, a minute before the clock (room for the refreshes)."""
        return math.floor((self.clock - 60) / self.step) * self.step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0, help="events per second in the hour")
    ap.add_argument("--seconds", type=float, default=3600.0, help="span held (and max_window)")
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compare", help="another source tree whose API runs beside this one")
    ap.add_argument("--big", action="store_true", help="also one 11,000-point range per kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    started = time.perf_counter()
    summary = build(args.rate, args.seconds)
    clock = summary.clock_seconds
    print(f"built the summary of {int(args.rate * args.seconds):,} events in "
          f"{time.perf_counter() - started:.1f} s ({len(summary.to_bytes()):,} bytes)", flush=True)
    trees = ([Path(args.compare)] if args.compare else []) + [ROOT]
    results: dict = {}
    with redis_server("tm-bench-prom-") as (redis, tmp):
        Publisher(redis.url).publish_summary(STREAM, summary, version=1, events=int(args.rate * args.seconds))
        apis = [start_api(tree, redis.url, tmp) for tree in trees]
        try:
            clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) for _, port in apis]
            span = args.seconds - WINDOW - 120  # the panel ends a minute before the clock at most
            for kind in kinds:
                panels = [Panel(c, kind, clock, span, args.points) for c in clients]
                for p in panels:  # warm: decoded summary, compiled kernels
                    p.prom(p.aligned_end() - 1.234), p.native(clock - 2.345)
                for r in range(args.repeats):  # cold: every request at instants not asked before
                    for t, p in enumerate(panels):
                        results.setdefault((t, kind, "cold prom"), []).append(timed(lambda: p.prom(clock - 61 - r * 0.37)))
                        results.setdefault((t, kind, "cold native"), []).append(timed(lambda: p.native(clock - 3 - r * 0.41)))
                for t, p in enumerate(panels):  # refresh: one step on, on the step's grid
                    end = p.aligned_end() - args.repeats * p.step
                    p.prom(end)
                    for r in range(1, args.repeats + 1):
                        results.setdefault((t, kind, "refresh prom"), []).append(
                            timed(lambda: p.prom(end + r * p.step)))
                    p.native(clock)
                    for r in range(args.repeats):
                        results.setdefault((t, kind, "refresh native"), []).append(timed(lambda: p.native(clock)))
                    if args.big:
                        big = Panel(p.client, kind, clock, span, 11_000)
                        results[(t, kind, "11,000 points")] = [timed(lambda: big.prom(clock - 60.5))]
                print(f"  {kind}: done", flush=True)
        finally:
            for proc, _ in apis:
                stop(proc)
    print(f"\n{args.points}-point ranges, window 5m, {args.rate:g} events/s over {args.seconds:g} s, "
          f"{args.repeats} requests each, one at a time (p50 / p99, ms):")
    cols = ["cold prom", "cold native", "refresh prom", "refresh native"] + (["11,000 points"] if args.big else [])
    print("| query | tree | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for kind in kinds:
        for t, tree in enumerate(trees):
            cells = []
            for col in cols:
                lat = np.array(results.get((t, kind, col), [np.nan])) * 1000
                cells.append(f"{np.percentile(lat, 50):.0f} / {np.percentile(lat, 99):.0f}"
                             if lat.size > 1 else f"{lat[0]:.0f}")
            print(f"| {kind} | {run_label(tree)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
