"""End to end: HTTP ingest -> Redis -> Spark worker -> Redis -> API answers with bounds.

Exact answers are computed from the events the test sent (the oracle); every bound must
contain them.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import post_events

pytestmark = pytest.mark.spark

T0 = 1_700_000_000.0


def _events(rng, n, span=3000.0, late=True):
    ts = T0 + rng.uniform(0, span, n)
    if late:  # arrival order: mostly increasing, with heavy-tailed lateness
        order = np.argsort(ts + rng.pareto(1.2, n) * 30)
        ts = ts[order]
    weights = np.round(rng.exponential(3.0, n), 3)
    weights[rng.random(n) < 0.05] = 0.0
    keys = [f"k{k}" for k in rng.zipf(1.3, n) % 500]
    return [{"ts": float(t), "key": k, "weight": float(w)} for t, k, w in zip(ts, keys, weights)]


def _truth(events, at, window):
    ts = np.array([e["ts"] for e in events])
    w = np.array([e["weight"] for e in events])
    inside = (ts >= at - window) & (ts <= at)
    return float(inside.sum()), float(w[inside].sum())


def _check(c, stream, events, window, at=None):
    params = {"window": window} if at is None else {"window": window, "at": at}
    count = c.get(f"/v1/streams/{stream}/count", params=params).json()
    total = c.get(f"/v1/streams/{stream}/sum", params=params).json()
    true_count, true_sum = _truth(events, count["at"], window)
    for answer, truth in ((count, true_count), (total, true_sum)):
        b = answer["bound"]
        assert b["lower"] - 1e-6 <= truth <= b["upper"] + 1e-6, (answer, truth)
        # A range ending before the clock, or a sum of weights below 1, loses Lemma 3's
        # relative ε (the interval still holds): such answers say "additive".
        relative = answer is count and at is None
        assert b["confidence"] == 1.0 and (b["kind"] == "relative" if relative else b["kind"] in ("relative", "additive"))
        assert b["method"] == "splittable-histogram"
        # The bound is useful, not [0, inf]: within epsilon plus the time grain at the edges.
        assert b["upper"] - b["lower"] <= 4 * 0.05 * truth + 2 * _edge_mass(events, answer), (answer, truth)
    return count, total


def _edge_mass(events, answer):
    ts = np.array([e["ts"] for e in events])
    w = np.array([e["weight"] for e in events])
    a, b = answer["at"] - answer["window"], answer["at"]
    edge = ((ts >= np.floor(a) - 1) & (ts <= np.ceil(a) + 1)) | ((ts >= np.floor(b) - 1) & (ts <= b))
    return float(max(edge.sum(), w[edge].sum()))


def test_out_of_order_events_are_counted_within_their_bounds(pipeline, stream_name):
    rng = np.random.default_rng(1)
    events = _events(rng, 6000)
    with pipeline.client() as c:
        assert c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h", "epsilon": 0.05}).status_code == 201
        for i in range(0, len(events), 1000):
            r = post_events(c, stream_name, json=events[i : i + 1000])
            assert r.status_code == 202 and r.json() == {"accepted": 1000, "rejected": []}
        status = pipeline.wait_events(stream_name, len(events))
        assert status["events"] == len(events) and status["late_dropped"] == 0
        assert status["clock"] == max(e["ts"] for e in events)
        assert status["received"] == len(events)
        for window in (1, 10, 59.5, 600, 1800, 3599, 3600):
            count, _ = _check(c, stream_name, events, window)
            assert count["as_of"]["events"] == len(events)
        _check(c, stream_name, events, 3600, at=status["clock"] + 100)
        _check(c, stream_name, events, 1000, at=T0 + 2500.5)


def test_malformed_events_are_rejected_and_the_good_ones_counted(pipeline, stream_name):
    body = '{"ts": %f}\n{"ts": "soon"}\n{"ts": %f, "weight": -2}\n{"ts": %f, "weight": 2}\n' % (T0, T0, T0 + 1)
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "10m"})
        r = post_events(c, stream_name, content=body,
                   headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 202
        assert r.json()["accepted"] == 2
        assert [x["index"] for x in r.json()["rejected"]] == [1, 2]
        status = pipeline.wait_events(stream_name, 2)
        assert status["rejected"] == 2
        answer = c.get(f"/v1/streams/{stream_name}/sum", params={"window": 60}).json()
        assert answer["bound"]["lower"] <= 3 <= answer["bound"]["upper"]


def test_events_too_old_on_arrival_are_counted_as_late_dropped(pipeline, stream_name):
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "60s"})
        post_events(c, stream_name, json=[{"ts": T0 + 1000}])
        pipeline.wait_events(stream_name, 1)
        post_events(c, stream_name, json=[{"ts": T0 + 100}, {"ts": T0 + 990}])
        status = pipeline.wait_events(stream_name, 3)
        assert status["events"] == 2 and status["late_dropped"] == 1


@pytest.mark.parametrize(
    "path, params, status, detail",
    [
        ("/v1/streams/nope/count", {}, 404, "not declared"),
        ("/v1/streams/{s}/count", {"window": "2h"}, 422, "exceeds the stream's max_window"),
        ("/v1/streams/{s}/count", {"window": "soon"}, 422, "is not a duration"),
        ("/v1/streams/{s}/count", {"at": "noon"}, 422, "is not a number"),
        ("/v1/streams/{s}/median", {}, 422, "unknown query"),
        ("/v1/streams/bad name!/count", {}, 422, "name"),
    ],
)
def test_bad_queries_are_4xx_with_a_reason(api, stream_name, path, params, status, detail):
    with api.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        r = c.get(path.format(s=stream_name), params=params)
        assert r.status_code == status, r.text
        assert detail in r.json()["detail"]


def test_health_readiness_metrics_and_docs(pipeline, stream_name):
    with pipeline.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        post_events(c, stream_name, json=[{"ts": T0 + 1}, {"ts": T0 + 2}])
        pipeline.wait_events(stream_name, 2)
        c.get(f"/v1/streams/{stream_name}/count")
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz").json()
        assert ready["ready"] is ready["redis"] is ready["worker"] is True, ready
        assert ready["heartbeat"]["run_id"] == str(pipeline.query.runId)
        text = c.get("/metrics").text
        for name in (f'tidemark_events_accepted_total{{stream="{stream_name}"}} 2.0',
                     f'tidemark_sketch_bytes{{part="count",stream="{stream_name}"}}',
                     "tidemark_query_seconds_count", "tidemark_worker_batch_seconds",
                     f'tidemark_publish_age_seconds{{stream="{stream_name}"}}'):
            assert name in text, name
        assert c.get("/docs").status_code == 200
        assert "/v1/streams/{name}/{query}" in c.get("/openapi.json").json()["paths"]
