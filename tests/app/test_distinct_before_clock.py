"""``distinct`` over windows that end before the clock (issue 21): answered from the
randomized wave's latest ticks with the bracket its state proves, against the exact oracle."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from app.answers import answer
from tests import strategies as S
from tidemark.streams import StreamConfig


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(S.cases(max_events=40), st.data())
def test_distinct_before_the_clock_brackets_the_truth(case, data):
    """Few keys (level 0 of every wave holds them all): every reading is exact, so the
    bracket is deterministic and must hold, wherever the window ends."""
    summary = S.summarize(case)
    if summary is None:
        return
    w, at = data.draw(S.windows(case))
    body = answer("distinct", "s", case.config, summary, S.status(case), {"window": repr(w), "at": repr(at)})
    truth = len(S.frequencies(case, S.in_window(case, w, at)))
    b = body["bound"]
    assert b["confidence"] == 1.0
    assert b["lower"] <= truth <= b["upper"], (w, at, b, truth)


def test_a_window_long_before_the_clock_is_answered_with_what_the_state_proves():
    """Keys a..e in the window, then only a and b again later: the three whose latest event
    is in the window are certain, the two seen again may or may not have been in it."""
    config = StreamConfig(max_window=600, epsilon=0.1, delta=0.05)
    ts = [100.5, 101.5, 102.5, 103.5, 104.5, 400.5, 401.5]
    keys = ["a", "b", "c", "d", "e", "a", "b"]
    case = S.Case(config, ts, keys, [math.nan] * 7, [1.0] * 7, [0, 1, 0, 1, 0, 1, 0])
    body = answer("distinct", "s", config, S.summarize(case), S.status(case), {"window": "10", "at": "105"})
    b = body["bound"]
    assert (b["lower"], b["upper"], b["confidence"], b["kind"]) == (3.0, 5.0, 1.0, "additive")


def test_many_keys_before_the_clock_hold_with_the_stated_confidence():
    """Beyond level 0 the readings are (ε, δ): the bracket's confidence is 1 − 3δ, and over
    independent seeds the failures stay within what that allows."""
    rng = np.random.default_rng(3)
    config = StreamConfig(max_window=300, epsilon=0.2, delta=0.05, resolution=1)
    trials = failures = 0
    for case, summary in S.seeded_cases(rng, config, 12, 3000, 1000, 1300,
                                        lambda rng: f"k{int(rng.integers(0, 2000))}", shards=2):
        w, at = 60.0, 1200.0
        truth = len(S.frequencies(case, S.in_window(case, w, at)))
        b = answer("distinct", "s", config, summary, S.status(case), {"window": "60", "at": "1200"})["bound"]
        assert abs(b["confidence"] - (1 - 3 * 0.05)) < 1e-12
        trials += 1
        failures += not b["lower"] <= truth <= b["upper"]
    assert failures <= S.binom_upper(trials, 3 * 0.05), (failures, trials)
