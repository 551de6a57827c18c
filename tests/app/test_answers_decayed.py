"""Decayed sums against an exact oracle, below Spark: every decay, both guarantees, ``at``
anywhere (events after it never count), τ and range ends on value-cell edges.

Relative answers are deterministic and checked on every example; additive ones hold with
probability 1 − δ and are checked by their failure rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.answers import QueryError, answer
from tests import strategies as S
from tidemark.streams import StreamConfig

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Float sums of weights: the oracle and the sketch add in different orders.
SUM_SLACK = 1e-9


def ask(case, summary, kind, **params):
    return answer(kind, "s", case.config, summary, S.status(case), params)


@st.composite
def decays(draw, relative: bool):
    if relative:
        return draw(st.sampled_from([{"kind": "none"}, {"kind": "polynomial", "alpha": 1.5}]))
    res = draw(st.sampled_from([0.001, 0.3, 1.0, 60.0]))
    return draw(st.sampled_from([
        {"kind": "none"}, {"kind": "polynomial", "alpha": 1.5}, {"kind": "polynomial", "alpha": 0.5},
        {"kind": "exponential", "half_life": res * 3}, {"kind": "sliding", "window": res * 2.5},
        {"kind": "sliding", "window": res}]))


def params_of(spec):
    p = {"decay": spec["kind"]}
    for name in ("alpha", "half_life", "window"):
        if name in spec:
            p[name if name != "window" else "window"] = spec[name]
    return p


def cell_edge(draw) -> float:
    j = draw(st.integers(0, 256))
    e = S.VALUE_MIN + j * S.CELL
    return draw(st.sampled_from([e, math.nextafter(e, -math.inf), math.nextafter(e, math.inf)]))


def query(case, summary, kind, spec, guarantee, at, extra):
    p = {**params_of(spec), "guarantee": guarantee, "at": at, **extra}
    if spec["kind"] == "sliding":
        p["window"] = spec["window"]  # the decay's window; the query window is then the same
        if spec["window"] > case.config.max_window:
            return None
    return ask(case, summary, kind, **p)


@given(st.data())
@FAST
def test_relative_decayed_sums_hold_and_estimate_well(data):
    case = data.draw(S.cases(decays=True))
    summary = S.summarize(case)
    spec = data.draw(decays(relative=True))
    for _ in range(3):
        w, at = data.draw(S.windows(case))
        w = min(w, case.config.max_window)
        tau = cell_edge(data.draw)
        lo, hi = sorted((cell_edge(data.draw), cell_edge(data.draw)))
        for kind, extra, (a, b) in (("decayed-sum", {"tau": tau}, (tau, math.inf)),
                                    ("decayed-range-sum", {"lo": lo, "hi": hi}, (lo, hi))):
            r = query(case, summary, kind, spec, "relative", at, {**extra, "window": w})
            truth = S.decayed_truth(case, spec, at, a, b)
            bd = r["bound"]
            assert bd["kind"] == "relative" and bd["confidence"] == 1.0
            assert bd["lower"] - SUM_SLACK * truth <= truth <= bd["upper"] + SUM_SLACK * truth, \
                (kind, spec, at, extra, bd, truth)
            # the estimate is the interval's minimax point: within its relative half-width
            est, L, U = r["estimate"], bd["lower"], bd["upper"]
            if truth > 0 and U > 0:
                assert abs(est - truth) <= (U - L) / (U + L) * truth * (1 + 1e-9) + SUM_SLACK * truth


@given(st.data())
@FAST
def test_decayed_answers_never_count_events_after_at(data):
    """Class 8 for every decay: a query at an earlier instant; relative answers always,
    additive ones must at least keep their deterministic shape (the rate test below)."""
    case = data.draw(S.cases(decays=True))
    if not case.ts:
        return
    summary = S.summarize(case)
    spec = data.draw(decays(relative=True))
    at = data.draw(st.sampled_from(sorted(case.ts)))
    at = data.draw(st.sampled_from([at, math.nextafter(at, -math.inf), math.nextafter(at, math.inf)]))
    if at < case.clock - case.config.max_window + case.config.resolution / 100:
        return
    r = query(case, summary, "decayed-sum", spec, "relative", at, {"tau": 0.0, "window": case.config.resolution / 100})
    truth = S.decayed_truth(case, spec, at, 0.0, math.inf)
    assert r["bound"]["lower"] - SUM_SLACK * truth <= truth <= r["bound"]["upper"] + SUM_SLACK * truth, \
        (spec, at, r["bound"], truth)


def test_additive_decayed_sums_fail_at_most_at_their_rate():
    """Every decay, ``at`` before, on and after the clock: failures below δ = 0.1 with a
    margin a correct sketch breaches with probability < 1e-4."""
    rng = np.random.default_rng(11)
    trials = failures = 0
    specs = [{"kind": "none"}, {"kind": "polynomial", "alpha": 1.5}, {"kind": "exponential", "half_life": 2.0},
             {"kind": "sliding", "window": 3.3}]
    for seed in range(30):
        res = [0.001, 0.3, 1.0, 1.5][seed % 4]
        config = StreamConfig(max_window=20.0, epsilon=0.1, delta=0.1, resolution=res,
                              value_min=S.VALUE_MIN, value_max=S.VALUE_MAX)
        n = 200
        ts = np.sort(rng.uniform(500, 520, n)).tolist()
        vals = rng.uniform(0, 10, n).tolist()
        case = S.Case(config, ts, [None] * n, vals, rng.choice([0.5, 1.0, 2.0], n).tolist(),
                      [i % 2 for i in range(n)])
        summary = S.summarize(case, seed=seed + 1)
        for spec in specs:
            at = float(case.clock - rng.uniform(0, 5))
            tau = float(rng.uniform(0, 10))
            r = query(case, summary, "decayed-sum", spec, "additive", at, {"tau": tau, "window": 1.0})
            truth = S.decayed_truth(case, spec, at, tau, math.inf)
            trials += 1
            failures += not (r["bound"]["lower"] <= truth <= r["bound"]["upper"])
    # P(Bin(120, 0.1) > 25) < 1e-4
    assert failures <= 25, (failures, trials)


# -- the classes of issue 13, one example each ----------------------------------------------------
def _case(config, ts, values, weights=None):
    n = len(ts)
    return S.Case(config, list(ts), [None] * n, list(values), list(weights or [1.0] * n), [0] * n)


def test_range_sum_lower_bound_excludes_the_cell_above_hi():
    """Class 3: the value cell holding ``hi`` has values above it; they never count below."""
    config = StreamConfig(max_window=60, epsilon=0.1, delta=0.1, value_min=0, value_max=10,
                          decays=[{"kind": "none"}])
    cell = 10 / 255
    case = _case(config, [1.0, 2.0, 3.0], [5 * cell + cell * 0.9, 5 * cell + cell * 0.1, 2.0])
    summary = S.summarize(case)
    for lo, hi in ((5 * cell + cell / 2, 5 * cell + cell / 2), (0.0, 5 * cell + cell / 2), (1.0, 2.0)):
        r = ask(case, summary, "decayed-range-sum", decay="none", guarantee="relative", lo=lo, hi=hi)
        truth = S.decayed_truth(case, {"kind": "none"}, case.clock, lo, hi)
        assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], (lo, hi, r["bound"], truth)


def test_sliding_window_edge_is_exact():
    """Class 5: ``at`` 1e-10 s after a tick once read as on it, so an event just outside
    the sliding window counted."""
    config = StreamConfig(max_window=60, epsilon=0.1, delta=0.01, value_min=0, value_max=10)
    at = 100.0 + 1e-10
    case = _case(config, [90.0, 95.0, 100.0], [1.0, 1.0, 1.0], [1000.0, 1.0, 1.0])
    summary = S.summarize(case)
    r = ask(case, summary, "decayed-sum", decay="sliding", window=10.0, at=at, tau=0.0)
    truth = S.decayed_truth(case, {"kind": "sliding", "window": 10.0}, at, 0.0, math.inf)
    assert truth == 2.0
    assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], r["bound"]


def test_relative_estimate_is_the_best_point_of_its_interval():
    """Class 6: with events on tick boundaries and ``at`` on a tick, the estimate is within
    ε·S of the truth (the interval is tight there)."""
    config = StreamConfig(max_window=600, epsilon=0.05, delta=0.1, value_min=0, value_max=10,
                          decays=[{"kind": "polynomial", "alpha": 1.5}])
    ts = [float(t) for t in range(1000, 1100)]
    case = _case(config, ts, [5.0] * len(ts))
    summary = S.summarize(case)
    at = 1200.0
    r = ask(case, summary, "decayed-sum", decay="polynomial", alpha=1.5, guarantee="relative", tau=0.0, at=at)
    truth = S.decayed_truth(case, {"kind": "polynomial", "alpha": 1.5}, at, 0.0, math.inf)
    assert abs(r["estimate"] - truth) <= 0.05 * truth, (r, truth)


def test_decay_none_before_the_clock_counts_nothing_after_at():
    """Class 8: ``decay=none`` at clock − 7.3 s once returned the sum of every weight."""
    config = StreamConfig(max_window=60, epsilon=0.1, delta=0.1, value_min=0, value_max=10,
                          decays=[{"kind": "none"}])
    ts = [100.0 + i * 0.5 for i in range(40)]
    case = _case(config, ts, [3.0] * 40)
    summary = S.summarize(case)
    at = case.clock - 7.3
    truth = S.decayed_truth(case, {"kind": "none"}, at, 0.0, math.inf)
    for guarantee in ("relative", "additive", ""):
        r = ask(case, summary, "decayed-sum", decay="none", at=at, window=1.0, guarantee=guarantee)
        assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], (guarantee, r["bound"], truth)
        if guarantee != "relative":  # the undecayed relative sketch is one bucket up to its clock
            assert r["bound"]["upper"] < sum(case.weights), guarantee


@pytest.mark.parametrize("res", [0.001, 0.25, 1.5, 60.0])
def test_declared_polynomial_decay_is_relative_at_every_resolution(res):
    """Class 9: a declared polynomial decay answers with a relative guarantee at any
    resolution, and its bound holds."""
    config = StreamConfig(max_window=res * 200, epsilon=0.1, delta=0.1, value_min=0, value_max=10,
                          resolution=res, decays=[{"kind": "polynomial", "alpha": 1.5}])
    ts = [res * (10 + i * 0.77) for i in range(150)]
    case = _case(config, ts, [float(i % 10) for i in range(150)])
    summary = S.summarize(case)
    spec = {"kind": "polynomial", "alpha": 1.5}
    r = ask(case, summary, "decayed-sum", decay="polynomial", alpha=1.5, guarantee="relative", tau=4.0)
    truth = S.decayed_truth(case, spec, case.clock, 4.0, math.inf)
    assert r["bound"]["kind"] == "relative"
    assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], (r["bound"], truth)


def test_relative_is_refused_where_no_small_summary_gives_it():
    config = StreamConfig(max_window=60, epsilon=0.1, delta=0.1, value_min=0, value_max=10)
    case = _case(config, [1.0], [1.0])
    with pytest.raises(QueryError, match="Theorem 4.1"):
        ask(case, S.summarize(case), "decayed-sum", decay="sliding", window=5, guarantee="relative")


def test_decayed_quantile_ticks_at_exactly():
    """``at`` = 1.0 s at a 0.1 s resolution is in tick 9 (10 × the float 0.1 is above 1.0),
    but the float quotient 1.0 / 0.1 rounds to 10: read that way, an event of tick 10, after
    ``at``, counted in the decayed quantile (the maximum came out 900, not 10)."""
    config = StreamConfig(max_window=60, epsilon=0.1, delta=0.1, value_min=0, value_max=1000,
                          resolution=0.1)
    at = 1.0
    assert math.floor(at / config.resolution) == 10  # the float quotient crosses the integer
    case = _case(config, [0.5, math.nextafter(at, math.inf)], [10.0, 900.0])
    summary = S.summarize(case)
    for phi in (0.5, 1.0):
        r = ask(case, summary, "decayed-quantile", decay="none", phi=phi, at=at, window=1.0)
        assert r["bound"]["lower"] <= 10.0 <= r["bound"]["upper"], (phi, r["bound"])
        assert r["bound"]["upper"] < 100.0, (phi, r["bound"])  # the event after at is not held
