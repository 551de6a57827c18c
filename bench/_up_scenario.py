"""Scenario (up) of ``bench_query_latency.py``: the API as a new user runs it, with
``tidemark up``'s defaults and its real Spark worker on the same machine.

One stream (max_window 1 h) is given a backlog (``--backlog`` events over the last 50
minutes, counted by the worker before the load), then takes 5,000 events/s in
1,000-event NDJSON posts (one every 0.2 s) through the API for the whole run, while:

1. 50 kept-alive clients ask count, sum, frequency, heavy hitters and quantiles,
   open-loop, at each of ``--up-rate`` (2,000 and 500 queries/s by default);
2. ``/healthz`` is asked flat out over 50 kept-alive connections;
3. one answer (``count?window=600``, kept by the API) is asked flat out the same way;
4. ingest is flooded (``--flood`` processes posting 1,000-event bodies back to back;
   ``429`` taken as an answer) while nothing else asks.

Each phase starts once the worker has caught up with the posts (a flat-out phase leaves
it behind on two cores), so every phase meets the steady state.

Throughout, a probe process asks ``/healthz`` and ``/readyz`` every 0.1 s each on
connections of its own, so their worst latency per phase shows whether a probe ever
waits behind ingest or queries. At the end: the API processes' resident memory (RSS)
and proportional share (PSS: shared pages split between the processes sharing them,
what they hold together), the CPU of the API processes per phase, and after each phase
the longest event-loop stall of its last 30 s any API process reports on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from _common import KEY, cpu_of, start_up, stop_up
from _http_load import flat_out, paced, probe

__all__ = ["run_up", "api_pids", "memory"]

STREAM = "live"
QUERIES = {
    "count": "count?window=600",
    "sum": "sum?window=600",
    "frequency": "frequency?window=600&key=k1",
    "heavy-hitters": "heavy-hitters?window=600&phi=0.01",
    "quantiles": "quantiles?window=600&q=0.5,0.99",
}
CACHED = f"/v1/streams/{STREAM}/count?window=600"


def _tree(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            for child in Path(task, "children").read_text().split():
                out += _tree(int(child))
        except OSError:
            continue
    return out


def api_pids(up: int) -> list[int]:
    """The API service's processes under ``tidemark up`` (its parent, its API processes
    and their helper processes)."""
    for pid in _tree(up):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tidemark_cli" in cmd and b"api" in cmd:
            return _tree(pid)
    return []


def memory(pids: list[int]) -> tuple[float, float]:
    """(RSS, PSS) of ``pids`` together, MB."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024


def _body(rng, n: int, start: float, end: float) -> str:
    ts = np.sort(rng.uniform(start, end, n))
    keys = rng.zipf(1.3, n) % 500
    values = np.minimum(rng.lognormal(3, 1, n), 1000.0)
    return "\n".join(f'{{"ts":{t:.3f},"key":"k{k}","value":{v:.3f}}}' for t, k, v in zip(ts, keys, values))


def _poster(port: int, key: str, stop, counts, every: float, seed: int) -> None:
    """In its own process (``key``: this run's, which a spawned process would draw anew):
    a 1,000-event NDJSON post every ``every`` s (0: back to back), events of the last
    second; counts[0] events accepted, counts[1] posts refused."""
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                      headers={"Authorization": f"Bearer {key}", "content-type": "application/x-ndjson"}) as c:
        next_at = time.monotonic()
        while not stop.is_set():
            now = time.time()
            r = c.post(f"/v1/streams/{STREAM}/events", content=_body(rng, 1000, now - 1, now))
            if r.status_code == 202:
                counts[0] += r.json()["accepted"]
            else:
                counts[1] += 1
                if counts[1] == 1:
                    print(f"post: {r.status_code} {r.text[:200]}", flush=True)
            if every:
                next_at += every
                stop.wait(max(0.0, next_at - time.monotonic()))


def _prober(port: int, out: str, stop) -> None:
    """In its own process: /healthz and /readyz every 0.1 s each, (time, path, seconds,
    status) lines into ``out``."""
    async def run():
        done = asyncio.Event()

        async def watch():
            while not stop.is_set():
                await asyncio.sleep(0.05)
            done.set()

        watcher = asyncio.create_task(watch())
        found = await probe(port, ["/healthz", "/readyz"], 0.1, done)
        await watcher
        return found

    found = asyncio.run(run())
    Path(out).write_text(json.dumps(found))


def _backlog(port: int, events: int) -> None:
    """``events`` over the last 50 minutes, in order, in 1,000-event posts (429s retried)."""
    rng = np.random.default_rng(11)
    now = time.time()
    posts = max(events // 1000, 1)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                      headers={"Authorization": f"Bearer {KEY}", "content-type": "application/x-ndjson"}) as c:
        for i in range(posts):
            start = now - 3000 + i * 3000 / posts
            body = _body(rng, 1000, start, start + 3000 / posts)
            while (r := c.post(f"/v1/streams/{STREAM}/events", content=body)).status_code == 429:
                time.sleep(float(r.headers.get("retry-after", "1")))
            assert r.status_code == 202, r.text


def _wait(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _counted(base: str, events: int) -> bool:
    try:
        status = httpx.get(f"{base}/v1/streams/{STREAM}", headers={"Authorization": f"Bearer {KEY}"},
                           timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return False
    return (status.get("status") or status).get("events", 0) >= events


def _caught_up(base: str) -> bool:
    """Is the worker within two seconds of the posts (a flat-out phase may leave it behind;
    the next phase starts from a steady state)?"""
    try:
        lag = httpx.get(f"{base}/readyz", timeout=5).json().get("lag", {})
    except (httpx.HTTPError, ValueError):
        return False
    return lag.get("pending_events", 0) <= 10_000


def _stall(base: str, tries: int = 12) -> float:
    """The longest event-loop stall of the last 30 s any API process reports (ms; each
    new connection may reach another process; NaN where the tree has no such metric)."""
    found = float("nan")
    for _ in range(tries):
        try:
            text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith("tidemark_event_loop_stall_seconds "):
                value = float(line.split()[1]) * 1000
                found = value if found != found else max(found, value)
    return found


def run_up(src: str, args) -> dict:
    """The scenario against ``tidemark up`` from ``src``: figures by phase."""
    ctx = multiprocessing.get_context("spawn")
    tmp, port, up = start_up(src, STREAM, "tm-bench-up-")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(up.stdout), daemon=True).start()  # never let its pipe fill
    base = f"http://127.0.0.1:{port}"
    stop, posters = ctx.Event(), []
    try:
        _wait("ready", lambda: _ready(base), 300)
        _backlog(port, args.backlog)
        _wait("backlog counted", lambda: _counted(base, args.backlog), 300)
        counts = ctx.Array("q", 2)
        live = ctx.Process(target=_poster, args=(port, KEY, stop, counts, 0.2, 1))
        live.start()
        posters.append(live)
        paths = [(kind, f"/v1/streams/{STREAM}/{q}") for kind, q in QUERIES.items()]
        time.sleep(3)
        for _, path in paths:  # the first read of each question
            httpx.get(f"{base}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        pids = api_pids(up.pid)
        probe_stop = ctx.Event()
        probe_out = f"{tmp}/probe.json"
        prober = ctx.Process(target=_prober, args=(port, probe_out, probe_stop))
        prober.start()
        time.sleep(1)
        out: dict = {"phases": {}, "processes": len(pids)}

        def phase(name: str, work):
            cpu0, posted0, t0 = cpu_of(api_pids(up.pid)), counts[0], time.time()
            result = work()
            t1 = time.time()
            out["phases"][name] = {"result": result, "from": t0, "to": t1, "stall": _stall(base),
                                   "api_cores": (cpu_of(api_pids(up.pid)) - cpu0) / (t1 - t0),
                                   "posted": (counts[0] - posted0) / (t1 - t0), "load": os.getloadavg()[0]}

        for rate in args.up_rate:
            _wait("the worker caught up", lambda: _caught_up(base), 120)
            phase(f"{rate:.0f} q/s", lambda rate=rate: asyncio.run(
                paced(port, KEY, paths, rate, args.clients, args.seconds)))
        _wait("the worker caught up", lambda: _caught_up(base), 120)
        phase("healthz", lambda: asyncio.run(flat_out(port, None, "/healthz", args.clients, args.flat_seconds)))
        _wait("the worker caught up", lambda: _caught_up(base), 120)
        phase("cached", lambda: asyncio.run(flat_out(port, KEY, CACHED, args.clients, args.flat_seconds)))
        _wait("the worker caught up", lambda: _caught_up(base), 120)
        flood_stop = ctx.Event()
        flood = [ctx.Process(target=_poster, args=(port, KEY, flood_stop, counts, 0.0, 100 + i)) for i in range(args.flood)]

        def flooded():
            for p in flood:
                p.start()
            time.sleep(args.flat_seconds)
            flood_stop.set()
            for p in flood:
                p.join(60)
            return None

        phase("ingest flood", flooded)
        rss, pss = memory(api_pids(up.pid))
        out["rss"], out["pss"] = rss, pss
        probe_stop.set()
        prober.join(60)
        found = json.loads(Path(probe_out).read_text())
        out["probes"] = found
        return out
    finally:
        stop.set()
        for p in posters:
            p.join(30)
        stop_up(up)
