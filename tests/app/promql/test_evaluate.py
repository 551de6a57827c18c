"""``app.promql.evaluate``: a selector's series over many instants, in process.

Every sample is the native answer at its instant (the HTTP tests in
``tests/app/test_prometheus_api.py`` show it through the real API); here the ranges are
long enough to be answered in several chunks, and the items of list answers are shared
between neighbouring instants (``app.kinds.keyed``), which the rendering must not mix up.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.answers import QueryError, answer
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


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("kind, labels, params", [
    ("heavy-hitters", ', phi="0.02"', {"phi": "0.02"}),
    ("quantiles", ', q="0.5,0.9"', {"q": "0.5,0.9"}),
    ("count", "", {}),
])
def test_every_sample_of_a_range_in_several_chunks_is_the_instant_answer(stream, kind, labels, params, cached):
    case, summary = stream
    query = read_query(f'tidemark_{kind.replace("-", "_")}{{stream="s", window="5m"{labels}}}')
    step_ms = 2_300
    end_ms = int(case.clock * 1000) // step_ms * step_ms
    times = list(range(end_ms - step_ms * (2 * _CHUNK + 40), end_ms + 1, step_ms))  # three chunks
    cache = RangeCache() if cached else None
    for _ in range(2 if cached else 1):  # computed, then kept
        series = evaluate(_Store(case, summary), query, ["s"], times, step_ms, cache=cache)
        got = {(tuple(sorted((k, v) for k, v in s.labels.items() if k in ("key", "q", "bound")))): dict(s.values)
               for s in series}
        expected: dict = {}
        for t in times:
            at = t / 1000
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
        assert got == expected
        assert sum(len(v) for v in got.values()) >= 3 * len(times)  # no instant without its samples
        assert not any(math.isnan(float(x)) for v in got.values() for x in v.values())
