"""The table of query kinds, built from the registry of query families (``app.kinds``):
every route, alert rule and answer reads it; the inner product is a kind over two streams
(``GET /v1/inner-product?streams=A,B``)."""

from __future__ import annotations

import importlib
import itertools
import time

import numpy as np
import pytest

from app import kinds
from app.alerts.rules import ALERT_QUERIES, AlertCreate
from app.answers import QUERY_KINDS, QueryError, answer_streams, lookup, streams_of
from tests import strategies as S
from tests.conftest import TEST_SECRET
from tidemark import families
from tidemark.streams import StreamConfig
from workers.publish import Publisher

_names = (f"kinds-{i}" for i in itertools.count())
CONFIG = StreamConfig(max_window=100.0, epsilon=0.1, delta=0.1)


def _case(rng, n, config=CONFIG):
    ts = sorted(rng.uniform(0, 100, n).round(3).tolist())
    keys = [S.KEYS[min(rng.integers(0, len(S.KEYS), 2))] for _ in range(n)]
    return S.Case(config, ts, keys, [1.0] * n, [1.0] * n, rng.integers(0, 3, n).tolist())


def _status(case):
    return {**S.status(case), "sketch_version": 7 if case.ts else 0}


def test_the_table_names_every_kind_once_and_what_alerts_may_watch():
    assert {"count", "sum", "distinct", "frequency", "heavy-hitters", "self-join", "inner-product",
            "quantiles", "distribution", "decayed-sum"} <= set(QUERY_KINDS)
    assert all(q.name == n for n, q in QUERY_KINDS.items())
    assert [n for n, q in QUERY_KINDS.items() if q.streams != 1] == ["inner-product"]
    assert set(ALERT_QUERIES) == {"count", "sum", "frequency", "distinct", "self-join", "inner-product",
                                  "quantiles", "decayed-sum"}
    assert AlertCreate.model_json_schema()["properties"]["query"]["enum"] == list(ALERT_QUERIES)


def test_the_table_is_the_registrys_kinds_one_family_each_over_the_cores_families():
    """One served family per family of the core's registry, in its order; the table holds
    each family's kinds, each declared by one family; each family's module names its
    parts' module, its paper and its tests."""
    assert [f.family for f in kinds.FAMILIES] == list(families.FAMILIES)
    declared = [k.name for f in kinds.FAMILIES for k in f.kinds]
    assert len(declared) == len(set(declared)) and set(declared) == set(QUERY_KINDS)
    assert QUERY_KINDS is kinds.QUERY_KINDS
    assert all(QUERY_KINDS[k.name] is k for f in kinds.FAMILIES for k in f.kinds)
    assert {f.name: [k.name for k in f.kinds] for f in kinds.FAMILIES} == {
        "windowed": ["count", "sum"], "distinct": ["distinct"],
        "keyed": ["frequency", "heavy-hitters", "self-join", "inner-product"],
        "values": ["quantiles", "distribution", "decayed-quantile"],
        "decayed": ["decayed-sum", "decayed-range-sum", "decayed-frequency", "decayed-heavy-hitters"]}
    assert {n for n, q in QUERY_KINDS.items() if q.not_series} == {"distribution"}
    assert {n for n, q in QUERY_KINDS.items() if q.monotone} == {
        "count", "sum", "distinct", "frequency", "heavy-hitters", "self-join", "inner-product", "decayed-sum",
        "decayed-range-sum"}
    assert {n for n, q in QUERY_KINDS.items() if q.decayed} == {n for n in QUERY_KINDS if n.startswith("decayed")}
    for family in kinds.FAMILIES:
        doc = importlib.import_module(f"app.kinds.{family.name}").__doc__
        assert f"tidemark/families/{family.name}.py" in doc and "Tested by:" in doc


def test_lookup_and_stream_names_are_the_callers_mistakes_when_wrong():
    with pytest.raises(QueryError, match=r"^inner-product is a query over 2 streams: GET /v1/inner-product\?streams=A,B$"):
        lookup("inner-product", streams=1)
    with pytest.raises(QueryError, match="^unknown query 'nope'; known: count, ") as e:
        lookup("nope", streams=1)
    assert "inner-product" not in str(e.value)
    ip = lookup("inner-product")
    assert streams_of(ip, None, {"streams": " a , b "}) == ["a", "b"]
    for bad in ("", "a", "a,b,c", ",,"):
        with pytest.raises(QueryError, match="inner-product needs streams=A,B"):
            streams_of(ip, None, {"streams": bad})
    assert streams_of(lookup("count"), "s", {"streams": "x,y"}) == ["s"]


def test_the_inner_product_brackets_the_exact_sum_of_products():
    """Over 40 independent pairs of streams the bound (confidence 1 − δ = 0.9) misses the
    brute-force Σ f_A·f_B rarely; a window's lower reading never exceeds its upper."""
    rng = np.random.default_rng(5)
    misses = 0
    for trial in range(40):
        a, b = _case(rng, int(rng.integers(0, 60))), _case(rng, int(rng.integers(0, 60)))
        w, at = float(rng.uniform(1, 100)), 100.0
        read = [(S.summarize(c, seed=trial), _status(c)) for c in (a, b)]
        body = answer_streams("inner-product", ["a", "b"], [CONFIG, CONFIG], read, {"window": w, "at": at})
        fa, fb = (S.frequencies(c, S.in_window(c, w, at)) for c in (a, b))
        truth = sum(fa[k] * fb.get(k, 0) for k in fa)
        bound = body["bound"]
        assert bound["lower"] <= body["estimate"] <= bound["upper"]
        assert body["streams"] == ["a", "b"] and body["as_of"]["sketch_versions"] == {
            "a": read[0][1]["sketch_version"], "b": read[1][1]["sketch_version"]}
        if not a.ts or not b.ts:
            assert body["estimate"] == bound["upper"] == 0.0 == truth
        misses += not bound["lower"] <= truth <= bound["upper"]
    assert misses <= 8


def test_the_two_streams_must_share_a_sketch_shape():
    rng = np.random.default_rng(1)
    a, b = _case(rng, 5), _case(rng, 5, StreamConfig(max_window=100.0, epsilon=0.2, delta=0.1))
    read = [(S.summarize(c), _status(c)) for c in (a, b)]
    with pytest.raises(QueryError, match="same epsilon, delta, max_window and resolution"):
        answer_streams("inner-product", ["a", "b"], [a.config, b.config], read, {})


def test_routes_come_from_the_table(api, redis_url):
    """``/v1/inner-product`` answers as the table's kind does; the one-stream route names it."""
    rng = np.random.default_rng(2)
    p = Publisher(redis_url)
    names = [next(_names), next(_names)]
    cases = [_case(rng, 40), _case(rng, 30)]
    with api.client() as c:
        for name, case in zip(names, cases):
            c.put(f"/v1/streams/{name}", json={"max_window": "100s", "epsilon": 0.1, "delta": 0.1}).raise_for_status()
            for shard, summary in S.shard_summaries(case, secret=TEST_SECRET).items():
                p.publish_summary(name, summary, version=1, events=len(case.ts), shard=shard)
        # The API reads a stream's statuses at most every read_ttl (0.25 s) or on the
        # publish announcement; past that, every shard published above is served.
        time.sleep(0.6)
        got = c.get("/v1/inner-product", params={"streams": ",".join(names), "window": "50s"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["query"] == "inner-product" and body["streams"] == names
        assert body["at"] == max(case.clock for case in cases)
        refused = c.get(f"/v1/streams/{names[0]}/inner-product", params={"streams": ",".join(names)})
        assert refused.status_code == 422 and "GET /v1/inner-product?streams=A,B" in refused.json()["detail"]
        one = c.get("/v1/inner-product", params={"streams": names[0]})
        assert one.status_code == 422
        missing = c.get("/v1/inner-product", params={"streams": f"{names[0]},{next(_names)}"})
        assert missing.status_code == 404


def test_the_kinds_route_lists_exactly_the_table_to_a_reader(api):
    """``GET /v1/kinds`` names every kind of the table once, by family in the registry's
    order, with what its declaration says; it is a read like the others: 401 without a
    key, 403 with an ingest key, 200 with a read key."""
    from app.promql.query import metric_names

    with api.client(None) as c:
        assert c.get("/v1/kinds").status_code == 401
    with api.client("ingest") as c:
        assert c.get("/v1/kinds").status_code == 403
    with api.client("read") as c:
        got = c.get("/v1/kinds")
    assert got.status_code == 200, got.text
    listed = got.json()["kinds"]
    assert [k["name"] for k in listed] == [k.name for f in kinds.FAMILIES for k in f.kinds]
    assert {k["name"] for k in listed} == set(QUERY_KINDS)
    served = {kind: metric for metric, kind in metric_names().items()}
    for k in listed:
        kind = QUERY_KINDS[k["name"]]
        assert k == {"name": kind.name, "family": next(f.name for f in kinds.FAMILIES if kind in f.kinds),
                     "streams": kind.streams, "alert": kind.alert, "metric": served.get(kind.name),
                     "not_series": kind.not_series}
        assert (k["metric"] is None) == (k["not_series"] is not None)


def test_every_read_ahead_names_a_part_of_the_kinds_summary():
    """What a kind reads ahead over time (``QueryKind.read_ahead``) is a part a summary of
    its stream holds: a read-ahead naming no part would silently read nothing ahead."""
    parts = {spec.name for family in families.FAMILIES for spec in family.parts if spec.instances is None}
    declared = {(k.name, part) for k in QUERY_KINDS.values() for part, _ in k.read_ahead}
    assert declared and all(part in parts for _, part in declared), declared


def test_distribution_rows_bracket_the_cdf_and_its_share():
    """``distribution`` through the answer path, windows whose edges cut ticks, shards
    merged: each row's count bracket holds C(≤ upper edge), its share bracket holds
    C(≤ upper edge)/n (each side from one consistent world) inside cdf/events."""
    from app.answers import answer

    rng = np.random.default_rng(21)
    config = StreamConfig(max_window=600.0, epsilon=0.05, delta=0.1, resolution=1.0, value_min=0.0, value_max=1e6)
    n = 6000
    ts = (1000 + np.sort(rng.uniform(0, 600, n)) * 1024 // 1 / 1024).tolist()
    values = np.round(rng.lognormal(3, 1, n), 1)
    case = S.Case(config, ts, [None] * n, values.tolist(), [1.0] * n, rng.integers(0, 4, n).tolist())
    summary = S.summarize(case)
    status = _status(case)
    for _ in range(12):
        w = float(rng.uniform(5, 500))
        at = case.clock - float(rng.uniform(0, 600 - w))
        r = answer("distribution", "s", config, summary, status,
                   {"window": repr(w), "at": repr(at), "buckets": "4096"})
        inside = values[S.in_window(case, w, at)]  # exact rationals, as the contract says
        assert r["events"]["lower"] <= inside.size <= r["events"]["upper"]
        for row in r["items"]:
            c = int(np.count_nonzero(inside <= row["upper_edge"]))
            assert row["cdf_lower"] <= c <= row["cdf_upper"], (row, c)
            if inside.size:
                assert row["share_lower"] <= c / inside.size <= row["share_upper"], (row, c, inside.size)
            assert row["share_lower"] >= row["cdf_lower"] / r["events"]["upper"] * (1 - 1e-12)
            if r["events"]["lower"]:
                assert row["share_upper"] <= min(1.0, row["cdf_upper"] / r["events"]["lower"]) * (1 + 1e-12)
