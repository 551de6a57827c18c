"""The API's CPU per ingest request, without Spark: what ``bench_scale`` counts as the API's
share of the cores, measured alone so that a change to the request path shows in a minute.

A real Redis, ``tidemark api`` (``--compare TREE`` runs TREE first, then this tree, same
options), ``--streams`` declared streams with published shard statuses, and a stand-in for
a worker that keeps up (every second: the log's read positions published as a finished
batch would, the partitions trimmed, each stream's shard statuses counting what it
received), so the back-pressure path judges a live worker as under ``bench_scale``. The
load is ``bench/_load.py`` (open loop, pre-built 500-event Arrow bodies) at ``--rate``
events/s, or NDJSON posts (``--ndjson``: a few processes posting pre-built bodies, paced).

Reported per answered request: the API process's CPU alone, its ingest processes', and
both, in ms; ``--profile DIR`` adds a py-spy raw profile of the API and its children.

    python bench/bench_ingest_cpu.py [--seconds 20] [--rate 100000] [--streams 100]
        [--loaders 2] [--ndjson] [--repeat 2] [--compare /work/base] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))

from _common import KEY, api_env, redis_server, wait_healthy  # noqa: E402
from tidemark.redis_server import free_port  # noqa: E402
from tidemark.streams import StreamConfig  # noqa: E402
from tidemark.wire import keys  # noqa: E402
from tidemark.wire.records import ShardStatus  # noqa: E402

CONFIG = StreamConfig(max_window="1h", epsilon=0.05, delta=0.05)
SIZE = 500


def cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` alone and of its children (the ingest processes)."""
    tick = os.sysconf("SC_CLK_TCK")

    def of(p: int) -> float:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / tick

    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in Path(task, "children").read_text().split()]
        except OSError:
            pass
    return of(pid), sum(of(k) for k in kids)


def sys_share(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` alone."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tick, int(f[12]) / tick


def settle(pid: int, timeout: float = 180.0) -> None:
    """Until the API process tree is idle (under 5 % of a core over a second)."""
    deadline, before = time.time() + timeout, sum(cpu(pid))
    while time.time() < deadline:
        time.sleep(1.0)
        now = sum(cpu(pid))
        if now - before < 0.05:
            return
        before = now


def keep_up(r: redis.Redis, names: list[str], generations: dict[str, int], shards: int,
            partitions: int, stop: threading.Event) -> None:
    """A worker that keeps up, as the API sees it: every second a finished batch read
    everything appended, the partitions are trimmed, and each stream's shards count all it
    received."""
    version = 1
    while not stop.wait(1.0):
        with r.pipeline(transaction=False) as p:
            for part in range(partitions):
                p.hmget(keys.log_stats(part), "last", "events", "chunks")
            for n in names:
                p.hget(keys.ingest_stats(n), "received")
            out = p.execute()
        read = [[(last or b"0-0").decode(), int(e or 0), int(c or 0)] for last, e, c in out[:partitions]]
        received = out[partitions:]
        version += 1
        with r.pipeline(transaction=False) as p:
            p.hset(keys.LOG_PROGRESS, mapping={
                "read": json.dumps(read), "batch_ended": time.time(), "fixed_seconds": 0.3,
                "seconds_per_event": 1e-6, "seconds_per_group": 0.005, "capacity": 1e6,
                "batch_seconds": 0.6, "at": time.time()})
            for part in range(partitions):
                p.xtrim(keys.log_partition(part), maxlen=0)
            for n, got in zip(names, received):
                total = int(got or 0)
                p.hset(keys.shard_status(n), mapping={
                    s: status(generations[n], version, total // shards + (total % shards if s == 0 else 0))
                    for s in range(shards)})
            p.execute()


def status(generation: int, version: int, events: int) -> str:
    return ShardStatus(version=version, events=events, clock=time.time(), generation=generation,
                       updated_at="2026-01-01T00:00:00+00:00", sizes={"count": 40, "quantile": 9000},
                       segments=[["count", "a" * 16], ["quantile", "b" * 16]]).encode()


def ndjson_poster(conf: dict) -> None:
    """One NDJSON posting process: pre-built bodies, paced to ``rate`` requests/s."""
    import httpx

    rng = __import__("random").Random(conf["seed"])
    url = f"http://127.0.0.1:{conf['port']}/v1/streams/{{}}/events"
    headers = {"Authorization": f"Bearer {conf['key']}", "Content-Type": "application/x-ndjson"}
    out = {"accepted": 0, "refused": 0, "other": 0, "requests": 0}
    end, gap = time.time() + conf["seconds"], 1.0 / conf["rate"]
    with httpx.Client(timeout=30) as client:
        nxt = time.time()
        while time.time() < end:
            now = time.time()
            body = "".join(json.dumps({"ts": now - rng.random() * 5, "key": f"k{rng.randrange(1000)}"}) + "\n"
                           for _ in range(SIZE)).encode()
            name = rng.choice(conf["streams"])
            r = client.post(url.format(name), content=body, headers=headers)
            out["requests"] += 1
            if r.status_code == 202:
                out["accepted"] += r.json()["accepted"]
            elif r.status_code == 429:
                out["refused"] += 1
            else:
                out["other"] += 1
                out.setdefault("codes", {}).setdefault(str(r.status_code), r.text[:200])
            nxt += gap
            time.sleep(max(0.0, nxt - time.time()))
    print(json.dumps(out))


def run(src: Path, args) -> dict:
    with redis_server("tm-bench-ingest-cpu-") as (server, tmp):
        r = redis.Redis.from_url(server.url)
        names = [f"s{i:05d}" for i in range(args.streams)]
        gens = {n: 1_000_000 + i for i, n in enumerate(names)}
        r.hset(keys.STREAMS, mapping={n: CONFIG.model_dump_json() for n in names})
        r.hset(keys.GENERATIONS, mapping=gens)
        r.set(keys.SHARDS_MAX, CONFIG.shards)
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "api", "--redis", server.url, "--port", str(port)],
            env=api_env(src, tmp, TIDEMARK_MAX_STREAMS="100000",
                        TIDEMARK_LOG_PARTITIONS=str(args.log_partitions)),
            cwd=str(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stop = threading.Event()
        try:
            wait_healthy(f"http://127.0.0.1:{port}", api)
            settle(api.pid)  # its start-up work (kernels warmed, ingest processes) done
            worker = threading.Thread(target=keep_up, daemon=True, args=(
                r, names, gens, CONFIG.shards, args.log_partitions, stop))
            worker.start()
            i0, ic0, it0 = *cpu(api.pid), time.time()  # idle: the worker stand-in only
            time.sleep(5)
            idle = (sum(cpu(api.pid)) - i0 - ic0) / (time.time() - it0)
            t0 = time.time() + 1.0
            procs = []
            per_loader = [names[i::args.loaders] for i in range(args.loaders)]
            for i, mine in enumerate(per_loader):
                if args.ndjson:
                    conf = {"port": port, "key": KEY, "streams": mine, "seconds": args.seconds,
                            "rate": args.rate / SIZE / args.loaders, "seed": i}
                    cmd = [sys.executable, __file__, "--ndjson-poster", json.dumps(conf)]
                else:
                    period = SIZE / (args.rate / len(names))
                    phases = [((i + args.loaders * j) / len(names)) * period for j in range(len(mine))]
                    conf = {"host": "127.0.0.1", "port": port, "key": KEY, "streams": mine,
                            "phases": phases, "size": SIZE, "period": period, "t0": t0,
                            "seconds": args.seconds, "conns": 16, "sample": [], "seed": i}
                    cmd = [sys.executable, str(HERE / "_load.py"), json.dumps(conf)]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                              env={**os.environ, "PYTHONPATH": str(ROOT)}))
            time.sleep(max(0.0, t0 + args.warm - time.time()))
            spy = None
            if args.profile:
                os.makedirs(args.profile, exist_ok=True)
                label = "base" if src != ROOT else "tree"
                spy = subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "-p", str(api.pid), "-r", "200",
                     "-d", str(int(args.seconds - args.warm - 2)), "-f", "raw", "--subprocesses", *os.environ.get("SPY_FLAGS", "").split(),
                     "--nonblocking", "-o", f"{args.profile}/{label}-{time.time():.0f}.txt"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            a0, c0, at0 = *cpu(api.pid), time.time()
            u0, s0 = sys_share(api.pid)
            time.sleep(max(0.0, t0 + args.seconds - 1 - time.time()))
            a1, c1, at1 = *cpu(api.pid), time.time()
            u1, s1 = sys_share(api.pid)
            results = [json.loads(p.communicate()[0]) for p in procs]
            if spy:
                spy.wait()
        finally:
            stop.set()
            api.terminate()
            api.wait(30)
    for x in results:
        if x.get("codes") or not x.get("requests", 1):
            print("loader:", x.get("codes") or x, file=sys.stderr)
    accepted = sum(x["accepted"] for x in results)
    refused = sum(x["refused"] for x in results)
    answered = accepted / SIZE + refused  # over the whole load; the CPU over its steady part
    steady = at1 - at0
    per_s = answered / args.seconds
    return {"tree": str(src), "requests_per_s": per_s, "refused": refused,
            "other": sum(sum(x["other"].values()) if isinstance(x["other"], dict) else x["other"] for x in results),
            "api_ms": 1000 * (a1 - a0) / steady / per_s, "ingest_ms": 1000 * (c1 - c0) / steady / per_s,
            "total_ms": 1000 * ((a1 - a0) + (c1 - c0)) / steady / per_s,
            "api_cores": (a1 - a0 + c1 - c0) / steady, "idle_cores": idle, "api_sys": (s1 - s0) / max(1e-9, (u1 - u0) + (s1 - s0)), "load": os.getloadavg()[0]}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--ndjson-poster":
        ndjson_poster(json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warm", type=float, default=4)
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--loaders", type=int, default=2)
    ap.add_argument("--log-partitions", type=int, default=2)
    ap.add_argument("--ndjson", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--profile")
    args = ap.parse_args()
    trees = ([args.compare.resolve()] if args.compare else []) + [ROOT]
    print("| tree | requests/s | 429s | API ms/req | ingest procs ms/req | total ms/req | cores | idle cores | API sys share | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _ in range(args.repeat):
        for src in trees:
            o = run(src, args)
            label = "this tree" if src == ROOT else str(src)
            print(f"| {label} | {o['requests_per_s']:.0f} | {o['refused']} | {o['api_ms']:.2f} | "
                  f"{o['ingest_ms']:.2f} | {o['total_ms']:.2f} | {o['api_cores']:.2f} | {o['idle_cores']:.3f} | {o['api_sys']:.0%} | {o['load']:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()
