"""Window kinds (count, sum, frequency, self-join, distinct, heavy hitters) against an exact
oracle, built below Spark: shard summaries merged as the publisher merges them, answered
by the same ``app.answers.answer`` the API calls.

Deterministic bounds are checked on every example; probabilistic ones (ECM lower bounds,
distinct counts) by their failure rate over independent seeds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.answers import answer
from tests import strategies as S
from tidemark.streams import StreamConfig

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ask(case, summary, kind, **params):
    return answer(kind, "s", case.config, summary, S.status(case), params)


def holds(lower, truth, upper, slack=0.0):
    return lower - slack <= truth <= upper + slack


def _drawn_windows(data, n):
    """A drawn case and ``n`` windows drawn on it: ``(case, summary, window, at, mask of the
    events in the window)`` each, the summary built once."""
    case = data.draw(S.cases())
    summary = S.summarize(case)
    for _ in range(n):
        w, at = data.draw(S.windows(case))
        yield case, summary, w, at, S.in_window(case, w, at)


# -- the tick rule ------------------------------------------------------------------------------
@given(st.sampled_from(S.RESOLUTIONS + [0.0123456, 2.5e-3]), st.integers(0, 2**41),
       st.sampled_from([-1, 0, 1]))
@settings(max_examples=300, deadline=None)
def test_ticks_are_the_exact_floor(res, k, how):
    from tidemark.ticks import tick_of, ticks_of

    t = float(k * Fraction(res))
    if how:
        t = math.nextafter(t, math.inf if how > 0 else -math.inf)
    assert int(ticks_of(np.array([t]), res)[0]) == tick_of(t, res) == math.floor(Fraction(t) / Fraction(res))


# -- deterministic bounds at every edge ----------------------------------------------------------
@given(st.data())
@FAST
def test_count_and_sum_hold_at_every_edge(data):
    for case, summary, w, at, m in _drawn_windows(data, 4):
        for kind, truth in (("count", float(m.sum())),
                            ("sum", float(np.array(case.weights)[m].sum()) if m.any() else 0.0)):
            b = ask(case, summary, kind, window=w, at=at)["bound"]
            assert holds(b["lower"], truth, b["upper"], 1e-9 * truth), (kind, w, at, b, truth)
            half = b["half_width"]
            assert half == pytest.approx((b["upper"] - b["lower"]) / 2)


@given(st.data())
@FAST
def test_key_upper_bounds_and_heavy_hitters_are_complete(data):
    for case, summary, w, at, m in _drawn_windows(data, 3):
        freq = S.frequencies(case, m)
        n = int(m.sum())
        for key in ("a", "ключ"):
            b = ask(case, summary, "frequency", key=key, window=w, at=at)["bound"]
            assert freq.get(key, 0) <= b["upper"], (key, w, at, b)
        sj = ask(case, summary, "self-join", window=w, at=at)["bound"]
        assert sum(f * f for f in freq.values()) <= sj["upper"] * (1 + 1e-12)
        phi = data.draw(st.sampled_from([0.01, 0.1, 0.2, 0.25, 0.5, 0.9]))
        hh = ask(case, summary, "heavy-hitters", phi=phi, window=w, at=at)
        listed = {item["key"] for item in hh["items"]}
        assert hh["events"]["lower"] <= n <= hh["events"]["upper"]
        # The reader's rule: no unlisted key reaches φ·N when unlisted_max < φ·events.lower.
        reader_sure = hh["unlisted_max"] < phi * hh["events"]["lower"]
        for key, f in freq.items():
            if key not in listed:
                assert f <= hh["unlisted_max"], (key, f, hh["unlisted_max"], w, at)
            if (hh["complete"] or reader_sure) and f >= phi * n:
                assert key in listed, (key, f, n, phi, w, at)
        for item in hh["items"]:  # a listed key reads as its frequency answer, bound and all
            one = ask(case, summary, "frequency", key=item["key"], window=w, at=at)
            assert (item["estimate"], item["bound"]) == (one["estimate"], one["bound"]), (item, one)


# -- probabilistic bounds at their rate ---------------------------------------------------------
def test_probabilistic_bounds_fail_at_most_at_their_rate():
    """ECM lower bounds and distinct counts: each answer may fail with probability δ = 0.1.
    Over independent seeds the failures must stay below δ by a margin a correct sketch
    breaches with probability < 1e-4 (binomial tail)."""
    rng = np.random.default_rng(7)
    config = StreamConfig(max_window=30.0, epsilon=0.1, delta=0.1, resolution=0.25)
    trials = failures = 0
    skewed = lambda rng: S.KEYS[int(min(rng.integers(0, 10), rng.integers(0, 10)))]  # noqa: E731
    for case, summary in S.seeded_cases(rng, config, 40, 300, 1000, 1030, skewed, shards=3):
        w, at = float(rng.uniform(0.1, 30.0)), case.clock - float(rng.uniform(0, 0.01))
        w = min(w, 30.0 - (case.clock - at))
        m = S.in_window(case, w, at)
        freq = S.frequencies(case, m)
        for key in ("a", "b"):
            b = ask(case, summary, "frequency", key=key, window=w, at=at)["bound"]
            trials += 1
            failures += not holds(b["lower"], freq.get(key, 0), b["upper"])
        m_clock = S.in_window(case, w, case.clock)
        b = ask(case, summary, "distinct", window=w, at=case.clock)["bound"]
        trials += 1
        failures += not holds(b["lower"], len(S.frequencies(case, m_clock)), b["upper"])
        b = ask(case, summary, "distinct", window=w, at=at)["bound"]  # ends before the clock
        trials += 1
        failures += not holds(b["lower"], len(freq), b["upper"])
    # P(Bin(160, 0.1) > 32) < 1e-4
    assert failures <= 32, (failures, trials)


# -- the edges where a bound is easiest to get wrong, one example each -----------------------------
def _one(config, rows, **kw):
    ts, keys = [r[0] for r in rows], [r[1] for r in rows]
    return S.Case(config, ts, keys, [math.nan] * len(ts), [1.0] * len(ts), [0] * len(ts))


def test_window_start_one_ulp_before_an_event_is_exact():
    """The window start is exact; an event one ulp before it never counts (``ceil(a / res)``
    against ``floor(ts / res)`` would count 11.399999999999999 in ``[11.4, 12.9]`` at a
    0.3 s resolution)."""
    config = StreamConfig(max_window=15.0, epsilon=0.1, delta=0.1, resolution=0.3)
    case = _one(config, [(11.399999999999999, "a"), (12.9, "a")])
    summary = S.summarize(case)
    for at, w in ((12.9, 1.5), (12.9, 12.9 - 11.4), (12.0, 0.6), (11.7, 0.3)):
        m = S.in_window(case, w, at)
        b = ask(case, summary, "count", window=w, at=at)["bound"]
        assert b["lower"] <= m.sum() <= b["upper"], (at, w, b, m)


def test_heavy_hitters_complete_only_when_nothing_is_missing():
    """No tick wholly inside the window (the count's lower bound is 0) must not
    make an answer claim ``complete`` while a heavy key is missing."""
    config = StreamConfig(max_window=30.0, epsilon=0.2, delta=0.1, resolution=1.0)
    rows = [(105.0 + i * 0.002, f"k{i % 100}") for i in range(300)] + [(105.7, "ключ")]
    case = _one(config, sorted(rows))
    summary = S.summarize(case)
    for at, w in ((105.71, 0.02), (105.9, 0.5), (105.75, 0.1), (105.8, 1.5)):
        m = S.in_window(case, w, at)
        freq, n = S.frequencies(case, m), int(m.sum())
        hh = ask(case, summary, "heavy-hitters", phi=0.1, window=w, at=at)
        listed = {i["key"] for i in hh["items"]}
        missing = [k for k, f in freq.items() if f >= 0.1 * n and k not in listed]
        assert not (hh["complete"] and missing), (at, w, hh, freq)
        for k, f in freq.items():
            assert k in listed or f <= hh["unlisted_max"], (k, f, hh["unlisted_max"])


def test_unlisted_max_covers_dropped_candidates():
    """A candidate dropped for weighing below φ·N_low can weigh up to φ·N_low."""
    config = StreamConfig(max_window=60.0, epsilon=0.1, delta=0.1, resolution=1.0)
    rows = [(10.0 + i * 0.1, "a" if i % 9 else "b") for i in range(288)]
    case = _one(config, rows)
    summary = S.summarize(case)
    hh = ask(case, summary, "heavy-hitters", phi=0.2, window="60", at=case.clock)
    freq = S.frequencies(case, S.in_window(case, 60.0, case.clock))
    assert "b" not in {i["key"] for i in hh["items"]}
    assert freq["b"] <= hh["unlisted_max"], (freq, hh["unlisted_max"])


def test_every_bound_states_its_half_width():
    """The answer says how wide its interval is, beside the structure's epsilon."""
    config = StreamConfig(max_window=3600.0, epsilon=0.05, delta=0.1, resolution=60.0)
    case = _one(config, [(1000.0 + i * 7.3, "a") for i in range(100)])
    summary = S.summarize(case)
    b = ask(case, summary, "count", window="100", at=case.clock - 31)["bound"]
    assert b["epsilon"] == 0.05
    assert b["half_width"] == pytest.approx((b["upper"] - b["lower"]) / 2)
    est = ask(case, summary, "count", window="100", at=case.clock - 31)["estimate"]
    assert b["half_width_relative"] == pytest.approx(b["half_width"] / est)
    assert b["lower"] <= est <= b["upper"]
