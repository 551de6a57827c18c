"""Access (contract §9), input limits and quotas, through the real server and a real Redis."""

from __future__ import annotations

import json
import logging
import socket
import stat
import time

import httpx
import pytest
import redis

from app.security import RedactKeys, api_routes, required_scope
from tests.conftest import KEYS, ApiServer, auth
from tidemark.credentials import ensure_api_keys, private_file
from tidemark.redis_server import EmbeddedRedis, config_problems
from tidemark.settings import Settings

NOW = time.time()
SCOPES = ("read", "ingest", "admin")


@pytest.fixture(scope="module")
def server(own_redis):
    s = ApiServer(own_redis.url, max_body_bytes=4096, max_streams=6, max_alerts=2,
                  max_sse_clients=2).start()
    with s.client() as c:
        assert c.put("/v1/streams/known", json={"max_window": "1h", "value_min": 0,
                                                "value_max": 100}).status_code in (200, 201)
    yield s
    s.stop()


def _fill(path: str, method: str = "GET") -> str:
    # The probe never deletes the stream the other tests read.
    name = "never-declared" if method == "DELETE" else "known"
    return (path.replace("{name}", name).replace("{query}", "count")
            .replace("{alert_id}", "0123456789abcdef"))


def _guarded(app) -> list[tuple[str, str, str]]:
    out = []
    for path, route in api_routes(app.routes):
        scope = required_scope(route)
        if scope is not None:
            out += [(path, method, scope) for method in sorted(route.methods)]
    return out


def _call(c: httpx.Client, method: str, path: str, headers: dict) -> int:
    """The status of one request; /v1/live is a stream, so only its head is read."""
    kw = {"headers": headers}
    if method in ("POST", "PUT"):
        kw["headers"] = {**headers, "content-type": "application/json"}
        kw["content"] = b"[]" if path.endswith("/events") else b"{}"
    with c.stream(method, _fill(path, method), **kw) as r:
        return r.status_code


def test_every_api_route_is_guarded_and_the_walk_sees_them_all(server):
    guarded = {(p, m) for p, m, _ in _guarded(server.app)}
    for expected in [("/v1/streams", "GET"), ("/v1/streams/{name}", "PUT"), ("/v1/streams/{name}/events", "POST"),
                     ("/v1/streams/{name}/{query}", "GET"), ("/v1/inner-product", "GET"), ("/v1/live", "GET"),
                     ("/v1/alerts", "POST"), ("/v1/alerts/{alert_id}", "DELETE"), ("/metrics", "GET")]:
        assert expected in guarded
    for path, route in api_routes(server.app.routes):
        if path.startswith("/v1/") or path == "/metrics":
            assert required_scope(route) in SCOPES, f"{path} has no access guard"


def test_each_route_answers_401_without_a_key_and_403_without_its_scope(server):
    with server.client(None) as c:
        for path, method, scope in _guarded(server.app):
            where = f"{method} {path}"
            r = c.request(method, _fill(path, method)) if path != "/v1/live" else None
            status = _call(c, method, path, {})
            assert status == 401, where
            if r is not None:
                assert r.headers["www-authenticate"] == "Bearer" and "API key" in r.json()["detail"]
            assert _call(c, method, path, {"Authorization": "Bearer not-a-key-of-ours-at-all"}) == 401, where
            assert _call(c, method, path, {"Authorization": "Basic " + KEYS["admin"]}) == 401, where
            for held in SCOPES:
                allowed = held == "admin" or held == scope
                status = _call(c, method, path, auth(held))
                if allowed:
                    assert status not in (401, 403), f"{where} with {held}: {status}"
                else:
                    assert status == 403, f"{where} with {held}: {status}"


def test_health_readiness_and_the_dashboard_need_no_key(server):
    with server.client(None) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code in (200, 503)  # no worker here; but never 401
        assert c.get("/").status_code == 200
        assert c.get("/static/js/main.js").status_code == 200


def test_the_dashboard_signs_in_once_with_a_cookie_good_for_reading_only(server):
    with server.client(None) as c:
        r = c.get("/", params={"key": KEYS["admin"]}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
        assert c.get("/v1/streams/known").status_code == 200
        assert c.get("/v1/alerts").status_code == 200
        with c.stream("GET", "/v1/live") as live:
            assert live.status_code == 200
        # The cookie never counts for writes: a cross-site page cannot ride it anyway,
        # and a stolen browser session cannot declare, ingest or manage alerts.
        assert c.put("/v1/streams/by-cookie", json={"max_window": "1h"}).status_code == 401
        assert c.post("/v1/streams/known/events", json=[{"ts": NOW}]).status_code == 401
        assert c.delete("/v1/alerts/0123456789abcdef").status_code == 401
    with server.client(None) as c:
        r = c.get("/", params={"key": "wrong-key-wrong-key"}, follow_redirects=False)
        assert r.status_code == 401 and "set-cookie" not in r.headers


def test_a_foreign_host_header_is_refused(server):
    with server.client() as c:
        assert c.get("/v1/streams", headers={"Host": "attacker.example"}).status_code == 400
        assert c.get("/healthz", headers={"Host": "attacker.example:80"}).status_code == 400
        assert c.get("/v1/streams", headers={"Host": f"localhost:{server.port}"}).status_code == 200


def test_keys_are_never_logged_nor_printed():
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1", "GET", "/?key=" + KEYS["admin"] + "&x=1", "1.1", 303), None)
    RedactKeys().filter(record)
    assert KEYS["admin"] not in record.getMessage() and "key=***" in record.getMessage()
    settings = Settings(api_keys=[{"key": KEYS["admin"], "scopes": ["admin"]}])
    assert KEYS["admin"] not in repr(settings) and KEYS["admin"] not in str(settings.api_keys)


def test_short_keys_unknown_scopes_and_wildcard_webhook_hosts_fail_fast():
    for bad in ([{"key": "short", "scopes": ["read"]}], [{"key": "x" * 20, "scopes": ["root"]}],
                [{"key": "x" * 20, "scopes": []}]):
        with pytest.raises(ValueError):
            Settings(api_keys=bad)
    with pytest.raises(ValueError, match="wildcards"):
        Settings(webhook_allow_hosts=["*"])


def test_the_first_start_key_is_private_and_kept(tmp_path):
    settings = Settings(run_dir=str(tmp_path / "run"))
    keys, generated = ensure_api_keys(settings)
    assert generated and keys[0].scopes == ["admin"] and len(generated) >= 32
    path = tmp_path / "run" / "api-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_api_keys(settings)[1] == generated  # read back, not made again
    configured = Settings(run_dir=str(tmp_path / "other"), api_keys=[{"key": "k" * 16, "scopes": ["read"]}])
    assert ensure_api_keys(configured) == (configured.api_keys, None)
    assert not (tmp_path / "other").exists()
    assert private_file(path, lambda: "never used") == generated


# -- ingest: content types, sizes, hostile bodies ----------------------------------------------
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/xml"])
def test_ingest_takes_only_json_and_ndjson(server, content_type):
    headers = {**auth("ingest"), **({"content-type": content_type} if content_type else {})}
    with server.client(None) as c:
        r = c.post("/v1/streams/known/events", content=json.dumps([{"ts": NOW}]), headers=headers)
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
        for good in ("application/json", "application/json; charset=utf-8", "application/x-ndjson"):
            body = json.dumps([{"ts": NOW}]) if "json;" in good or good == "application/json" else '{"ts": %f}\n' % NOW
            r = c.post("/v1/streams/known/events", content=body, headers={**auth("ingest"), "content-type": good})
            assert r.status_code == 202 and r.json()["accepted"] == 1, (good, r.text)


def _raw(port: int, head: bytes, body: bytes = b"", wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(head + body)
        s.settimeout(wait)
        return s.recv(4096)


def test_an_oversize_content_length_is_refused_before_reading(server):
    head = (f"POST /v1/streams/known/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {KEYS['ingest']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 2000000000\r\n\r\n").encode()
    started = time.monotonic()
    answer = _raw(server.port, head)  # no body at all: the answer must not wait for one
    assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - started < 3


def test_a_chunked_body_is_counted_while_it_streams(server):
    def chunks():
        yield b"["
        for _ in range(1000):  # about 25 KB, in small chunks with no Content-Length
            yield json.dumps({"ts": NOW}).encode() + b","
        yield b'{"ts": 1}]'

    with server.client("ingest") as c:
        r = c.post("/v1/streams/known/events", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "4096" in r.json()["detail"]


GOOD = '{"ts": %s}' % NOW
HOSTILE = [  # (a bad event, what its rejection says)
    ('{"ts": %s, "weight": 1%s}' % (NOW, "0" * 400), "weight"),
    ('{"ts": 9%s}' % ("9" * 5000), "ts"),
    ('{"ts": "9%s"}' % ("9" * 5000), "ts"),
    ('{"ts": %s, "value": NaN}' % NOW, "value"),
    ('{"ts": Infinity}', "ts"),
    ("[" * 50_000 + "]" * 50_000, "nested"),
    ('{"a":' * 50_000 + '{"ts": 1}' + "}" * 50_000, "nested"),
    ('{"ts": %s}' % (NOW + 10 * 365 * 86400), "ahead of the server's clock"),
    ('{"ts": "2099-01-01T00:00:00Z"}', "ahead of the server's clock"),
    ('{"ts": %s, "key": "%s"}' % (NOW, "k" * 300), "key"),
]


@pytest.fixture(scope="module")
def roomy(server, own_redis):
    """A server whose body limit lets the 100 KB hostile bodies in."""
    s = ApiServer(own_redis.url, max_body_bytes=1 << 20).start()
    yield s
    s.stop()


# ids by position: NOW is in some bodies, and xdist's workers must collect the same ids
@pytest.mark.parametrize("bad, reason", HOSTILE, ids=[f"{i}-{reason}" for i, (_, reason) in enumerate(HOSTILE)])
def test_hostile_events_are_refused_one_by_one_and_the_good_kept(roomy, bad, reason):
    with roomy.client("ingest") as c:
        for body, media in ((f"[{GOOD}, {bad}, {GOOD}]", "application/json"),
                            (f"{GOOD}\n{bad}\n{GOOD}\n", "application/x-ndjson")):
            r = c.post("/v1/streams/known/events", content=body, headers={"content-type": media})
            assert r.status_code == 202, r.text
            assert r.json()["accepted"] == 2, (media, r.text)
            [rejected] = r.json()["rejected"]
            assert rejected["index"] == 1 and reason in rejected["error"], (media, rejected)


def test_unparsable_bodies_are_400_not_500(server):
    with server.client("ingest") as c:
        for body in (b"[1, 2", b'[{"ts": 1}] [', b"\xff\xfe", b"{", b'"just a string"'):
            r = c.post("/v1/streams/known/events", content=body, headers={"content-type": "application/json"})
            assert r.status_code in (202, 400), (body, r.status_code, r.text)


def test_a_range_too_wide_to_subtract_is_refused(server):
    with server.client() as c:
        r = c.put("/v1/streams/too-wide", json={"max_window": "1h", "value_min": -1e308, "value_max": 1e308})
        assert r.status_code == 422 and "finite" in r.json()["detail"]


# -- quotas ------------------------------------------------------------------------------------------
def test_streams_are_capped_and_listed_page_by_page(server):
    with server.client() as c:
        names = {s["name"] for s in c.get("/v1/streams").json()["streams"]}
        i = 0
        while len(names) < 6:
            r = c.put(f"/v1/streams/page-{i}", json={"max_window": "1h"})
            assert r.status_code == 201, r.text
            names.add(f"page-{i}")
            i += 1
        r = c.put("/v1/streams/one-too-many", json={"max_window": "1h"})
        assert r.status_code == 409 and "TIDEMARK_MAX_STREAMS" in r.json()["detail"]
        assert c.put("/v1/streams/known", json={"max_window": "1h", "value_min": 0,
                                                "value_max": 100}).status_code == 200  # re-declaring is fine
        seen, cursor = [], None
        while True:
            page = c.get("/v1/streams", params={"limit": 4, **({"cursor": cursor} if cursor else {})}).json()
            assert len(page["streams"]) <= 4 and all("status" in s and "settings" in s for s in page["streams"])
            seen += [s["name"] for s in page["streams"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted(names)
        for bad in ({"limit": 0}, {"limit": 10**6}, {"limit": "x"}, {"cursor": "bad name!"}):
            assert c.get("/v1/streams", params=bad).status_code == 422


def test_alerts_are_capped(server):
    rule = {"stream": "known", "query": "count", "params": {"window": "60"}, "op": ">", "threshold": 1e9,
            "webhook_url": "http://127.0.0.1:9/hook", "secret": "a-secret-of-sixteen", "mode": "certain"}
    with server.client() as c:
        created = [c.post("/v1/alerts", json=rule) for _ in range(2)]
        assert [r.status_code for r in created] == [201, 201]
        r = c.post("/v1/alerts", json=rule)
        assert r.status_code == 409 and "TIDEMARK_MAX_ALERTS" in r.json()["detail"]
        for r in created:
            assert c.delete(f"/v1/alerts/{r.json()['id']}").status_code == 204


def test_live_clients_are_capped_and_share_one_redis_subscription(server, own_redis):
    admin = redis.Redis.from_url(own_redis.url)

    def subscribers() -> int:
        return sum(1 for c in admin.client_list() if int(c.get("psub", 0)) + int(c.get("sub", 0)) > 0)

    with server.client("read") as c1, server.client("read") as c2, server.client("read") as c3:
        with c1.stream("GET", "/v1/live") as a:
            assert a.status_code == 200
            a_lines = a.iter_lines()  # kept: dropping the iterator would close the stream
            next(a_lines)
            time.sleep(0.5)
            one_client = subscribers()
            with c2.stream("GET", "/v1/live") as b:
                assert b.status_code == 200
                b_lines = b.iter_lines()
                next(b_lines)
                time.sleep(0.5)
                assert subscribers() == one_client  # a second client, no second subscription
                r = c3.get("/v1/live")
                assert r.status_code == 429 and "TIDEMARK_MAX_SSE_CLIENTS" in r.json()["detail"]
                assert "retry-after" in r.headers
        deadline = time.monotonic() + 10
        while True:  # the slots free up once the server notices the clients left
            with c3.stream("GET", "/v1/live") as again:
                if again.status_code == 200:
                    break
            assert time.monotonic() < deadline, "live slots were never freed"
            time.sleep(0.3)


# -- Redis ---------------------------------------------------------------------------------------------
def test_redis_down_is_a_503_with_retry_after(tmp_path):
    own = EmbeddedRedis(tmp_path / "redis").start()
    s = ApiServer(own.url).start()
    try:
        own.stop()
        with s.client() as c:
            for method, path in (("GET", "/v1/streams"), ("GET", "/v1/streams/x/count"), ("PUT", "/v1/streams/x")):
                r = c.request(method, path, json={"max_window": "1h"} if method == "PUT" else None)
                assert r.status_code == 503 and r.headers["retry-after"]
                assert r.json() == {"detail": "storage unavailable; retry shortly"}
            r = c.post("/v1/streams/x/events", json=[{"ts": NOW}])
            assert r.status_code == 503
            assert c.get("/healthz").status_code == 200
    finally:
        s.stop()


def test_the_embedded_redis_wants_its_password(own_redis):
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=own_redis.port).ping()
    assert redis.Redis.from_url(own_redis.url).ping()
    assert stat.S_IMODE((own_redis.directory / "password").stat().st_mode) == 0o600
    assert redis.Redis.from_url(own_redis.url).config_get("protected-mode")["protected-mode"] == "yes"


def test_risky_redis_settings_are_named(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as own:
        assert config_problems(own.url) == []
        client = redis.Redis.from_url(own.url)
        client.config_set("appendonly", "no")
        client.config_set("maxmemory-policy", "allkeys-lru")
        problems = config_problems(own.url)
        assert any("appendonly" in p for p in problems)
        assert any("allkeys-lru" in p and "noeviction" in p for p in problems)


def _arrow(columns: dict) -> bytes:
    import pyarrow as pa

    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_arrow_bodies_are_checked_row_by_row(server):
    import pyarrow as pa

    body = _arrow({
        "ts": pa.array([NOW, None, NOW + 86400 * 365, NOW, NOW, NOW, NOW, 1e300], pa.float64()),
        "key": pa.array(["a", "b", "c", "k" * 300, None, "f", "g", "h"]),
        "value": pa.array([1.0, 2.0, 3.0, 4.0, float("nan"), 500.0, None, 1.0]),
        "weight": pa.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0]),
    })
    with server.client("ingest") as c:
        r = c.post("/v1/streams/known/events", content=body,
                   headers={"content-type": "application/vnd.apache.arrow.stream"})
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] == 1
        reasons = {x["index"]: x["error"] for x in r.json()["rejected"]}
        assert reasons == {1: "missing ts", 2: reasons[2], 3: "key must be 1-256 UTF-8 bytes",
                           4: "value must be finite", 5: "value outside the stream's declared range [0, 100]",
                           6: "weight must be >= 0", 7: "ts must be a Unix time between 0 and 9999-12-31"}
        assert "ahead of the server's clock" in reasons[2]
        for bad in (b"not arrow at all", _arrow({"when": [1.0]}), _arrow({"ts": ["noon"]})):
            r = c.post("/v1/streams/known/events", content=bad,
                       headers={"content-type": "application/vnd.apache.arrow.stream"})
            assert r.status_code == 400, r.text


def test_a_full_redis_is_a_503_without_its_bytes(tmp_path):
    own = EmbeddedRedis(tmp_path / "redis").start()
    s = ApiServer(own.url, max_body_bytes=1 << 20).start()
    try:
        with s.client() as c:
            assert c.put("/v1/streams/full", json={"max_window": "1h"}).status_code == 201
            client = redis.Redis.from_url(own.url)
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", str(client.info("memory")["used_memory"] + 200_000))
            body = "\n".join('{"ts": %s, "key": "k-%06d-%s"}' % (NOW, i, "x" * 100) for i in range(5000))
            statuses = []
            for _ in range(5):
                r = c.post("/v1/streams/full/events", content=body, headers={"content-type": "application/x-ndjson"})
                statuses.append(r.status_code)
                if r.status_code == 503:
                    assert r.json() == {"detail": "storage unavailable; retry shortly"}
                    assert r.headers["retry-after"]
            assert 503 in statuses and all(code in (202, 503) for code in statuses), statuses
    finally:
        s.stop()
        own.stop()


def test_stream_names_from_yaml_are_checked_like_path_names(tmp_path):
    from tidemark_cli.main import load_streams
    from tidemark.errors import CliError

    for bad in ("../etc", "a b", "x" * 65, "-lead", "ünï"):
        path = tmp_path / "streams.yaml"
        path.write_text(json.dumps({"streams": {bad: {"max_window": "1h"}}}))
        with pytest.raises(CliError, match="is not valid"):
            load_streams(str(path))
    path.write_text(json.dumps({"streams": {"web.v2_a-b": {"max_window": "1h"}}}))
    assert list(load_streams(str(path))) == ["web.v2_a-b"]
