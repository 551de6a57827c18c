"""A federated stream over a site fed by the suite's real Spark session: events posted to
that site's API go through its ingest log and the Spark worker's stateful update into its
published summary; the federating Tidemark merges it with its own (``local``), and the
answers bracket the exact union."""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import KEYS, ApiServer, post_events
from tests.in_process import run
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from workers.publish import Publisher

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0
SETTINGS = {"max_window": 3600, "epsilon": 0.05, "delta": 0.05}


def _events(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    ts = np.sort(T0 + rng.uniform(0, 1200, n))
    return [{"ts": float(t), "key": f"k{int(k)}", "value": float(v)}
            for t, k, v in zip(ts, rng.zipf(1.4, n) % 100, np.round(rng.lognormal(3, 1, n), 2))]


def test_a_spark_fed_site_and_the_local_one_answer_as_their_union(pipeline, stream_name, tmp_path):
    spark_events, local_events = _events(1, 3000), _events(2, 1000)
    with pipeline.client() as c:
        assert c.put(f"/v1/streams/{stream_name}", json=SETTINGS).status_code == 201
        assert post_events(c, stream_name, json=spark_events).status_code == 202
    pipeline.wait_events(stream_name, len(spark_events))
    with EmbeddedRedis(tmp_path / "redis") as redis:
        home = ApiServer(redis.url, sites=[{"name": "spark", "url": pipeline.api, "key": KEYS["read"]}]).start()
        try:
            with home.client() as c:
                r = c.put(f"/v1/streams/{stream_name}", json={**SETTINGS, "sites": ["spark", "local"]})
                assert r.status_code == 201, r.text
            done = run(StreamConfig.model_validate(SETTINGS), [local_events], [0], [1], 1)
            Publisher(redis.url).publish_summary(stream_name, done.summary, version=1, events=len(local_events))
            union = spark_events + local_events
            with home.client("read") as c:
                deadline = time.monotonic() + 20
                while (r := c.get(f"/v1/streams/{stream_name}/count", params={"window": 900})).json()["as_of"]["events"] != len(union):
                    assert time.monotonic() < deadline, r.text
                    time.sleep(0.2)
                body = r.json()
                lo, at = Fraction(body["at"]) - 900, Fraction(body["at"])
                inside = [e for e in union if lo <= Fraction(e["ts"]) <= at]
                assert body["bound"]["lower"] <= len(inside) <= body["bound"]["upper"], body
                assert set(body["as_of"]["sites"]) == {"spark", "local"} and "incomplete" not in body
                q = c.get(f"/v1/streams/{stream_name}/quantiles", params={"window": 900, "q": "0.5,0.99"}).json()
                values = sorted(e["value"] for e in inside)
                for item in q["items"]:
                    truth = values[max(math.ceil(item["q"] * len(values)), 1) - 1]
                    assert item["bound"]["lower"] <= truth <= item["bound"]["upper"], item
                d = c.get(f"/v1/streams/{stream_name}/distinct", params={"window": 900}).json()
                truth = len({e["key"] for e in inside})
                assert d["bound"]["lower"] <= truth <= d["bound"]["upper"], d
        finally:
            home.stop()
