"""Federated streams across sites (contract §11, issue #35): bytes shipped between sites,
federated query latency against a local one, and how stale a federated answer is.

    .venv/bin/python bench/bench_federation.py [--sites 3,16] [--streams 100,10]
        [--rate 100] [--seconds 30] [--window 300] [--pull-interval 1]

For each site count N (paired with a stream count S): N sites, each a real Redis and a
``tidemark api`` process, and a federating ``tidemark api`` (its own Redis) that knows them
all (``TIDEMARK_SITES``). S streams are declared at every site and federated at home over
the N sites. Feeder processes (two: the machine has two cores) build each (site, stream)
summary by the worker's update path (``workers.update.update_shard``) from ``--rate`` events
per second per stream (so a site takes S × rate events/s) and publish it every second as the
worker does (``workers.publish.Publisher``), after filling ``--window`` seconds of history
first (the summaries' steady size). Spark is not run: it would take the machine's two cores
for one site; the update path is the worker's own.

Measured over ``--seconds`` of feeding, while a reader asks every federated stream once in
a while (a stream nobody reads is not pulled):

* bytes home received per site per second (``tidemark_site_pulled_bytes`` in home's
  ``/metrics``: bodies as sent) against the Arrow bytes of the events that site summarised
  (the ingest chunks ``tidemark.chunks.encode_chunk`` makes of them);
* query latency, ``count`` and ``quantiles`` with a fresh window each time (no answer is
  cached), interleaved: home over the N sites (federated) and one site (local);
* staleness: for a probe stream, each site's new version from its publish (``updated_at``)
  to the first federated answer whose ``as_of.sites`` shows it, and to the site's own
  answer showing it (the site's own, here: publish → its API; a worker adds its batch).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from _common import HEADERS, KEY, ROOT, SECRET, api_env, run_dir, stop, wait_healthy
from tidemark.redis_server import EmbeddedRedis, free_port

SETTINGS = {"epsilon": 0.05, "delta": 0.05}


def _settings(window: int) -> dict:
    return {"max_window": window, **SETTINGS}


def feed(sites: list[tuple[int, str, str]], streams: list[str], rate: int, window: int, seconds: float,
         start, out, arrow) -> None:
    """A feeder process: fill ``window`` seconds of history, publish, say so, then from the
    wall-clock time the driver puts in ``start`` one batch of ``rate`` events per stream
    every second for ``seconds``."""
    from tidemark.chunks import encode_chunk
    from tidemark.streams import StreamConfig
    from workers.publish import Publisher
    from workers.update import Chunk, update_shard

    config = StreamConfig.model_validate(_settings(window))
    rng = np.random.default_rng(os.getpid())
    publishers = {site: Publisher(url) for _, site, url in sites}
    index = {site: i for i, site, _ in sites}
    state: dict = {}
    version = {}

    def batch(site, name, t0, n_seconds, count_bytes):
        n = rate * n_seconds
        ts = t0 + np.sort(rng.uniform(0, n_seconds, n))
        keys = [f"/page/{k}" for k in rng.zipf(1.3, n) % 2000]
        values = rng.lognormal(4, 1, n)
        payload = encode_chunk(ts, keys, values, np.ones(n))
        if count_bytes:  # shared with the driver, which reads it when it reads home's bytes
            with arrow.get_lock():
                arrow[index[site]] += len(payload)
        summary, clock, events = state.get((site, name), (None, -np.inf, 0))
        result = update_shard(summary, config, SECRET, [Chunk(payload, clock)])
        state[(site, name)] = (result.summary, float(ts.max()), events + result.events)
        v = version[(site, name)] = version.get((site, name), 0) + 1
        status = {"version": v, "events": events + result.events, "late_dropped": 0, "clock": float(ts.max()),
                  "sizes": result.sizes, "failed": None, "failed_events": 0,
                  "updated_at": dt.datetime.now(dt.timezone.utc).isoformat()}
        publishers[site].publish(name, 0, status, result.blob, config.model_dump())

    now = time.time()
    for _, site, _ in sites:  # history: the summaries' steady size
        for name in streams:
            batch(site, name, now - window, window, False)
    out.put(("ready", None))
    while not start.value:
        time.sleep(0.05)
    start_at = start.value
    time.sleep(max(0.0, start_at - time.time()))
    behind = 0
    for r in range(int(seconds)):
        round_at = start_at + r
        for _, site, _ in sites:
            for name in streams:
                batch(site, name, round_at, 1, True)
        late = time.time() - (round_at + 1)
        behind = max(behind, late)
        time.sleep(max(0.0, round_at + 1 - time.time()))
    out.put(("done", {"behind": behind}))


def _start_site(name: str) -> dict:
    redis = EmbeddedRedis(Path(run_dir(f"tm-fed-{name}-")) / "redis").start()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", redis.url, "--port", str(port)],
                            env=api_env(ROOT, run_dir(f"tm-fed-{name}-run-"), TIDEMARK_INGEST_PROCESSES="0"),
                            cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"name": name, "redis": redis, "port": port, "proc": proc, "url": f"http://127.0.0.1:{port}"}


def _pulled_bytes(client: httpx.Client) -> dict[str, float]:
    text = client.get("/metrics").text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'tidemark_site_pulled_bytes\{site="([^"]+)"\} (\S+)', text)}


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))] if xs else float("nan")


def run(n_sites: int, n_streams: int, rate: int, seconds: float, window: int, pull_interval: float) -> dict:
    names = [f"s{i:03d}" for i in range(n_streams)]
    sites = [_start_site(f"site-{i}") for i in range(n_sites)]
    home_redis = EmbeddedRedis(Path(run_dir("tm-fed-home-")) / "redis").start()
    home_port = free_port()
    peers = [{"name": s["name"], "url": s["url"], "key": KEY} for s in sites]
    home = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", home_redis.url,
                             "--port", str(home_port)],
                            env=api_env(ROOT, run_dir("tm-fed-home-run-"), TIDEMARK_SITES=json.dumps(peers),
                                        TIDEMARK_SITE_PULL_INTERVAL=str(pull_interval), TIDEMARK_INGEST_PROCESSES="0"),
                            cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    home_url = f"http://127.0.0.1:{home_port}"
    feeders = []
    try:
        for s in sites:
            wait_healthy(s["url"], s["proc"])
        wait_healthy(home_url, home)
        for s in sites:
            with httpx.Client(base_url=s["url"], headers=HEADERS, timeout=30) as c:
                for name in names:
                    assert c.put(f"/v1/streams/{name}", json=_settings(window)).status_code in (200, 201)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        groups = [[(i, s["name"], s["redis"].url) for i, s in enumerate(sites)][j::2] for j in range(2)]
        arrow = ctx.Array("d", n_sites)
        start = ctx.Value("d", 0.0)
        for group in groups:
            if group:
                p = ctx.Process(target=feed, args=(group, names, rate, window, seconds, start, out, arrow))
                p.start()
                feeders.append(p)
        for _ in feeders:  # each has filled and published its history
            assert out.get(timeout=1800)[0] == "ready"
        with httpx.Client(base_url=home_url, headers=HEADERS, timeout=60) as c:
            for name in names:  # declared at home over every site (each site's manifest checked)
                r = c.put(f"/v1/streams/{name}", json={**_settings(window), "sites": [s["name"] for s in sites]})
                assert r.status_code in (200, 201), r.text
            for name in names:  # read once: pulled from now on
                c.get(f"/v1/streams/{name}/count")
        start_at = start.value = time.time() + 3
        stop_reading = threading.Event()
        lat = {("home", "count"): [], ("home", "quantiles"): [], ("local", "count"): [], ("local", "quantiles"): []}
        seen: dict = {}

        def reader():
            """Every federated stream asked every few seconds (kept pulled), the latency
            sample interleaved home / one site."""
            i = 0
            with httpx.Client(base_url=home_url, headers=HEADERS, timeout=30) as h, \
                    httpx.Client(base_url=sites[0]["url"], headers=HEADERS, timeout=30) as l:
                while not stop_reading.is_set():
                    name = names[i % len(names)]
                    for where, client in (("home", h), ("local", l)):
                        for kind, extra in (("count", {}), ("quantiles", {"q": "0.5,0.99"})):
                            params = {"window": str(60 + i % 200), **extra}
                            t = time.perf_counter()
                            r = client.get(f"/v1/streams/{name}/{kind}", params=params)
                            lat[(where, kind)].append(time.perf_counter() - t)
                            assert r.status_code == 200, r.text
                    i += 1
                    time.sleep(max(0.0, 2.0 / len(names) - 0.001))

        def prober():
            """Stream s000: when each site's new version shows at home, and at the site."""
            with httpx.Client(base_url=home_url, headers=HEADERS, timeout=30) as h:
                own = [httpx.Client(base_url=s["url"], headers=HEADERS, timeout=30) for s in sites[:3]]
                while not stop_reading.is_set():
                    now = time.time()
                    body = h.get("/v1/streams/s000/count").json()
                    for site, a in body["as_of"]["sites"].items():
                        seen.setdefault(("home", site, a["sketch_version"]), (now, a["updated_at"]))
                    for s, c in zip(sites[:3], own):
                        a = c.get("/v1/streams/s000/count").json()["as_of"]
                        seen.setdefault(("own", s["name"], a["sketch_version"]), (time.time(), a["updated_at"]))
                    time.sleep(0.1)
                for c in own:
                    c.close()

        threads = [threading.Thread(target=reader, daemon=True), threading.Thread(target=prober, daemon=True)]
        with httpx.Client(base_url=home_url, headers=HEADERS, timeout=30) as c:
            time.sleep(max(0.0, start_at - time.time()))
            for t in threads:
                t.start()
            time.sleep(3)  # the first rounds' pulls settle
            b0, a0, t0 = _pulled_bytes(c), list(arrow), time.monotonic()
            time.sleep(max(1.0, seconds - 6))
            b1, a1, t1 = _pulled_bytes(c), list(arrow), time.monotonic()
        done = [out.get(timeout=120) for _ in feeders]
        stop_reading.set()
        for t in threads:
            t.join(10)
        behind = max(d["behind"] for _, d in done)
        # both over the same seconds: what home received, what the sites summarised meanwhile
        per_site = {s["name"]: (b1.get(s["name"], 0) - b0.get(s["name"], 0)) / (t1 - t0) for s in sites}
        arrow_rate = {s["name"]: (a1[i] - a0[i]) / (t1 - t0) for i, s in enumerate(sites)}

        def stale(where):
            out = []
            for (w, site, version), (at, updated) in seen.items():
                if w == where and updated:
                    published = dt.datetime.fromisoformat(updated).timestamp()
                    if published >= start_at:
                        out.append(at - published)
            return out

        return {"sites": n_sites, "streams": n_streams, "rate": rate, "window": window,
                "shipped_per_site": statistics.mean(per_site.values()),
                "arrow_per_site": statistics.mean(arrow_rate.values()),
                "latency": {f"{w}/{k}": (_quantile(v, 0.5), _quantile(v, 0.99), len(v)) for (w, k), v in lat.items()},
                "stale_home": (_quantile(stale("home"), 0.5), _quantile(stale("home"), 0.95), len(stale("home"))),
                "stale_own": (_quantile(stale("own"), 0.5), _quantile(stale("own"), 0.95), len(stale("own"))),
                "feeder_behind": behind, "load": os.getloadavg()[0]}
    finally:
        for p in feeders:
            p.terminate()
        stop(home)
        home_redis.stop()
        for s in sites:
            stop(s["proc"])
            s["redis"].stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sites", default="3,16")
    p.add_argument("--streams", default="100,10", help="streams per site, paired with --sites")
    p.add_argument("--rate", type=int, default=100, help="events per second per stream")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--window", type=int, default=300, help="streams' max_window, seconds (history filled first)")
    p.add_argument("--pull-interval", type=float, default=1.0)
    args = p.parse_args()
    rows = []
    for n, s in zip(map(int, args.sites.split(",")), map(int, args.streams.split(","))):
        r = run(n, s, args.rate, args.seconds, args.window, args.pull_interval)
        rows.append(r)
        print(json.dumps(r), flush=True)
    print("\n| sites | streams/site | events/s per site | shipped B/s per site | events' Arrow B/s per site | ratio "
          "| federated count p50/p99 ms | local count p50/p99 ms | federated quantiles p50/p99 ms "
          "| local quantiles p50/p99 ms | staleness federated p50/p95 s | site's own p50/p95 s | feeder behind s | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["latency"]
        ms = lambda k: f"{lat[k][0] * 1000:.1f} / {lat[k][1] * 1000:.1f}"  # noqa: E731
        print(f"| {r['sites']} | {r['streams']} | {r['streams'] * r['rate']:,} | {r['shipped_per_site']:,.0f} "
              f"| {r['arrow_per_site']:,.0f} | {r['shipped_per_site'] / max(r['arrow_per_site'], 1):.2f} "
              f"| {ms('home/count')} | {ms('local/count')} | {ms('home/quantiles')} | {ms('local/quantiles')} "
              f"| {r['stale_home'][0]:.2f} / {r['stale_home'][1]:.2f} | {r['stale_own'][0]:.2f} / {r['stale_own'][1]:.2f} "
              f"| {r['feeder_behind']:.1f} | {r['load']:.1f} |")


if __name__ == "__main__":
    main()
