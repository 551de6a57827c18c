"""``tidemark demo``'s live streams (``tidemark_cli.demo``): every generated event is one
each demo stream takes, and the feeder posts to every demo stream of the real API until
it is stopped."""

from __future__ import annotations

import re
import time

import httpx
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import KEYS, auth
from tidemark.events import validate_events
from tidemark_cli.demo import DEMO_STREAMS, DemoFeeder, generate
from tidemark_cli.main import declare_streams


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 400), now=st.floats(1e6, 4e9))
@settings(max_examples=60, deadline=None)
def test_every_generated_event_is_taken_by_every_demo_stream(seed, n, now):
    events = generate(np.random.default_rng(seed), now, n)
    assert len(events) == n
    for name, config in DEMO_STREAMS.items():
        assert validate_events(events, config).rejects == [], name
    # Around ``now``: delays are capped at ten minutes, times rounded to the millisecond.
    assert all(now - 600 - 1e-3 <= e["ts"] <= now + 1e-3 for e in events)
    assert all(re.fullmatch(r"user-\d+", e["key"]) and e["weight"] >= 0 for e in events)


def _accepted(c: httpx.Client) -> dict[str, float]:
    text = c.get("/metrics").text
    return {name: sum(float(v) for v in re.findall(
        rf'^tidemark_events_accepted_total{{stream="{name}"}} (\S+)$', text, re.M)) for name in DEMO_STREAMS}


def test_the_feeder_posts_to_every_demo_stream_until_stopped(api, redis_url):
    declare_streams(redis_url, DEMO_STREAMS)
    feeder = DemoFeeder(api.url, KEYS["ingest"], rate=100.0, seed=3)
    with httpx.Client(base_url=api.url, timeout=30, headers=auth("read")) as c:
        before = _accepted(c)
        feeder.start()
        try:
            deadline = time.monotonic() + 30
            while not all(_accepted(c)[n] > before[n] for n in DEMO_STREAMS):
                assert time.monotonic() < deadline, (before, _accepted(c))
                time.sleep(0.2)
        finally:
            feeder.stop()
        assert not feeder._thread.is_alive()
        stopped = _accepted(c)
        time.sleep(1.2)  # past two of its ticks: nothing more arrives
        assert _accepted(c) == stopped
