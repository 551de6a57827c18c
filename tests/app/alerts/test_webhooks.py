"""Webhooks (contract §9): public addresses only, checked after resolution and again when
sending, connected to the checked address; one bad delivery never holds up the others."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid

import httpx
import pytest
import redis

from app.alerts.rules import AlertRule
from app.alerts.store import RULES
from app.alerts.webhooks import PinnedTransport, WebhookRefused, check_webhook, is_public, public_url
from tests.conftest import ApiServer
from tests.webhook_receiver import Receiver
from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark.settings import Settings

SECRET = "a-webhook-secret-of-some-length"

# Every spelling of an internal address the issue found accepted, and more.
INTERNAL = [
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://0.0.0.0/",
    "http://0/",
    "http://[::]/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[fc00::1]/",
    "http://[fd12:3456:789a::1]/",
    "http://[fe80::1]/",
    "http://[2002:7f00:1::]/",          # 6to4 around 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo around 127.0.0.1
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",               # carrier-grade NAT
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://localhost/",
    "http://localhost./",
    "http://LOCALHOST:6379/",
    "http://ip6-localhost/",
    "http://127.0.0.1:80:80/",          # not even a URL httpx can send
    "http://127.0.0.1:6379/",
    "https://127.0.0.1./x",
    "http://user:pass@127.0.0.1/",
    "ftp://example.com/",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "http:///nohost",
    "not a url",
]


@pytest.mark.parametrize("url", INTERNAL)
def test_internal_targets_are_refused_by_the_check(url):
    with pytest.raises(WebhookRefused):
        check_webhook(url, [])


def test_the_check_says_nothing_of_what_a_name_resolves_to():
    with pytest.raises(WebhookRefused) as e:
        check_webhook("http://localhost:6379/", [])
    assert "127.0.0.1" not in str(e.value) and "::1" not in str(e.value)


def test_embedded_ipv4_is_judged_by_itself():
    import ipaddress

    assert is_public(ipaddress.ip_address("8.8.8.8"))
    assert is_public(ipaddress.ip_address("2606:4700:4700::1111"))
    for internal in ("::ffff:10.0.0.1", "::ffff:127.0.0.1", "2002:a00:1::", "64:ff9b::7f00:1"):
        ip = ipaddress.ip_address(internal)
        assert not is_public(ip) or internal.startswith("64:ff9b"), internal


def test_the_allow_list_opens_exactly_what_it_names():
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    check_webhook(url, ["127.0.0.1"])
    check_webhook(url, ["127.0.0.0/8"])
    check_webhook(f"http://localhost:{port}/", ["localhost"])
    check_webhook(f"http://0x7f.1:{port}/", ["127.0.0.1"])  # same address, other spelling
    for allow in (["10.0.0.0/8"], ["example.com"], ["127.0.0.2"]):
        with pytest.raises(WebhookRefused):
            check_webhook(url, allow)
    with pytest.raises(WebhookRefused):
        check_webhook("http://169.254.169.254/", ["127.0.0.1"])
    with pytest.raises(ValueError, match="wildcards"):
        Settings(webhook_allow_hosts=["*"])
    with pytest.raises(ValueError, match="wildcards"):
        Settings(webhook_allow_hosts=["*.internal"])


def test_default_allow_list_is_empty():
    assert Settings().webhook_allow_hosts == []


def test_the_masked_url_hides_credentials_path_and_query():
    assert public_url("https://hooks.slack.com/services/T000/B000/XXXX") == "https://hooks.slack.com/***"
    assert public_url("https://u:p@example.com:8443/a?token=t") == "https://example.com:8443/***"
    assert public_url("https://example.com/") == "https://example.com/"
    assert public_url("http://[2001:db8::1]:81/x") == "http://[2001:db8::1]:81/***"


# -- the real server -----------------------------------------------------------------------------
def _server(tmp_path_factory, allow: list[str]):
    """An API with its own Redis (so no other API's engine leases its deliveries)."""
    own = EmbeddedRedis(tmp_path_factory.mktemp("redis-webhooks")).start()
    s = ApiServer(own.url, webhook_allow_hosts=allow).start()
    s.redis_url = own.url
    with s.client() as c:
        c.put("/v1/streams/hooks", json={"max_window": "1h"})
    return own, s


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """An API with the default (empty) webhook allow-list."""
    own, s = _server(tmp_path_factory, [])
    yield s
    s.stop()
    own.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """An API that may post to 127.0.0.1 (where the test receivers listen)."""
    own, s = _server(tmp_path_factory, ["127.0.0.1"])
    yield s
    s.stop()
    own.stop()


def _rule(url: str, **kw) -> dict:
    return {"stream": "hooks", "query": "count", "params": {"window": "60"}, "op": ">",
            "threshold": 1e12, "webhook_url": url, "secret": SECRET, "mode": "certain", **kw}


@pytest.mark.parametrize("url", INTERNAL)
def test_the_api_refuses_internal_webhooks(strict, url):
    with strict.client() as c:
        r = c.post("/v1/alerts", json=_rule(url))
        assert r.status_code == 422, r.text
        assert "webhook" in r.json()["detail"]


def test_short_secrets_are_refused(local):
    with local.client() as c:
        r = c.post("/v1/alerts", json=_rule("http://127.0.0.1:9/x", secret="short"))
        assert r.status_code == 422 and "at least 16" in r.json()["detail"]


def test_listing_masks_secrets_and_urls_and_redis_holds_neither_in_clear(local):
    url = "http://127.0.0.1:9/services/T000/B000/sl4ck-t0ken?sig=abc"
    with local.client() as c:
        created = c.post("/v1/alerts", json=_rule(url)).json()
        try:
            for shown in (created, c.get(f"/v1/alerts/{created['id']}").json(),
                          *c.get("/v1/alerts").json()["alerts"]):
                text = json.dumps(shown)
                assert SECRET not in text and "sl4ck-t0ken" not in text and "sig=abc" not in text
            assert created["webhook_url"] == "http://127.0.0.1:9/***" and created["secret"] == "***"
            dump = b"".join(v for v in redis.Redis.from_url(local.redis_url).hvals(RULES))
            assert dump and SECRET.encode() not in dump and b"sl4ck-t0ken" not in dump
        finally:
            c.delete(f"/v1/alerts/{created['id']}")


def _queue(server: ApiServer, url: str) -> str:
    """Store a rule as it is (bypassing the API's checks: a rule stored before an upgrade,
    or a host whose DNS changed) and queue a firing message for it."""
    alerts = server.app.state.alerts
    rule = AlertRule(**{**_rule(url), "id": uuid.uuid4().hex[:16], "created_at": "2026-01-01T00:00:00+00:00"})
    alerts.add(rule)
    body = {"alert_id": rule.id, "state": "firing", "stream": "hooks"}
    assert alerts.record([(rule, 1, "firing", {"estimate": 1}, body)]) == 1
    server.app.state.alert_engine_wake()
    return rule.id


def _attempts(server: ApiServer, alert_id: str, n: int = 1, timeout: float = 15.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    with server.client() as c:
        while True:
            got = c.get(f"/v1/alerts/{alert_id}/deliveries").json()["deliveries"]
            if len(got) >= n:
                return got
            assert time.monotonic() < deadline, f"no delivery attempt recorded for {alert_id}"
            time.sleep(0.05)


def test_a_poisoned_or_hanging_webhook_does_not_delay_the_others(local):
    good, hanging = Receiver(), Receiver("hang")
    poisoned: list[str] = []
    try:
        poisoned += [_queue(local, u) for u in ("http://127.0.0.1:80:80/", "http://169.254.169.254/",
                                                hanging.url)]
        started = time.monotonic()
        good_id = _queue(local, good.url)
        got = good.wait(1)
        assert got[0]["body"]["alert_id"] == good_id
        assert got[0]["at"] - started < 3.0, "the good receiver waited for the bad ones"
        assert _attempts(local, good_id)[0]["status"] == 200
        bad_url, bad_host = (_attempts(local, a)[0] for a in poisoned[:2])
        assert bad_url["status"] is None and bad_url["error"] == "InvalidURL"
        assert bad_host["status"] is None and bad_host["error"] == "refused: webhook address not allowed"
        time.sleep(1.0)
        assert len(good.received) == 1  # settled once: not sent again with the bad ones
        assert len(hanging.received) == 1
    finally:
        for a in poisoned:
            local.app.state.alerts.delete(a)
        good.close()
        hanging.close()


def test_a_send_rechecks_the_address(strict):
    receiver = Receiver()
    try:
        # Allowed when stored (say, the name pointed elsewhere then); refused at send time.
        alert_id = _queue(strict, receiver.url)
        attempt = _attempts(strict, alert_id)[0]
        assert attempt["error"] == "refused: webhook address not allowed"
        time.sleep(0.5)
        assert receiver.received == []
    finally:
        strict.app.state.alerts.delete(alert_id)
        receiver.close()


def test_redirects_are_not_followed(local):
    target = Receiver()
    redirect = Receiver("redirect", location=target.url)
    try:
        alert_id = _queue(local, redirect.url)
        attempt = _attempts(local, alert_id)[0]
        assert attempt["status"] == 302 and attempt["error"] is None
        time.sleep(0.5)
        assert target.received == [] and redirect.received  # retried later, never followed
    finally:
        local.app.state.alerts.delete(alert_id)
        target.close()
        redirect.close()


def test_the_log_shows_an_error_class_not_the_socket_message(local):
    closed = f"http://127.0.0.1:{free_port()}/hook"
    alert_id = _queue(local, closed)
    try:
        attempt = _attempts(local, alert_id)[0]
        assert attempt["status"] is None and attempt["error"] == "ConnectError"
    finally:
        local.app.state.alerts.delete(alert_id)


# -- the transport: pinned to the checked address -------------------------------------------------------
def _post_with(transport: PinnedTransport, url: str) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(transport=transport, timeout=5) as client:
            return await client.post(url, content=b"{}")
    return asyncio.run(go())


def test_the_transport_connects_to_the_address_it_checked(monkeypatch):
    """A name that only our resolver knows: reaching the receiver proves the connection
    went to the checked address, not to a second lookup (DNS rebinding has no second lookup
    to win)."""
    import asyncio.base_events as base_events

    receiver = Receiver()
    port = receiver.server.server_port
    lookups = []

    async def fake_getaddrinfo(self, host, port_, *args, **kwargs):
        lookups.append(host)
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]
        raise socket.gaierror("unknown")

    try:
        monkeypatch.setattr(base_events.BaseEventLoop, "getaddrinfo", fake_getaddrinfo)
        r = _post_with(PinnedTransport(["127.0.0.1"]), f"http://rebind.test:{port}/hook")
        assert r.status_code == 200 and lookups == ["rebind.test"]
        assert receiver.received[0]["headers"]["Host"] == f"rebind.test:{port}"
        with pytest.raises(WebhookRefused):
            _post_with(PinnedTransport([]), f"http://rebind.test:{port}/hook")
        assert len(receiver.received) == 1
    finally:
        receiver.close()
