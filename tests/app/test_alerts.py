"""Alerts end to end: a real HTTP receiver, real Redis, the real pipeline."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from tests.conftest import ApiServer, post_events
from tests.webhook_receiver import Receiver
from tidemark.redis_server import free_port

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0
SECRET = "s3cret-of-16-chars-or-more"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _rule(stream, url, **kw):
    rule = {"stream": stream, "query": "count", "params": {"window": "10"}, "op": ">",
            "threshold": 50, "webhook_url": url, "secret": SECRET, "mode": "certain"}
    rule.update(kw)
    return rule


def _send(c, stream, ts_list):
    r = post_events(c, stream, json=[{"ts": t} for t in ts_list])
    assert r.status_code == 202


def test_one_message_per_crossing_and_one_resolve_signed(pipeline, stream_name, receiver):
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        created = c.post("/v1/alerts", json=_rule(stream_name, receiver.url))
        assert created.status_code == 201, created.text
        alert_id = created.json()["id"]
        assert created.json()["secret"] == "***" and created.json()["state"] == "ok"
        _send(c, stream_name, [T0 + i * 0.05 for i in range(100)])  # 100 events in 5 s
        pipeline.wait_events(stream_name, 100)
        got = receiver.wait(1)
        first = got[0]
        expected = "sha256=" + hmac.new(SECRET.encode(), first["raw"], hashlib.sha256).hexdigest()
        assert first["headers"]["X-Tidemark-Signature"] == expected
        assert first["headers"]["X-Tidemark-Delivery"] == first["body"]["delivery_id"]
        body = first["body"]
        assert body["state"] == "firing" and body["alert_id"] == alert_id
        assert body["bound"]["lower"] > 50
        for field in ("stream", "query", "params", "op", "threshold", "mode", "estimate", "at",
                      "sketch_version", "sent_at"):
            assert field in body
        # More events over the threshold: still firing, no second message.
        _send(c, stream_name, [T0 + 5 + i * 0.01 for i in range(50)])
        pipeline.wait_events(stream_name, 150)
        time.sleep(1.0)
        assert len(receiver.received) == 1
        # The window slides past them: one resolve.
        _send(c, stream_name, [T0 + 1000])
        pipeline.wait_events(stream_name, 151)
        got = receiver.wait(2)
        assert got[1]["body"]["state"] == "resolved"
        time.sleep(1.0)
        assert len(receiver.received) == 2
        state = c.get(f"/v1/alerts/{alert_id}").json()
        assert state["state"] == "ok" and state["last"]["estimate"] <= 50
        attempts = c.get(f"/v1/alerts/{alert_id}/deliveries").json()["deliveries"]
        assert [a["status"] for a in attempts] == [200, 200]


def test_certain_and_possible_differ_on_a_straddling_bound(pipeline, stream_name, receiver):
    with pipeline.client() as c:
        # A coarse time grain makes the bound straddle: the window's edges cut ticks.
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h", "resolution": "10s"})
        _send(c, stream_name, [T0 + i * 0.1 for i in range(600)])  # 60 s, 10 events/s
        pipeline.wait_events(stream_name, 600)
        params = {"window": "25", "at": str(T0 + 55)}
        answer = c.get(f"/v1/streams/{stream_name}/count", params=params).json()
        lower, upper = answer["bound"]["lower"], answer["bound"]["upper"]
        assert lower < upper
        threshold = (lower + upper) / 2
        certain = c.post("/v1/alerts", json=_rule(stream_name, receiver.url, params=params,
                                                  threshold=threshold, mode="certain")).json()
        possible = c.post("/v1/alerts", json=_rule(stream_name, receiver.url, params=params,
                                                   threshold=threshold, mode="possible")).json()
        assert certain["state"] == "ok" and possible["state"] == "firing"
        got = receiver.wait(1)
        time.sleep(1.0)
        assert [g["body"]["alert_id"] for g in receiver.received] == [possible["id"]]
        assert got[0]["body"]["bound"]["upper"] > threshold


def test_retries_until_2xx_with_the_same_delivery_id(pipeline, stream_name):
    receiver = Receiver(fail_first=3)
    try:
        with pipeline.client() as c:
            c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
            _send(c, stream_name, [T0 + i * 0.01 for i in range(100)])
            pipeline.wait_events(stream_name, 100)
            alert = c.post("/v1/alerts", json=_rule(stream_name, receiver.url)).json()
            got = receiver.wait(4, timeout=60)
            time.sleep(2.0)
            assert len(receiver.received) == 4
            assert len({g["body"]["delivery_id"] for g in got}) == 1
            attempts = c.get(f"/v1/alerts/{alert['id']}/deliveries").json()["deliveries"]
            assert sorted(a["status"] for a in attempts) == [200, 500, 500, 500]
            assert all("latency_ms" in a for a in attempts)
    finally:
        receiver.close()


def test_a_pending_delivery_survives_an_api_restart(pipeline, stream_name, redis_url):
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        _send(c, stream_name, [T0 + i * 0.01 for i in range(100)])
        pipeline.wait_events(stream_name, 100)
    # A second API replica queues the message while the receiver is down, then stops.
    replica = ApiServer(redis_url).start()
    try:
        with replica.client() as c:
            alert = c.post("/v1/alerts", json=_rule(stream_name, url)).json()
            assert alert["state"] == "firing"
            time.sleep(1.0)
            attempts = c.get(f"/v1/alerts/{alert['id']}/deliveries").json()["deliveries"]
            assert attempts and attempts[0]["status"] is None  # connection refused
    finally:
        replica.stop()
    receiver = Receiver(port=port)
    try:
        got = receiver.wait(1, timeout=60)  # delivered by the pipeline's API
        assert got[0]["body"]["alert_id"] == alert["id"] and got[0]["body"]["state"] == "firing"
    finally:
        receiver.close()


def test_a_deleted_rule_sends_nothing(pipeline, stream_name, receiver):
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        alert = c.post("/v1/alerts", json=_rule(stream_name, receiver.url)).json()
        assert c.delete(f"/v1/alerts/{alert['id']}").status_code == 204
        assert c.get(f"/v1/alerts/{alert['id']}").status_code == 404
        _send(c, stream_name, [T0 + i * 0.01 for i in range(100)])
        pipeline.wait_events(stream_name, 100)
        time.sleep(1.5)
        assert receiver.received == []


@pytest.mark.parametrize(
    "change, detail",
    [
        ({"op": ">="}, "op"),
        ({"mode": "sometimes"}, "mode"),
        ({"threshold": "high"}, "threshold"),
        ({"webhook_url": "ftp://127.0.0.1/x"}, "http or https"),
        ({"webhook_url": "http://169.254.169.254/latest"}, "allow-list"),
        ({"stream": "missing-stream"}, "not declared"),
        ({"query": "median"}, "query"),
        ({"params": {"window": "9h"}}, "max_window"),
        ({"query": "quantiles", "params": {"q": "0.5,0.9"}}, "exactly one q"),
    ],
)
def test_bad_rules_are_refused_with_reasons(api, stream_name, change, detail):
    with api.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        r = c.post("/v1/alerts", json={**_rule(stream_name, "http://127.0.0.1:9/x"), **change})
        assert r.status_code in (404, 422), r.text
        assert detail in r.json()["detail"]


def test_a_quantile_rule_on_an_empty_stream_is_accepted(api, stream_name):
    with api.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h", "value_min": 0, "value_max": 10})
        rule = {**_rule(stream_name, "http://127.0.0.1:9/x"), "query": "quantiles", "params": {"q": "0.99"}}
        r = c.post("/v1/alerts", json=rule)
        assert r.status_code == 201, r.text
        assert r.json()["state"] == "ok"
