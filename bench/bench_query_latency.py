"""Query latency under load: p50/p99 per query kind at a target rate over concurrent
clients, while events are ingested and new sketch versions are published.

Starts a real Redis and the API (uvicorn, in a subprocess); declares streams with keys and
values and publishes summaries every second the way the worker does, with the Publisher of
the tree under test (``bench/_publish_loop.py``). Scenarios (``--scenario``): (a) one
stream of an hour (200 K events) publishing every second while 5 K events/s are posted
through the API; (b) 100 streams (20 K events each) publishing every second, queries
spread over them; (c) (b) with 1,000 alert rules. Reported per run: p50/p99/max, the CPU
of the API process and of its child processes (decoder; ingest, where the tree has them),
the bytes Redis sent per publish (INFO ``total_net_output_bytes``: the API's reads)
against the size of a whole blob, the child-process CPU per publish (decoding, and
validating posts where ingest processes do it), the events posted a second, and the
machine's load average as the run started. The load is open-loop: each of
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
        [--scenario a --scenario b --scenario c] [--src /tmp/before] [--workers 1 --workers 2]
        [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import time

import httpx
import numpy as np

from _common import KEY, ROOT, SECRET, cpu_seconds, profile, profile_path, redis_server, start_api, stop, table_of
from _http_load import Connection, paced
from _up_scenario import run_up
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

STREAM = "lat"
T0 = 1_700_000_000.0
EVENTS = 200_000
MANY, MANY_EVENTS, RULES = 100, 20_000, 1000  # scenarios (b) and (c)
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


async def _single(port: int, repeats: int = 20) -> dict:
    """One query at a time (no load): the latency a lone dashboard sees."""
    conn = await Connection(port, KEY).open()
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
    conn.close()
    return out


def _ingest(port: int, key: str, stop, counts) -> None:
    """In its own process (the load generator's event loop must not share a GIL with it):
    post 1,000 NDJSON events every 0.2 s (5 K events/s)."""
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


def _supports_workers(src: str) -> bool:
    return "--workers" in open(f"{src}/tidemark_cli/main.py").read()


def _prepared(path: str, versions: list[StreamSummary], events: int) -> str:
    """The blobs the publish loop sends (``bench/_publish_loop.py``), in a file."""
    with open(path, "wb") as f:
        pickle.dump({"config": versions[0].config.model_dump(), "events": events,
                     "clock": versions[-1].clock_seconds,
                     "blobs": [v.to_bytes() for v in versions]}, f)
    return path


def _published(count_file: str) -> int:
    try:
        return int(open(count_file).read() or 0)
    except (OSError, ValueError):
        return 0


def _own_cpu(pid: int) -> float:
    """CPU seconds of the process itself (not its decoder or ingest processes)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(src: str, workers: int, args, scenario: str, versions: list[StreamSummary],
        many: list[StreamSummary], profile_to: str | None) -> dict:
    """One scenario against the API of ``src``: (a) one stream publishing every second
    while 5 K events/s are posted, (b) 100 streams publishing every second, queries spread
    over them, (c) (b) with 1,000 alert rules (10 per stream, thresholds never crossed:
    every rule is evaluated on each publish of its stream, no webhook is due)."""
    names = [STREAM] if scenario == "a" else [f"m{i:03d}" for i in range(MANY)]
    with redis_server("tm-bench-latency-") as (redis, tmp):
        extra = ("--workers", str(workers)) if workers > 1 else ()
        api, port = start_api(src, redis.url, tmp, *extra, TIDEMARK_WEBHOOK_ALLOW_HOSTS='["127.0.0.1"]')
        loop = None
        try:
            c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=180,
                             headers={"Authorization": f"Bearer {KEY}"})
            for name in names:
                assert c.put(f"/v1/streams/{name}", json=CONFIG).status_code in (200, 201)
            if scenario == "c":
                for r in range(RULES):
                    got = c.post("/v1/alerts", json={
                        "stream": names[r % len(names)], "query": "count", "params": {"window": str(600 + r % 10)},
                        "op": ">", "threshold": 1e15, "webhook_url": "http://127.0.0.1:9/hook",
                        "secret": "x" * 16})
                    assert got.status_code in (200, 201), got.text
            chosen = versions if scenario == "a" else many
            blobs = _prepared(f"{tmp}/blobs.pickle", chosen, EVENTS if scenario == "a" else MANY_EVENTS)
            count_file = f"{tmp}/published"
            loop = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_publish_loop.py"), redis.url,
                                     blobs, count_file, *names],
                                    env={**os.environ, "PYTHONPATH": str(src)})
            deadline = time.monotonic() + 120
            while _published(count_file) < len(names) and time.monotonic() < deadline:
                time.sleep(0.1)  # its first round: every stream has a version
            paths = [f"/v1/streams/{n}/{q}" for n in names for q in QUERIES.values()]
            for path in paths:  # every stream's first read (the only one that may wait)
                c.get(path)
            single = asyncio.run(_single(port)) if scenario == "a" else {}
            ctx = multiprocessing.get_context("spawn")
            stop_event, counts = ctx.Event(), ctx.Array("q", 3)
            ingest = ctx.Process(target=_ingest, args=(port, KEY, stop_event, counts))
            if scenario == "a" and not args.quiet and not args.no_ingest:
                ingest.start()
                deadline = time.monotonic() + 120
                while counts[1] < 1 and not counts[2] and time.monotonic() < deadline:
                    time.sleep(0.1)  # its first post
            if args.quiet:
                loop.terminate()
                loop.wait()
            spy = profile(api.pid, args.seconds, profile_to) if profile_to else None
            r0 = _redis_out(redis.url)
            cpu, own, pub0 = cpu_seconds(api.pid), _own_cpu(api.pid), _published(count_file)
            asked = [(kind, f"/v1/streams/{n}/{q}") for n in names for kind, q in QUERIES.items()]
            results, errors, elapsed = asyncio.run(paced(port, KEY, asked, args.rate, args.clients, args.seconds))
            cpu, own = cpu_seconds(api.pid) - cpu, _own_cpu(api.pid) - own
            publishes = _published(count_file) - pub0
            sent = _redis_out(redis.url) - r0
            stop_event.set()
            if ingest.is_alive():
                ingest.join(60)
            if spy:
                spy.wait()
            return {"single": single, "results": results, "errors": errors, "elapsed": elapsed,
                    "cpu": cpu, "own_cpu": own, "published": publishes, "posted": counts[1],
                    "redis_out": sent, "blob": len(chosen[0].to_bytes())}
        finally:
            if loop is not None and loop.poll() is None:
                loop.terminate()
                loop.wait()
            stop(api)


def _commit(src: str) -> str:
    """The tree's commit (and ``+`` when it has changes not committed): what a row measured."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def _redis_out(url: str) -> int:
    """Bytes Redis has sent its clients so far (the API's reads, mostly)."""
    import redis as redis_py

    return int(redis_py.Redis.from_url(url).info("stats")["total_net_output_bytes"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2000.0, help="queries per second, all clients together")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--scenario", action="append", choices=["a", "b", "c", "up"],
                    help="(a) one stream, (b) 100 streams, (c) 100 streams and 1,000 rules, (up) `tidemark up` "
                    "with its worker (bench/_up_scenario.py); default a")
    ap.add_argument("--src", "--compare", action="append", default=[], dest="src",
                    help="another source tree whose API runs beside this one's in the same invocation (repeatable)")
    ap.add_argument("--up-rate", type=float, action="append", help="(up) paced rates, q/s (default 2000 and 500)")
    ap.add_argument("--backlog", type=int, default=100_000, help="(up) events counted before the load")
    ap.add_argument("--flat-seconds", type=float, default=10.0, help="(up) seconds of each flat-out run")
    ap.add_argument("--flood", type=int, default=2, help="(up) processes posting back to back in the flood")
    ap.add_argument("--quiet", action="store_true", help="no ingest and no new versions during the load")
    ap.add_argument("--no-ingest", action="store_true", help="(a) publishes but posts no events")
    ap.add_argument("--workers", type=int, action="append", help="API processes (repeatable; default 1)")
    ap.add_argument("--profile", help="directory for py-spy raw profiles of each run's API")
    args = ap.parse_args()
    args.up_rate = args.up_rate or [2000.0, 500.0]
    if args.scenario == ["up"]:
        return _main_up(args)
    versions = summaries()
    many = summaries(MANY_EVENTS)
    sources = []
    for label, src in [("this tree", str(ROOT))] + [(s, s) for s in args.src]:
        label = f"{label} @ {_commit(src)}"
        for w in args.workers or [1]:
            if w == 1 or _supports_workers(src):
                sources.append((label if w == 1 else f"{label}, {w} workers", src, w))
    rows = []
    for i in range(args.runs):
        for scenario in args.scenario or ["a"]:
            for label, src, workers in sources:
                load = os.getloadavg()[0]
                r = run(src, workers, args, scenario, versions, many,
                        profile_path(args.profile, f"{label}-{scenario}", i))
                total = sum(len(v) for v in r["results"].values())
                every = np.concatenate([np.array(v) for v in r["results"].values()])
                per = max(r["published"], 1)
                rows.append(
                    f"| ({scenario}) {label} | {total / r['elapsed']:.0f} / {args.rate:.0f} | "
                    f"{np.percentile(every, 50) * 1000:.1f} ms | {np.percentile(every, 99) * 1000:.1f} ms | "
                    f"{every.max() * 1000:.0f} ms | {r['own_cpu'] / r['elapsed']:.2f} + "
                    f"{(r['cpu'] - r['own_cpu']) / r['elapsed']:.2f} | {r['published']} | "
                    f"{r['redis_out'] / per / 1024:.0f} KB ({r['redis_out'] / per / r['blob'] * 100:.0f} %) | "
                    f"{(r['cpu'] - r['own_cpu']) / per * 1000:.1f} ms | {len(r['errors'])} | "
                    f"{r['posted'] / r['elapsed'] / 1000:.1f} K/s | {load:.1f} |")
                print(f"\n{label} ({scenario}): {total / r['elapsed']:.0f} queries/s answered of "
                      f"{args.rate:.0f} offered, {args.clients} clients, {r['elapsed']:.1f} s; "
                      f"{len(r['errors'])} errors; {r['published']} publishes, {r['posted']} events posted",
                      flush=True)
                if r["errors"]:
                    print("  first error:", r["errors"][0])
                if r["single"]:
                    print("| query | alone: asked again | alone: first asked | p50 under load | p99 under load | answered |")
                    print("|---|---|---|---|---|---|")
                    for kind in QUERIES:
                        lat = np.array(r["results"].get(kind, [np.nan]))
                        print(f"| {kind} | {r['single'][kind] * 1000:.1f} ms | {r['single'][kind + ' new'] * 1000:.1f} ms | "
                              f"{np.percentile(lat, 50) * 1000:.1f} ms | "
                              f"{np.percentile(lat, 99) * 1000:.1f} ms | {lat.size} |", flush=True)
    print(f"\n{' '.join(sys.argv)}\n(a): one stream publishing every second, 5 K events/s posted as NDJSON "
          "unless --no-ingest/--quiet; (b) 100 streams; (c) (b) with 1,000 alert rules. Latency from the "
          "scheduled send; 'load' is the machine's 1-minute load average as the run started (2 cores: "
          "above ~2, other work shares them).")
    print("\n| scenario, tree @ commit | answered / offered q/s | p50 | p99 | max | API CPU (cores: API + "
          "decoder and ingest processes) | publishes | read from Redis per publish (of the blob) "
          "| child-process CPU per publish | errors | posted | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows), flush=True)


def _main_up(args) -> None:
    """Scenario (up) alone: each tree's `tidemark up` in turn, ``--runs`` times."""
    rows, probes = [], []
    trees = [("this tree", str(ROOT))] + [(src, src) for src in args.src]
    for i in range(args.runs):
        for label, src in trees:
            label = f"{label} @ {_commit(src)}"
            r = run_up(src, args)
            ph = r["phases"]
            cells = [f"{ph['healthz']['result'][0]:,.0f}", f"{ph['cached']['result'][0]:,.0f}"]
            for rate in args.up_rate:
                results, errors, elapsed = ph[f"{rate:.0f} q/s"]["result"]
                every = np.concatenate([np.array(v) for v in results.values()])
                answered = every.size / elapsed
                cells.append(f"{answered:,.0f} / {np.percentile(every, 50) * 1000:.1f} / "
                             f"{np.percentile(every, 99) * 1000:.1f} / {every.max() * 1000:.0f} ms"
                             + (f" ({len(errors)} errors)" if errors else ""))
            cells.append(f"{ph[f'{args.up_rate[0]:.0f} q/s']['api_cores']:.2f}")
            cells.append(" / ".join(f"{ph[f'{rate:.0f} q/s']['stall']:.0f}" for rate in args.up_rate))
            worst = {}
            for path, got in r["probes"].items():
                for name, p in ph.items():
                    inside = [s for t, s, _ in got if p["from"] <= t <= p["to"]]
                    worst[(path, name)] = max(inside) * 1000 if inside else float("nan")
            cells.append(" / ".join(f"{max(worst[(path, n)] for n in ph if n != 'ingest flood'):.0f}"
                                    for path in ("/healthz", "/readyz")))
            cells.append(" / ".join(f"{worst[(path, 'ingest flood')]:.0f}" for path in ("/healthz", "/readyz")))
            cells.append(f"{ph[f'{args.up_rate[0]:.0f} q/s']['posted'] / 1000:.1f} K/s")
            cells.append(f"{r['processes']}: {r['rss']:,.0f} / {r['pss']:,.0f} MB")
            cells.append(f"{ph['healthz']['load']:.1f}")
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
            print(f"{label}: worst probe by phase (ms, /healthz / /readyz): " + "; ".join(
                f"{n} {worst[('/healthz', n)]:.0f} / {worst[('/readyz', n)]:.0f}" for n in ph), flush=True)
            print(rows[-1], flush=True)
    rates = " | ".join(f"{r:.0f} q/s: answered/s / p50 / p99 / max" for r in args.up_rate)
    print(f"\n{' '.join(sys.argv)}\n(up): `tidemark up` (defaults, its Spark worker) of each tree in turn; one "
          f"stream, {args.backlog:,} events of backlog, 5,000 events/s posted in 1,000-event NDJSON posts "
          f"throughout; {args.clients} kept-alive connections; flat-out runs {args.flat_seconds:.0f} s, paced "
          f"runs {args.seconds:.0f} s; probes every 0.1 s; memory of the API service's processes at the end.")
    print(f"\n| tree @ commit | /healthz flat out /s | cached answer flat out /s | {rates} | API cores at "
          f"{args.up_rate[0]:.0f} q/s | longest loop stall at {' / '.join(f'{r:.0f}' for r in args.up_rate)} q/s (ms) | worst /healthz / /readyz during the load (ms) | the same during an "
          f"ingest flood ({args.flood} posters back to back) | posted | API processes: RSS / PSS | load |")
    print("|---|" + "---|" * (9 + len(args.up_rate)))
    print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
