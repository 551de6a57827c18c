"""The fast query path gives the same answers as the plain one.

* ``ECMSketch.frequencies`` (every key in one call) equals ``frequency`` key by key;
* heavy hitters read that way list the same keys with the same bounds as reading each
  candidate on its own, and every φ-heavy key of the exact oracle is listed;
* a new version is decoded off the request path: until it is ready answers come from the
  version before, and the stream's status says which; a question asked again of the same
  version is answered from the rendered answer, and a new version answers anew.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from app.answers import answer, bound_of, parse_window, window_estimate
from app.kinds import keyed
from app.store import Store
from sketches.ecm import ECMSketch
from tests.conftest import TEST_SECRET
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

T0 = 1_700_000_000.0
_names = (f"qpath-{i}" for i in itertools.count())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), keys=st.integers(1, 400),
       fractional=st.booleans(), lo=st.integers(0, 700), span=st.integers(-5, 700))
def test_frequencies_equal_frequency_key_by_key(seed, n, keys, fractional, lo, span):
    rng = np.random.default_rng(seed)
    ecm = ECMSketch(0.05, 0.05, 600, seed=seed % 1000)
    ticks = rng.integers(0, 600, n)  # out of order, duplicates
    ids = (rng.zipf(1.2, n) % keys).astype(np.uint64)
    weights = rng.uniform(0.01, 5.0, n) if fractional else None
    if n:
        ecm.update(ticks, ids, weights)
    asked = np.unique(np.concatenate([ids, rng.integers(0, 2**63, 5).astype(np.uint64)]))
    hi = lo + span
    if n and lo < ecm._tb.horizon:
        return  # before the window: refused alike by both (a SketchError)
    assert ecm.frequencies(asked, lo, hi) == [ecm.frequency(int(k), lo, hi) for k in asked]


def _summary(config: StreamConfig, ts, keys, values) -> StreamSummary:
    summary = StreamSummary.create(config, TEST_SECRET)
    if len(ts):
        summary.update_table(decode_chunk(encode_chunk(np.asarray(ts, float), list(keys),
                                                       np.asarray(values, float), np.ones(len(ts)))))
    return summary


def _heavy_one_by_one(summary, window, phi):
    """The heavy-hitter rule with every candidate read on its own (the previous code)."""
    found = summary["key_candidates"].candidates(*window.outer)
    level = phi * window_estimate(summary["count"].query, window, "splittable-histogram").lower
    ecm, items, dropped = summary["keys"], [], 0.0
    for key_id, name in zip(found.ids.tolist(), found.keys):
        e = window_estimate(lambda lo, hi: ecm.frequency(key_id, lo, hi), window, keyed.METHOD)
        if e.upper >= level and e.upper > 0:
            items.append({"key": name, "estimate": e.estimate, "bound": bound_of(e)})
        else:
            dropped = max(dropped, e.upper)
    items.sort(key=lambda item: -item["estimate"])
    return items, max(found.threshold, dropped)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 2000), window=st.sampled_from([1, 7, 60, 599]),
       back=st.floats(0, 200), phi=st.sampled_from([0.001, 0.02, 0.2, 0.6]),
       resolution=st.sampled_from([1.0, 10.0]))
def test_heavy_hitters_read_together_equal_one_by_one_and_hold_the_truth(seed, n, window, back, phi,
                                                                         resolution):
    rng = np.random.default_rng(seed)
    config = StreamConfig(max_window=600, resolution=resolution)
    ts = T0 + rng.uniform(0, 590, n)
    keys = [f"k{k}" for k in rng.zipf(1.4, n) % 300]
    summary = _summary(config, ts, keys, np.full(n, np.nan))
    clock = summary.clock_seconds
    params = {"window": str(window), "phi": str(phi)}
    if clock is not None:
        params["at"] = repr(clock - back)
    try:
        w = parse_window(params, config, clock)
    except Exception:
        return  # outside what is kept: refused before any sketch is read
    got = keyed._heavy_hitters(summary, config, w, {"phi": phi})
    items, unlisted = _heavy_one_by_one(summary, w, phi)
    assert list(got) == items and got.extra["unlisted_max"] == unlisted
    # The truth: every key with f >= phi * N in [at - window, at] is listed.
    inside = (ts >= w.at - w.seconds) & (ts <= w.at)
    truth = Counter(k for k, i in zip(keys, inside) if i)
    listed = {item["key"] for item in got}
    for key, f in truth.items():
        if f >= phi * inside.sum():
            assert key in listed


@pytest.fixture
def store(redis_url):
    return Store(redis_url, TEST_SECRET)


def test_a_new_version_decodes_off_the_request_path_and_the_status_agrees(redis_url, store, monkeypatch):
    name = next(_names)
    config = StreamConfig(max_window=600)
    publisher = Publisher(redis_url)
    one = _summary(config, T0 + np.arange(10.0), [None] * 10, np.full(10, np.nan))
    two = _summary(config, T0 + np.arange(25.0), [None] * 25, np.full(25, np.nan))
    publisher.publish_summary(name, one, version=1, events=10)
    summary, status = store.reads.summary(name)  # nothing decoded yet: waits for it
    assert status["events"] == 10 and answer("count", name, config, summary, status, {})["estimate"] == 10
    store.summaries.read_ttl = 0.0  # see the new version at once
    decoded = []
    original = store.summaries._decode

    def slow_decode(*args):  # this store's decodes only (an API in the same process has its own)
        time.sleep(2.0)  # far longer than any answer takes, even on a busy machine
        decoded.append(1)
        return original(*args)

    monkeypatch.setattr(store.summaries, "_decode", slow_decode)
    publisher.publish_summary(name, two, version=2, events=25)
    started = time.monotonic()
    summary, status = store.reads.summary(name)
    assert time.monotonic() - started < 1.5, "a query waited for the decode"
    assert status["events"] == 10 and status["sketch_version"] == 1  # the version it answers from
    assert store.reads.status(name)["events"] == 10
    deadline = time.monotonic() + 10
    while store.reads.status(name)["events"] != 25:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    summary, status = store.reads.summary(name)
    assert status["sketch_version"] == 2
    assert answer("count", name, config, summary, status, {})["estimate"] == 25
    assert len(decoded) == 1  # decoded once, whatever the number of readers
    # Alerts ask for the announced version itself.
    three = _summary(config, T0 + np.arange(40.0), [None] * 40, np.full(40, np.nan))
    publisher.publish_summary(name, three, version=3, events=40)
    assert store.reads.summary(name, fresh=True)[1]["events"] == 40


def test_answers_are_rendered_once_per_version_and_anew_for_a_new_one(api, redis_url):
    name = next(_names)
    config = StreamConfig(max_window=600)
    publisher = Publisher(redis_url)
    publisher.publish_summary(name, _summary(config, T0 + np.arange(10.0), [None] * 10,
                                             np.full(10, np.nan)), version=1, events=10)
    with api.client("read") as c:
        first = c.get(f"/v1/streams/{name}/count", params={"window": "600"})
        again = c.get(f"/v1/streams/{name}/count", params={"window": "600"})
        assert first.status_code == again.status_code == 200
        assert first.content == again.content and first.json()["estimate"] == 10
        assert c.get(f"/v1/streams/{name}/count", params={"window": "5"}).json()["estimate"] < 10
        publisher.publish_summary(name, _summary(config, T0 + np.arange(30.0), [None] * 30,
                                                 np.full(30, np.nan)), version=2, events=30)
        deadline = time.monotonic() + 10
        while c.get(f"/v1/streams/{name}").json()["status"]["events"] != 30:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = c.get(f"/v1/streams/{name}/count", params={"window": "600"}).json()
        assert body["estimate"] == 30 and body["as_of"]["sketch_version"] == 2
        bad = c.get(f"/v1/streams/{name}/count", params={"window": "9h"})
        assert bad.status_code == 422 and "max_window" in bad.json()["detail"]
