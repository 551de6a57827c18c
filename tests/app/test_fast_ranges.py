"""The Prometheus range fast path (``app.fast_ranges``) answers exactly what the full way
answers: the same requests, once through each, give the same status, body and headers
(gzip included); what it must not take (a key without the scope, no key, an unknown
Host, a restricted key with ``streams=``, a POST without its length or beyond what the
route reads, another route) it leaves to the full way, which answers it."""

from __future__ import annotations

import gzip
import time

import httpx
import pytest

from app.routes.prometheus import MAX_BODY
from tests.app.test_prometheus_api import publish
from tests.conftest import API_KEYS, KEYS, ApiServer

TENANT_KEY = "fast-ranges-tenant-key-0123456789abcdef"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def server(own_redis):
    keys = API_KEYS + [{"key": TENANT_KEY, "scopes": ["read"], "streams": ["team-a.*"]}]
    s = ApiServer(own_redis.url, api_keys=keys).start()
    end = float(int(time.time()))
    for name in ("team-a.web", "team-b.web"):
        publish(own_redis.url, name, end)
    yield s, end
    s.stop()


def _basic(key: str) -> httpx.BasicAuth:
    return httpx.BasicAuth("grafana", key)


def _cases(end: float) -> list[tuple[str, str, dict, dict, bytes | None]]:
    """(method, path with query string, headers, auth kwargs, form body) of each request."""
    q = 'tidemark_quantiles{stream="team-a.web", window="5m", q="0.5,0.99"}'
    form = httpx.QueryParams({"query": q, "start": end - 600, "end": end, "step": "7s"})
    body = str(form).encode()
    read, ingest = {"auth": _basic(KEYS["read"])}, {"auth": _basic(KEYS["ingest"])}
    tenant = {"headers": {"Authorization": f"Bearer {TENANT_KEY}"}}
    hidden = str(form.set("query", 'tidemark_count{stream="team-b.web"}')).encode()
    bad = str(form.set("step", "0")).encode()
    return [
        ("POST", "/api/v1/query_range", {"content-type": FORM}, read, body),
        ("GET", f"/api/v1/query_range?{form}", {}, read, None),
        ("GET", f"/api/v1/query_range?{form}", {"accept-encoding": "identity"}, read, None),  # no gzip
        ("POST", "/api/v1/query_range", {"content-type": FORM}, read, bad),  # 400 bad_data
        ("POST", "/api/v1/query_range", {"content-type": "text/plain"}, read, body),  # 400: body type
        ("POST", "/api/v1/query_range", {"content-type": FORM}, tenant, body),  # its own stream
        ("POST", "/api/v1/query_range", {"content-type": FORM}, tenant, hidden),  # 422, as absent
        ("POST", "/api/v1/query_range", {"content-type": FORM}, {"auth": _basic(KEYS["admin"])}, body),
        # left to the full way:
        ("POST", "/api/v1/query_range", {"content-type": FORM}, ingest, body),  # 403
        ("POST", "/api/v1/query_range", {"content-type": FORM}, {}, body),  # 401
        ("POST", "/api/v1/query_range", {"content-type": FORM, "host": "evil.example"}, read, body),  # 400
        ("GET", f"/api/v1/query_range?{form}&streams=team-b.web", {}, tenant, None),  # 404
        ("POST", "/api/v1/query_range", {"content-type": FORM}, read, b"x" * (MAX_BODY + 1)),  # 400
        ("PUT", "/api/v1/query_range", {"content-type": FORM}, read, body),  # 405
        ("GET", f"/api/v1/query?{httpx.QueryParams({'query': q, 'time': end})}", {}, read, None),  # another route
        # histories
        ("GET", "/v1/streams/team-a.web/quantiles/history?window=300&q=0.5,0.9&points=50", {}, read, None),
        ("GET", "/v1/streams/team-a.web/count/history?window=60", {}, tenant, None),  # 120 points
        ("GET", "/v1/streams/team-a.web/count/history?window=1h5m&points=3", {}, read, None),  # 422: window
        ("GET", "/v1/streams/team-a.web/no-such-kind/history?points=3", {}, read, None),  # 422
        ("GET", "/v1/streams/team-a.absent/count/history?points=3", {}, read, None),  # 404
        # left to the full way:
        ("GET", "/v1/streams/team-b.web/count/history?window=60&points=3", {}, tenant, None),  # 404
        ("GET", "/v1/streams/team-a.web/count/history?window=60&points=501", {}, read, None),  # 422
        ("GET", "/v1/streams/team-a.web/count/history?window=60&points=07", {}, read, None),  # as the full way
        ("GET", "/v1/streams/team-a.web/count/history?points=3&points=4", {}, read, None),
        ("GET", "/v1/streams/bad%20name!/count/history?points=3", {}, read, None),  # 422
        ("GET", "/v1/streams/team-a.web/count/history?points=3", {}, ingest, None),  # 403
        ("GET", "/v1/streams/team-a.web/count/history?points=3", {}, {}, None),  # 401
    ]


def _answers(server, end: float) -> list[tuple]:
    out = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for method, path, headers, kwargs, body in _cases(end):
            extra = kwargs.get("headers", {})
            r = c.request(method, path, content=body, headers={**headers, **extra}, auth=kwargs.get("auth"))
            kept = {k: r.headers.get(k) for k in ("content-type", "content-encoding", "vary",
                                                  "www-authenticate", "content-length")}
            # (httpx took the gzip off: the body sent is compared as the client reads it)
            out.append((r.status_code, r.content, kept))
    return out


def test_the_fast_path_answers_what_the_full_way_answers(server):
    api, end = server
    app = api.app
    fast, taken = app.fast_ranges, []
    original = fast.take

    async def spy(scope, receive, send):
        answered = await original(scope, receive, send)
        taken.append(answered)
        return answered

    kept, app.fast_answers = app.fast_answers, None  # (a history asked again: app.answer_cache)
    app.fast_ranges = None
    try:
        full = _answers(api, end)
    finally:
        app.fast_ranges = fast
    fast.take = spy
    try:
        quick = _answers(api, end)
    finally:
        fast.take = original
        app.fast_answers = kept
    assert [a[0] for a in full] == [200, 200, 200, 400, 400, 200, 422, 200,
                                    403, 401, 400, 404, 400, 405, 200,
                                    200, 200, 422, 422, 404,
                                    404, 422, 200, 200, 422, 403, 401], [(a[0], a[1][:200]) for a in full]
    for i, (a, b) in enumerate(zip(full, quick)):
        assert a == b, (i, a[0], b[0], a[1][:300], b[1][:300], a[2], b[2])
    assert full[0][2]["content-encoding"] == "gzip" and full[2][2]["content-encoding"] is None
    assert b'"q":"0.99"' in full[0][1] and full[0][1] == full[1][1] == full[2][1]
    # What the fast path took and what it left to the full way.
    assert taken == [True] * 8 + [False] * 7 + [True] * 5 + [False] * 7, taken
    assert full[15][1].count(b'"estimate"') >= 50 and full[16][1].count(b'"at"') == 120


def test_a_gzipped_range_is_the_body_compressed(server):
    """The bytes on the wire, for a client that accepts gzip, are the body gzipped once."""
    api, end = server
    q = 'tidemark_count{stream="team-a.web", window="5m"}'
    with httpx.Client(base_url=api.url, timeout=60) as c:
        r = c.get("/api/v1/query_range", params={"query": q, "start": end - 3000, "end": end, "step": "3s"},
                  auth=_basic(KEYS["read"]))
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        with c.stream("GET", "/api/v1/query_range", params={"query": q, "start": end - 3000, "end": end,
                                                            "step": "3s"}, auth=_basic(KEYS["read"])) as raw:
            wire = b"".join(raw.iter_raw())
    assert gzip.decompress(wire) == r.content
