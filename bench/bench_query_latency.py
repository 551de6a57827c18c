"""Query latency under load: p50/p99 per query kind at a target rate over concurrent
clients, while events are ingested and new sketch versions are published.

Starts a real Redis and the API (uvicorn, in a subprocess); declares a stream with keys
and values, publishes summaries the way the worker does
(``workers.publish.Publisher.publish_summary``) — a new version every second during the
load — and posts NDJSON events through the API meanwhile. The load is open-loop: each of
``--clients`` kept-alive connections sends its share of ``--rate`` on a fixed schedule,
cycling through count, sum, frequency, quantiles and heavy-hitters; latency runs from the
scheduled send (a late send counts its wait, so a saturated API cannot hide it). Alone
(one query at a time, before the load): the same question asked again, and a window asked
for the first time (its answer computed, not kept from before).

The client is a small asyncio HTTP/1.1 client (httptools parses the replies): an httpx
client spends more CPU per request than the API it measures, on the same two cores.

Side by side: ``--src DIR`` (repeatable) runs the API from another source tree as well;
``--workers N`` (repeatable) runs each tree with N API processes (``tidemark api --workers``;
a tree that has no such option runs with one). Runs are interleaved, so every side meets
the same machine load.

    .venv/bin/python bench/bench_query_latency.py [--rate 2000] [--clients 50] [--seconds 20]
        [--src /tmp/before] [--workers 1 --workers 2] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import threading
import time

import httptools
import httpx
import numpy as np

from _common import KEY, ROOT, SECRET, cpu_seconds, profile, profile_path, redis_server, start_api, stop, table_of
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

STREAM = "lat"
T0 = 1_700_000_000.0
EVENTS = 200_000
CONFIG = {"max_window": "1h", "value_min": 0, "value_max": 1000}
QUERIES = {
    "count": "count?window=600",
    "sum": "sum?window=600",
    "frequency": "frequency?window=600&key=k1",
    "quantiles": "quantiles?window=600&q=0.5,0.99",
    "heavy-hitters": "heavy-hitters?window=600&phi=0.01",
}


def summaries(n: int = EVENTS, versions: int = 2) -> list[StreamSummary]:
    """Summaries of an hour of events, Zipf keys, lognormal values; the later ones hold more."""
    rng = np.random.default_rng(7)
    out = []
    config = StreamConfig(**CONFIG)
    for v in range(versions):
        ts = T0 + np.sort(rng.uniform(0, 3600, n))
        keys = [f"k{k}" for k in rng.zipf(1.3, n) % 5000]
        values = np.minimum(rng.lognormal(3, 1, n), 1000.0)
        summary = StreamSummary.create(config, SECRET)
        summary.update_table(table_of(ts, keys, values))
        out.append(summary)
    return out


class Reply:
    def __init__(self):
        self.done = False
        self.body = bytearray()

    def on_body(self, data):
        self.body += data

    def on_message_complete(self):
        self.done = True


class Connection:
    """One kept-alive HTTP/1.1 connection sending GETs one at a time."""

    def __init__(self, port: int):
        self.port = port

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def get(self, path: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Authorization: Bearer {KEY}\r\n\r\n".encode())
        reply = Reply()
        parser = httptools.HttpResponseParser(reply)
        while not reply.done:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("closed")
            parser.feed_data(data)
        return parser.get_status_code(), bytes(reply.body)


async def _client(port: int, rate: float, seconds: float, offset: int, results: dict, errors: list):
    conn = Connection(port)
    await conn.open()
    kinds = list(QUERIES)
    start = time.perf_counter() + 0.5 + (offset % 50) / 50 / rate  # spread the clients' phases
    i = 0
    while True:
        scheduled = start + i / rate
        if scheduled > start + seconds or time.perf_counter() > start + seconds:
            break  # a saturated API answers fewer: the count shows it
        now = time.perf_counter()
        if scheduled > now:
            await asyncio.sleep(scheduled - now)
        kind = kinds[(i + offset) % len(kinds)]
        status, body = await conn.get(f"/v1/streams/{STREAM}/{QUERIES[kind]}")
        done = time.perf_counter()
        if status != 200:
            errors.append((kind, status, body[:200]))
        results.setdefault(kind, []).append(done - scheduled)
        i += 1
    conn.writer.close()


async def _load(port: int, rate: float, clients: int, seconds: float) -> tuple[dict, list, float]:
    results: dict[str, list[float]] = {}
    errors: list = []
    started = time.perf_counter()
    await asyncio.gather(*[_client(port, rate / clients, seconds, c, results, errors)
                           for c in range(clients)])
    return results, errors, time.perf_counter() - started - 0.5


async def _single(port: int, repeats: int = 20) -> dict:
    """One query at a time (no load): the latency a lone dashboard sees."""
    conn = Connection(port)
    await conn.open()
    out = {}
    for kind, q in QUERIES.items():
        for label, vary in (("", False), (" new", True)):
            lat = []
            for i in range(repeats):
                # " new": a window asked for the first time (no answer of it kept yet)
                path = q.replace("window=600", f"window={600 + i}") if vary else q
                t = time.perf_counter()
                status, body = await conn.get(f"/v1/streams/{STREAM}/{path}")
                lat.append(time.perf_counter() - t)
                assert status == 200, body
            out[kind + label] = float(np.median(lat))
    conn.writer.close()
    return out


def _background(redis_url: str, port: int, key: str, stop, counts) -> None:
    """In its own process (the load generator's event loop must not share a GIL with it):
    publish a new version every second and post 1,000 NDJSON events every 0.2 s."""
    versions = summaries()

    def publish():
        publisher = Publisher(redis_url)
        v = 2
        while not stop.wait(1.0):
            v += 1
            publisher.publish_summary(STREAM, versions[v % len(versions)], version=v, events=EVENTS)
            counts[0] += 1

    def ingest():
        rng = np.random.default_rng(3)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": f"Bearer {key}",
                                   "content-type": "application/x-ndjson"}) as c:
            while not stop.wait(0.2):
                body = "\n".join(json.dumps({"ts": T0 + 3600 + rng.uniform(0, 1), "key": f"k{k}",
                                             "value": 5.0}) for k in rng.integers(0, 100, 1000))
                r = c.post(f"/v1/streams/{STREAM}/events", content=body)
                if r.status_code == 202:
                    counts[1] += 1000
                elif not counts[2]:
                    counts[2] = r.status_code
                    print("ingest:", r.status_code, r.text[:200], flush=True)

    threads = [threading.Thread(target=publish), threading.Thread(target=ingest)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _supports_workers(src: str) -> bool:
    return "--workers" in open(f"{src}/tidemark_cli/main.py").read()


def run(src: str, workers: int, args, versions: list[StreamSummary], profile_to: str | None) -> dict:
    with redis_server("tm-bench-latency-") as (redis, tmp):
        extra = ("--workers", str(workers)) if workers > 1 else ()
        api, port = start_api(src, redis.url, tmp, *extra)
        try:
            c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                             headers={"Authorization": f"Bearer {KEY}"})
            assert c.put(f"/v1/streams/{STREAM}", json=CONFIG).status_code in (200, 201)
            Publisher(redis.url).publish_summary(STREAM, versions[0], version=2, events=EVENTS)
            single = asyncio.run(_single(port))
            ctx = multiprocessing.get_context("spawn")
            stop_event, counts = ctx.Event(), ctx.Array("q", 3)
            background = ctx.Process(target=_background, args=(redis.url, port, KEY, stop_event, counts))
            if not args.quiet:
                background.start()
                deadline = time.monotonic() + 180
                while counts[0] < 1 and time.monotonic() < deadline:  # its first publish
                    time.sleep(0.1)
            spy = profile(api.pid, args.seconds, profile_to) if profile_to else None
            cpu = cpu_seconds(api.pid)
            results, errors, elapsed = asyncio.run(_load(port, args.rate, args.clients, args.seconds))
            cpu = cpu_seconds(api.pid) - cpu
            stop_event.set()
            if not args.quiet:
                background.join(60)
            if spy:
                spy.wait()
            return {"single": single, "results": results, "errors": errors, "elapsed": elapsed,
                    "cpu": cpu, "published": counts[0], "posted": counts[1]}
        finally:
            stop(api)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2000.0, help="queries per second, all clients together")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--src", action="append", default=[], help="another source tree to run beside this one")
    ap.add_argument("--quiet", action="store_true", help="no ingest and no new versions during the load")
    ap.add_argument("--workers", type=int, action="append", help="API processes (repeatable; default 1)")
    ap.add_argument("--profile", help="directory for py-spy raw profiles of each run's API")
    args = ap.parse_args()
    versions = summaries()
    sources = []
    for label, src in [("this tree", str(ROOT))] + [(s, s) for s in args.src]:
        for w in args.workers or [1]:
            if w == 1 or _supports_workers(src):
                sources.append((label if w == 1 else f"{label}, {w} workers", src, w))
    for i in range(args.runs):
        for label, src, workers in sources:
            r = run(src, workers, args, versions, profile_path(args.profile, label, i))
            total = sum(len(v) for v in r["results"].values())
            print(f"\n{label}: {total / r['elapsed']:.0f} queries/s answered of {args.rate:.0f} offered, "
                  f"{args.clients} clients, {r['elapsed']:.1f} s; {len(r['errors'])} errors; "
                  f"API CPU {r['cpu'] / r['elapsed']:.2f} cores; {r['published']} publishes, "
                  f"{r['posted']} events posted meanwhile", flush=True)
            if r["errors"]:
                print("  first error:", r["errors"][0])
            print("| query | alone: asked again | alone: first asked | p50 under load | p99 under load | answered |")
            print("|---|---|---|---|---|---|")
            for kind in QUERIES:
                lat = np.array(r["results"].get(kind, [np.nan]))
                print(f"| {kind} | {r['single'][kind] * 1000:.1f} ms | {r['single'][kind + ' new'] * 1000:.1f} ms | "
                      f"{np.percentile(lat, 50) * 1000:.1f} ms | "
                      f"{np.percentile(lat, 99) * 1000:.1f} ms | {lat.size} |")
            every = np.concatenate([np.array(v) for v in r["results"].values()])
            print(f"| all | | | {np.percentile(every, 50) * 1000:.1f} ms | {np.percentile(every, 99) * 1000:.1f} ms "
                  f"| {every.size} |", flush=True)


if __name__ == "__main__":
    main()
