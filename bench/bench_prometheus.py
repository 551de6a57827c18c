"""Answers over time: ``query_range`` (contract §10) and the native history route, cold and
refreshed, over a stream holding an hour at ``--rate`` events/s; ``--compare TREE`` runs
another source tree's API beside this one in the same invocation, on the same Redis and
the same published summary, requests interleaved.

Builds the summary of the hour the way the worker does and publishes it (no Spark). Then,
one request at a time on a kept-alive connection, for every kind of one stream:

* **cold**: ``/api/v1/query_range`` as Grafana posts it (form body, HTTP Basic with the key
  as the password), ``--points`` steps, ``window="5m"``, each request ending at another
  instant so that no point of it was computed before; and
  ``GET /v1/streams/{name}/{kind}/history?points=…&window=…`` at another ``at`` and a
  window a few ms short of 300 s each time (its inner instants lie on a grid of the
  span, which histories at neighbouring ``at`` share);
* **refresh**: the same panel one step later, as Grafana asks it on a refresh (start and
  end aligned to the step and moved by one step: all points but one shared with the
  request before; the version unchanged). On a live stream a publish between the two
  makes a refresh cold (the points are kept per version);
* **live refresh**: as a live stream refreshes, ``--repeats`` times: five more seconds of
  events published as a new version (``touched`` at their first time, as the worker
  announces it), then the panel asked again ending at the new clock (on the step's grid
  for ``query_range``; the history route at the clock). Points before the new events are
  kept; the new steps and those whose windows the events reach are computed;
* **11,000 points** (``--big``): one cold ``query_range`` of the most points a series may
  have, per kind;
* **panels** (``--panels N``): N panels (the kinds in turn) each refreshed every 5 s for
  ``--run`` seconds while a version is published every second, four viewers' worth of
  refreshes in all; the API's CPU seconds per second of run.

Latency is from sending the request to the last byte of the answer.

    .venv/bin/python bench/bench_prometheus.py [--rate 1000] [--seconds 3600] [--points 500]
        [--repeats 7] [--compare /work/prev] [--big] [--whole-steps]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import httpx
import numpy as np

from _common import KEY, ROOT, SECRET, cpu_seconds, redis_server, run_label, start_api, stop, table_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.wire.records import ShardStatus
from workers.publish import Publisher

STREAM = "prom"
WHOLE_STEPS = False  # --whole-steps
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


class Live:
    """The stream going on: each ``advance`` adds ``seconds`` of events after the clock and
    publishes the summary as the next version, with ``touched`` as the worker says it."""

    def __init__(self, publisher: Publisher, summary: StreamSummary, rate: float, events: int):
        self.publisher, self.summary, self.rate, self.events = publisher, summary, rate, events
        self.version, self.rng = 1, np.random.default_rng(11)

    def advance(self, seconds: float = 5.0) -> None:
        clock = self.summary.clock_seconds
        m = int(self.rate * seconds)
        ts = clock + np.sort(self.rng.uniform(0.001, seconds, m))
        keys = [f"k{k}" for k in self.rng.zipf(1.3, m) % 5000]
        self.summary.update_table(table_of(ts, keys, np.minimum(self.rng.lognormal(3, 1, m), 1000.0)))
        self.version += 1
        self.events += m
        status = ShardStatus(version=self.version, events=self.events, clock=self.summary.clock_seconds,
                             touched=repr(float(ts.min())))
        self.publisher.publish(STREAM, 0, status, self.summary.to_bytes(), self.summary.config.model_dump())

    def served(self, clients: list) -> None:
        """Wait until every API serves the newest version (it decodes off the request path)."""
        for c in clients:
            deadline = time.monotonic() + 60
            while c.get(f"/v1/streams/{STREAM}/count", params={"window": WINDOW},
                        headers={"Authorization": f"Bearer {KEY}"}).json()["as_of"]["sketch_version"] != self.version:
                assert time.monotonic() < deadline, "an API never served the new version"
                time.sleep(0.02)


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
        # whole ms, as Grafana's; or a round step (``--whole-steps``: Grafana rounds the
        # interval it asks for to such a value, 250 ms, 5 s, 1 m, and a range's instants
        # then share an offset within their ticks): whole seconds, or a fraction of one
        raw = span / (points - 1)
        self.step = math.floor(raw * 1000) / 1000
        if WHOLE_STEPS:
            self.step = math.floor(raw) if raw >= 1 else max(s for s in (0.5, 0.25, 0.2, 0.1, 0.05) if s <= raw)

    def prom(self, end: float, points: int | None = None):
        start = end - self.step * ((points or self.points) - 1)
        form = {"query": self.query, "start": repr(start), "end": repr(end), "step": repr(self.step)}
        return self.client.post("/api/v1/query_range", data=form, auth=("grafana", KEY))

    def native(self, at: float | None, window: float = WINDOW):
        """The history route, at ``at`` (None: at the clock, as the dashboard asks it);
        another ``window`` asks points no request asked before (the route's inner
        instants lie on a grid of the span: histories at neighbouring ``at`` share them)."""
        when = {} if at is None else {"at": repr(at)}
        return self.client.get(f"/v1/streams/{STREAM}/{self.kind}/history",
                               params={**self.params, "window": window, "points": self.points, **when},
                               headers={"Authorization": f"Bearer {KEY}"})

    def aligned_end(self, clock: float | None = None) -> float:
        """An end on the step's grid, a minute before the clock (room for the refreshes);
        with ``clock``, the last step at or before it (as Grafana aligns ``now``)."""
        if clock is not None:
            return math.floor(clock / self.step) * self.step
        return math.floor((self.clock - 60) / self.step) * self.step


def run_panels(client, proc, live: Live, clients, kinds, panels: int, seconds: float, span: float,
               points: int) -> float:
    """``panels`` panels over the kinds, each refreshed every 5 s, a version published every
    second: the API's CPU seconds per second (cores)."""
    boards = [Panel(client, kinds[i % len(kinds)], live.summary.clock_seconds, span, points)
              for i in range(panels)]
    for b in boards:
        b.prom(b.aligned_end(live.summary.clock_seconds))
    started, cpu0 = time.monotonic(), cpu_seconds(proc.pid)
    due = [started + 5 * i / panels for i in range(panels)]
    next_publish = started + 1
    while time.monotonic() - started < seconds:
        now = time.monotonic()
        if now >= next_publish:
            live.advance(1.0)
            next_publish += 1
        for i, b in enumerate(boards):
            if now >= due[i]:
                b.prom(b.aligned_end(live.summary.clock_seconds))
                due[i] += 5
        time.sleep(0.01)
    return (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - started)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0, help="events per second in the hour")
    ap.add_argument("--seconds", type=float, default=3600.0, help="span held (and max_window)")
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compare", help="another source tree whose API runs beside this one")
    ap.add_argument("--big", action="store_true", help="also one 11,000-point range per kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--panels", type=int, default=0, help="panels refreshed every 5 s (0: skip)")
    ap.add_argument("--run", type=float, default=60.0, help="seconds of the panels run")
    ap.add_argument("--whole-steps", action="store_true", help="steps of whole seconds (as Grafana rounds them)")
    args = ap.parse_args()
    global WHOLE_STEPS
    WHOLE_STEPS = args.whole_steps
    kinds = args.kinds.split(",")
    started = time.perf_counter()
    summary = build(args.rate, args.seconds)
    clock = summary.clock_seconds
    print(f"built the summary of {int(args.rate * args.seconds):,} events in "
          f"{time.perf_counter() - started:.1f} s ({len(summary.to_bytes()):,} bytes)", flush=True)
    trees = ([Path(args.compare)] if args.compare else []) + [ROOT]
    results: dict = {}
    with redis_server("tm-bench-prom-") as (redis, tmp):
        publisher = Publisher(redis.url)
        publisher.publish_summary(STREAM, summary, version=1, events=int(args.rate * args.seconds))
        live = Live(publisher, summary, args.rate, int(args.rate * args.seconds))
        apis = [start_api(tree, redis.url, tmp) for tree in trees]
        try:
            clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) for _, port in apis]
            span = args.seconds - WINDOW - 120  # the panel ends a minute before the clock at most
            for kind in kinds:
                panels = [Panel(c, kind, clock, span, args.points) for c in clients]
                for p in panels:  # warm: decoded summary, compiled kernels, the process's memory
                    for w in range(3):  # (a first range per kind costs 1.5-3x the next ones)
                        p.prom(p.aligned_end() - 1.234 - w), p.native(clock - 2.345 - w)
                for r in range(args.repeats):  # cold: every request at instants not asked before
                    for t, p in enumerate(panels):
                        results.setdefault((t, kind, "cold prom"), []).append(timed(lambda: p.prom(clock - 61 - r * 0.37)))
                        results.setdefault((t, kind, "cold native"), []).append(
                            timed(lambda: p.native(clock - 3 - r * 0.41, WINDOW - (r + 1) / 1024)))
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
                for p in panels:  # the panels as they are now, then the stream goes on
                    p.prom(p.aligned_end(live.summary.clock_seconds)), p.native(None)
                for r in range(args.repeats):
                    live.advance()
                    live.served(clients)
                    for t, p in enumerate(panels):
                        end = p.aligned_end(live.summary.clock_seconds)
                        results.setdefault((t, kind, "live refresh prom"), []).append(timed(lambda: p.prom(end)))
                        results.setdefault((t, kind, "live refresh native"), []).append(timed(lambda: p.native(None)))
                clock = live.summary.clock_seconds
                print(f"  {kind}: done", flush=True)
            if args.panels:
                for t, (proc, _) in enumerate(apis):
                    results[(t, "panels", "cpu")] = run_panels(clients[t], proc, live, clients, kinds,
                                                               args.panels, args.run, span, args.points)
                    print(f"  panels on {run_label(trees[t])}: {results[(t, 'panels', 'cpu')]:.3f} cores", flush=True)
        finally:
            for proc, _ in apis:
                stop(proc)
    print(f"\n{args.points}-point ranges, window 5m, {args.rate:g} events/s over {args.seconds:g} s, "
          f"{args.repeats} requests each, one at a time (p50 / p99, ms):")
    cols = ["cold prom", "cold native", "refresh prom", "refresh native", "live refresh prom",
            "live refresh native"] + (["11,000 points"] if args.big else [])
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
    if args.panels:
        print(f"\n{args.panels} panels refreshed every 5 s, a version published every second, "
              f"{args.run:g} s: API CPU (cores)")
        for t, tree in enumerate(trees):
            print(f"| {run_label(tree)} | {results[(t, 'panels', 'cpu')]:.3f} |")


if __name__ == "__main__":
    main()
