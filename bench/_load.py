"""One load-generator process of ``bench_scale.py``: open-loop, paced Arrow posts over
kept-alive HTTP/1.1 connections, many in flight, with as little CPU per request as Python
allows, so that a few of these offer 100 K events/s on two cores and leave the cores to
the API and Spark.

* Bodies are built once: an Arrow IPC stream of ``size`` events (``ts``, ``key``) whose
  ``ts`` buffer is found in the serialized bytes and overwritten per request with the
  time of sending minus fixed jitter (0-5 s), a memcpy; Arrow IPC has no checksum.
* Each stream of this process sends one request every ``size / per_stream`` seconds at
  its own phase (open loop: a request is sent when due whatever the answers before it
  took). A ``429`` is sent again, the same size, after its ``Retry-After``; the stream's
  schedule goes on meanwhile (so the offered rate stays the one asked for, and the retries
  are on top of it, as ``tidemark ingest`` clients behind a queue would do).
* Raw HTTP/1.1 over asyncio streams (one request in flight per connection, ``conns``
  connections): a request costs a header join, a write and reading one short answer.

Run by ``bench_scale.py`` as ``python bench/_load.py '<json conf>'``; prints one JSON
object of results on stdout at the end: requests and events offered, accepted, 429s,
other answers, accepted events per second of the run, for the sampled streams the accept
time and running accepted total of each 202 (the parent's freshness watcher joins them
with what became visible), how late sends left against their schedule, answer latency and
this process's CPU seconds.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import time

import numpy as np

ARROW = "application/vnd.apache.arrow.stream"


def template(size: int, seed: int) -> tuple[bytes, int, np.ndarray]:
    """An Arrow IPC body of ``size`` events, the byte offset of its ``ts`` values, and the
    jitter each event's ``ts`` has behind the time of sending."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    rng = np.random.default_rng(seed)
    jitter = rng.uniform(0, 5, size)
    marker = 1e15 + np.arange(size, dtype=np.float64) * 7.0 + seed  # values found nowhere else
    keys = [f"k{k}" for k in rng.integers(0, 1000, size)]
    table = pa.table({"ts": pa.array(marker), "key": pa.array(keys)})
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    body = sink.getvalue()
    at = body.find(marker.tobytes())
    assert at > 0 and body.find(marker.tobytes(), at + 1) < 0, "ts buffer not found once"
    return body, at, jitter


async def _run(conf: dict) -> dict:
    host, port, key = conf["host"], conf["port"], conf["key"]
    streams: list[str] = conf["streams"]
    phases: list[float] = conf["phases"]  # seconds after t0 of each stream's first send
    size, period = int(conf["size"]), float(conf["period"])
    t0, end = float(conf["t0"]), float(conf["t0"]) + float(conf["seconds"])
    sample = set(conf.get("sample", []))
    bodies = [template(size, conf.get("seed", 0) * 16 + i) for i in range(4)]
    heads = [(f"POST /v1/streams/{s}/events HTTP/1.1\r\nHost: {host}\r\n"
              f"Authorization: Bearer {key}\r\nContent-Type: {ARROW}\r\n").encode()
             for s in streams]
    lengths = [f"Content-Length: {len(b)}\r\n\r\n".encode() for b, _, _ in bodies]
    queue: asyncio.Queue = asyncio.Queue()
    out = {"requests": 0, "offered_events": 0, "held_back": 0, "accepted": 0, "refused": 0, "errors": 0,
           "other": {}, "accepted_by_second": [0] * (int(conf["seconds"]) + 30),
           "accepts": {s: [] for s in streams if s in sample}, "late_sends": [], "latency": [],
           "retry_after": {}}
    totals = {s: 0 for s in streams}
    blocked = [0.0] * len(streams)  # until when each stream was told to wait (Retry-After)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    async def schedule():
        k = 0  # round: every stream once, in phase order
        order = sorted(range(len(streams)), key=lambda i: phases[i])
        if not order:  # nothing to send (more loaders than streams): never a busy loop
            done.set()
            return
        while True:
            base = t0 + k * period
            for i in order:
                due = base + phases[i]
                if due >= end:
                    done.set()
                    return
                wait = due - time.time()
                if wait > 0.001:
                    await asyncio.sleep(wait)
                out["offered_events"] += size
                if blocked[i] > due:  # told to wait: its retry is queued, this send held back
                    out["held_back"] += size
                    continue
                out["requests"] += 1
                queue.put_nowait((i, due))
            k += 1

    async def connection(n: int):
        reader = writer = None
        while True:
            i, due = await queue.get()
            if i < 0:
                break
            which = (i + n) & 3
            body, at, jitter = bodies[which]
            now = time.time()
            out["late_sends"].append(now - due)
            payload = bytearray(body)
            payload[at:at + 8 * size] = (now - jitter).tobytes()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(heads[i] + lengths[which] + payload)
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ", 2)[1])
                fields = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        fields[name.strip().lower()] = value.strip()
                answer = await reader.readexactly(int(fields.get("content-length", 0)))
                if fields.get("connection", "").lower() == "close":
                    writer.close()
                    reader = writer = None
            except (OSError, asyncio.IncompleteReadError, ValueError):
                out["errors"] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
                await asyncio.sleep(0.1)
                if time.time() < end + 10:
                    queue.put_nowait((i, due))
                continue
            answered = time.time()
            out["latency"].append(answered - now)
            if status == 202:
                accepted = json.loads(answer)["accepted"]
                out["accepted"] += accepted
                name = streams[i]
                totals[name] += accepted
                second = int(answered - t0)
                if 0 <= second < len(out["accepted_by_second"]):
                    out["accepted_by_second"][second] += accepted
                if name in out["accepts"]:
                    out["accepts"][name].append((answered, totals[name]))
            elif status == 429:
                out["refused"] += 1
                after = float(fields.get("retry-after", 1))
                out["retry_after"][str(int(after))] = out["retry_after"].get(str(int(after)), 0) + 1
                reason = json.loads(answer).get("detail", "")[:60] if answer else ""
                out.setdefault("reasons", {})[reason] = out.setdefault("reasons", {}).get(reason, 0) + 1
                blocked[i] = answered + after
                if answered + after < end:  # the same events again, when told
                    out["requests"] += 1
                    loop.call_later(after, queue.put_nowait, (i, answered + after))
            else:
                out["other"][str(status)] = out["other"].get(str(status), 0) + 1

    workers = [asyncio.create_task(connection(n)) for n in range(int(conf["conns"]))]
    await schedule()
    await done.wait()
    # Requests still queued or in flight get until a few seconds past the end; then stop.
    drain = end + float(conf.get("drain", 5))
    while (queue.qsize() or any(not w.done() for w in workers)) and time.time() < drain:
        if not queue.qsize():
            for _ in workers:
                queue.put_nowait((-1, 0.0))
            await asyncio.wait(workers, timeout=max(0.0, drain - time.time()))
            break
        await asyncio.sleep(0.05)
    for w in workers:
        w.cancel()
    out["unsent"] = queue.qsize()
    return out


async def sink(port: int, accepted: int) -> None:
    """A trivial HTTP/1.1 sink that answers every request 202 ``{"accepted": n}`` at once:
    the load generator's own ceiling is measured against it."""
    answer = json.dumps({"accepted": accepted, "rejected": []}).encode()
    reply = (b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: "
             + str(len(answer)).encode() + b"\r\n\r\n" + answer)

    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                writer.write(reply)
        except (OSError, asyncio.IncompleteReadError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    if sys.argv[1] == "--sink":
        asyncio.run(sink(int(sys.argv[2]), int(sys.argv[3])))
        return
    conf = json.loads(sys.argv[1])
    try:
        import uvloop  # noqa: F401 — the cheaper event loop, if installed

        uvloop.install()
    except ImportError:
        pass
    began = time.process_time()
    out = asyncio.run(_run(conf))
    late, lat = np.array(out.pop("late_sends") or [0.0]), np.array(out.pop("latency") or [0.0])
    out["late_send_p50"], out["late_send_p95"] = float(np.percentile(late, 50)), float(np.percentile(late, 95))
    out["latency_p50"], out["latency_p95"] = float(np.percentile(lat, 50)), float(np.percentile(lat, 95))
    out["cpu_seconds"] = time.process_time() - began
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
