"""The query benches' HTTP load: kept-alive HTTP/1.1 connections on asyncio (httptools
parses the replies; an httpx client spends more CPU per request than the API it
measures, on the same two cores), paced open-loop or flat out."""

from __future__ import annotations

import asyncio
import time

import httptools

__all__ = ["Connection", "paced", "flat_out", "probe"]


class _Reply:
    def __init__(self):
        self.done = False
        self.body = bytearray()

    def on_body(self, data):
        self.body += data

    def on_message_complete(self):
        self.done = True


class Connection:
    """One kept-alive HTTP/1.1 connection sending GETs one at a time."""

    def __init__(self, port: int, key: str | None):
        self.port = port
        self.auth = f"Authorization: Bearer {key}\r\n" if key else ""

    async def open(self) -> "Connection":
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def get(self, path: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{self.auth}\r\n".encode())
        reply = _Reply()
        parser = httptools.HttpResponseParser(reply)
        while not reply.done:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("closed")
            parser.feed_data(data)
        return parser.get_status_code(), bytes(reply.body)

    def close(self) -> None:
        self.writer.close()


async def _paced_client(port: int, key: str, paths: list[str], rate: float, seconds: float, offset: int,
                        results: dict, errors: list) -> None:
    conn = await Connection(port, key).open()
    start = time.perf_counter() + 0.5 + offset / 50 / rate  # spread the clients' phases
    i = 0
    while True:
        scheduled = start + i / rate
        if scheduled > start + seconds or time.perf_counter() > start + seconds:
            break  # a saturated API answers fewer: the count shows it
        now = time.perf_counter()
        if scheduled > now:
            await asyncio.sleep(scheduled - now)
        label, path = paths[(i + offset) % len(paths)]
        status, body = await conn.get(path)
        if status != 200:
            errors.append((label, status, body[:200]))
        results.setdefault(label, []).append(time.perf_counter() - scheduled)
        i += 1
    conn.close()


async def paced(port: int, key: str, paths: list[tuple[str, str]], rate: float, clients: int,
                seconds: float) -> tuple[dict, list, float]:
    """``rate`` requests a second over ``clients`` connections, open-loop: each sends its
    share on a fixed schedule, cycling through ``paths`` ((label, path) each); latency runs
    from the scheduled send, so a saturated API shows its queue. Returns (latencies by
    label, errors, seconds)."""
    results: dict[str, list[float]] = {}
    errors: list = []
    started = time.perf_counter()
    await asyncio.gather(*[_paced_client(port, key, paths, rate / clients, seconds, c, results, errors)
                           for c in range(clients)])
    return results, errors, time.perf_counter() - started - 0.5


async def flat_out(port: int, key: str | None, path, clients: int, seconds: float) -> tuple[float, int]:
    """As many requests as ``clients`` connections get answered, each sending its next
    when its last is answered: (answered a second, non-200 answers). ``path`` is a path,
    or a function of the request's number giving one."""
    conns = [await Connection(port, key).open() for _ in range(clients)]
    counts = [0, 0, 0]  # answered, not 200, sent
    until = time.perf_counter() + seconds

    async def one(conn: Connection) -> None:
        while time.perf_counter() < until:
            counts[2] += 1
            status, _ = await conn.get(path(counts[2]) if callable(path) else path)
            counts[0] += 1
            counts[1] += status != 200
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*[one(c) for c in conns])
    return counts[0] / (time.perf_counter() - started), counts[1]


async def probe(port: int, paths: list[str], every: float, stop: asyncio.Event) -> dict[str, list]:
    """Each of ``paths`` asked every ``every`` s on a connection of its own (no key) until
    ``stop``: {path: [(Unix time sent, seconds, status), …]}."""
    out: dict[str, list] = {p: [] for p in paths}

    async def one(path: str) -> None:
        conn = await Connection(port, None).open()
        while not stop.is_set():
            sent, t = time.time(), time.perf_counter()
            status, _ = await conn.get(path)
            out[path].append((sent, time.perf_counter() - t, status))
            try:
                await asyncio.wait_for(stop.wait(), every)
            except asyncio.TimeoutError:
                pass
        conn.close()

    await asyncio.gather(*[one(p) for p in paths])
    return out
