"""Quick return: ``kill -9`` of the worker under a steady load → events flowing again.

Runs ``tidemark up`` (embedded Redis, the Spark worker, the API, under its supervisor) from a
source tree on free ports in a fresh run directory, posts a steady in-order load (100 events
every 0.1 s through the retrying ingest client) and, once events are counted, kills the
worker's Python driver (``--part jvm``: its JVM; ``api``, ``redis``: that part) with
SIGKILL, ``--kills`` times, each once the standby worker stands by (``--no-standby``: without
one). Per kill it measures the seconds from the fault until

* the supervisor has started that part again (its ``supervisor.json``),
* ``/readyz`` answers 200 again (after having said 503),
* the first event accepted after the fault is counted (the published count exceeds what had
  been accepted at the fault: the load is in order and nothing is counted twice).

At the end the load stops and every accepted event must be counted exactly once (count =
received = accepted, none late). The log of ``tidemark up`` is stamped in seconds since
the last fault (``--log``), which says where the time goes.

    .venv/bin/python bench/bench_recovery.py [--kills 3] [--part worker|jvm|api|redis]
                                             [--no-standby] [--src DIR] [--log]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tidemark_cli.ingest_client import NDJSON, post_batch
from _common import HEADERS, start_up, stop_up

HERE = str(Path(__file__).resolve().parents[1])


class Load(threading.Thread):
    """In-order events, 100 per request every 0.1 s, retried through 503/429/dropped links."""

    def __init__(self, client: httpx.Client, stream: str):
        super().__init__(daemon=True)
        self.client, self.stream = client, stream
        self.accepted, self.sent, self.error = 0, 0, None
        self.stop = threading.Event()
        self.t0 = time.time() - 600

    def run(self):
        try:
            while not self.stop.is_set():
                body = "".join(json.dumps({"ts": self.t0 + (self.sent + i) * 0.001}) + "\n"
                               for i in range(100)).encode()
                self.accepted += post_batch(self.client, self.stream, body, NDJSON,
                                            retry_for=600)["accepted"]
                self.sent += 100
                time.sleep(0.1)
        except Exception as e:  # noqa: BLE001 — reported at the end
            self.error = e


def _get(c: httpx.Client, path: str):
    try:
        return c.get(path)
    except httpx.HTTPError:
        return None


def _counted(c: httpx.Client, stream: str) -> dict | None:
    r = _get(c, f"/v1/streams/{stream}")
    return r.json()["status"] if r is not None and r.status_code == 200 else None


def _java_child(pid: int) -> int:
    out = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True).stdout
    if not out.split():
        raise RuntimeError(f"no JVM under the worker (pid {pid})")
    return int(out.split()[0])


def run(src: str, kills: int, victim_part: str, show_log: bool, standby: bool = True) -> dict:
    started = time.perf_counter()
    fault_at = [started]
    tmp, port, up = start_up(src, "rec", "tm-bench-recovery-",
                             {"TIDEMARK_STANDBY_WORKER": str(standby).lower()})
    state_file = Path(tmp, "supervisor.json")
    log: list[tuple[int, float, str]] = []  # (kill number, seconds since it, line)

    def read():
        for line in up.stdout:
            log.append((len(fault_at) - 1, time.perf_counter() - fault_at[-1], line.rstrip()))

    threading.Thread(target=read, daemon=True).start()

    def wait(what, check, timeout):
        deadline = time.perf_counter() + timeout
        while True:
            value = check()
            if value:
                return value
            if up.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"{what}:\n" + "\n".join(l for _, _, l in log[-40:]))
            time.sleep(0.05)

    rounds, load = [], None
    out = {"rounds": rounds}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5,
                          headers=HEADERS) as c:
            wait("not ready", lambda: (r := _get(c, "/readyz")) is not None and r.status_code == 200, 300)
            load = Load(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                     headers=HEADERS), "rec")
            load.start()
            wait("no events counted", lambda: ((_counted(c, "rec") or {}).get("events") or 0) > 0, 300)
            for _ in range(kills):
                time.sleep(5)  # steady state: batches every second
                if standby:  # faults some time apart: the spare has stood up again
                    wait("no standby worker standing by", lambda: sum(
                        "standing by" in l for _, _, l in log) > sum(
                        "takes over" in l for _, _, l in log), 180)
                supervised = "worker" if victim_part == "jvm" else victim_part
                part = json.loads(state_file.read_text())["parts"][supervised]
                victim = _java_child(part["pid"]) if victim_part == "jvm" else part["pid"]
                accepted = load.accepted
                fault = time.perf_counter()
                fault_at.append(fault)
                os.kill(victim, signal.SIGKILL)
                row = {}
                seen_503, now = False, 0.0
                # Done once flowing and ready again; a /readyz that never said 503 (events
                # waited less than TIDEMARK_READY_MAX_WAIT) is watched 12 s past flowing.
                while "flowing" not in row or ("ready" not in row and now < 120 and (
                        seen_503 or now < row["flowing"] + 12)):
                    now = time.perf_counter() - fault
                    if now > 300 or up.poll() is not None:
                        raise RuntimeError("events not flowing again:\n" +
                                           "\n".join(l for _, _, l in log[-40:]))
                    if "restarted" not in row and json.loads(state_file.read_text())["parts"][
                            supervised]["restarts"] > part["restarts"]:
                        row["restarted"] = now
                    r = _get(c, "/readyz")
                    if r is not None and r.status_code != 200:
                        seen_503 = True
                    elif r is not None and seen_503 and "ready" not in row:
                        row["ready"] = time.perf_counter() - fault
                    if "flowing" not in row and ((_counted(c, "rec") or {}).get("events") or 0) > accepted:
                        row["flowing"] = time.perf_counter() - fault
                    time.sleep(0.05)
                rounds.append(row)
            load.stop.set()
            load.join(120)
            if load.error is not None:
                raise RuntimeError(f"the load failed: {load.error!r}")
            status = wait("not every accepted event counted",
                          lambda: (s := _counted(c, "rec")) and s["events"] >= load.accepted and s, 300)
            time.sleep(3)  # a double count would show by now
            status = _counted(c, "rec")
            out.update(accepted=load.accepted, sent=load.sent, events=status["events"],
                       received=status["received"], late=status["late_dropped"])
            out["exactly_once"] = (status["events"] == status["received"] == load.accepted
                                   == load.sent and status["late_dropped"] == 0)
    finally:
        if load is not None:
            load.stop.set()
        stop_up(up, 90)
        if show_log:
            for n, t, line in log:
                if n and not line.startswith(("\tat ", " ")):
                    print(f"  kill {n} {t:7.2f} s  {line[:200]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--part", choices=["worker", "jvm", "api", "redis"], default="worker",
                    help="what to kill: the worker's Python driver, its JVM, the API or Redis")
    ap.add_argument("--src", default=HERE)
    ap.add_argument("--log", action="store_true", help="print the log of tidemark up after each kill")
    ap.add_argument("--no-standby", action="store_true",
                    help="no spare worker (TIDEMARK_STANDBY_WORKER=false): every return starts a JVM")
    args = ap.parse_args()
    r = run(args.src, args.kills, args.part, args.log, not args.no_standby)
    victim = {"worker": "worker's Python driver", "jvm": "worker's JVM", "api": "API",
              "redis": "embedded Redis"}[args.part] + ("" if args.no_standby else " (with a standby worker)")
    print(f"| kill -9 of the {victim} | restarted | /readyz 200 | first new event counted |")
    print("|---|---|---|---|")
    for i, row in enumerate(r["rounds"], 1):
        ready = f"{row['ready']:.1f} s" if "ready" in row else "stayed 200"
        print(f"| kill {i} | {row.get('restarted', float('nan')):.1f} s | {ready} | "
              f"{row['flowing']:.1f} s |")
    print(f"\naccepted {r['accepted']:,}, counted {r['events']:,}, received {r['received']:,}, "
          f"late {r['late']}: {'exactly once' if r['exactly_once'] else 'NOT EXACTLY ONCE'}")
    if not r["exactly_once"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
