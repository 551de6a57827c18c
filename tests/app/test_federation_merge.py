"""Merging sites' summaries (``app.federation.merge_sites``) against one site that saw every
event, and what an answer keeps when a site is missing (``app.site_bounds``).

Hypothesis splits one set of events across one to four sites at random (and each site's
events across shards and batches), builds each site's summary by the worker's update path
(``tests.in_process.run``) and checks that the merged summary's answers bracket the exact
answer over the union of what the sites kept; the distinct counter's merged waves are byte
for byte those of the single site fed everything (same hash secret: the sketch of the union).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.answers import answer
from app.federation import Federation, merge_sites
from app.site_bounds import SIDES, mark_sites
from tests.in_process import run
from tidemark.streams import StreamConfig

T0 = 1_700_000_000.0
CONFIG = StreamConfig(max_window=600, epsilon=0.1, delta=0.05, value_min=0, value_max=100,
                      decays=[{"kind": "none"}])


@st.composite
def split_events(draw):
    n = draw(st.integers(1, 400))
    seed = draw(st.integers(0, 2**32 - 1))
    sites = draw(st.integers(1, 4))
    rng = np.random.default_rng(seed)
    ts = T0 + np.round(rng.uniform(0, 900, n), 3)  # some older than max_window: late at a site
    keys = [f"k{int(k)}" for k in rng.zipf(1.5, n) % 50]
    values = np.round(rng.uniform(0, 100, n), 1)
    weights = np.round(rng.exponential(1.0, n), 2)
    events = [{"ts": float(t), "key": k, "value": float(v), "weight": float(w)}
              for t, k, v, w in zip(ts, keys, values, weights)]
    owner = rng.integers(0, sites, n)
    shards = [int(x) for x in rng.integers(1, 3, sites)]
    cuts = [int(x) for x in rng.integers(1, 4, 3)]
    return events, owner, sites, shards, cuts


def _status(summaries, events):
    clocks = [s.clock_seconds for s in summaries if s is not None and s.clock_seconds is not None]
    return {"clock": max(clocks) if clocks else None, "sketch_version": 1, "updated_at": "t",
            "events": events, "late_dropped": 0}


def _holds(bound, truth, slack=1e-9):
    return bound["lower"] - slack * max(1.0, abs(truth)) <= truth <= bound["upper"] + slack * max(1.0, abs(truth))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split_events())
def test_merged_sites_bracket_the_union_like_one_site(case):
    events, owner, sites, shards, cuts = case
    runs = []
    for site in range(sites):
        mine = [e for e, o in zip(events, owner) if o == site]
        requests = [mine[i : i + 7] for i in range(0, len(mine), 7)]
        runs.append(run(CONFIG, requests, owner=list(range(shards[site])), cuts=cuts, shards=shards[site]))
    summaries = [r.summary for r in runs if r.summary is not None]
    merged = merge_sites(summaries)
    kept = [(t, w, v, k) for r, site in zip(runs, range(sites))
            for (t, w, v), k in zip(r.kept(), _keys_kept(r, events, owner, site))]
    status = _status(summaries, sum(r.events for r in runs))
    at = status["clock"]
    for window in (30, 300, 600):
        lo, hi = Fraction(at) - window, Fraction(at)
        inside = [(t, w, v, k) for t, w, v, k in kept if lo <= Fraction(t) <= hi]
        freq = Counter(k for *_, k in inside)
        params = {"window": str(window)}
        assert _holds(answer("count", "s", CONFIG, merged, status, params)["bound"], len(inside))
        assert _holds(answer("sum", "s", CONFIG, merged, status, params)["bound"], math.fsum(w for _, w, _, _ in inside))
        assert _holds(answer("distinct", "s", CONFIG, merged, status, params)["bound"], len(freq))
        assert _holds(answer("self-join", "s", CONFIG, merged, status, params)["bound"],
                      sum(f * f for f in freq.values()))
        for key in ("k1", "k2", "k9"):
            assert _holds(answer("frequency", "s", CONFIG, merged, status, {**params, "key": key})["bound"],
                          freq.get(key, 0))
        q = answer("quantiles", "s", CONFIG, merged, status, {**params, "q": "0.5,0.9"})
        values = sorted(v for _, _, v, _ in inside)
        for item, phi in zip(q["items"], (0.5, 0.9)):
            if values:
                truth = values[max(math.ceil(phi * len(values)), 1) - 1]
                assert item["bound"]["lower"] <= truth <= item["bound"]["upper"], (item, truth)
    # The randomized waves of one hash secret merge into the waves of the union.
    # One site fed exactly what the sites kept, in time order (so none of it is late there).
    union = [{"ts": t, "weight": w, "value": v, "key": k} for t, w, v, k in sorted(kept)]
    one = run(CONFIG, [union[i : i + 50] for i in range(0, len(union), 50)], owner=[0], cuts=[2], shards=1)
    assert one.late_dropped == 0 and one.events == len(kept)
    assert merged["distinct"].to_bytes() == one.summary["distinct"].to_bytes()


def _keys_kept(r, events, owner, site):
    """The keys of the events ``r.kept()`` lists, in its order (kept is in ingest order)."""
    mine = [e for e, o in zip(events, owner) if o == site]
    clock, out = None, []
    for e in mine:
        if clock is None or Fraction(clock) - Fraction(e["ts"]) <= Fraction(CONFIG.max_window):
            out.append(e["key"])
        clock = e["ts"] if clock is None else max(clock, e["ts"])
    return out


def _body(kind: str) -> dict:
    return {"estimate": 5.0, "bound": {"lower": 4.0, "upper": 6.0, "confidence": 1.0, "half_width": 1.0,
                                       "half_width_relative": 0.2},
            "items": [{"q": 0.5, "estimate": 3.0, "bound": {"lower": 2.0, "upper": 4.0, "confidence": 1.0}}],
            "complete": True, "unlisted_max": 2.0, "events": {"lower": 4.0, "upper": 6.0}}


@pytest.mark.parametrize("kind", ["count", "sum", "distinct", "frequency", "self-join", "inner-product",
                                  "decayed-sum", "decayed-range-sum", "heavy-hitters"])
def test_a_monotone_kind_keeps_its_lower_bound_without_a_site(kind):
    body = mark_sites(_body(kind), kind, {"eu": "unreachable (ConnectError)"})
    assert body["incomplete"] == ["eu"] and body["incomplete_sites"] == {"eu": "unreachable (ConnectError)"}
    for b in (body["bound"], body["items"][0]["bound"]):
        assert b["upper"] is None and b["lower"] is not None and b["confidence"] == 0.0
    assert body["bound"]["half_width"] is None
    assert body["complete"] is False and body["unlisted_max"] is None and body["events"]["upper"] is None


@pytest.mark.parametrize("kind", ["quantiles", "distribution", "decayed-quantile", "decayed-frequency",
                                  "decayed-heavy-hitters", "some-new-kind"])
def test_a_ratio_or_rank_keeps_no_side_without_a_site(kind):
    assert kind not in SIDES
    body = mark_sites(_body(kind), kind, {"us": "stale", "ap": "unreachable"})
    assert body["incomplete"] == ["ap", "us"]
    for b in (body["bound"], body["items"][0]["bound"]):
        assert b["upper"] is None and b["lower"] is None and b["confidence"] == 0.0


def test_a_lost_events_record_keeps_its_form_and_names_the_sites():
    body = {**_body("count"), "incomplete": {"events": 3, "why": "shard 0 failed"}}
    body = mark_sites(body, "count", {"eu": "stale"})
    assert body["incomplete"]["events"] == 3 and body["incomplete"]["sites"] == ["eu"]


def test_the_status_adds_the_sites_that_answered_and_names_the_others():
    gathered = {"local": (None, {"events": 3, "sketch_version": 2, "updated_at": "a", "clock": 10.0,
                                 "late_dropped": 1, "received": 4}, 0.0, None),
                "eu": (None, {"events": 5, "sketch_version": 7, "updated_at": "b", "clock": 12.0}, 0.4, None),
                "us": (None, {"events": 9, "sketch_version": 1, "updated_at": "c", "clock": 99.0}, 40.0, "stale")}
    status = Federation._status(gathered)
    assert (status["events"], status["sketch_version"], status["clock"], status["late_dropped"]) == (8, 9, 12.0, 1)
    assert status["incomplete_sites"] == {"us": "stale"} and status["state"] == "incomplete"
    assert status["sites"]["eu"] == {"sketch_version": 7, "updated_at": "b", "events": 5, "age": 0.4}
    assert status["sites"]["us"]["error"] == "stale"
