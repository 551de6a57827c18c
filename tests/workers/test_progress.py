"""``workers.progress``: what the query's progress proves was read, and the batch-cost fit
back-pressure reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

from workers.progress import fit_batch_costs, log_progress, read_everything_before


def test_the_first_batch_of_a_run_never_proves_that_everything_was_read():
    """A run's first batch may replay offsets planned before a kill: entries appended
    since are unread, so readiness must not take its start as the line (it did, and
    /readyz said 200 while 20 s of events waited)."""
    at = "2026-11-23T22:00:00.000Z"
    assert read_everything_before({}, None) is None  # no batch yet
    assert read_everything_before({"batchId": 7, "timestamp": at}, None) is None
    assert read_everything_before({"batchId": 7, "timestamp": at}, 7) is None  # the run's first
    assert read_everything_before({"batchId": 8, "timestamp": at}, 7) == at


def test_the_fit_counts_group_updates_not_chunks():
    def progress(batch, start, end, ms, groups):
        return {"batchId": batch, "durationMs": {"triggerExecution": ms},
                "sources": [{"startOffset": json.dumps({"log": start}) if start else None,
                             "endOffset": json.dumps({"log": end})}],
                "stateOperators": [{"numRowsUpdated": groups, "numRowsRemoved": 0}]}
    logs = [[["0-0", 0, 0]], [["1-0", 1_000, 10]], [["2-0", 3_000, 30]], [["3-0", 7_000, 70]],
            [["4-0", 8_000, 80]]]
    # 10 streams: 10, 20, 40, 10 chunks, always 10 group updates of 50 ms, 0.3 s fixed.
    recent = [progress(i, logs[i - 1] if i else None, logs[i], 800, 10) for i in range(1, 5)]
    out = log_progress(recent)
    assert out["seconds_per_event"] == 0.0 and out["seconds_per_group"] == 0.0
    assert out["fixed_seconds"] == pytest.approx(0.8)  # the same cost whatever the chunks
    recent = [progress(i, logs[i - 1], logs[i], 300 + 50 * g, g) for i, g in zip(range(1, 5), (4, 8, 10, 2))]
    out = log_progress(recent)
    assert out["seconds_per_group"] == pytest.approx(0.05) and out["fixed_seconds"] == pytest.approx(0.3)


def test_the_worker_measures_its_costs_from_the_batches_it_ran():
    def progress(batch, start, end, ms):
        return {"batchId": batch, "sources": [{"startOffset": json.dumps({"log": start}) if start else None,
                                               "endOffset": json.dumps({"log": end})}],
                "durationMs": {"triggerExecution": ms}}
    a = [["1-0", 0, 0], ["2-0", 0, 0]]
    b = [["5-0", 60_000, 6], ["6-0", 40_000, 4]]
    c = [["7-0", 60_100, 7], ["6-0", 40_000, 4]]
    d = [["7-0", 60_100, 7], ["9-0", 40_000, 5]]
    e = [["9-0", 80_100, 8], ["9-0", 40_000, 5]]
    # 0.2 s fixed + 10 ms a chunk + 10 µs an event, exactly
    recent = [progress(0, None, a, 9000), progress(1, a, b, 200 + 100 + 1000),
              progress(2, b, c, 200 + 10 + 1), progress(3, c, d, 200 + 10),
              progress(4, d, e, 200 + 10 + 200)]
    out = log_progress(recent, first_batch=0)  # the run's first batch (9 s of start) is left out
    assert json.loads(out["read"]) == e
    assert out["fixed_seconds"] == pytest.approx(0.2, abs=1e-3)
    assert out["seconds_per_group"] == pytest.approx(0.01, rel=1e-3)
    assert out["seconds_per_event"] == pytest.approx(1e-5, rel=1e-3)
    assert out["capacity"] == pytest.approx(100_000, rel=1e-3)
    assert out["batch_seconds"] == pytest.approx(1.3)  # the slowest recent one, not a typical one
    assert log_progress([progress(0, None, a, 9000)], first_batch=0)["batch_seconds"] == 0.0
    assert log_progress([{"sources": [{"startOffset": None, "endOffset": '{"s": "1-0"}'}],
                          "durationMs": {"triggerExecution": 5}}]) is None  # a legacy offset


_COST = st.one_of(st.just(0.0), st.floats(1e-3, 1.0))


@given(fixed=_COST, per_group=_COST, per_event=_COST.map(lambda c: c / 1000),
       batches=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 50)), min_size=3, max_size=12))
def test_the_fit_finds_the_costs_that_made_the_batches(fixed, per_group, per_event, batches):
    """Batches that cost exactly ``fixed + per_group × groups + per_event × events`` are
    explained by those costs, none negative, whichever of them are zero."""
    x = np.array([[1.0, g, e] for e, g in batches])
    assume(np.linalg.matrix_rank(x) == 3)
    made = [(fixed + per_group * g + per_event * e, e, g) for e, g in batches]
    fit = fit_batch_costs(made)
    assert min(fit) >= 0
    assert fit == pytest.approx((fixed, per_group, per_event), rel=1e-6, abs=1e-9)


def test_the_fit_never_says_a_cost_is_negative():
    # Seconds that fall as groups rise: no non-negative group cost explains them.
    fit = fit_batch_costs([(1.0, 100, 1), (0.8, 100, 10), (0.6, 100, 20)])
    assert min(fit) >= 0 and fit[1] == 0.0
