"""Federated streams (contract §11) with real parts: three sites on this machine, each its
own Redis and ``tidemark api`` process, whose summaries are built by the worker's own update
path (``workers.update.update_shard``, through ``tests.in_process.run``) and published as
the worker publishes them; a federating Tidemark that pulls and merges them; a fourth site
under another hash secret. Every query kind is checked against the exact answer over the
union of the sites' events; then a site is killed and restarted, another stopped (stale),
and the federation's declarations and refusals are checked.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest
import zstandard

from app.site_serving import MAX_DIGESTS
from tests.conftest import API_KEYS, KEYS, TEST_SECRET, ApiServer, auth, wait_for_api
from tests.in_process import run
from tidemark.redis_server import EmbeddedRedis, free_port
from tidemark.streams import StreamConfig
from tidemark.supervisor import terminate
from workers.publish import Publisher

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0
SETTINGS = {"max_window": 3600, "epsilon": 0.05, "delta": 0.05, "value_min": 0, "value_max": 1000,
            "decays": [{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}]}
CONFIG = StreamConfig.model_validate(SETTINGS)
NARROW = "team-b.*"  # the streams a restricted read key of every site reaches
RESTRICTED = {"key": f"test-restricted-read-{os.getpid()}-key", "scopes": ["read"], "streams": [NARROW]}


class Site:
    """One site: its own Redis and its own ``tidemark api`` process, on free ports."""

    def __init__(self, name: str, directory: Path, secret_hex: str):
        self.name, self.directory, self.secret_hex = name, directory, secret_hex
        self.redis = EmbeddedRedis(directory / "redis").start()
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Site":
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TIDEMARK_RUN_DIR": str(self.directory / "run"),
               "TIDEMARK_CHECKPOINT": str(self.directory / "checkpoint"),
               "TIDEMARK_API_KEYS": json.dumps([*API_KEYS, RESTRICTED]),
               "TIDEMARK_HASH_SECRET": self.secret_hex, "TIDEMARK_INGEST_PROCESSES": "0",
               # One process: a site is stopped (SIGSTOP) and killed as one (its processes
               # would go on answering for a stopped parent).
               "TIDEMARK_API_WORKERS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "api", "--redis", self.redis.url,
                                      "--port", str(self.port)], env=env, cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def wait(self) -> "Site":
        wait_for_api(self.url, self.proc, f"site {self.name}")
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped site would never see the SIGTERM
            terminate(self.proc, 15)
        self.redis.stop()

    def client(self, scope: str = "admin") -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=auth(scope), timeout=30)

    def publish(self, name: str, requests: list[list[dict]], version: int, shards: int = 2):
        """Build the site's summary of ``requests`` by the worker's update path and
        publish it as the worker does; the run (its exact kept events) for the oracle."""
        done = run(CONFIG, requests, owner=list(range(shards)), cuts=[3, 1, 5], shards=shards)
        Publisher(self.redis.url).publish_summary(name, done.summary, version=version, events=done.events,
                                                  late_dropped=done.late_dropped)
        return done


def _events(seed: int, n: int, keys: int = 300) -> list[dict]:
    rng = np.random.default_rng(seed)
    ts = T0 + rng.uniform(0, 1800, n)
    ts = ts[np.argsort(ts + rng.pareto(1.2, n) * 20)]  # late arrivals, none older than max_window
    ks = [f"user-{k}" if k % 7 else f"ключ-{k}" for k in rng.zipf(1.3, n) % keys]
    values = np.round(rng.lognormal(4, 1, n).clip(0, 1000), 2)
    weights = rng.exponential(2.0, n).round(3)
    return [{"ts": float(t), "key": k, "value": float(v), "weight": float(w)}
            for t, k, v, w in zip(ts, ks, values, weights)]


def _requests(events: list[dict], size: int = 250) -> list[list[dict]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Sites eu, us, ap (processes, the run's hash secret), xx (another secret, in a
    thread), and the federating Tidemark (in a thread) that knows all four."""
    base = tmp_path_factory.mktemp("federation")
    sites = {n: Site(n, base / n, TEST_SECRET.secret.hex()).start() for n in ("eu", "us", "ap")}
    odd_redis = EmbeddedRedis(base / "xx-redis").start()
    odd = ApiServer(odd_redis.url, hash_secret=bytes(range(1, 33)).hex()).start()
    home_redis = EmbeddedRedis(base / "home-redis").start()
    try:
        for s in sites.values():
            s.wait()
        peers = [{"name": n, "url": s.url, "key": KEYS["read"]} for n, s in sites.items()]
        peers.append({"name": "xx", "url": odd.url, "key": KEYS["read"]})
        # Pulls time out after 6 s, the staleness limit is 2.5 s: a stopped site is stale
        # before its pull fails.
        home = ApiServer(home_redis.url, sites=peers, site_max_age=2.5, site_pull_interval=0.3,
                         site_timeout=6.0, api_keys=[*API_KEYS, RESTRICTED]).start()
        yield {"sites": sites, "odd": odd, "home": home, "home_redis": home_redis}
        home.stop()
    finally:
        for s in sites.values():
            s.stop()
        odd.stop()
        odd_redis.stop()
        home_redis.stop()


def _declare_everywhere(world, name: str, settings: dict = SETTINGS) -> None:
    for s in world["sites"].values():
        with s.client() as c:
            assert c.put(f"/v1/streams/{name}", json=settings).status_code == 201


@pytest.fixture(scope="module")
def loaded(world):
    """``web`` at eu, us and ap (a third of the events each, split unevenly and at random),
    federated at home over the three: the union's kept events are the oracle."""
    events = _events(11, 6000)
    rng = np.random.default_rng(12)
    owner = rng.choice(3, len(events), p=[0.5, 0.3, 0.2])
    name = "web"
    _declare_everywhere(world, name)
    kept = []
    for i, s in enumerate(world["sites"].values()):
        mine = [e for e, o in zip(events, owner) if o == i]
        done = s.publish(name, _requests(mine), version=1)
        assert done.late_dropped == 0
        kept += [e for e in mine]
    with world["home"].client() as c:
        r = c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "us", "ap"]})
        assert r.status_code == 201, r.text
        assert r.json()["sites"] == ["eu", "us", "ap"]
    return name, kept


# -- the exact oracle over the union -------------------------------------------------------
def _window(events, at, window):
    lo, hi = Fraction(at) - Fraction(window), Fraction(at)
    return [e for e in events if lo <= Fraction(e["ts"]) <= hi]


def _quantile(values, q):
    values = sorted(values)
    k = max(math.ceil(q * len(values)), 1)  # as the answers read q: a float product
    return values[k - 1]


DECAYS = {"none": lambda a: 1.0, "polynomial": lambda a: (a + 1.0) ** -1.5,
          "exponential": lambda a: 2.0 ** (-a / 120.0), "sliding": lambda a: float(a <= 600)}


def _holds(bound, truth, slack=0.0):
    tol = slack * max(abs(truth), 1.0)
    return bound["lower"] - tol <= truth <= bound["upper"] + tol


def test_every_query_kind_brackets_the_union_of_the_sites_events(world, loaded):
    name, events = loaded
    with world["home"].client("read") as c:
        base = f"/v1/streams/{name}"
        r = c.get(base).json()
        assert r["status"]["events"] == len(events) and r["sites"] == ["eu", "us", "ap"]
        at = r["status"]["clock"]
        assert at == max(e["ts"] for e in events)
        for window in (60, 600, 3600):
            inside = _window(events, at, window)
            freq = Counter(e["key"] for e in inside)
            count = c.get(f"{base}/count", params={"window": window}).json()
            assert count["at"] == at and _holds(count["bound"], len(inside)), (window, count)
            assert set(count["as_of"]["sites"]) == {"eu", "us", "ap"} and "incomplete" not in count
            assert count["bound"]["confidence"] == 1.0
            s = c.get(f"{base}/sum", params={"window": window}).json()
            assert _holds(s["bound"], math.fsum(e["weight"] for e in inside), 1e-12), (window, s)
            d = c.get(f"{base}/distinct", params={"window": window}).json()
            assert _holds(d["bound"], len(freq)), (window, d)
            sj = c.get(f"{base}/self-join", params={"window": window}).json()
            assert _holds(sj["bound"], sum(f * f for f in freq.values())), (window, sj)
            ip = c.get("/v1/inner-product", params={"streams": f"{name},{name}", "window": window}).json()
            assert _holds(ip["bound"], sum(f * f for f in freq.values())), (window, ip)
            for key in ("user-1", "user-2", "ключ-7", "nobody"):
                f = c.get(f"{base}/frequency", params={"window": window, "key": key}).json()
                assert _holds(f["bound"], freq.get(key, 0)), (window, key, f)
            hh = c.get(f"{base}/heavy-hitters", params={"window": window, "phi": 0.05}).json()
            listed = {item["key"]: item for item in hh["items"]}
            for key, f in freq.items():
                if key in listed:
                    assert _holds(listed[key]["bound"], f), (key, f, listed[key])
                elif hh["complete"]:
                    assert f < 0.05 * len(inside), (key, f, hh)
                    assert f <= hh["unlisted_max"]
            qs = [0.01, 0.5, 0.9, 0.99]
            quant = c.get(f"{base}/quantiles", params={"window": window, "q": ",".join(map(str, qs))}).json()
            for item, q in zip(quant["items"], qs):
                assert _holds(item["bound"], _quantile([e["value"] for e in inside], q)), (window, item)
            dist = c.get(f"{base}/distribution", params={"window": window}).json()
            values = np.sort([e["value"] for e in inside])
            for row in dist["items"]:
                below = int(np.searchsorted(values, row["upper_edge"], side="right"))
                assert row["cdf_lower"] <= below <= row["cdf_upper"], (row, below)
        for params in ({"decay": "none"}, {"decay": "polynomial", "alpha": "1.5"},
                       {"decay": "exponential", "half_life": "120"}, {"decay": "sliding", "window": "600"}):
            f = DECAYS[params["decay"]]
            for tau in (0, 80, 400):
                r = c.get(f"{base}/decayed-sum", params={**params, "tau": tau}).json()
                truth = math.fsum(e["weight"] * f(at - e["ts"]) for e in events if e["value"] >= tau)
                assert _holds(r["bound"], truth, 1e-9), (params, tau, r, truth)
        rs = c.get(f"{base}/decayed-range-sum", params={"decay": "none", "lo": 20, "hi": 300}).json()
        assert _holds(rs["bound"], math.fsum(e["weight"] for e in events if 20 <= e["value"] <= 300), 1e-9)
        for kind, params in (("decayed-frequency", {"value": 50}), ("decayed-heavy-hitters", {"phi": 0.2}),
                             ("decayed-quantile", {"phi": 0.5})):
            r = c.get(f"{base}/{kind}", params={"decay": "none", **params})
            assert r.status_code == 200 and set(r.json()["as_of"]["sites"]) == {"eu", "us", "ap"}, r.text


def test_the_summary_endpoint_serves_versions_and_only_what_changed(world):
    name = "team-a.summary"
    eu = world["sites"]["eu"]
    _declare_everywhere(world, name)
    eu.publish(name, _requests(_events(31, 2000)), version=1)
    with world["home"].client() as c:
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu"]}).status_code == 201
    with eu.client("read") as c:
        r = c.get(f"/v1/streams/{name}/summary")
        assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
        etag = r.headers["etag"]
        from tidemark.summary import StreamSummary

        assert StreamSummary.from_bytes(r.content, TEST_SECRET).config == CONFIG
        assert json.loads(r.headers["tidemark-status"])["events"] == 2000
        assert c.get(f"/v1/streams/{name}/summary", headers={"If-None-Match": etag}).status_code == 304
        m = c.get(f"/v1/streams/{name}/summary/manifest")
        manifest = m.json()
        assert m.headers["etag"] == etag == manifest["etag"]
        assert manifest["fingerprint"] == TEST_SECRET.fingerprint and manifest["settings"] == CONFIG.public()
        assert c.get(f"/v1/streams/{name}/summary/manifest", headers={"If-None-Match": etag}).status_code == 304
        digests = [d for _, d, _ in manifest["segments"]]
        assert len(digests) > 40  # paged parts: a summary is many segments, asked a batch at a time
        got = b"".join(c.get(f"/v1/streams/{name}/summary/segments",
                             params={"digests": ",".join(digests[i : i + 40])}).content
                       for i in range(0, len(digests), 40))
        assert got == r.content  # the segments, in order, are the summary
        too_many = ",".join((digests * (MAX_DIGESTS // len(digests) + 2))[: MAX_DIGESTS + 1])
        assert c.get(f"/v1/streams/{name}/summary/segments", params={"digests": too_many}).status_code == 422
        assert c.get(f"/v1/streams/{name}/summary/segments", params={"digests": "0" * 32}).status_code == 410
        assert c.get(f"/v1/streams/{name}/summary/segments", params={"digests": "nope"}).status_code == 422
    with world["home"].client("read") as c:
        assert c.get(f"/v1/streams/{name}/count").json()["as_of"]["events"] == 2000
    stats = world["home"].app.state.store.federation.pulled["eu"]
    before = dict(stats)
    # A new version whose events carry no value: the value parts keep their bytes; home,
    # holding version 1, gets version 2 as a delta from it.
    events = _events(31, 2000) + [{"ts": T0 + 1799.0, "key": "late-comer"}]
    eu.publish(name, _requests(events), version=2)
    with world["home"].client("read") as c:
        deadline = time.monotonic() + 10
        while c.get(f"/v1/streams/{name}/count").json()["as_of"]["events"] != 2001:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    with eu.client("read") as c:
        after = c.get(f"/v1/streams/{name}/summary/manifest").json()
        # the segments that changed, and only those, are what a peer holding version 1 lacks
        changed = [d for _, d, _ in after["segments"] if d not in digests]
        unchanged = [p for p, d, _ in after["segments"] if d in digests]
        assert after["etag"] != etag and "values" in unchanged and changed
        # ... and the delta since version 1 gives version 2's bytes from version 1's
        d = c.get(f"/v1/streams/{name}/summary/delta", params={"since": etag})
        assert d.status_code == 200 and d.headers["etag"] == after["etag"]
        dictionary = zstandard.ZstdCompressionDict(r.content, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        new = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(d.content)
        assert new == c.get(f"/v1/streams/{name}/summary").content
        assert len(d.content) < len(new) / 4, (len(d.content), len(new))
        assert c.get(f"/v1/streams/{name}/summary/delta", params={"since": after["etag"]}).status_code == 304
        assert c.get(f"/v1/streams/{name}/summary/delta", params={"since": '"nope"'}).status_code == 410
    assert stats["deltas"] - before["deltas"] >= 1 and stats["segments"] == before["segments"]
    assert stats["not_modified"] >= 1
    with httpx.Client(base_url=eu.url) as anonymous:
        assert anonymous.get(f"/v1/streams/{name}/summary").status_code == 401
    with httpx.Client(base_url=eu.url, headers={"Authorization": f"Bearer {RESTRICTED['key']}"}) as narrow:
        assert narrow.get(f"/v1/streams/{name}/summary").status_code == 404  # not its stream


def test_sites_that_cannot_be_merged_are_refused_at_declaration(world):
    name = "refused"
    _declare_everywhere(world, name)
    with world["odd"].client() as c:
        assert c.put(f"/v1/streams/{name}", json=SETTINGS).status_code == 201
    with world["sites"]["ap"].client() as c:
        assert c.put("/v1/streams/other-eps", json={**SETTINGS, "epsilon": 0.02}).status_code == 201
    with world["home"].client() as c:
        r = c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "xx"]})
        assert r.status_code == 409 and "'xx'" in r.json()["detail"] and "hash secret" in r.json()["detail"], r.text
        r = c.put("/v1/streams/other-eps", json={**SETTINGS, "sites": ["eu", "ap"]})
        assert r.status_code == 409 and "'eu' has no stream" in r.json()["detail"], r.text
        r = c.put("/v1/streams/other-eps", json={**SETTINGS, "sites": ["ap"]})
        assert r.status_code == 409 and "'ap'" in r.json()["detail"] and "epsilon 0.05 here, 0.02 there" in r.json()["detail"]
        r = c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "mars"]})
        assert r.status_code == 422 and "mars" in r.json()["detail"]
        for refused in (name, "other-eps"):  # nothing was declared
            assert c.get(f"/v1/streams/{refused}").status_code == 404
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "us", "local"]}).status_code == 201
        r = c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu"]})
        assert r.status_code == 409 and "sites cannot change" in r.json()["detail"]
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "us", "local"]}).status_code == 200


def test_local_takes_events_and_a_federation_without_it_refuses_them(world, loaded):
    name, events = loaded
    home = world["home"]
    with home.client() as c:
        r = c.post(f"/v1/streams/{name}/events", json=[{"ts": T0 + 10, "key": "x"}])
        assert r.status_code == 409 and "post its events to a site" in r.json()["detail"]
        mixed = "mixed"
        _declare_everywhere(world, mixed)
        assert c.put(f"/v1/streams/{mixed}", json={**SETTINGS, "sites": ["local", "eu"]}).status_code == 201
    eu_events = _events(21, 500)
    world["sites"]["eu"].publish(mixed, _requests(eu_events), version=1)
    local_events = _events(22, 300)
    Publisher(world["home_redis"].url).publish_summary(
        mixed, run(CONFIG, _requests(local_events), [0], [2], 1).summary, version=1, events=len(local_events))
    with home.client("read") as c:
        deadline = time.monotonic() + 10  # until home holds the versions just published
        while (r := c.get(f"/v1/streams/{mixed}/count", params={"window": 3600}).json())["as_of"]["events"] != 800:
            assert time.monotonic() < deadline, r
            time.sleep(0.1)
        union = eu_events + local_events
        assert _holds(r["bound"], len(_window(union, r["at"], 3600))), r
        assert set(r["as_of"]["sites"]) == {"local", "eu"} and r["as_of"]["events"] == len(union)


def test_a_killed_site_is_named_and_only_the_lower_bound_stays_until_it_is_back(world, loaded):
    name, events = loaded
    eu = world["sites"]["eu"]
    with world["home"].client("read") as c:
        complete = c.get(f"/v1/streams/{name}/count", params={"window": 3600}).json()
        assert "incomplete" not in complete
        eu.kill()
        try:
            deadline = time.monotonic() + 10
            while "incomplete" not in (r := c.get(f"/v1/streams/{name}/count", params={"window": 3600}).json()):
                assert time.monotonic() < deadline, r
                time.sleep(0.1)
            assert r["incomplete"] == ["eu"] and "unreachable" in r["incomplete_sites"]["eu"]
            truth = len(_window(events, r["at"], 3600))
            assert r["bound"]["upper"] is None and r["bound"]["confidence"] == 0.0
            assert r["bound"]["lower"] <= truth and r["as_of"]["sites"]["eu"]["error"]
            q = c.get(f"/v1/streams/{name}/quantiles", params={"q": "0.5"}).json()
            assert q["items"][0]["bound"]["lower"] is None and q["items"][0]["bound"]["upper"] is None
            hh = c.get(f"/v1/streams/{name}/heavy-hitters", params={"phi": 0.1}).json()
            assert hh["complete"] is False and hh["unlisted_max"] is None
            status = c.get(f"/v1/streams/{name}").json()["status"]
            assert status["state"] == "incomplete" and "eu" in status["incomplete_sites"]
            # Through the Prometheus API the side that no longer holds has no sample (never a 5xx).
            metric = f'tidemark_count{{stream="{name}", window="1h"}}'
            r = c.get("/api/v1/query_range", params={"query": metric, "start": r["at"] - 60, "end": r["at"],
                                                     "step": 30})
            assert r.status_code == 200, r.text
            bounds = {s["metric"]["bound"] for s in r.json()["data"]["result"]}
            assert bounds == {"estimate", "lower"}
        finally:
            eu.start().wait()  # the same Redis: its published summary is still there
        deadline = time.monotonic() + 15
        while "incomplete" in (r := c.get(f"/v1/streams/{name}/count", params={"window": 3600}).json()):
            assert time.monotonic() < deadline, r
            time.sleep(0.1)
        assert r["bound"]["confidence"] == 1.0 and r["bound"]["upper"] is not None


def test_a_stopped_site_goes_stale_then_comes_back(world, loaded):
    name, _ = loaded
    us = world["sites"]["us"]
    with world["home"].client("read") as c:
        c.get(f"/v1/streams/{name}/count")
        us.proc.send_signal(signal.SIGSTOP)  # answers nothing, refuses nothing: a hung site
        try:
            deadline = time.monotonic() + 10
            while "incomplete" not in (r := c.get(f"/v1/streams/{name}/count").json()):
                assert time.monotonic() < deadline, r
                time.sleep(0.1)
            assert r["incomplete"] == ["us"] and r["incomplete_sites"]["us"].startswith("stale")
            assert r["as_of"]["sites"]["us"]["age"] > 2.5 and r["bound"]["upper"] is None
        finally:
            us.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 15
        while "incomplete" in c.get(f"/v1/streams/{name}/count").json():
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_prometheus_and_alerts_read_a_federated_stream(world, loaded):
    name, events = loaded
    with world["home"].client("read") as c:
        at = max(e["ts"] for e in events)
        r = c.get("/api/v1/query", params={"query": f'tidemark_count{{stream="{name}", window="1h"}}', "time": at})
        assert r.status_code == 200, r.text
        series = {s["metric"]["bound"]: float(s["value"][1]) for s in r.json()["data"]["result"]}
        assert series["lower"] <= len(events) <= series["upper"]
    with world["home"].client() as c:
        r = c.post("/v1/alerts", json={"stream": name, "query": "count", "params": {"window": "1h"}, "op": ">",
                                       "threshold": 1, "webhook_url": "http://127.0.0.1:9/hook",
                                       "secret": "s" * 16, "mode": "certain"})
        assert r.status_code == 201, r.text
        rule = r.json()["id"]
        deadline = time.monotonic() + 15  # the rule fires (its lower bound is past 1): a delivery is tried
        while not (name in world["home"].app.state.store.federation.also_watch()
                   and c.get(f"/v1/alerts/{rule}/deliveries").json()):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert c.delete(f"/v1/alerts/{rule}").status_code == 204


def test_deleting_a_federated_stream_leaves_the_sites_streams(world):
    name = "team-b.gone"
    _declare_everywhere(world, name)
    with world["home"].client() as c:
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "us"]}).status_code == 201
        assert c.delete(f"/v1/streams/{name}").status_code == 204
        assert c.get(f"/v1/streams/{name}").status_code == 404
        # declared again afresh, as a plain stream: no federation left behind
        assert c.put(f"/v1/streams/{name}", json=SETTINGS).status_code == 201
        assert "sites" not in c.get(f"/v1/streams/{name}").json()
    for s in world["sites"].values():
        with s.client("read") as c:
            assert c.get(f"/v1/streams/{name}").status_code == 200


def test_stream_patterns_apply_to_a_federated_streams_name_here(world, loaded):
    name, _ = loaded
    narrow = {"Authorization": f"Bearer {RESTRICTED['key']}"}
    with httpx.Client(base_url=world["home"].url, headers=narrow, timeout=30) as c:
        assert c.get(f"/v1/streams/{name}/count").status_code == 404  # "web" is not team-b's
        assert name not in [s["name"] for s in c.get("/v1/streams").json()["streams"]]


def test_a_site_that_changes_after_declaration_is_named_never_merged(world):
    name = "team-b.changed"
    _declare_everywhere(world, name)
    eu, us = world["sites"]["eu"], world["sites"]["us"]
    eu.publish(name, _requests(_events(41, 300)), version=1)
    us.publish(name, _requests(_events(42, 200)), version=1)
    with world["home"].client() as c:
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["eu", "us"]}).status_code == 201
        assert c.get(f"/v1/streams/{name}/count").json()["as_of"]["events"] == 500
    with us.client() as c:  # us declares the name afresh, with other settings
        assert c.delete(f"/v1/streams/{name}").status_code == 204
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "epsilon": 0.1}).status_code == 201
    with world["home"].client("read") as c:
        deadline = time.monotonic() + 10
        while "incomplete" not in (r := c.get(f"/v1/streams/{name}/count").json()):
            assert time.monotonic() < deadline, r
            time.sleep(0.1)
        assert r["incomplete"] == ["us"] and "epsilon 0.05 here, 0.1 there" in r["incomplete_sites"]["us"]
        assert r["as_of"]["events"] == 300 and r["bound"]["lower"] == 300 and r["bound"]["upper"] is None


def test_a_sites_new_version_is_announced_to_live_clients(world):
    name = "team-b.live"
    _declare_everywhere(world, name)
    ap = world["sites"]["ap"]
    ap.publish(name, _requests(_events(51, 100)), version=1)
    with world["home"].client() as c:
        assert c.put(f"/v1/streams/{name}", json={**SETTINGS, "sites": ["ap"]}).status_code == 201
        assert c.get(f"/v1/streams/{name}/count").json()["as_of"]["events"] == 100  # read: pulled from now on
    notes = []

    def listen():
        with world["home"].client("read", timeout=15) as c, c.stream("GET", "/v1/live") as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    note = json.loads(line[6:])
                    if note.get("stream") == name:
                        notes.append(note)
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    time.sleep(0.5)  # subscribed
    ap.publish(name, _requests(_events(51, 150)), version=2)
    listener.join(15)
    assert notes and notes[0]["site"] == "ap", notes
