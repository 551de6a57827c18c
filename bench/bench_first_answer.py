"""First answer: ``tidemark up`` → ``/readyz`` → the first posted event visible in an answer.

Runs ``tidemark up`` (embedded Redis, the Spark worker, the API) from a source tree in a
fresh run directory with one declared stream, waits for ``/readyz``, posts one event and
polls its count until it is counted. ``--fresh`` first deletes Numba's compiled-kernel
cache (``sketches/__pycache__/*.nbi|*.nbc``), as on a first start of a machine. The output
timeline stamps every log line of ``tidemark up`` (seconds since start), which says
where the time goes.

    .venv/bin/python bench/bench_first_answer.py [--fresh] [--src DIR] [--log]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import httpx

from _common import HEADERS, start_up, stop_up

HERE = str(Path(__file__).resolve().parents[1])


def clear_kernel_cache(src: str) -> int:
    files = [p for ext in ("*.nbi", "*.nbc") for p in Path(src, "sketches").rglob(ext)]
    for p in files:
        p.unlink()
    return len(files)


def run(src: str, fresh: bool, show_log: bool) -> dict:
    cleared = clear_kernel_cache(src) if fresh else 0
    started = time.perf_counter()
    _, port, up = start_up(src, "first", "tm-bench-first-")
    log: list[tuple[float, str]] = []

    def read():
        for line in up.stdout:
            log.append((time.perf_counter() - started, line.rstrip()))

    threading.Thread(target=read, daemon=True).start()
    out = {"cleared": cleared}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5,
                          headers=HEADERS) as c:
            while True:
                if up.poll() is not None or time.perf_counter() - started > 300:
                    raise RuntimeError("tidemark up did not get ready:\n" + "\n".join(l for _, l in log[-30:]))
                try:
                    if c.get("/readyz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            out["ready"] = time.perf_counter() - started
            r = c.post("/v1/streams/first/events", json=[{"ts": time.time(), "key": "a", "value": 1.0}])
            assert r.status_code == 202, r.text
            out["posted"] = time.perf_counter() - started
            while True:
                if time.perf_counter() - started > 400:
                    raise RuntimeError("the event never became visible")
                try:
                    body = c.get("/v1/streams/first/count", params={"window": "1h"}).json()
                except httpx.HTTPError:
                    body = {}  # the API busy (its first decode): ask again
                if body.get("estimate", 0) >= 1:
                    break
                time.sleep(0.1)
            out["visible"] = time.perf_counter() - started
            time.sleep(2)  # the worker logs the first batch's phases (not part of the figure)
    finally:
        stop_up(up, 60)
        out["log"] = log
        if show_log:
            for t, line in log:
                print(f"  {t:7.2f} s  {line[:160]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fresh", action="store_true", help="delete Numba's kernel cache first")
    ap.add_argument("--src", default=HERE)
    ap.add_argument("--log", action="store_true", help="print the timestamped log of tidemark up")
    args = ap.parse_args()
    r = run(args.src, args.fresh, args.log)
    kind = f"fresh ({r['cleared']} cache files deleted)" if args.fresh else "warm"
    print("| start | /readyz | event posted → visible | up → first answer |")
    print("|---|---|---|---|")
    print(f"| {kind} | {r['ready']:.1f} s | {r['visible'] - r['posted']:.1f} s | {r['visible']:.1f} s |")


if __name__ == "__main__":
    main()
