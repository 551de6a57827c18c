"""Answers on one exact rule for time (issue 21), in process from ingest to answer:
the late edge that a float subtraction rounds, grains too fine to tick exactly, and
windows written with an exponent."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from app.answers import QueryError, answer, parse_window
from tests import in_process
from tidemark import limits
from tidemark.streams import StreamConfig


def test_the_late_edge_is_decided_as_the_answers_decide_it():
    """Issue 21, failure 2: the event at the float ``1761000000.0 − 60.2`` is late (older
    than max_window behind the clock, exactly); the worker rounded and counted it, and a
    relative decayed sum answered [1000000.99999994, 1000001.00000006] for a truth of 1."""
    config = StreamConfig(max_window=60.2, value_min=0, value_max=10, decays=[{"kind": "none"}])
    clock = 1761000000.0
    r = in_process.run(config, [[{"ts": clock, "value": 1, "weight": 1}],
                                [{"ts": clock - 60.2, "value": 1, "weight": 1e6}]],
                       owner=[0], cuts=[2], shards=1)
    assert r.late_dropped == 1 and r.events == 1
    got = answer("decayed-sum", "s", config, r.summary, r.status(),
                 {"tau": "0", "decay": "none", "guarantee": "relative"})["bound"]
    assert got["lower"] <= 1 <= got["upper"] and got["confidence"] == 1.0
    for kind in ("count", "sum"):
        b = answer(kind, "s", config, r.summary, r.status(), {})["bound"]
        assert b["lower"] <= 1 <= b["upper"]


def test_a_grain_finer_than_times_can_be_ticked_is_refused_with_the_finest():
    """Issue 21, failure 3: at 1e-9 most events landed ticks off, at 5e-10 every update
    failed; now such a declaration is refused, naming the finest grain, and at that grain
    an event at a present-day time is counted in the one tick that holds it."""
    for res in (1e-9, 5e-10, 1e-7):
        with pytest.raises(ValidationError, match="finest grain a stream can take is 1.19209e-07 s"):
            StreamConfig(max_window=60, resolution=res)
    config = StreamConfig(max_window=60, resolution=limits.FINEST_RESOLUTION)
    t = 1761000000.123456
    r = in_process.run(config, [[{"ts": t}]], owner=[0], cuts=[1], shards=1)
    for window, at, truth in ((limits.FINEST_RESOLUTION, t, 1), (1e-6, math.nextafter(t, 0), 0),
                              (60, t, 1)):
        b = answer("count", "s", config, r.summary, r.status(),
                   {"window": repr(window), "at": repr(at)})["bound"]
        assert b["lower"] <= truth <= b["upper"], (window, at, b)


@pytest.mark.parametrize("raw, seconds", [("1e-3", 0.001), ("1E2", 100.0), ("2.5e1", 25.0), (".5", 0.5),
                                          ("1e+2", 100.0), ("600", 600.0), ("1e1s", 10.0), ("1e1m", 600.0)])
def test_a_window_takes_any_number_of_seconds(raw, seconds):
    w = parse_window({"window": raw, "at": "1000"}, StreamConfig(max_window=600), 1000.0)
    assert w.seconds == seconds


@pytest.mark.parametrize("raw, message", [
    ("1e3", "exceeds the stream's max_window 600s"), ("0", "must be positive"),
    ("0e5", "must be positive"), ("1e-400", "must be positive"), ("1e999", "must be positive and finite"),
    ("-1e-3", "is not a duration"), ("e3", "is not a duration"), ("1e", "is not a duration"),
    ("nan", "is not a duration"), ("inf", "is not a duration")])
def test_a_bad_window_says_why(raw, message):
    with pytest.raises(QueryError, match=message):
        parse_window({"window": raw, "at": "1000"}, StreamConfig(max_window=600), 1000.0)


def test_over_http_refusals_are_422s_that_say_why(api):
    """Through the API (real Redis): a grain too fine is refused at declaration naming the
    finest; an event beyond the horizon or heavier than the limit is rejected with its
    reason while the others are kept; a window with an exponent is answered."""
    with api.client("admin") as c:
        r = c.put("/v1/streams/too-fine", json={"max_window": 60, "resolution": 1e-9})
        assert r.status_code == 422 and "finest grain a stream can take is 1.19209e-07 s" in r.text
        assert c.put("/v1/streams/exact-limits", json={"max_window": 600}).status_code in (200, 201)
        r = c.post("/v1/streams/exact-limits/events", json=[
            {"ts": 1000.5, "weight": limits.MAX_WEIGHT}, {"ts": 2.0**40}, {"ts": 1001.5, "weight": 2e15}])
        assert r.status_code == 202 and r.json()["accepted"] == 1
        assert [(j["index"], "9999-12-31" in j["error"] or "weight must be <= 1e+15" in j["error"])
                for j in r.json()["rejected"]] == [(1, True), (2, True)]
        assert c.get("/v1/streams/exact-limits/count", params={"window": "1e2"}).status_code == 200
        r = c.get("/v1/streams/exact-limits/count", params={"window": "1e3"})
        assert r.status_code == 422 and "exceeds the stream's max_window" in r.json()["detail"]
