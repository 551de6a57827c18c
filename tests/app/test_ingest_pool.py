"""Ingest processes (``app.ingest_pool``): a body is validated and encoded in one, and an
ingest process that is killed — between requests or while it holds one — or that sticks
loses nothing accepted and hangs nothing: the request it held is answered 503 *not
stored* (and nothing of it is stored), the pool starts again, and posts are accepted
again at once (in the request's thread until the new processes are up)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.conftest import ApiServer
from tidemark.wire import keys

N = 100


def _body(n: int = N, start: float = 1.7e9) -> bytes:
    return "\n".join(json.dumps({"ts": start + i, "key": f"k{i % 7}"}) for i in range(n)).encode()


def _wait_ready(pool, deadline: float = 60.0) -> list[int]:
    end = time.monotonic() + deadline
    while not (pool.ready and pool.pids()):
        assert time.monotonic() < end, "the ingest processes did not start"
        time.sleep(0.05)
    return pool.pids()


@pytest.fixture
def server(redis_url):
    s = ApiServer(redis_url, ingest_processes=1).start()
    yield s
    s.stop()


def _received(store, name: str) -> int:
    """Events the API stored for ``name`` (not ``pending``: a worker on the shared Redis,
    started by another test, may already have counted them)."""
    return int(store.redis.hget(keys.ingest_stats(name), "received") or 0)


def _cpu_ticks(pid: int) -> int:
    """User + system CPU of a process, in clock ticks (1/100 s)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _post(c, name: str, body: bytes, media: str = "application/x-ndjson", **headers):
    return c.post(f"/v1/streams/{name}/events", content=body,
                  headers={"content-type": media, **headers})


def test_a_killed_or_stuck_ingest_process_loses_and_hangs_nothing(server):
    pool, store = server.app.state.ingest_pool, server.app.state.store
    name = f"ingest-pool-{os.getpid()}"
    with server.client(timeout=60) as c:
        assert c.put(f"/v1/streams/{name}", json={"max_window": 600}).status_code == 201
        first = _wait_ready(pool)
        r = _post(c, name, _body() + b'\n{"ts": "soon"}')  # through the process, a reject named
        assert r.status_code == 202 and r.json()["accepted"] == N, r.text
        assert r.json()["rejected"][0]["index"] == N
        r = _post(c, name, b"not arrow", "application/vnd.apache.arrow.stream")
        assert r.status_code == 400 and "Arrow" in r.json()["detail"], r.text  # its BodyError, in words
        assert pool.pids() == first  # a refused body is no crash
        stored = N

        # Killed between requests: the next one is told nothing was stored.
        os.kill(first[0], signal.SIGKILL)
        time.sleep(0.2)
        r = _post(c, name, _body(), **{"Idempotency-Key": "after-kill"})
        assert r.status_code == 503 and "not stored" in r.json()["detail"], r.text
        assert r.headers["Retry-After"] == "1"
        assert _received(store, name) == stored
        r = _post(c, name, _body(), **{"Idempotency-Key": "after-kill"})  # the retry is stored once
        assert r.status_code == 202 and r.json()["accepted"] == N, r.text
        stored += N
        second = _wait_ready(pool)
        assert set(second).isdisjoint(first)

        # Killed while it validates a body (a JSON array of 200 K events takes it ~1 s).
        big = json.dumps([{"ts": 1.7e9 + i} for i in range(200_000)]).encode()
        answer = {}
        started = time.monotonic()
        sender = threading.Thread(target=lambda: answer.update(r=_post(c, name, big, "application/json")))
        busy_from = _cpu_ticks(second[0])
        sender.start()
        deadline = time.monotonic() + 20  # killed once it is working on the body, not before
        while _cpu_ticks(second[0]) < busy_from + 10:  # 0.1 s of CPU: it holds the body
            assert time.monotonic() < deadline, "the ingest process never took the body"
            time.sleep(0.01)
        os.kill(second[0], signal.SIGKILL)
        sender.join(30)
        assert not sender.is_alive(), "the request held by the killed process hangs"
        assert answer["r"].status_code == 503, answer["r"].text
        assert time.monotonic() - started < 10
        assert _received(store, name) == stored
        third = _wait_ready(pool)
        r = _post(c, name, _body())
        assert r.status_code == 202 and r.json()["accepted"] == N, r.text
        stored += N

        # Stuck (stopped): answered 503 after the pool's timeout, the stuck process killed.
        pool.timeout = 1.0
        os.kill(third[0], signal.SIGSTOP)
        r = _post(c, name, _body())
        assert r.status_code == 503 and "not stored" in r.json()["detail"], r.text
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{third[0]}") and open(f"/proc/{third[0]}/stat").read().split()[2] != "Z":
            assert time.monotonic() < deadline, "the stuck ingest process was not stopped"
            time.sleep(0.05)
        assert set(_wait_ready(pool)).isdisjoint(third)
        r = _post(c, name, _body())
        assert r.status_code == 202, r.text
        stored += N
        assert _received(store, name) == stored


def test_without_ingest_processes_the_thread_validates(redis_url):
    s = ApiServer(redis_url, ingest_processes=0).start()
    try:
        name = f"ingest-thread-{os.getpid()}"
        with s.client() as c:
            assert c.put(f"/v1/streams/{name}", json={"max_window": 600}).status_code == 201
            r = _post(c, name, _body())
            assert r.status_code == 202 and r.json()["accepted"] == N, r.text
        assert s.app.state.ingest_pool.pids() == [] and not s.app.state.ingest_pool.ready
    finally:
        s.stop()


def _arrow(n: int, compression: str | None = None) -> bytes:
    import pyarrow as pa

    table = pa.table({"ts": pa.array([1.7e9 + i for i in range(n)], pa.float64()),
                      "key": pa.array([f"key-{i % 97:04d}" for i in range(n)])})
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_small_compressed_arrow_body_is_validated_in_the_process_never_the_api(codec):
    """A compressed Arrow body of a few KB can decode to gigabytes: however small, it is
    validated in an ingest process (which may take and lose it), never in the API's thread
    (here: the process is stuck, so the compressed body is answered "not stored" while a
    plain one of the same events is taken in the thread); and it is read whole."""
    from app.ingest_pool import IngestPool, IngestUnavailable
    from tidemark.events import ARROW_STREAM
    from tidemark.streams import StreamConfig

    config, plain, packed = StreamConfig(max_window=600), _arrow(2_000), _arrow(2_000, codec)
    assert len(packed) < len(plain) <= 64 * 1024
    pool = IngestPool(processes=1, timeout=60.0)
    try:
        # Before the processes are up, a plain body is validated here, a compressed one waits.
        assert pool.prepare(plain, config, 1e9, ARROW_STREAM).accepted == 2_000
        with pytest.raises(IngestUnavailable):
            pool.prepare(packed, config, 1e9, ARROW_STREAM)
        got = (pool.prepare(packed, config, 1e9, ARROW_STREAM) if _wait_ready(pool) else None)
        assert got.accepted == 2_000 and not got.rejects
        stuck = pool.pids()
        pool.timeout = 1.0
        os.kill(stuck[0], signal.SIGSTOP)
        try:
            assert pool.prepare(plain, config, 1e9, ARROW_STREAM).accepted == 2_000
            with pytest.raises(IngestUnavailable):
                pool.prepare(packed, config, 1e9, ARROW_STREAM)
        finally:
            if os.path.exists(f"/proc/{stuck[0]}"):
                os.kill(stuck[0], signal.SIGCONT)
    finally:
        pool.close()


def test_a_small_arrow_body_is_validated_in_the_request_and_a_large_one_in_the_process(server):
    """A small Arrow body costs less to validate than to hand over, so it never waits for
    an ingest process (here: a stuck one); a large one still goes to the process, and is
    answered 503 *not stored* when that process is stuck."""
    from tidemark.events import ARROW_STREAM

    pool, store = server.app.state.ingest_pool, server.app.state.store
    name = f"ingest-inline-{os.getpid()}"
    small, large = _arrow(500), _arrow(20_000)
    assert len(small) <= pool.inline_arrow_bytes < len(large)
    with server.client(timeout=60) as c:
        assert c.put(f"/v1/streams/{name}", json={"max_window": 600}).status_code == 201
        stuck = _wait_ready(pool)
        pool.timeout = 1.0
        os.kill(stuck[0], signal.SIGSTOP)
        try:
            started = time.monotonic()
            r = _post(c, name, small, ARROW_STREAM)
            assert r.status_code == 202 and r.json()["accepted"] == 500, r.text
            assert time.monotonic() - started < 1.0  # not through the stuck process
            r = _post(c, name, large, ARROW_STREAM)
            assert r.status_code == 503 and "not stored" in r.json()["detail"], r.text
        finally:
            if os.path.exists(f"/proc/{stuck[0]}"):
                os.kill(stuck[0], signal.SIGCONT)
        assert _received(store, name) == 500
        assert set(_wait_ready(pool)).isdisjoint(stuck)
        r = _post(c, name, large, ARROW_STREAM)
        assert r.status_code == 202 and r.json()["accepted"] == 20_000, r.text
        assert _received(store, name) == 20_500
