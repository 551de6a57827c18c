"""The API's CPU per request, by route and by stage: where a ``/healthz``, a kept answer,
an answer computed the full way and a ``/readyz`` spend their time.

A real Redis, one stream's summary (200,000 events over an hour) published the way the
worker does, and ``tidemark api --workers 1`` of this tree (``--compare TREE``: that
tree's after it, same load). Each route is asked flat out over ``--clients`` kept-alive
connections for ``--seconds`` while py-spy samples the API process (``--native`` off:
Python frames; time in C called from a frame counts to that frame) 200 times a second.
CPU per request = the API process's CPU seconds / requests answered. Each sample is put
in the first stage (top of the stack down) whose pattern one of its frames matches:

* **http parse / write**: uvicorn's protocol (``httptools_impl``), parsing the request and
  writing the head and body to the socket;
* **event loop**: asyncio / uvloop scheduling, tasks, callbacks;
* **host + key check**: ``first_headers``, ``presented_key``, ``Keychain.principal``;
* **lookup**: the fast paths' dict lookups and version checks (``answer_cache``);
* **metrics**: prometheus_client;
* **middleware + routing**: Starlette's middleware stack, routing and FastAPI's dependency
  solving and parameter parsing;
* **answer**: computing an answer (``app.answers``, ``app.kinds``, ``sketches``);
* **rendering**: JSON encoding (``jsonable_encoder``, ``json``, ``JSONResponse``);
* **thread pool**: handing a plain ``def`` route to a thread (anyio);
* **redis**: redis-py;
* **other**: the rest, and idle samples are left out.

A sample counts to the stage of its innermost frame that names one.

    .venv/bin/python bench/bench_request_cpu.py [--seconds 8] [--clients 50] [--compare /work/prev]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import subprocess
import sys
import time
from pathlib import Path

import httpx

from _common import KEY, ROOT, cpu_seconds, redis_server, start_api, stop
from _http_load import flat_out

STREAM = "cpu"
ROUTES = {
    "/healthz": ("/healthz", None),
    "kept answer (count)": (f"/v1/streams/{STREAM}/count?window=600", KEY),
    "kept answer (heavy hitters)": (f"/v1/streams/{STREAM}/heavy-hitters?window=600&phi=0.01", KEY),
    "answer computed (count, a new instant each)": (lambda i: f"/v1/streams/{STREAM}/count?window=600&at={_at(i)}", KEY),
    "answer computed (heavy hitters, a new instant each)": (
        lambda i: f"/v1/streams/{STREAM}/heavy-hitters?window=600&phi=0.01&at={_at(i)}", KEY),
    "/readyz": ("/readyz", None),
    "stream status": (f"/v1/streams/{STREAM}", KEY),
}
def _at(i: int) -> str:
    """An instant inside the summary's hour not asked before (each answer computed)."""
    return f"{1_700_001_800 + (i % 100_000) * 0.01:.2f}"


STAGES = [  # (stage, patterns), in the order they are tried on each frame
    ("redis", ("redis/",)),
    ("metrics", ("prometheus_client",)),
    ("rendering", ("jsonable_encoder", "json/encoder", "json/__init__", "JSONResponse", "render (")),
    ("answer", ("app/answers", "app/kinds", "sketches/", "tidemark/ticks", "tidemark/summary")),
    ("host + key check", ("first_headers", "presented_key", "principal (", "_digest", "authorize")),
    ("lookup", ("answer_cache", "summary_cache", "fast_reads", "readiness")),
    ("thread pool", ("anyio", "to_thread", "concurrent/futures", "threading")),
    ("middleware + routing", ("starlette/", "fastapi/")),
    ("http parse / write", ("httptools_impl", "uvicorn/")),
    ("event loop", ("asyncio/", "uvloop", "run_forever")),
]


def _stage(stack: list[str]) -> str:
    """The stage of the innermost frame that names one (a sample in uvicorn's send called
    from a fast path is writing, not looking up)."""
    for frame in reversed(stack):
        for stage, patterns in STAGES:
            if any(p in frame for p in patterns):
                return stage
    return "other"


def _profile(pid: int, seconds: float, out: str) -> subprocess.Popen:
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "-p", str(pid), "-d", str(max(int(seconds), 1)), "-r", "200",
                             "-f", "raw", "-o", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stages(raw: str) -> collections.Counter:
    """Samples per stage of a py-spy raw profile (idle samples left out)."""
    found: collections.Counter = collections.Counter()
    for line in Path(raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames and any(w in frames[-1] for w in ("select (", "_run_once (", "wait (", "poll (")) \
                and "httptools" not in stack:
            continue  # waiting, not working
        found[_stage(frames)] += int(count)
    return found


def measure(src: str, redis_url: str, tmp: str, args) -> dict:
    api, port = start_api(src, redis_url, tmp, "--workers", "1")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {KEY}"},
                          timeout=60) as c:
            for _ in range(2):  # the first read of the stream, kernels, the kept answers
                for path, _ in ROUTES.values():
                    c.get(path(0) if callable(path) else path)
                time.sleep(1)
        out = {}
        for route, (path, key) in ROUTES.items():
            raw = f"{tmp}/{Path(src).name}-{route.replace('/', '').replace(' ', '_')}.txt"
            spy = _profile(api.pid, args.seconds, raw)
            time.sleep(0.5)
            cpu0, t0 = cpu_seconds(api.pid), time.perf_counter()
            rate, errors = asyncio.run(flat_out(port, key, path, args.clients, args.seconds - 1))
            cpu = cpu_seconds(api.pid) - cpu0
            answered = rate * (time.perf_counter() - t0)
            spy.wait()
            stages = _stages(raw) if Path(raw).exists() else collections.Counter()
            out[route] = {"rate": rate, "errors": errors, "cpu_ms": cpu / max(answered, 1) * 1000,
                          "stages": stages}
        return out
    finally:
        stop(api)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--compare", help="another source tree measured after this one, same load")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_query_latency import CONFIG, EVENTS, summaries
    from workers.publish import Publisher

    summary = summaries(versions=1)[0]
    trees = [str(ROOT)] + ([args.compare] if args.compare else [])
    results = {}
    with redis_server("tm-bench-cpu-") as (redis, tmp):
        api, port = start_api(ROOT, redis.url, tmp, "--workers", "1")
        try:  # the stream, declared as a user does, and its summary published as the worker does
            assert httpx.put(f"http://127.0.0.1:{port}/v1/streams/{STREAM}", json=CONFIG,
                             headers={"Authorization": f"Bearer {KEY}"}).status_code in (200, 201)
            Publisher(redis.url).publish_summary(STREAM, summary, version=1, events=EVENTS)
        finally:
            stop(api)
        for src in trees:
            results[src] = measure(src, redis.url, tmp, args)
    names = [s for s, _ in STAGES] + ["other"]
    print(f"\n{' '.join(sys.argv)}\n")
    print("| route | tree | answered/s (1 process, flat out) | CPU per request | " + " | ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for route in ROUTES:
        for src in trees:
            r = results[src][route]
            total = sum(r["stages"].values()) or 1
            label = "this tree" if src == str(ROOT) else src
            shares = " | ".join(f"{r['stages'][n] / total * r['cpu_ms'] * 1000:.0f} µs" if r["stages"][n] else "–"
                                for n in names)
            refused = f" ({r['errors']} non-200)" if r["errors"] else ""
            print(f"| {route} | {label} | {r['rate']:,.0f}{refused} | "
                  f"{r['cpu_ms'] * 1000:.0f} µs | {shares} |", flush=True)


if __name__ == "__main__":
    main()
