"""``GET /v1/streams/{name}/{query}/history``: the window's answers at past instants.

Summaries are built and published the way the worker does (no Spark): each history answer
must be the plain query's answer at the same ``at`` and bracket the brute-force truth.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.routes.history import MAX_POINTS, instants
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher
from tests.conftest import TEST_SECRET

T0 = 1_700_000_000.0
MAX_WINDOW = 600.0
_names = (f"hist-{i}" for i in itertools.count())


def _publish(redis_url: str, name: str, ts: np.ndarray, weights: np.ndarray,
             values: np.ndarray | None = None) -> StreamConfig:
    config = StreamConfig(max_window=MAX_WINDOW, epsilon=0.05)
    summary = StreamSummary.create(config, TEST_SECRET)
    n = len(ts)
    if n:
        values = np.full(n, np.nan) if values is None else values
        summary.update_table(decode_chunk(encode_chunk(ts, [None] * n, values, weights)))
    Publisher(redis_url).publish_summary(name, summary, version=1, events=n)
    return config


@st.composite
def streams(draw):
    """Out of order, bursts on one instant, duplicates, fractional times; all within max_window."""
    n = draw(st.integers(0, 300))
    base = draw(st.lists(st.floats(0, MAX_WINDOW * 0.95, allow_nan=False), min_size=n, max_size=n))
    bursts = draw(st.lists(st.sampled_from(base), max_size=60)) if base else []
    ts = T0 + np.array(base + bursts, dtype=float)
    weights = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 2.5, 1000.0]),
                                     min_size=len(ts), max_size=len(ts))), dtype=float)
    return ts, weights


def test_instants_end_at_the_last_and_are_even():
    assert instants(10.0, 10.0, 5) == [10.0]
    assert instants(10.0, 0.0, 1) == [10.0]
    got = instants(10.0, 0.0, 5)
    assert got == [0.0, 2.5, 5.0, 7.5, 10.0]
    got = instants(T0 + 0.1, T0 - 3599.7, 7)
    assert got[-1] == T0 + 0.1 and got == sorted(got) and len(got) == 7


@given(st.floats(1e3, 2e9), st.sampled_from([60.0, 95.5, 3300.0, 86400.0 * 7]), st.integers(3, MAX_POINTS),
       st.floats(0.01, 30.0), st.sampled_from([None, 1.0, 0.25, 0.1, 60.0]))
@settings(max_examples=200, deadline=None)
def test_a_history_asked_again_later_shares_its_inner_instants(clock, span, points, later, grain):
    """The inner instants lie on a grid of the nominal span: asked again ``later`` seconds
    on (the route's span is ``max_window − window`` at every clock), all inner instants
    up to the first history's end are instants of the first, so their points are kept.
    With a grain (the stream's resolution) the grid's step is a whole number of its
    eighths where it has room, at most 2 % short of an even spread."""
    first = instants(clock, clock - span, points, span, grain)
    again = instants(clock + later, clock + later - span, points, span, grain)
    if points > 3 and grain and span / (points - 1) * 8 / grain >= 50:  # (two inner instants: a step)
        step = first[-2] - first[-3]
        assert step == pytest.approx(math.floor(span / (points - 1) * 8 / grain) * grain / 8, rel=1e-6)
        assert step >= span / (points - 1) * 0.98
    assert len(first) == len(again) == points and first == sorted(first) and again == sorted(again)
    assert first[0] == clock - span and again[-1] == clock + later
    inner = set(first[1:-1])
    assert all(t in inner for t in again[1:-1] if t < first[-1])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=streams(), window=st.sampled_from([1.0, 30.0, 95.5, MAX_WINDOW]),
       points=st.integers(1, 40))
def test_history_answers_are_the_plain_answers_and_hold_the_truth(api, redis_url, data, window, points):
    ts, weights = data
    name = next(_names)
    _publish(redis_url, name, ts, weights)
    with api.client() as c:
        for query, truth_of in (("count", lambda m: float(m.sum())), ("sum", lambda m: float(weights[m].sum()))):
            r = c.get(f"/v1/streams/{name}/{query}/history", params={"window": window, "points": points})
            assert r.status_code == 200, r.text
            body = r.json()
            answers = body["answers"]
            assert body["window"] == window and body["query"] == query
            ats = [a["at"] for a in answers]
            assert ats == sorted(ats)
            if len(ts) == 0:
                assert len(answers) == 1 and answers[0]["estimate"] == 0
                continue
            clock = float(ts.max())
            assert ats[-1] == clock
            room = MAX_WINDOW - window
            assert len(answers) == (points if room > 0 else 1)
            if room > 0 and points > 1:
                assert math.isclose(ats[0], clock - room, rel_tol=0, abs_tol=1e-6)
            for a in answers:
                plain = c.get(f"/v1/streams/{name}/{query}", params={"window": window, "at": repr(a["at"])}).json()
                assert a == plain
                inside = (ts >= a["at"] - window) & (ts <= a["at"])
                truth = truth_of(inside)
                b = a["bound"]
                assert b["confidence"] == 1.0 and b["lower"] <= truth <= b["upper"], (a, truth)


def _true_quantile(values: np.ndarray, q: float) -> float:
    """Contract §6: the smallest v with at least q × count events of value ≤ v (at least one)."""
    v = np.sort(values)
    return float(v[max(math.ceil(Fraction(repr(q)) * v.size), 1) - 1])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=streams(), window=st.sampled_from([1.0, 95.5, 300.0]), points=st.integers(2, 30),
       seed=st.integers(0, 2**32 - 1))
def test_quantile_history_brackets_the_truth_at_every_instant(api, redis_url, data, window, points, seed):
    """Quantiles over time: each instant's items, each with its bracket, are the plain
    query's answer at that ``at`` and hold the brute-force quantile (latency-like values
    with ties; an instant whose window is empty has no bracket)."""
    ts, weights = data
    rng = np.random.default_rng(seed)
    values = np.round(rng.lognormal(3, 1, ts.size), 1)
    name = next(_names)
    _publish(redis_url, name, ts, weights, values)
    qs = [0.5, 0.9, 0.99]
    with api.client() as c:
        r = c.get(f"/v1/streams/{name}/quantiles/history",
                  params={"window": window, "points": points, "q": "0.5,0.9,0.99"})
        assert r.status_code == 200, r.text
        for a in r.json()["answers"]:
            assert [it["q"] for it in a["items"]] == qs
            plain = c.get(f"/v1/streams/{name}/quantiles",
                          params={"window": window, "at": repr(a["at"]), "q": "0.5,0.9,0.99"}).json()
            assert a == plain
            inside = (ts >= a["at"] - window) & (ts <= a["at"])
            for it in a["items"]:
                if not inside.any():
                    continue  # no event: nothing to bracket (the edge ticks may still hold some)
                truth = _true_quantile(values[inside], it["q"])
                b = it["bound"]
                assert b["confidence"] == 1.0 and b["lower"] <= truth <= b["upper"], (a["at"], it, truth)


@pytest.mark.parametrize("params, status, words", [
    ({"window": "2h"}, 422, "max_window"),
    ({"window": "nonsense"}, 422, "not a duration"),
    ({"points": 0}, 422, "points"),
    ({"points": MAX_POINTS + 1}, 422, "points"),
    ({"points": "many"}, 422, "points"),
    ({"at": "soon"}, 422, "not a number"),
    ({"at": T0 - 10 * MAX_WINDOW}, 422, "no longer kept"),
])
def test_bad_parameters_are_4xx_with_a_reason(api, redis_url, params, status, words):
    name = next(_names)
    _publish(redis_url, name, T0 + np.arange(10.0), np.ones(10))
    r = httpx.get(f"{api.url}/v1/streams/{name}/count/history", params=params, headers=api.headers)
    assert r.status_code == status and words in r.json()["detail"], r.text


def test_unknown_stream_and_query_are_4xx(api, redis_url):
    assert httpx.get(f"{api.url}/v1/streams/nowhere/count/history", headers=api.headers).status_code == 404
    name = next(_names)
    _publish(redis_url, name, T0 + np.arange(3.0), np.ones(3))
    r = httpx.get(f"{api.url}/v1/streams/{name}/median/history", headers=api.headers)
    assert r.status_code == 422 and "unknown query" in r.json()["detail"]


def test_history_of_a_list_query_and_of_a_stream_never_published(api, redis_url):
    name = next(_names)
    httpx.put(f"{api.url}/v1/streams/{name}", json={"max_window": "10m"}, headers=api.headers).raise_for_status()
    r = httpx.get(f"{api.url}/v1/streams/{name}/count/history", params={"points": 50}, headers=api.headers)
    assert r.status_code == 200 and [a["estimate"] for a in r.json()["answers"]] == [0.0]
    _publish(redis_url, name, T0 + np.arange(100.0), np.ones(100))
    r = httpx.get(f"{api.url}/v1/streams/{name}/heavy-hitters/history", params={"window": 60, "points": 5, "phi": 0.5}, headers=api.headers)
    assert r.status_code == 200 and len(r.json()["answers"]) == 5
    assert all("items" in a for a in r.json()["answers"])


def test_a_refreshed_history_computes_only_what_a_publish_reached(api, redis_url):
    """A publish that added events from ``touched`` on keeps every point before it: the
    refresh computes the new instants and those at or after ``touched``; a kept point is
    still the answer of its version and still brackets the truth over every event."""
    import time

    from tidemark.wire.records import ShardStatus

    name = next(_names)
    config = StreamConfig(max_window=MAX_WINDOW, epsilon=0.05)
    first = T0 + np.arange(0.0, 500.0)
    later = T0 + np.concatenate([np.arange(450.0, 470.0), np.arange(500.0, 520.0)])  # late ones too
    publisher = Publisher(redis_url)

    def publish(ts, version, touched):
        summary = StreamSummary.create(config, TEST_SECRET)
        summary.update_table(decode_chunk(encode_chunk(ts, [None] * len(ts), np.full(len(ts), np.nan),
                                                       np.ones(len(ts)))))
        status = ShardStatus(version=version, events=len(ts), clock=float(ts.max()), touched=touched)
        assert publisher.publish(name, 0, status, summary.to_bytes(), config.model_dump())

    def history(c, version):
        deadline = time.monotonic() + 10
        while True:
            body = c.get(f"/v1/streams/{name}/count/history", params={"window": 60, "points": 200}).json()
            if body["answers"][-1]["as_of"]["sketch_version"] == version or time.monotonic() > deadline:
                return body["answers"]
            time.sleep(0.05)

    cache = api.app.state.range_cache
    publish(first, 1, repr(float(first.min())))
    with api.client() as c:
        before = {a["at"]: a for a in history(c, 1)}
        hits = cache.hits
        publish(np.concatenate([first, later]), 2, repr(float(later.min())))
        deadline = time.monotonic() + 10
        while 2 not in cache._ledger.get(name, {}).get(0, {}) and time.monotonic() < deadline:
            time.sleep(0.02)  # the announcement reaches the process's subscription
        after = history(c, 2)
    touched = float(later.min())
    kept = [a for a in after if a["as_of"]["sketch_version"] == 1]
    assert kept and all(a["at"] < touched for a in kept)
    assert all(a["as_of"]["sketch_version"] == 2 for a in after if a["at"] >= touched)
    shared_before = [t for t in before if t < touched and t in {a["at"] for a in after}]
    assert len(kept) == len(shared_before) and cache.hits - hits >= len(kept)
    every = np.concatenate([first, later])
    for a in kept:
        assert a == before[a["at"]]
        truth = int(((every >= a["at"] - 60) & (every <= a["at"])).sum())
        assert a["bound"]["lower"] <= truth <= a["bound"]["upper"]
