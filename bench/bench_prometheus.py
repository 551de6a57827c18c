"""Range queries through the Prometheus HTTP API (contract §10) against the native history
route, over a stream holding an hour at ``--rate`` events/s.

Starts a real Redis and the API (``tidemark api``, in a subprocess), builds the summary
of the hour the way the worker does and publishes it (no Spark). Then, one request at a
time on a kept-alive connection, each asked ``--repeats`` times (the two interleaved):

* ``/api/v1/query_range`` as Grafana posts it (form body, HTTP Basic with the key as the
  password): ``--points`` steps ending at the stream's clock, ``window="5m"``;
* ``GET /v1/streams/{name}/{kind}/history?points=…&window=300``, the native route the
  dashboard uses, the same number of instants;

for count, quantiles (``q="0.5,0.99"``) and heavy hitters (``phi="0.01"``). Latency is from
sending the request to the last byte of the answer.

    .venv/bin/python bench/bench_prometheus.py [--rate 1000] [--seconds 3600] [--points 500] [--repeats 15]
"""

from __future__ import annotations

import argparse
import time

import httpx
import numpy as np

from _common import KEY, ROOT, SECRET, redis_server, start_api, stop, table_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

STREAM = "prom"
T0 = 1_700_000_000.0
WINDOW = 300
KINDS = {  # kind: (PromQL parameters, native parameters)
    "count": ("", {}),
    "quantiles": (', q="0.5,0.99"', {"q": "0.5,0.99"}),
    "heavy-hitters": (', phi="0.01"', {"phi": "0.01"}),
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


def timed(sends: list, repeats: int) -> list[tuple[np.ndarray, httpx.Response]]:
    """Each of ``sends`` ``repeats`` times, interleaved (both meet the same machine load)."""
    lat: list[list[float]] = [[] for _ in sends]
    last = [None] * len(sends)
    for _ in range(repeats):
        for i, send in enumerate(sends):
            started = time.perf_counter()
            r = send()
            lat[i].append(time.perf_counter() - started)
            assert r.status_code == 200, r.text[:300]
            last[i] = r
    return [(np.array(lat[i]), last[i]) for i in range(len(sends))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=1000.0, help="events per second in the hour")
    ap.add_argument("--seconds", type=float, default=3600.0, help="span held (and max_window)")
    ap.add_argument("--points", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    started = time.perf_counter()
    summary = build(args.rate, args.seconds)
    clock = summary.clock_seconds
    print(f"built the summary of {int(args.rate * args.seconds):,} events in "
          f"{time.perf_counter() - started:.1f} s ({len(summary.to_bytes()):,} bytes)", flush=True)
    with redis_server("tm-bench-prom-") as (redis, tmp):
        api, port = start_api(ROOT, redis.url, tmp)
        try:
            Publisher(redis.url).publish_summary(STREAM, summary, version=1, events=int(args.rate * args.seconds))
            base = f"http://127.0.0.1:{port}"
            # The native history spans [clock - max_window + window, clock]; the range query the same.
            span = args.seconds - WINDOW
            step = span / (args.points - 1)
            end = clock
            start = end - step * (args.points - 1)
            rows = []
            with httpx.Client(base_url=base, timeout=300) as c:
                for kind, (labels, params) in KINDS.items():
                    metric = "tidemark_" + kind.replace("-", "_")
                    form = {"query": f'{metric}{{stream="{STREAM}", window="5m"{labels}}}',
                            "start": repr(start), "end": repr(end), "step": repr(step)}
                    prom = lambda: c.post("/api/v1/query_range", data=form, auth=("grafana", KEY))
                    native = lambda: c.get(f"/v1/streams/{STREAM}/{kind}/history",
                                           params={**params, "window": WINDOW, "points": args.points},
                                           headers={"Authorization": f"Bearer {KEY}"})
                    prom(), native()  # warm: decoded summary, compiled kernels
                    (p_lat, p_r), (n_lat, n_r) = timed([prom, native], args.repeats)
                    series = p_r.json()["data"]["result"]
                    points = max(len(s["values"]) for s in series)
                    rows.append((kind, len(series), points, p_lat, len(n_r.json()["answers"]), n_lat))
                    print(f"  {kind}: done", flush=True)
        finally:
            stop(api)
    print(f"\n{args.points}-point range queries, window 5m, {args.rate:g} events/s over "
          f"{args.seconds:g} s, {args.repeats} requests each, one at a time:")
    print("| query | series | points | query_range p50 | query_range p99 | native history p50 | native history p99 |")
    print("|---|---|---|---|---|---|---|")
    ms = lambda a, q: f"{np.percentile(a, q) * 1000:.0f} ms"
    for kind, n_series, points, p_lat, n_points, n_lat in rows:
        print(f"| {kind} | {n_series} | {points} | {ms(p_lat, 50)} | {ms(p_lat, 99)} | "
              f"{ms(n_lat, 50)} | {ms(n_lat, 99)} |")


if __name__ == "__main__":
    main()
