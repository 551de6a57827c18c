"""The ingest fast path (``app.fast_ingest``) answers exactly what the full way answers:
the same posts, once through each, give the same status, body and headers; what it must
not take (another key's stream, a cookie, an unknown Host, a too long Idempotency-Key, a
key without the scope) it leaves to the full way, which answers it."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import API_KEYS, ApiServer, auth

TENANT_KEY = "fast-ingest-tenant-key-0123456789abcdef"
ARROW = "application/vnd.apache.arrow.stream"
NOW = time.time()


def _arrow(n: int) -> bytes:
    import pyarrow as pa

    table = pa.table({"ts": pa.array([NOW - i for i in range(n)], pa.float64()),
                      "key": pa.array([f"k{i % 5}" for i in range(n)])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def server(own_redis):
    keys = API_KEYS + [{"key": TENANT_KEY, "scopes": ["ingest"], "streams": ["team-a.*"]}]
    # Nothing consumes this Redis: the per-stream cap (600 waiting) refuses a stream's
    # second 500-event post with 429.
    s = ApiServer(own_redis.url, api_keys=keys, max_pending_events=600, max_body_bytes=64 * 1024).start()
    yield s
    s.stop()


def _cases(stream: str) -> list[tuple[dict, str, bytes, str]]:
    """(headers, path, body, content type) of each post, in order, for one stream."""
    ndjson = b'{"ts": %f, "key": "a"}\n{"ts": "soon"}\n' % NOW
    tenant = {"Authorization": f"Bearer {TENANT_KEY}"}
    return [
        (auth("ingest"), f"/v1/streams/{stream}/events", ndjson, "application/x-ndjson"),
        (auth("ingest") | {"Idempotency-Key": f"{stream}-1"}, f"/v1/streams/{stream}/events", _arrow(3), ARROW),
        (auth("ingest") | {"Idempotency-Key": f"{stream}-1"}, f"/v1/streams/{stream}/events", _arrow(3), ARROW),
        (auth("ingest"), f"/v1/streams/{stream}/events", _arrow(500), ARROW),
        (auth("ingest"), f"/v1/streams/{stream}/events", _arrow(500), ARROW),  # 429: 503 waiting
        (auth("ingest"), f"/v1/streams/{stream}/events", b"not arrow", ARROW),  # 400
        (auth("ingest"), f"/v1/streams/{stream}/events", b"x" * 70_000, ARROW),  # 413
        (auth("ingest"), f"/v1/streams/{stream}/events", b"ts=1", "text/plain"),  # 415
        (auth("ingest"), "/v1/streams/no-such-stream/events", _arrow(1), ARROW),  # 404, named
        (auth("admin"), f"/v1/streams/{stream}/events", _arrow(1), ARROW),  # admin implies ingest
        (tenant, "/v1/streams/team-a.absent/events", _arrow(1), ARROW),  # 404, hidden
        (tenant, "/v1/streams/team-b.web/events", _arrow(1), ARROW),  # another tenant's: 404
        (auth("read"), f"/v1/streams/{stream}/events", _arrow(1), ARROW),  # 403
        ({}, f"/v1/streams/{stream}/events", _arrow(1), ARROW),  # 401
        ({"Cookie": f"tidemark_key={API_KEYS[1]['key']}"}, f"/v1/streams/{stream}/events", _arrow(1), ARROW),
        (auth("ingest") | {"Host": "evil.example"}, f"/v1/streams/{stream}/events", _arrow(1), ARROW),
        (auth("ingest") | {"Idempotency-Key": "k" * 256}, f"/v1/streams/{stream}/events", _arrow(1), ARROW),
        (auth("ingest"), f"/v1/streams/{stream}/events?streams=x", _arrow(1), ARROW),
        (auth("ingest"), "/v1/streams/bad name!/events", _arrow(1), ARROW),  # 422
    ]


def _answers(server, stream: str) -> list[tuple]:
    out = []
    with server.client(None) as c:
        for headers, path, body, media in _cases(stream):
            r = c.post(path, content=body, headers={"content-type": media, **headers})
            text = r.text.replace(stream, "STREAM")
            kept = {k: r.headers.get(k) for k in ("content-type", "retry-after", "idempotent-replayed",
                                                  "www-authenticate", "vary", "content-encoding")}
            out.append((r.status_code, json.loads(text) if text.startswith("{") else text, kept))
    return out


def test_the_fast_path_answers_what_the_full_way_answers(server):
    app = server.app
    taken = []
    fast = app.fast_ingest
    original = fast.take

    async def spy(scope, receive, send):
        answered = await original(scope, receive, send)
        taken.append(answered)
        return answered

    with server.client("admin") as c:
        for name in ("team-a.full", "team-a.fast"):
            assert c.put(f"/v1/streams/{name}", json={"max_window": "1h"}).status_code == 201
    app.fast_ingest = None
    try:
        full = _answers(server, "team-a.full")
    finally:
        app.fast_ingest = fast
    fast.take = spy
    try:
        quick = _answers(server, "team-a.fast")
    finally:
        fast.take = original
    assert [a[0] for a in full] == [202, 202, 202, 202, 429, 400, 413, 415, 404, 202, 404, 404, 403,
                                    401, 401, 400, 422, 202, 422], full
    for i, (a, b) in enumerate(zip(full, quick)):
        assert a == b, (i, a, b)
    assert full[2][2]["idempotent-replayed"] == "true" and full[4][2]["retry-after"]
    # What the fast path took and what it left to the full way.
    assert taken == [True] * 10 + [True, False, False, False, False, False, False, False, False], taken
