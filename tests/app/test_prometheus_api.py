"""The Prometheus HTTP API's read side (contract §10), against the real API and Redis.

Summaries are built and published the way the worker does (no Spark). Requests are shaped
as Grafana's Prometheus data source sends them: form-encoded POST bodies, the key as the
password of HTTP Basic, ``stream=~"(a|b)"`` for a multi-value variable. Every sample must be
the native answer (``GET /v1/streams/{name}/{kind}``) at the same ``at``.
"""

from __future__ import annotations

import functools
import itertools
import time

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.routes.prometheus import MAX_POINTS
from tests.conftest import KEYS, TEST_SECRET, auth
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

MAX_WINDOW = 3600.0
_names = (f"prom-{i}" for i in itertools.count())


def publish(redis_url: str, name: str, end: float, n: int = 3000, seed: int = 0,
            config: StreamConfig | None = None) -> StreamConfig:
    """``n`` events over the ``MAX_WINDOW / 2`` before ``end``: zipf keys, lognormal values."""
    rng = np.random.default_rng(seed)
    config = config or StreamConfig(max_window=MAX_WINDOW, epsilon=0.05)
    summary = StreamSummary.create(config, TEST_SECRET)
    if n:
        ts = end - rng.uniform(0, MAX_WINDOW / 2, n)
        ts[0] = end
        keys = [f"k{k}" for k in rng.zipf(1.5, n) % 50]
        values = rng.lognormal(3, 1, n)
        summary.update_table(decode_chunk(encode_chunk(ts, keys, values, np.ones(n))))
    Publisher(redis_url).publish_summary(name, summary, version=1, events=n)
    return config


def basic(scope: str = "read") -> httpx.BasicAuth:
    """What Grafana sends with basic auth on: any user name, the key as the password."""
    return httpx.BasicAuth("grafana", KEYS[scope])


def grafana_post(api, path: str, form: dict, scope: str = "read") -> httpx.Response:
    """A form-encoded POST with Basic auth, as Grafana's Prometheus data source sends it."""
    return httpx.post(f"{api.url}/api/v1/{path}", data=form, auth=basic(scope), timeout=30,
                      headers={"Content-Type": "application/x-www-form-urlencoded"})


@pytest.fixture(scope="module")
def streams(api, redis_url):
    """Two streams whose clocks are now (promtool and Grafana ask about now)."""
    end = float(int(time.time()))
    names = [next(_names), next(_names)]
    for i, name in enumerate(names):
        publish(redis_url, name, end, seed=i)
    return names, end


@functools.lru_cache(maxsize=None)
def _native(url: str, name: str, kind: str, params: tuple) -> dict:
    r = httpx.get(f"{url}/v1/streams/{name}/{kind}", params=dict(params), headers=auth("read"))
    assert r.status_code == 200, r.text
    return r.json()


def native(api, name: str, kind: str, params: dict) -> dict:
    """The native answer (the same question asked twice is asked once)."""
    return _native(api.url, name, kind, tuple(sorted(params.items())))


def test_instant_query_is_the_native_answer_with_its_bounds(api, streams):
    (name, _), end = streams
    at = end - 17.25
    r = grafana_post(api, "query", {"query": f'tidemark_count{{stream="{name}", window="5m"}}',
                                    "time": repr(at)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "success" and body["data"]["resultType"] == "vector"
    got = {s["metric"]["bound"]: s for s in body["data"]["result"]}
    assert set(got) == {"estimate", "lower", "upper"}
    want = native(api, name, "count", {"window": 300, "at": repr(at)})
    for bound, value in (("estimate", want["estimate"]), ("lower", want["bound"]["lower"]),
                         ("upper", want["bound"]["upper"])):
        s = got[bound]
        assert s["metric"] == {"__name__": "tidemark_count", "stream": name, "window": "5m", "bound": bound}
        assert s["value"][0] == at and isinstance(s["value"][1], str)
        assert float(s["value"][1]) == value
    assert float(got["lower"]["value"][1]) <= float(got["estimate"]["value"][1]) <= float(got["upper"]["value"][1])


@pytest.mark.parametrize("kind, params, item", [
    ("quantiles", {"q": "0.5,0.99"}, "q"),
    ("heavy-hitters", {"phi": "0.05"}, "key"),
    ("frequency", {"key": "k1"}, None),
    ("sum", {}, None),
    ("distinct", {}, None),
    ("self-join", {}, None),
])
def test_range_query_answers_every_step_as_natively(api, streams, kind, params, item):
    (name, _), end = streams
    start, step = end - 600, 60
    labels = "".join(f', {k}="{v}"' for k, v in params.items())
    metric = "tidemark_" + kind.replace("-", "_")
    r = grafana_post(api, "query_range", {"query": f'{metric}{{stream="{name}"{labels}}}',
                                          "start": str(int(start)), "end": str(int(end)), "step": str(step)})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["resultType"] == "matrix" and data["result"]
    seen = set()
    for series in data["result"]:
        m = series["metric"]
        assert m["__name__"] == metric and m["stream"] == name and m["bound"] in ("estimate", "lower", "upper")
        for t, v in series["values"]:
            assert start <= t <= end and (t - start) % step == 0
            want = native(api, name, kind, {**params, "window": step, "at": repr(float(t))})
            if item is None:
                answer = want
            else:
                label = m[item]
                answer = next(i for i in want["items"] if (repr(i[item]).removesuffix(".0") if item == "q" else i[item]) == label)
            expected = answer["estimate"] if m["bound"] == "estimate" else answer["bound"][m["bound"]]
            assert float(v) == expected, (m, t)
            seen.add((m.get(item), m["bound"]))
    if kind == "quantiles":
        assert {q for q, _ in seen} == {"0.5", "0.99"}
    assert {b for _, b in seen} == {"estimate", "lower", "upper"}


def test_multi_value_regex_and_one_bound(api, streams):
    (a, b), end = streams
    r = grafana_post(api, "query", {"query": f'tidemark_count{{stream=~"({a}|{b})", bound="upper"}}',
                                    "time": str(end)})
    assert r.status_code == 200, r.text
    result = r.json()["data"]["result"]
    assert sorted(s["metric"]["stream"] for s in result) == sorted([a, b])
    assert all(s["metric"]["bound"] == "upper" for s in result)
    r = grafana_post(api, "query", {"query": 'tidemark_count{stream=~"no-such-.*"}', "time": str(end)})
    assert r.status_code == 200 and r.json()["data"]["result"] == []


def test_scalars_for_grafanas_test(api):
    r = grafana_post(api, "query", {"query": "1+1", "time": "1700000000.5"})
    assert r.json() == {"status": "success", "data": {"resultType": "scalar", "result": [1700000000.5, "2"]}}
    r = httpx.get(f"{api.url}/api/v1/query", params={"query": "(2 * 3 - 1) / 2", "time": "10"}, auth=basic())
    assert r.json()["data"]["result"] == [10, "2.5"]
    r = grafana_post(api, "query_range", {"query": "1+1", "start": "0", "end": "30", "step": "15s"})
    assert r.json()["data"] == {"resultType": "matrix",
                                "result": [{"metric": {}, "values": [[0, "2"], [15, "2"], [30, "2"]]}]}


@pytest.mark.parametrize("query, words", [
    ('rate(tidemark_count{stream="x"}[5m])', "1:1: parse error: functions"),
    ('tidemark_count{stream="x"}[5m]', "1:27: parse error: range vectors"),
    ('sum by (stream) (tidemark_count{stream="x"})', "aggregations"),
    ('tidemark_count{stream="x"} > 3', "1:28: parse error: operator '>'"),
    ('tidemark_count{stream="x"} + 1', "operators on series"),
    ('tidemark_count{stream!="x"}', "is not supported"),
    ('tidemark_count{stream="x", q=~"0.5"}', "is not supported"),
    ("tidemark_count", 'needs stream="…"'),
    ('node_cpu_seconds{stream="x"}', "unknown metric 'node_cpu_seconds'; Tidemark's metrics: "),
    ('tidemark_count{stream="x", bound="middle"}', "bound"),
    ('tidemark_count{stream="x", window="5 minutes"}', "window"),
    ('tidemark_count{stream="x"', "1:26: parse error: unexpected end of input"),
    ('tidemark_distribution{stream="x"}', "not served as series"),
    ('tidemark_inner_product{stream="x"}', 'reads 2 streams: name them with streams="A,B"'),
    ('tidemark_count{stream=~"(a+){2}"}', "not supported"),
    ("", "no query"),
])
def test_what_is_not_in_the_language_is_bad_data_with_a_reason(api, query, words):
    r = grafana_post(api, "query", {"query": query, "time": "1"})
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["status"] == "error" and body["errorType"] == "bad_data"
    assert words in body["error"], body["error"]


def test_queries_refused_as_a_whole_are_execution_errors(api, streams, redis_url):
    (name, _), end = streams
    valued = next(_names)
    publish(redis_url, valued, end, n=100,
            config=StreamConfig(max_window=MAX_WINDOW, value_min=0, value_max=1e6))
    for query, words in [
        ('tidemark_count{stream="never-declared"}', "stream 'never-declared' is not declared"),
        (f'tidemark_count{{stream="{name}", window="2h"}}', "max_window"),
        (f'tidemark_heavy_hitters{{stream="{name}", phi="2"}}', "phi"),
        (f'tidemark_decayed_sum{{stream="{name}"}}', "value_min"),
        (f'tidemark_decayed_sum{{stream="{valued}", decay="sliding", guarantee="relative"}}',
         "no small summary gives a relative error"),
    ]:
        r = grafana_post(api, "query", {"query": query, "time": str(end)})
        assert r.status_code == 422, (query, r.text)
        assert r.json()["errorType"] == "execution" and words in r.json()["error"], r.text


def test_instants_without_an_answer_have_no_sample(api, redis_url, streams):
    _, end = streams
    name = next(_names)
    publish(redis_url, name, end, n=0)
    r = grafana_post(api, "query", {"query": f'tidemark_quantiles{{stream="{name}", q="0.5"}}', "time": str(end)})
    assert r.status_code == 200 and r.json()["data"]["result"] == []
    r = grafana_post(api, "query", {"query": f'tidemark_count{{stream="{name}"}}', "time": str(end)})
    assert [float(s["value"][1]) for s in r.json()["data"]["result"]] == [0.0, 0.0, 0.0]
    # Before the earliest window kept: a refusal at those instants, samples after it.
    (full, _), _ = streams
    start = end - 2 * MAX_WINDOW
    r = grafana_post(api, "query_range", {"query": f'tidemark_count{{stream="{full}", window="10m", bound="estimate"}}',
                                          "start": str(start), "end": str(end), "step": "5m"})
    assert r.status_code == 200, r.text
    times = [t for t, _ in r.json()["data"]["result"][0]["values"]]
    assert times[-1] == end and times[0] >= end - MAX_WINDOW + 600 and len(times) < 25


def test_range_limits_and_parameters(api):
    q = 'tidemark_count{stream="x"}'
    for form, words in [
        ({"query": q, "start": "0", "end": str(MAX_POINTS), "step": "1"}, "exceeded maximum resolution of 11,000 points"),
        ({"query": q, "start": "10", "end": "0", "step": "1"}, "end timestamp must not be before start"),
        ({"query": q, "start": "0", "end": "10", "step": "0"}, "zero or negative"),
        ({"query": q, "start": "0", "end": "10", "step": "soon"}, 'invalid parameter "step"'),
        ({"query": q, "start": "yesterday", "end": "10", "step": "1"}, 'invalid parameter "start"'),
        ({"query": q, "start": "0", "end": "10"}, 'invalid parameter "step": missing'),
    ]:
        r = grafana_post(api, "query_range", form)
        assert r.status_code == 400 and r.json()["errorType"] == "bad_data", r.text
        assert words in r.json()["error"], r.text
    ok = {"query": "1", "start": "0", "end": str(MAX_POINTS - 1), "step": "1"}
    assert len(grafana_post(api, "query_range", ok).json()["data"]["result"][0]["values"]) == MAX_POINTS
    rfc = {"query": "1", "start": "2023-11-14T22:13:20Z", "end": "2023-11-14T22:23:20.5+00:00", "step": "5m"}
    values = grafana_post(api, "query_range", rfc).json()["data"]["result"][0]["values"]
    assert [t for t, _ in values] == [1700000000, 1700000300, 1700000600]


def test_access_bearer_basic_and_scopes(api, streams):
    (name, _), end = streams
    form = {"query": f'tidemark_count{{stream="{name}"}}', "time": str(end)}
    url = f"{api.url}/api/v1/query"
    assert httpx.post(url, data=form).status_code == 401
    assert httpx.post(url, data=form, auth=httpx.BasicAuth("x", "wrong-key-wrong-key")).status_code == 401
    assert httpx.post(url, data=form, auth=basic("ingest")).status_code == 403
    assert httpx.post(url, data=form, auth=basic("admin")).status_code == 200
    assert httpx.post(url, data=form, headers={"Authorization": f"Bearer {KEYS['read']}"}).status_code == 200
    assert httpx.post(url, data=form, headers={"Authorization": "Basic !!!"}).status_code == 401
    # The key is read where every route reads it (app.security.presented_key): Basic works natively too.
    assert httpx.get(f"{api.url}/v1/streams/{name}", auth=basic()).status_code == 200
    assert httpx.get(f"{api.url}/v1/streams/{name}", auth=httpx.BasicAuth(KEYS["read"], "")).status_code == 401
    for path in ("labels", "label/stream/values", "series?match[]=x", "status/buildinfo", "query_range"):
        assert httpx.get(f"{api.url}/api/v1/{path}").status_code == 401, path


def test_every_prometheus_route_asks_for_read(api):
    from app.security import api_routes, required_scope

    paths = [(p, r) for p, r in api_routes(api.app.routes) if p.startswith("/api/v1/")]
    assert len(paths) >= 6
    assert all(required_scope(r) == "read" for _, r in paths)


def test_labels_values_series_and_buildinfo(api, streams):
    (a, b), end = streams
    get = lambda path, **params: httpx.get(f"{api.url}/api/v1/{path}", params=params, auth=basic())
    names = get("label/__name__/values").json()["data"]
    assert "tidemark_count" in names and "tidemark_heavy_hitters" in names and "tidemark_distribution" not in names
    assert {a, b} <= set(get("label/stream/values").json()["data"])
    assert get("label/bound/values").json()["data"] == ["estimate", "lower", "upper"]
    assert {"__name__", "stream", "bound"} <= set(get("labels").json()["data"])
    assert get("label/nope/values").json() == {"status": "success", "data": []}
    assert get("label/1bad/values").status_code == 400
    # With match[], as Grafana's label_values(tidemark_count{…}, stream) asks:
    values = get("label/stream/values", **{"match[]": f'tidemark_count{{stream=~"{a}"}}'}).json()["data"]
    assert values == [a]
    # label_values(tidemark_count, stream): a match[] without stream matches every stream
    values = get("label/stream/values", **{"match[]": "tidemark_count"}).json()["data"]
    assert {a, b} <= set(values)
    r = httpx.post(f"{api.url}/api/v1/series", auth=basic(),
                   data={"match[]": f'tidemark_quantiles{{stream="{a}", q="0.5,0.9"}}', "end": str(end)})
    assert r.status_code == 200, r.text
    series = r.json()["data"]
    assert {(s["q"], s["bound"]) for s in series} == {(q, b) for q in ("0.5", "0.9") for b in ("estimate", "lower", "upper")}
    r = get("series", **{"match[]": f'tidemark_heavy_hitters{{stream="{a}", phi="0.2"}}', "end": str(end)})
    assert r.status_code == 200 and all("key" in s for s in r.json()["data"]) and r.json()["data"]
    assert get("series").json()["errorType"] == "bad_data"
    meta = get("metadata").json()["data"]
    assert meta["tidemark_count"][0]["type"] == "gauge" and set(meta) == set(names)
    assert get("query_exemplars", query="x").json() == {"status": "success", "data": []}
    info = get("status/buildinfo").json()
    assert info["status"] == "success" and info["data"]["version"].count(".") == 2


def test_a_request_past_its_timeout_is_a_timeout_error(api, streams):
    (name, _), end = streams
    form = {"query": f'tidemark_heavy_hitters{{stream="{name}", phi="0.01", window="1m"}}',
            "start": str(end - 1800), "end": str(end), "step": "1s", "timeout": "1ms"}
    r = grafana_post(api, "query_range", form)
    assert r.status_code == 422 and r.json()["errorType"] == "timeout", r.text
    r = grafana_post(api, "query_range", {**form, "timeout": "soon"})
    assert r.status_code == 400 and 'invalid parameter "timeout"' in r.json()["error"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_range_samples_are_native_answers_and_hold_the_truth(api, redis_url, data):
    """Out-of-order events with bursts on one instant; any step, window and range: every
    count sample is the native answer at its time, and its bound holds the exact count."""
    n = data.draw(st.integers(0, 200))
    base = data.draw(st.lists(st.floats(0, 1500, allow_nan=False), min_size=n, max_size=n))
    ts = 1_700_000_000.0 + np.array(base + data.draw(st.lists(st.sampled_from(base or [0.0]), max_size=30)))
    name = next(_names)
    config = StreamConfig(max_window=1800, epsilon=0.05)
    summary = StreamSummary.create(config, TEST_SECRET)
    if ts.size:
        summary.update_table(decode_chunk(encode_chunk(ts, [None] * ts.size, np.full(ts.size, np.nan), np.ones(ts.size))))
    Publisher(redis_url).publish_summary(name, summary, version=1, events=int(ts.size))
    window = data.draw(st.sampled_from(["1s", "30s", "5m", "1m30s"]))
    step_ms = data.draw(st.integers(500, 120_000))
    start_ms = data.draw(st.integers(1_700_000_000_000 - 600_000, 1_700_000_000_000 + 1_600_000))
    end_ms = start_ms + step_ms * data.draw(st.integers(0, 30))
    r = grafana_post(api, "query_range", {"query": f'tidemark_count{{stream="{name}", window="{window}"}}',
                                          "start": repr(start_ms / 1000), "end": repr(end_ms / 1000),
                                          "step": repr(step_ms / 1000)})
    assert r.status_code == 200, r.text
    by_time: dict = {}
    for series in r.json()["data"]["result"]:
        for t, v in series["values"]:
            by_time.setdefault(t, {})[series["metric"]["bound"]] = float(v)
    seconds_of = {"1s": 1, "30s": 30, "5m": 300, "1m30s": 90}[window]
    for t, got in by_time.items():
        want = native(api, name, "count", {"window": seconds_of, "at": repr(t)})
        assert got == {"estimate": want["estimate"], "lower": want["bound"]["lower"], "upper": want["bound"]["upper"]}
        truth = int(((ts >= t - seconds_of) & (ts <= t)).sum())
        assert got["lower"] <= truth <= got["upper"], (t, got, truth)
    if ts.size:  # every instant whose window is kept has its sample
        oldest = float(ts.max()) - 1800 + seconds_of
        kept = [ms / 1000 for ms in range(start_ms, end_ms + 1, step_ms) if ms / 1000 >= oldest + 1e-3]
        assert set(kept) <= set(by_time)


def test_every_stream_decision_goes_through_visible_streams(api, streams, monkeypatch):
    """The one hook for keys limited to some streams (contract §9): a stream it hides is
    absent from listings and regex matches, and named outright it is refused as absent."""
    import app.routes.prometheus as prom

    (a, b), end = streams
    monkeypatch.setattr(prom, "visible_streams", lambda request, names: [n for n in names if n != b])
    get = lambda path, **params: httpx.get(f"{api.url}/api/v1/{path}", params=params, auth=basic())
    assert a in get("label/stream/values").json()["data"] and b not in get("label/stream/values").json()["data"]
    assert get("label/stream/values", **{"match[]": "tidemark_count"}).json()["data"].count(b) == 0
    r = grafana_post(api, "query", {"query": f'tidemark_count{{stream=~"({a}|{b})"}}', "time": str(end)})
    assert {s["metric"]["stream"] for s in r.json()["data"]["result"]} == {a}
    hidden = grafana_post(api, "query", {"query": f'tidemark_count{{stream="{b}"}}', "time": str(end)})
    absent = grafana_post(api, "query", {"query": 'tidemark_count{stream="nowhere"}', "time": str(end)})
    assert hidden.status_code == absent.status_code == 422
    assert hidden.json()["error"].replace(b, "X") == absent.json()["error"].replace("nowhere", "X")


def test_inner_product_of_two_streams_is_the_native_answer(api, streams):
    (a, b), end = streams
    r = grafana_post(api, "query_range", {"query": f'tidemark_inner_product{{streams="{a},{b}", window="10m"}}',
                                          "start": str(end - 120), "end": str(end), "step": "60"})
    assert r.status_code == 200, r.text
    result = r.json()["data"]["result"]
    assert {s["metric"]["bound"] for s in result} == {"estimate", "lower", "upper"}
    for s in result:
        assert s["metric"]["streams"] == f"{a},{b}" and "stream" not in s["metric"]
        for t, v in s["values"]:
            want = httpx.get(f"{api.url}/v1/inner-product", headers=api.headers,
                             params={"streams": f"{a},{b}", "window": 600, "at": repr(float(t))}).json()
            assert float(v) == (want["estimate"] if s["metric"]["bound"] == "estimate" else want["bound"][s["metric"]["bound"]])
    r = grafana_post(api, "query", {"query": f'tidemark_inner_product{{streams="{a},nowhere"}}', "time": str(end)})
    assert r.status_code == 422 and "'nowhere' is not declared" in r.json()["error"]


_FUZZ_TEXT = st.one_of(
    st.text(alphabet='tidemark_countsumquailehvyrp{}()[]",=~!+-*/ 0123456789.x\\\'`#@', max_size=60),
    st.sampled_from(['tidemark_count{stream="prom-0"}', 'tidemark_quantiles{stream=~".*", q="2"}',
                     'tidemark_heavy_hitters{stream="prom-0", phi="nan"}', "1/0", "-Inf", "NaN",
                     'tidemark_count{stream="prom-0", window="99999999999y"}', "9" * 400]))
_FUZZ_NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12),
                         st.sampled_from(["1700000000", "0", "-1", "1e300", "5m", "2023-11-14T22:13:20Z"]))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=_FUZZ_TEXT, time_=_FUZZ_NUMBER, start=_FUZZ_NUMBER, end=_FUZZ_NUMBER, step=_FUZZ_NUMBER,
       extra=st.dictionaries(st.sampled_from(["match[]", "timeout", "time"]), _FUZZ_TEXT, max_size=2))
def test_no_request_is_a_5xx_and_every_error_is_in_the_envelope(api, streams, query, time_, start, end, step, extra):
    for path, form in (("query", {"query": query, "time": time_, **extra}),
                       ("query_range", {"query": query, "start": start, "end": end, "step": step, **extra}),
                       ("series", {"match[]": query, **extra}), ("labels", {"match[]": query})):
        r = grafana_post(api, path, form)
        assert r.status_code < 500, (path, form, r.status_code, r.text[:300])
        body = r.json()
        if r.status_code == 200:
            assert body["status"] == "success"
        else:
            assert body["status"] == "error" and body["errorType"] in ("bad_data", "execution", "timeout"), body


def test_a_range_reads_each_summary_once(api, streams, monkeypatch):
    """One read (and at most one decode) of each stream per request, not one per point."""
    (a, b), end = streams
    store = api.app.state.store
    reads: list[str] = []
    real = store.reads.summary
    monkeypatch.setattr(store.reads, "summary", lambda name, *args, **kw: (reads.append(name), real(name, *args, **kw))[1])
    r = grafana_post(api, "query_range", {"query": f'tidemark_quantiles{{stream=~"{a}|{b}", q="0.5"}}',
                                          "start": str(end - 600), "end": str(end), "step": "10"})
    assert r.status_code == 200 and len(r.json()["data"]["result"][0]["values"]) == 61
    assert sorted(reads) == sorted([a, b])


def test_a_stream_whose_summary_cannot_be_read_is_left_out_of_a_regex_not_a_5xx(api, redis_url, streams):
    """A published summary this deployment cannot read (another hash secret: refused whole)
    costs a regex selector that stream's samples, never the other streams' answer nor a 5xx."""
    from tidemark.hash_secret import HashSecret

    good, end = streams[0][0], streams[1]
    bad = next(_names)
    config = StreamConfig(max_window=MAX_WINDOW, epsilon=0.05)
    summary = StreamSummary.create(config, HashSecret(b"another-deployment-secret"))
    summary.update_table(decode_chunk(encode_chunk(np.array([end]), ["k"], np.ones(1), np.ones(1))))
    Publisher(redis_url).publish_summary(bad, summary, version=1, events=1)
    form = {"query": f'tidemark_count{{stream=~"{good}|{bad}", window="5m"}}', "time": end}
    r = grafana_post(api, "query", form)
    assert r.status_code == 200, r.text
    assert {s["metric"]["stream"] for s in r.json()["data"]["result"]} == {good}
    named = grafana_post(api, "query", {**form, "query": f'tidemark_count{{stream="{bad}", window="5m"}}'})
    # Named outright: refused whole, as the native route refuses it (503: ours, not the caller's).
    assert named.status_code == 503 and named.json()["errorType"] == "unavailable", named.text
    native = httpx.get(f"{api.url}/v1/streams/{bad}/count", params={"window": "5m"}, headers=auth("read"))
    assert native.status_code == 503 and "another hash secret" in native.json()["detail"], native.text
