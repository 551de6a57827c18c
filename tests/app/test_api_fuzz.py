"""A property-based fuzz of the whole API from its own OpenAPI schema (schemathesis): with
the admin key, no generated request may get a 5xx (contract §8: a 5xx is a bug)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis")

# Enough to walk every operation with odd values each time, modest enough for `make test`.
EXAMPLES = 25


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """An API on a Redis of its own: the fuzz declares streams and alerts by the dozen."""
    from tests.conftest import ApiServer
    from tidemark.redis_server import EmbeddedRedis

    own = EmbeddedRedis(tmp_path_factory.mktemp("redis-fuzz")).start()
    server = ApiServer(own.url, webhook_allow_hosts=[]).start()
    with server.client() as c:  # something to find: a stream with values and decays
        c.put("/v1/streams/fuzz", json={"max_window": "1h", "value_min": 0, "value_max": 100,
                                        "decays": [{"kind": "polynomial", "alpha": 1.5}]})
        c.post("/v1/streams/fuzz/events", json=[{"ts": 1_700_000_000 + i, "key": f"k{i % 7}",
                                                 "value": i % 100} for i in range(200)])
    yield server
    server.stop()
    own.stop()


def _operations(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    # /v1/live is an endless event stream: a fuzz request would never finish reading it.
    return [r.ok() for r in schema.get_all_operations() if r.ok().path != "/v1/live"]


def test_no_generated_request_is_a_5xx(fuzzed):
    operations = _operations(fuzzed)
    assert len(operations) >= 12  # the walk sees the API, not an empty schema
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def no_5xx(case):
            response = case.call(base_url=fuzzed.url, headers=fuzzed.headers, timeout=10)
            if case.path == "/readyz":  # 503 means "no worker here", by contract
                return
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} {case.query} {case.body!r:.300} "
                f"-> {response.status_code} {response.text[:300]}")

        no_5xx()


# The query endpoints take free-form parameters the schema cannot describe: fuzz them here.
QUERIES = ["count", "sum", "frequency", "heavy-hitters", "quantiles", "distinct", "self-join",
           "decayed-sum", "median"]
PARAMS = ["window", "at", "key", "phi", "q", "tau", "decay", "half_life", "alpha", "guarantee",
          "lo", "hi", "value", "streams"]


def _values():
    from hypothesis import strategies as st

    numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400),
                        st.sampled_from([0, 1, -1, 0.5, 1e-320, 1e308, 1_700_000_100, 3600]))
    return st.one_of(numbers.map(str), st.text(max_size=40),
                     st.sampled_from(["1h", "7d", "0.5,0.99", "none", "sliding", "exponential",
                                      "polynomial", "relative", "additive", "fuzz,fuzz", "k1", "9" * 5000]))


def test_query_parameters_never_make_a_5xx(fuzzed):
    from hypothesis import strategies as st

    @given(query=st.sampled_from(QUERIES),
           params=st.dictionaries(st.sampled_from(PARAMS), _values(), max_size=5))
    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def no_5xx(query, params):
        with fuzzed.client("read") as c:
            r = c.get(f"/v1/streams/fuzz/{query}", params=params)
            assert r.status_code < 500, (query, params, r.status_code, r.text[:300])
            if "streams" in params:
                r = c.get("/v1/inner-product", params=params)
                assert r.status_code < 500, ("inner-product", params, r.status_code, r.text[:300])

    no_5xx()
