"""``/healthz`` and ``/readyz`` answered before the stack (``app.fast_reads``) are exactly
what the full way answers: the same status, body and headers, for a Host the API answers
for, one it does not, a method the routes do not take; and a ``/readyz`` probe is answered
while every thread of the pool the routes share is held."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio.to_thread
import httpx
import pytest

from tests.conftest import ApiServer
from tidemark.redis_server import EmbeddedRedis
from workers.publish import Publisher


@pytest.fixture(scope="module")
def server(own_redis):
    s = ApiServer(own_redis.url).start()
    yield s
    s.stop()


_CASES = [("GET", "/healthz", {}), ("GET", "/readyz", {}), ("GET", "/healthz", {"Host": "evil.example"}),
          ("GET", "/readyz", {"Host": "evil.example"}), ("GET", "/healthz", {"Host": "localhost:8000"}),
          ("HEAD", "/healthz", {}), ("POST", "/healthz", {}), ("GET", "/healthz?x=1", {}),
          ("GET", "/readyz", {"Accept-Encoding": "gzip"})]


def _answers(server) -> list[tuple]:
    out = []
    with server.client(None) as c:
        for method, path, headers in _CASES:
            r = c.request(method, path, headers=headers)
            kept = {k: v for k, v in r.headers.items() if k not in ("date",)}
            body = r.json() if r.content and r.headers.get("content-type") == "application/json" else r.text
            if isinstance(body, dict) and "lag" in body:
                body = {k: v for k, v in body.items() if k != "lag"}  # moves with Redis' clock
            out.append((r.status_code, body, kept))
    return out


def test_the_fast_path_answers_what_the_full_way_answers(server):
    app = server.app
    fast = app.fast_reads
    taken = []
    original = fast.answer

    async def spy(scope, send):
        answered = await original(scope, send)
        taken.append(answered)
        return answered

    app.fast_reads = None
    try:
        full = _answers(server)
    finally:
        app.fast_reads = fast
    fast.answer = spy
    try:
        quick = _answers(server)
    finally:
        fast.answer = original
    assert [a[0] for a in full] == [200, 503, 400, 400, 200, 405, 405, 200, 503], full
    for i, (a, b) in enumerate(zip(full, quick)):
        assert a == b, (i, a, b)
    # Taken: the GETs of good Hosts; left to the full way: a Host not answered for (other
    # methods never reach it).
    assert taken == [True, True, False, False, True, True, True], taken


def test_readyz_answers_while_the_shared_thread_pool_is_held(tmp_path):
    """Every thread of the pool the routes share is busy; a probe still answers, at once."""
    with EmbeddedRedis(tmp_path / "redis") as redis_server:
        api = ApiServer(redis_server.url).start()
        release = threading.Event()
        try:
            Publisher(redis_server.url).heartbeat({"run_id": "run-1", "active": True, "batch_id": 1})
            loop = api.server.servers[0].get_loop()
            # More holders than the pool has threads (anyio's default: 40).
            for _ in range(60):
                asyncio.run_coroutine_threadsafe(anyio.to_thread.run_sync(release.wait, 30), loop)
            time.sleep(0.2)
            with httpx.Client(base_url=api.url, timeout=5) as c:
                started = time.perf_counter()
                r = c.get("/readyz")
                assert time.perf_counter() - started < 1.0
                assert r.status_code == 200 and r.json()["ready"] is True, r.text
                assert c.get("/healthz").status_code == 200
        finally:
            release.set()
            api.stop()
