"""``app.promql.evaluate``: a selector's series over many instants, in process.

Every sample is the native answer at its instant (the HTTP tests in
``tests/app/test_prometheus_api.py`` show it through the real API); here the ranges are
long enough to be answered in several chunks, and the items of list answers are shared
between neighbouring instants (``app.kinds.keyed``), which the rendering must not mix up.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import orjson
import pytest

from app.answers import QueryError, answer
from app.promql.blocks import BLOCK_STEPS
from app.promql.evaluate import _CHUNK, evaluate, format_value
from app.promql.query import read_query
from app.ranges import RangeCache
from tests.strategies import Case, status, summarize
from tidemark.streams import StreamConfig

T0 = 1_700_000_000.0


class _Store:
    """What ``evaluate`` reads of a store: one stream's declaration and summary."""

    def __init__(self, case: Case, summary):
        self.case, self.summary = case, summary
        store = self

        class Declarations:
            def config(self, name):
                return store.case.config

        class Reads:
            def summary(self, name):
                return store.summary, status(store.case)

        class Summaries:
            def versions_of(self, name, summary):
                return ((0, (1, 1)),)

        self.declarations, self.reads, self.summaries = Declarations(), Reads(), Summaries()


@pytest.fixture(scope="module")
def stream():
    rng = np.random.default_rng(3)
    n = 4000
    config = StreamConfig(max_window=3600.0, epsilon=0.05)
    ts = (T0 + rng.uniform(0, 3500, n)).tolist()
    keys = [f"k{k}" for k in rng.zipf(1.4, n) % 60]
    case = Case(config, ts, keys, rng.lognormal(3, 1, n).tolist(), [1.0] * n, [i % 2 for i in range(n)])
    return case, summarize(case)


def _samples(series) -> dict:
    """``{series labels: {time: text}}``, of samples as pairs or written as JSON text."""
    def pairs(values):
        return values if isinstance(values, list) else orjson.loads(orjson.dumps(values))

    return {(tuple(sorted((k, v) for k, v in s.labels.items() if k in ("key", "q", "bound")))): dict(pairs(s.values))
            for s in series}


def _expected(case, summary, kind, params, times, keep=lambda at: True) -> dict:
    """The instant answers' samples at ``times`` (those ``keep`` takes)."""
    expected: dict = {}
    for t in times:
        at = t / 1000
        if not keep(at):
            continue
        try:
            body = answer(kind, "s", case.config, summary, status(case), {**params, "window": "300.0",
                                                                           "at": repr(at)})
        except QueryError:
            continue
        rows = [({}, body)] if "items" not in body else [
            ({"key": item["key"]} if "key" in item else {"q": format_value(item["q"])}, item)
            for item in body["items"] if item.get("estimate") is not None]
        for label, row in rows:
            for bound, value in (("estimate", row["estimate"]), ("lower", row["bound"]["lower"]),
                                 ("upper", row["bound"]["upper"])):
                series_key = tuple(sorted({**label, "bound": bound}.items()))
                expected.setdefault(series_key, {})[at] = format_value(value)
    return expected


@pytest.mark.parametrize("rendered", [False, True])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("kind, labels, params", [
    ("heavy-hitters", ', phi="0.02"', {"phi": "0.02"}),
    ("quantiles", ', q="0.5,0.9"', {"q": "0.5,0.9"}),
    ("count", "", {}),
])
def test_every_sample_of_a_range_in_several_chunks_is_the_instant_answer(stream, kind, labels, params, cached,
                                                                          rendered):
    case, summary = stream
    query = read_query(f'tidemark_{kind.replace("-", "_")}{{stream="s", window="5m"{labels}}}')
    step_ms = 2_300
    end_ms = int(case.clock * 1000) // step_ms * step_ms
    times = list(range(end_ms - step_ms * (2 * _CHUNK + 40), end_ms + 1, step_ms))  # three chunks
    cache = RangeCache() if cached else None
    # computed, then kept (points, and the whole blocks of steps of a rendered range), then
    # moved on by a few steps as a refresh (partial edge blocks)
    shifts = [0, 0, 3, 3 + BLOCK_STEPS // 2] if cached else [0]
    every = _expected(case, summary, kind, params, sorted({t + s * step_ms for t in times for s in shifts}))
    for shift in shifts:
        moved = [t + shift * step_ms for t in times]
        series = evaluate(_Store(case, summary), query, ["s"], moved, step_ms, cache=cache, rendered=rendered)
        got = _samples(series)
        span = (moved[0] / 1000, moved[-1] / 1000)
        expected = {k: {at: v for at, v in pts.items() if span[0] <= at <= span[1]} for k, pts in every.items()}
        assert got == {k: v for k, v in expected.items() if v}
        assert sum(len(v) for v in got.values()) >= 3 * len(times)  # no instant without its samples
        assert not any(math.isnan(float(x)) for v in got.values() for x in v.values())


class _Versions(_Store):
    """A store whose stream moves to a newer version (``publish``)."""

    def __init__(self, case: Case, summary):
        super().__init__(case, summary)
        self.version, store = 1, self

        class Summaries:
            def versions_of(self, name, summary):
                return ((0, (1, store.version)),)

        self.summaries = Summaries()

    def publish(self, case: Case, summary, cache: RangeCache, touched: float) -> None:
        self.case, self.summary, self.version = case, summary, self.version + 1
        cache.heard({"stream": "s", "shard": 0, "version": self.version, "generation": 1, "touched": repr(touched)})


@pytest.mark.parametrize("kind, labels, params", [
    ("heavy-hitters", ', phi="0.02"', {"phi": "0.02"}),
    ("count", "", {}),
])
def test_a_refresh_after_a_publish_reads_the_new_version_from_the_first_event_it_added(stream, kind, labels,
                                                                                         params):
    """Blocks and points before the publish's first new event are the older version's
    answers (still valid: no event at or before them was added); every instant from it
    on is the new version's, a kept block that reaches it dropped whole."""
    case, summary = stream
    query = read_query(f'tidemark_{kind.replace("-", "_")}{{stream="s", window="5m"{labels}}}')
    step_ms = 2_300
    end_ms = int(case.clock * 1000) // step_ms * step_ms
    times = list(range(end_ms - step_ms * 300, end_ms + 1, step_ms))
    cache, store = RangeCache(), _Versions(case, summary)
    evaluate(store, query, ["s"], times, step_ms, cache=cache, rendered=True)
    # events added from the middle of the range on (some late: before the clock)
    rng = np.random.default_rng(5)
    touched = times[150] / 1000 + 0.7
    ts = (touched + rng.uniform(0, 500, 600)).tolist()
    ts[0] = touched
    ts[1] = times[-1] / 1000 + 2_900  # the clock moves on: the range's first instants are refused now
    more = Case(case.config, case.ts + ts, case.keys + [f"k{k}" for k in rng.zipf(1.4, 600) % 60],
                case.values + rng.lognormal(3, 1, 600).tolist(), case.weights + [1.0] * 600,
                case.shards + [i % 2 for i in range(600)])
    newer = summarize(more)
    store.publish(more, newer, cache, touched)
    moved = [t + 5 * step_ms for t in times]
    got = _samples(evaluate(store, query, ["s"], moved, step_ms, cache=cache, rendered=True))
    clock = Fraction(max(more.ts))
    refused = [at for at in (t / 1000 for t in moved) if Fraction(at) - 300 < clock - 3600]
    assert refused  # (a kept block of them would give samples: none is due)
    old = _expected(case, summary, kind, params, moved,
                    lambda at: at < touched and at <= times[-1] / 1000 and at not in refused)
    new = _expected(more, newer, kind, params, moved, lambda at: not (at < touched and at <= times[-1] / 1000))
    expected = {k: {**old.get(k, {}), **new.get(k, {})} for k in set(old) | set(new)}
    assert got == {k: v for k, v in expected.items() if v}
    # (a block kept past the publish would show: the versions differ from its first new event on)
    reached = lambda at: touched <= at <= times[-1] / 1000  # noqa: E731
    assert _expected(case, summary, kind, params, moved, reached) != _expected(more, newer, kind, params, moved, reached)
