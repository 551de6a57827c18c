"""One place for limits, one exact rule for time (issue 21, failures 1-3), below Spark.

* Every grain from 1 ns to 1 h is either refused at declaration, naming the finest grain
  a stream can take, or ticks every time ingest accepts exactly (``floor(ts/res)`` in
  rationals); times beyond the horizon (up to 2^40 s) are rejected at ingest with a reason.
* The late rule is exact: ``before − ts > max_window`` over the floats, on the adversarial
  edge ``ts ≈ before − max_window`` where a float subtraction rounds.
* Every weight ingest accepts fits the sketches: no summary update refuses it, and count
  and sum still bracket the exact truth.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from pydantic import ValidationError

from tests.conftest import TEST_SECRET
from tidemark import limits
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.events import validate_events
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.ticks import is_late, late_mask, ticks_of

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EDGE_GRAINS = [1e-9, 5e-10, 1e-8, 1e-7, limits.FINEST_RESOLUTION, 1.2e-7, 2.5e-7, 1e-6, 1e-3,
               0.3, 1.0, 60.2, 3600.0]
grains = st.one_of(st.sampled_from(EDGE_GRAINS),
                   st.floats(-9, math.log10(3600)).map(lambda e: 10.0**e))


@st.composite
def times_near_ticks(draw, res: float) -> float:
    """A time anywhere in [0, 2^40], or on a tick edge of ``res`` (or one ulp either side)."""
    if draw(st.booleans()):
        return draw(st.floats(0, 2.0**40))
    k = draw(st.integers(0, min(2**62, int(2.0**40 / res))))
    t = float(k * Fraction(res))
    return max(0.0, draw(st.sampled_from([t, math.nextafter(t, -math.inf), math.nextafter(t, math.inf)])))


def declare(res: float) -> StreamConfig:
    return StreamConfig(max_window=max(60.0, res), resolution=res)


@SETTINGS
@given(grains, st.data())
def test_every_grain_is_exact_at_every_accepted_time_or_refused(res, data):
    if res < limits.FINEST_RESOLUTION:
        with pytest.raises(ValidationError, match=r"finest grain a stream can take is 1\.19209e-07 s"):
            declare(res)
        return
    config = declare(res)
    ts = [data.draw(times_near_ticks(res)) for _ in range(8)]
    batch = validate_events([{"ts": t} for t in ts], config)
    for r in batch.rejects:  # only times beyond the horizon, each with its reason
        assert ts[r.index] > limits.TIME_HORIZON and "9999-12-31" in r.error
    assert len(batch) == sum(t <= limits.TIME_HORIZON for t in ts)
    got = ticks_of(batch.ts, config.resolution)
    want = [math.floor(Fraction(t) / Fraction(config.resolution)) for t in batch.ts]
    assert got.tolist() == want
    assert all(-limits.TICK_LIMIT < k < limits.TICK_LIMIT for k in want)


def test_the_issues_fine_grains_are_refused_and_the_finest_is_exact_today():
    """Issue 21, failure 3: 1e-7 put half the events a tick off, 5e-10 failed every update."""
    for res in (5e-10, 1e-9, 1e-8, 1e-7):
        with pytest.raises(ValidationError, match="finest grain"):
            StreamConfig(max_window=60, resolution=res)
    res = limits.FINEST_RESOLUTION
    ts = np.random.default_rng(7).uniform(1.76e9, 1.77e9, 20_000)
    assert ticks_of(ts, res).tolist() == [math.floor(Fraction(t) / Fraction(res)) for t in ts]
    top = ticks_of([limits.TIME_HORIZON], res)[0]
    assert top < limits.TICK_LIMIT


@st.composite
def late_edges(draw):
    """(before, ts, max_window) with ``ts`` within a few ulps of ``before − max_window``."""
    before = draw(st.one_of(st.floats(0, limits.TIME_HORIZON),
                            st.sampled_from([1761000000.0, 1760000001.5, 2.0**31, 0.0])))
    mw = draw(st.one_of(st.sampled_from([60.2, 0.1, 1e-3, 3600.0, 86400.0 * 7]),
                        st.floats(limits.FINEST_RESOLUTION, 1e7)))
    t = before - mw
    for _ in range(draw(st.integers(0, 3))):
        t = math.nextafter(t, draw(st.sampled_from([-math.inf, math.inf])))
    assume(0 <= t <= limits.TIME_HORIZON)
    return before, t, mw


@SETTINGS
@given(late_edges())
def test_the_late_rule_is_exact_on_its_edge(case):
    before, t, mw = case
    truth = Fraction(before) - Fraction(t) > Fraction(mw)
    assert late_mask(np.array([before, t]), -math.inf, mw).tolist() == [False, truth]
    assert late_mask(np.array([t]), before, mw).tolist() == [truth]
    assert is_late(t, before, mw) == truth


def test_the_issues_late_edge():
    """Issue 21, failure 2: ``1761000000.0 − 60.2`` is older than 60.2 s behind the clock."""
    clock = 1761000000.0
    t = clock - 60.2
    assert Fraction(clock) - Fraction(t) > Fraction(60.2)
    assert late_mask(np.array([clock, t]), -math.inf, 60.2).tolist() == [False, True]


weights = st.one_of(st.sampled_from([0.0, 1.0, 3e14, limits.MAX_WEIGHT, 2.0**48, 2.0**49 + 1]),
                    st.floats(0, limits.MAX_WEIGHT))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 50), weights, st.integers(1, 300)), min_size=1, max_size=6),
       st.sampled_from([0.25, 1.0, 7.5]), st.floats(1e-3, 0.5))
def test_every_accepted_weight_fits_the_sketches(groups, res, epsilon):
    """Heavy events, many of them at one tick, in several updates: nothing refuses, and the
    count and sum still bracket the exact truth over the whole window."""
    config = StreamConfig(max_window=100 * res, resolution=res, epsilon=epsilon)
    summary = StreamSummary.create(config, TEST_SECRET)
    count, total = 0, Fraction(0)
    for tick, w, n in groups:
        batch = validate_events([{"ts": 1e9 + tick * res, "weight": w}] * n, config)
        assert not batch.rejects
        summary.update_table(decode_chunk(encode_chunk(batch.ts, batch.key, batch.value, batch.weight)))
        count, total = count + n, total + n * Fraction(w)
    hi = int(ticks_of([summary.clock_seconds], res)[0])
    lo = hi - config.window_ticks
    c, s = summary["count"].query(lo, hi), summary["sum"].query(lo, hi)
    assert c.lower <= count <= c.upper
    assert Fraction(s.lower) <= total <= Fraction(s.upper)


def test_limits_come_from_one_place():
    config = StreamConfig(max_window=60)
    summary = StreamSummary.create(config, TEST_SECRET).build_all()
    assert summary["count"].max_total == limits.COUNT_MAX_TOTAL
    assert summary["sum"].max_total == limits.SUM_MAX_TOTAL >= limits.MAX_EVENTS * limits.MAX_WEIGHT
    batch = validate_events([{"ts": 1.0, "weight": limits.MAX_WEIGHT},
                             {"ts": 1.0, "weight": math.nextafter(limits.MAX_WEIGHT, math.inf)},
                             {"ts": limits.TIME_HORIZON}, {"ts": math.nextafter(limits.TIME_HORIZON, 1e300)}],
                            config)
    assert [r.index for r in batch.rejects] == [1, 3]
    with pytest.raises(ValidationError, match="at most"):
        StreamConfig(max_window=limits.TIME_HORIZON * 2, resolution=3600)
    with pytest.raises(ValidationError, match="2\\^40 ticks"):
        StreamConfig(max_window=2.0**40 * 1e-3 * 1.5, resolution=1e-3)
    with pytest.raises(ValidationError, match="2\\^40 ticks"):
        StreamConfig(max_window=2.0**37, resolution=0.125)
    # The longest window a declaration takes builds every part.
    longest = StreamConfig(max_window=(2.0**40 - 1) * 0.125, resolution=0.125, epsilon=0.5)
    assert longest.window_ticks == limits.MAX_WINDOW_TICKS
    StreamSummary.create(longest, TEST_SECRET).build_all()


def test_a_summary_written_under_the_old_cap_takes_the_new_one():
    """Shard states written before the caps came from limits (max_total 2^48) read back
    with the new cap: they merge with new shards and take heavy weights from then on."""
    from sketches.splittable_histogram import SplittableHistogram

    config = StreamConfig(max_window=60)
    old = StreamSummary.create(config, TEST_SECRET)
    for name in ("count", "sum"):
        old.parts[name] = SplittableHistogram(config.epsilon, config.window_ticks + 1, 2.0**48)
    old.update_table(decode_chunk(encode_chunk(np.array([10.0, 11.0]), [None, None],
                                               np.full(2, np.nan), np.array([1.0, 2.0]))))
    back = StreamSummary.from_bytes(old.to_bytes(), TEST_SECRET)
    assert back["sum"].max_total == limits.SUM_MAX_TOTAL
    back.update_table(decode_chunk(encode_chunk(np.array([12.0]), [None], np.full(1, np.nan),
                                                np.array([limits.MAX_WEIGHT]))))
    new = StreamSummary.create(config, TEST_SECRET)
    new.update_table(decode_chunk(encode_chunk(np.array([13.0]), [None], np.full(1, np.nan), np.ones(1))))
    s = new.merge(back)["sum"].query(0, 13)
    assert s.lower <= 1.0 + 2.0 + limits.MAX_WEIGHT + 1.0 <= s.upper
