"""Alert evaluation and delivery below Spark: one answer per distinct question, states that
follow the bound, and kept-alive webhook connections that never carry another name's
request, never read a reply nobody asked for, and stay within their bound."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest
from cryptography.fernet import Fernet

from app.alerts import engine as engine_module
from app.alerts.engine import AlertEngine
from app.alerts.rules import AlertRule, crossed
from app.alerts.secrets import SecretBox
from app.alerts.store import AlertStore
from app.alerts.webhooks import PinnedTransport, WebhookRefused
from app.answers import answer_from_store
from app.store import Store
from tests.conftest import TEST_SECRET
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory):
    """A Redis of this module's own: its rules are the only ones there."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("alert-engine-redis")).start()
    yield server.url
    server.stop()


def test_each_distinct_question_is_answered_once_and_states_follow_the_bound(own_redis, monkeypatch):
    rng = np.random.default_rng(11)
    config = StreamConfig(max_window="1h", resolution="10s")  # coarse: bounds straddle
    publisher = Publisher(own_redis)
    for s in range(3):
        n = 500 * (s + 1)
        ts = T0 + rng.uniform(0, 3000, n)
        summary = StreamSummary.create(config, TEST_SECRET)
        summary.update_table(decode_chunk(encode_chunk(ts, [None] * n, np.full(n, np.nan), np.ones(n))))
        publisher.publish_summary(f"e{s}", summary, version=1, events=n)
    store = Store(own_redis, TEST_SECRET)
    alerts = AlertStore(own_redis, SecretBox(Fernet.generate_key()))
    rules = []
    for i in range(300):
        window = ["600", "1205", "3600"][(i // 3) % 3]
        rule = AlertRule(stream=f"e{i % 3}", query="count", params={"window": window},
                         op=">" if i % 2 else "<", threshold=float(rng.integers(0, 1500)),
                         webhook_url="http://127.0.0.1:9/x", secret="s" * 16,
                         mode="certain" if i % 4 < 2 else "possible", id=f"r{i:03d}", created_at="now")
        alerts.add(rule)
        rules.append(rule)
    asked = []
    original = engine_module.rule_answer

    def counting(store_, rule):
        asked.append((rule.stream, rule.params["window"]))
        return original(store_, rule)

    monkeypatch.setattr(engine_module, "rule_answer", counting)
    engine = AlertEngine(store, alerts, own_redis, retry_for=60, allow_hosts=["127.0.0.1"])
    queued = engine.evaluate_streams(None)
    assert sorted(asked) == sorted(set(asked)) and len(asked) == 9  # 3 streams x 3 windows
    firing = 0
    for rule in rules:
        body = answer_from_store(store, "count", rule.stream, rule.params)
        expected = "firing" if crossed(rule, body["bound"]["lower"], body["bound"]["upper"]) else "ok"
        state = alerts.state(rule.id)
        assert state["state"] == expected and state["version"] == 1
        assert state["last"]["bound"] == body["bound"]
        firing += expected == "firing"
    assert queued == firing > 0
    # The same version again changes nothing and queues nothing.
    assert engine.evaluate_streams({"e0"}) == 0


def test_a_rule_over_two_streams_is_read_through_the_query_table(own_redis):
    """An inner-product rule is evaluated like every kind (``answer_from_store`` through the
    query table): an announcement of either of its streams evaluates it, one of the stream
    it is filed under but does not read does not, and its version counts both streams'."""
    rng = np.random.default_rng(5)
    config = StreamConfig(max_window="1h", resolution="10s")
    publisher = Publisher(own_redis)
    for version, name in enumerate(["ip-a", "ip-b"], start=1):
        n = 400
        ts = T0 + rng.uniform(0, 3000, n)
        keys = [f"k{k}" for k in rng.integers(0, 20, n)]
        summary = StreamSummary.create(config, TEST_SECRET)
        summary.update_table(decode_chunk(encode_chunk(ts, keys, np.full(n, np.nan), np.ones(n))))
        publisher.publish_summary(name, summary, version=version, events=n)
    store = Store(own_redis, TEST_SECRET)
    alerts = AlertStore(own_redis, SecretBox(Fernet.generate_key()))
    params = {"streams": "ip-a,ip-b", "window": "3600"}
    alerts.add(AlertRule(stream="e0", query="inner-product", params=params, op=">", threshold=-1.0,
                         webhook_url="http://127.0.0.1:9/x", secret="s" * 16, id="ip", created_at="now"))
    engine = AlertEngine(store, alerts, own_redis, retry_for=60, allow_hosts=["127.0.0.1"])
    assert engine.evaluate_streams({"e0"}) == 0 and alerts.state("ip")["version"] == -1
    assert engine.evaluate_streams({"ip-b"}) == 1
    body = answer_from_store(store, "inner-product", None, params)
    state = alerts.state("ip")
    assert state["state"] == "firing" and state["version"] == 1 + 2
    assert state["last"]["estimate"] == body["estimate"] > 0 and state["last"]["bound"] == body["bound"]
    assert engine.evaluate_streams({"ip-a"}) == 0  # the same versions: nothing changes


class Receiver:
    """An HTTP/1.1 receiver that records, per connection, the Host of each request."""

    def __init__(self, reply=None, delay: float = 0.0):
        self.hosts: dict[int, list[str]] = {}
        self.active = self.most_active = 0
        self.lock = threading.Lock()
        outer = self
        ids = itertools.count()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                self.conn_id = next(ids)
                outer.hosts[self.conn_id] = []

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.hosts[self.conn_id].append(self.headers["Host"])
                with outer.lock:
                    outer.active += 1
                    outer.most_active = max(outer.most_active, outer.active)
                time.sleep(delay)
                with outer.lock:
                    outer.active -= 1
                (reply or Receiver.ok)(self)

            def log_message(self, *a):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def ok(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _session(talk, transport: PinnedTransport | None = None):
    """``await talk(client)`` on one client of kept-alive connections (to 127.0.0.1 only,
    unless a ``transport`` is given)."""
    async def go():
        async with httpx.AsyncClient(transport=transport or PinnedTransport(["127.0.0.1"]), timeout=5) as client:
            return await talk(client)
    return asyncio.run(go())


def _send_all(transport: PinnedTransport, urls: list[str], together: bool = False) -> list[int]:
    async def talk(client):
        if together:
            return [r.status_code for r in await asyncio.gather(*[client.post(u, content=b"{}") for u in urls])]
        return [(await client.post(u, content=b"{}")).status_code for u in urls]
    return _session(talk, transport)


@pytest.fixture
def two_names(monkeypatch):
    """Two names that only our resolver knows, both at 127.0.0.1."""
    import asyncio.base_events as base_events

    async def fake_getaddrinfo(self, host, port, *args, **kwargs):
        if host in ("one.test", "two.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        raise socket.gaierror("unknown")

    monkeypatch.setattr(base_events.BaseEventLoop, "getaddrinfo", fake_getaddrinfo)


def test_a_kept_connection_carries_one_name_only(two_names):
    receiver = Receiver()
    try:
        urls = [f"http://{n}:{receiver.port}/hook" for n in ["one.test", "two.test"] * 3]
        assert _send_all(PinnedTransport(["127.0.0.1"]), urls) == [200] * 6
        assert len(receiver.hosts) == 2  # kept alive: one connection per name
        for hosts in receiver.hosts.values():
            assert len(set(hosts)) == 1 and len(hosts) == 3
        # A name no longer allowed is refused before any connection, kept or new.
        with pytest.raises(WebhookRefused):
            _send_all(PinnedTransport([]), [f"http://one.test:{receiver.port}/hook"])
        assert sum(len(h) for h in receiver.hosts.values()) == 6
    finally:
        receiver.close()


def test_a_connection_the_receiver_closed_is_replaced():
    def reply_and_hang_up(handler):
        Receiver.ok(handler)
        handler.close_connection = True  # closed without saying so

    receiver = Receiver(reply_and_hang_up)
    try:
        url = f"http://127.0.0.1:{receiver.port}/hook"

        async def talk(client):
            out = []
            for _ in range(3):
                out.append((await client.post(url, content=b"{}")).status_code)
                await asyncio.sleep(0.1)  # the hang-up reaches us while idle, or not
            return out
        assert _session(talk) == [200, 200, 200]
        assert len(receiver.hosts) == 3
    finally:
        receiver.close()


def test_a_reply_nobody_asked_for_is_never_read_as_the_next_one():
    def fail_then_inject(handler):
        handler.send_response(500)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        handler.wfile.flush()
        time.sleep(0.05)
        handler.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")  # unasked
        handler.wfile.flush()

    receiver = Receiver(fail_then_inject)
    try:
        url = f"http://127.0.0.1:{receiver.port}/hook"

        async def talk(client):
            first = (await client.post(url, content=b"{}")).status_code
            await asyncio.sleep(0.3)
            second = (await client.post(url, content=b"{}")).status_code
            return first, second
        assert _session(talk) == (500, 500)
        assert len(receiver.hosts) == 2  # the polluted connection was not reused
    finally:
        receiver.close()


def test_sends_to_one_target_stay_within_the_bound():
    receiver = Receiver(delay=0.05)
    try:
        urls = [f"http://127.0.0.1:{receiver.port}/hook"] * 20
        assert _send_all(PinnedTransport(["127.0.0.1"], per_target=3), urls, together=True) == [200] * 20
        assert receiver.most_active <= 3 and len(receiver.hosts) <= 3
    finally:
        receiver.close()
