"""Keys limited to stream patterns (contract §9) and the quotas of their tenant, through
the real server and a real Redis: a foreign stream is a 404 named nowhere, on every route
the app has (enumerated, so a new route is probed too), and on the fast answer path."""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
import uuid

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from app.security import Principal, api_routes, may_see, required_scope, visible
from tests.conftest import API_KEYS, TEST_SECRET, ApiServer
from tidemark.settings import ApiKey
from tidemark.streams import StreamConfig
from workers.publish import Publisher

PATTERNS = ["team-a.*", "shared-web"]
TEAM = {scope: f"team-a-{scope}-key-{uuid.uuid4().hex}" for scope in ("read", "ingest", "admin")}
FOREIGN = "team-b.secret"
MINE = "team-a.web"
T0 = 1_700_000_000.0


def team(scope: str) -> dict:
    return {"Authorization": f"Bearer {TEAM[scope]}"}


@pytest.fixture(scope="module")
def server(own_redis):
    keys = API_KEYS + [{"key": k, "scopes": [s], "streams": PATTERNS} for s, k in TEAM.items()]
    s = ApiServer(own_redis.url, api_keys=keys, tenant_max_streams=4, tenant_max_alerts=1,
                  tenant_max_events_per_second=1000).start()
    publisher = Publisher(own_redis.url)
    with s.client() as c:
        for name in (MINE, "shared-web", FOREIGN):
            assert c.put(f"/v1/streams/{name}", json={"max_window": "1h"}).status_code == 201
            summary = _summary()
            publisher.publish_summary(name, summary, version=1, events=5)
        s.foreign_alert = c.post("/v1/alerts", json=_alert(FOREIGN)).json()["id"]
    yield s
    s.stop()


def _summary():
    import numpy as np
    import pyarrow as pa

    from tidemark.summary import StreamSummary

    summary = StreamSummary.create(StreamConfig(max_window=3600), TEST_SECRET)
    summary.update_table(pa.table({"ts": pa.array(T0 + np.arange(5.0)), "key": pa.array(["x"] * 5),
                                   "value": pa.array(np.ones(5)), "weight": pa.array(np.ones(5))}))
    return summary


def _alert(stream: str, **extra) -> dict:
    return {"stream": stream, "query": "count", "params": {"window": "1h"}, "op": ">",
            "threshold": 1e12, "webhook_url": "http://127.0.0.1:9/hook", "secret": "s" * 16, **extra}


def _request(c: httpx.Client, method: str, path: str, name: str, alert_id: str):
    """One request of a route with ``name`` wherever a stream is named; for /v1/live only
    the head is read."""
    url = (path.replace("{name}", name).replace("{query}", "count").replace("{alert_id}", alert_id)
           .replace("{label_name}", "stream"))
    if path.startswith("/api/v1/"):  # contract §10: the stream is named inside the query
        form = {"query": f'tidemark_count{{stream="{name}", window="1h"}}', "time": T0,
                "match[]": f'tidemark_count{{stream="{name}"}}', "start": T0 - 60, "end": T0,
                "step": "60"}
        r = c.request(method, url, **({"data": form} if method == "POST" else {"params": form}))
        return r.status_code, r.text
    params = {"window": "1h"}
    if _names_a_stream(path, method) and "{" not in path:  # a query over several streams
        params["streams"] = f"{MINE},{name}"
    kw: dict = {"params": params}
    if method in ("POST", "PUT"):
        if path.endswith("/events"):
            kw["json"] = [{"ts": T0}]
        elif path == "/v1/alerts":
            kw["json"] = _alert(name)
        else:
            kw["json"] = {"max_window": "1h"}
    with c.stream(method, url, **kw) as r:
        if path == "/v1/live":
            return r.status_code, ""
        return r.status_code, r.read().decode()


def _names_a_stream(path: str, method: str) -> bool:
    if path.startswith("/api/v1/"):
        return path in ("/api/v1/query", "/api/v1/query_range")
    return "{name}" in path or "{alert_id}" in path or (path, method) == ("/v1/alerts", "POST") \
        or path.startswith("/v1/") and path.count("/") == 2 and path not in (
            "/v1/streams", "/v1/alerts", "/v1/live", "/v1/access", "/v1/kinds")


def test_a_restricted_key_probing_every_route_with_a_foreign_name_gets_404_naming_nothing(server):
    routes = [(p, m) for p, r in api_routes(server.app.routes) if required_scope(r) is not None
              for m in sorted(r.methods)]
    assert len(routes) >= 14  # the walk sees them all (test_security checks the list)
    with httpx.Client(base_url=server.url, headers=team("admin"), timeout=30) as c:
        for path, method in routes:
            where = f"{method} {path}"
            status, body = _request(c, method, path, FOREIGN, server.foreign_alert)
            assert "team-b" not in body, (where, body)
            if _names_a_stream(path, method):
                # a query of §10 naming an absent stream is refused whole: 422 execution
                assert status == (422 if path.startswith("/api/") else 404), (where, status, body)
                if method == "PUT":  # declaring a name it may not have: 404 (contract §9)
                    assert json.loads(body) == {"detail": "stream not found"}
                    continue
                # exactly what an absent stream (or alert) gets
                absent_status, absent = _request(c, method, path, "team-a.absent", "0123456789abcdef")
                assert (status, body.replace(server.foreign_alert, "0123456789abcdef")) == \
                    (absent_status, absent), where
            else:
                assert status in (200, 204), (where, status, body)
        # The same routes on its own stream are answered (the check is not a blanket 404).
        assert c.get(f"/v1/streams/{MINE}").status_code == 200
        assert c.get(f"/v1/streams/{MINE}/count", params={"window": "1h"}).status_code == 200
        assert c.get("/v1/inner-product", params={"streams": f"{MINE},shared-web",
                                                  "window": "1h"}).status_code == 200
    # An absent stream looks exactly like a foreign one.
    with httpx.Client(base_url=server.url, headers=team("read"), timeout=30) as c:
        assert c.get("/v1/streams/team-b.nothing").json() == c.get(f"/v1/streams/{FOREIGN}").json()
        assert c.get("/v1/streams/team-a.nothing").json() == {"detail": "stream not found"}


def test_listings_metrics_and_access_show_only_what_the_key_may_see(server):
    with server.client() as admin:
        assert admin.get("/metrics").status_code == 200  # fills the per-stream gauges
    with httpx.Client(base_url=server.url, headers=team("read"), timeout=30) as c:
        names = [s["name"] for s in c.get("/v1/streams").json()["streams"]]
        assert names == sorted([MINE, "shared-web"]) or set(names) >= {MINE, "shared-web"}
        assert FOREIGN not in names
        assert all(a["stream"] != FOREIGN for a in c.get("/v1/alerts").json()["alerts"])
        metrics = c.get("/metrics").text
        assert f'stream="{MINE}"' in metrics and "team-b" not in metrics
        assert c.get("/v1/access").json() == {"scopes": ["read"], "streams": sorted(PATTERNS)}


def test_the_fast_answer_path_refuses_what_the_full_way_refuses(server):
    path = f"/v1/streams/{FOREIGN}/count"
    with server.client() as admin:
        for _ in range(3):  # answered and indexed for the fast path
            assert admin.get(path, params={"window": "1h"}).status_code == 200
    with httpx.Client(base_url=server.url, headers=team("read"), timeout=30) as c:
        r = c.get(path, params={"window": "1h"})
        assert r.status_code == 404 and "team-b" not in r.text


def test_the_dashboard_cookie_carries_the_keys_patterns(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/", params={"key": TEAM["read"]}, follow_redirects=False).status_code == 303
        names = [s["name"] for s in c.get("/v1/streams").json()["streams"]]
        assert FOREIGN not in names and MINE in names
        assert c.get(f"/v1/streams/{FOREIGN}").status_code == 404


def test_live_updates_carry_only_visible_streams(server, own_redis):
    publisher = Publisher(own_redis.url)
    notes: list[dict] = []
    done = threading.Event()

    def follow():
        with httpx.Client(base_url=server.url, headers=team("read"), timeout=30) as c:
            with c.stream("GET", "/v1/live") as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        notes.append(json.loads(line[6:]))
                        if notes[-1]["stream"] == MINE:
                            break
                    if done.is_set():
                        break

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(0.5)
    for v in range(2, 12):
        publisher.publish_summary(FOREIGN, _summary(), version=v, events=5)
    publisher.publish_summary(MINE, _summary(), version=2, events=5)
    t.join(20)
    done.set()
    assert notes and notes[-1]["stream"] == MINE
    assert all(n["stream"] != FOREIGN for n in notes), notes


def test_tenant_quotas_409_and_429_like_the_global_limits(server):
    with httpx.Client(base_url=server.url, headers=team("admin"), timeout=30) as c:
        assert c.put("/v1/streams/team-b.mine", json={"max_window": "1h"}).status_code == 404
        assert c.put("/v1/streams/team-a.two", json={"max_window": "1h"}).status_code == 201
        assert c.put("/v1/streams/team-a.three", json={"max_window": "1h"}).status_code == 201
        refused = c.put("/v1/streams/team-a.four", json={"max_window": "1h"})
        assert refused.status_code == 409 and "TIDEMARK_TENANT_MAX_STREAMS" in refused.json()["detail"]
        assert c.put("/v1/streams/team-a.two", json={"max_window": "1h"}).status_code == 200
        # The deployment's own keys are not this tenant's: they declare on.
        with server.client() as admin:
            assert admin.put("/v1/streams/team-b.other", json={"max_window": "1h"}).status_code == 201
        assert c.post("/v1/alerts", json=_alert(MINE)).status_code == 201
        refused = c.post("/v1/alerts", json=_alert("shared-web"))
        assert refused.status_code == 409 and "TIDEMARK_TENANT_MAX_ALERTS" in refused.json()["detail"]
        burst = [{"ts": T0 + i * 0.001} for i in range(1500)]
        r = c.post(f"/v1/streams/{MINE}/events", json=burst)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "TIDEMARK_TENANT_MAX_EVENTS_PER_SECOND" in r.json()["detail"]
        with server.client() as admin:  # another tenant's flood never stops the deployment's
            assert admin.post(f"/v1/streams/{MINE}/events", json=burst).status_code == 202


# -- the pattern rule against an oracle ------------------------------------------------------
_NAMES = st.text(alphabet="ab.-_1", min_size=1, max_size=8)
_PATTERNS = st.lists(st.text(alphabet="ab.-_1*", min_size=1, max_size=6), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(patterns=_PATTERNS, names=st.lists(_NAMES, max_size=12))
def test_patterns_match_as_fnmatch_restricted_to_star(patterns, names):
    principal = Principal(frozenset({"read"}), patterns)
    for name in names:
        # fnmatch with '*' only: no '?' or '[' can appear in a valid pattern or name.
        assert may_see(principal, name) == any(fnmatch.fnmatchcase(name, p) for p in patterns)
    assert visible(principal, names) == [n for n in names if may_see(principal, n)]
    assert visible(Principal(frozenset({"read"})), names) == names  # no patterns: every stream


@pytest.mark.parametrize("bad", ["team-a.?", "a[b]", "", "x" * 65, "with space"])
def test_patterns_are_names_and_stars_only(bad):
    with pytest.raises(ValueError):
        ApiKey(key="k" * 16, scopes=["read"], streams=[bad])
    assert re.fullmatch(r"[A-Za-z0-9_.*-]+", "team-a.*")


def test_many_stars_cost_little_and_overlong_names_match_nothing():
    """A regular expression of many ``.*`` backtracks for minutes on a 40-character name;
    the check must stay cheap whatever pattern an operator writes and a request names."""
    many = Principal(frozenset({"read"}), ["*a" * 15 + "*b"])
    started = time.perf_counter()
    assert not may_see(many, "a" * 64)
    assert time.perf_counter() - started < 0.05
    assert not may_see(Principal(frozenset({"read"}), ["*"]), "x" * 65)  # no stream is longer
