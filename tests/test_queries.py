"""Every query kind of the contract through the live pipeline, against the exact truth."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import post_events

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _events(seed, n=8000, span=1800.0):
    rng = np.random.default_rng(seed)
    ts = T0 + rng.uniform(0, span, n)
    ts = ts[np.argsort(ts + rng.pareto(1.2, n) * 20)]  # late arrivals
    keys = [f"user-{k}" if k % 7 else f"ключ-{k}" for k in rng.zipf(1.3, n) % 400]
    values = np.round(rng.lognormal(4, 1, n).clip(0, 1000), 2)
    return [{"ts": float(t), "key": k, "value": float(v)} for t, k, v in zip(ts, keys, values)]


def _load(pipeline, c, name, events, **settings):
    body = {"max_window": "1h", "epsilon": 0.05, "delta": 0.05, "value_min": 0, "value_max": 1000, **settings}
    assert c.put(f"/v1/streams/{name}", json=body).status_code == 201
    for i in range(0, len(events), 2000):
        assert post_events(c, name, json=events[i : i + 2000]).status_code == 202
    return pipeline.wait_events(name, len(events))


def _in_window(events, at, window):
    return [e for e in events if at - window <= e["ts"] <= at]


@pytest.fixture(scope="module")
def loaded(pipeline):
    events = _events(1)
    with pipeline.client() as c:
        _load(pipeline, c, "keyed-a", events)
        _load(pipeline, c, "keyed-b", _events(2))
    return events


def test_frequency_and_self_join(pipeline, loaded):
    with pipeline.client() as c:
        for window in (60, 600, 3600):
            r = c.get("/v1/streams/keyed-a/self-join", params={"window": window}).json()
            sel = _in_window(loaded, r["at"], window)
            counts = {}
            for e in sel:
                counts[e["key"]] = counts.get(e["key"], 0) + 1
            assert r["bound"]["lower"] <= sum(v * v for v in counts.values()) <= r["bound"]["upper"]
            # two randomized queries (ticks inside, ticks touching): the union bound
            assert r["bound"]["kind"] == "additive" and r["bound"]["confidence"] >= 1 - 2 * 0.05 - 1e-9
            for key in ("user-1", "user-2", "ключ-7", "never-seen"):
                f = c.get("/v1/streams/keyed-a/frequency", params={"window": window, "key": key}).json()
                assert f["bound"]["lower"] <= counts.get(key, 0) <= f["bound"]["upper"], (key, f)


def test_heavy_hitters_list_every_heavy_key_with_its_string(pipeline, loaded):
    with pipeline.client() as c:
        r = c.get("/v1/streams/keyed-a/heavy-hitters", params={"phi": 0.05, "window": 1800}).json()
        sel = _in_window(loaded, r["at"], 1800)
        counts = {}
        for e in sel:
            counts[e["key"]] = counts.get(e["key"], 0) + 1
        listed = {item["key"]: item for item in r["items"]}
        assert r["complete"]
        for key, f in counts.items():
            if f >= 0.05 * len(sel):
                assert key in listed
        for key, item in listed.items():
            assert item["bound"]["lower"] <= counts.get(key, 0) <= item["bound"]["upper"]
            # Listed only if it may be heavy: its upper bound reaches φ·N (N known to ±1 pane).
            assert item["bound"]["upper"] >= 0.05 * len(sel) * 0.9


def test_quantiles_bracket_the_true_quantiles(pipeline, loaded):
    qs = [0.01, 0.25, 0.5, 0.9, 0.99]
    with pipeline.client() as c:
        r = c.get("/v1/streams/keyed-a/quantiles", params={"q": ",".join(map(str, qs)), "window": 900}).json()
        values = np.sort([e["value"] for e in _in_window(loaded, r["at"], 900)])
        for item, q in zip(r["items"], qs):
            true_q = values[max(int(np.ceil(q * values.size)) - 1, 0)]
            assert item["q"] == q
            assert item["bound"]["lower"] <= true_q <= item["bound"]["upper"], item


def test_inner_product_of_two_streams(pipeline, loaded):
    other = _events(2)
    with pipeline.client() as c:
        r = c.get("/v1/inner-product", params={"streams": "keyed-a,keyed-b", "window": 1200}).json()
        assert r["at"] == max(e["ts"] for e in loaded + other)
        fa, fb = {}, {}
        for e in _in_window(loaded, r["at"], 1200):
            fa[e["key"]] = fa.get(e["key"], 0) + 1
        for e in _in_window(other, r["at"], 1200):
            fb[e["key"]] = fb.get(e["key"], 0) + 1
        truth = sum(v * fb.get(k, 0) for k, v in fa.items())
        assert r["bound"]["lower"] <= truth <= r["bound"]["upper"]
        bad = c.get("/v1/inner-product", params={"streams": "keyed-a"})
        assert bad.status_code == 422 and "2 stream names" in bad.json()["detail"]


@pytest.mark.parametrize(
    "query, params, detail",
    [
        ("frequency", {}, "needs key"),
        ("heavy-hitters", {"phi": "2"}, "phi in (0, 1)"),
        ("quantiles", {"q": "0.5,1.5"}, "each q must be in [0, 1]"),
        ("quantiles", {"q": "half"}, "not a comma-separated list"),
    ],
)
def test_bad_parameters_are_422(pipeline, loaded, query, params, detail):
    with pipeline.client() as c:
        r = c.get(f"/v1/streams/keyed-a/{query}", params=params)
        assert r.status_code == 422 and detail in r.json()["detail"]


def test_quantiles_need_no_declared_value_range(api, stream_name):
    with api.client() as c:
        c.put(f"/v1/streams/{stream_name}", json={"max_window": "1h"})
        r = c.get(f"/v1/streams/{stream_name}/quantiles", params={"q": "0.5"})
        assert r.status_code == 200 and r.json()["items"] == [{"q": 0.5, "estimate": None, "bound": None}]


def test_distinct_keys_in_windows(pipeline, loaded):
    with pipeline.client() as c:
        for window in (30, 600, 3600):
            r = c.get("/v1/streams/keyed-a/distinct", params={"window": window}).json()
            truth = len({e["key"] for e in _in_window(loaded, r["at"], window)})
            assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], (window, r, truth)
            assert r["bound"]["method"] == "randomized-wave"


DECAYS = {"none": lambda a: np.ones_like(a), "polynomial": lambda a: (a + 1.0) ** -1.5,
          "exponential": lambda a: 2.0 ** (-a / 120.0), "sliding": lambda a: (a <= 600) * 1.0}


def test_decayed_sums_hold_their_bounds_and_refuse_the_impossible(pipeline, stream_name):
    rng = np.random.default_rng(5)
    n = 6000
    ts = T0 + rng.uniform(0, 1800, n)
    ts = ts[np.argsort(ts + rng.pareto(1.2, n) * 20)]
    values, weights = rng.uniform(0, 1000, n).round(2), rng.exponential(2.0, n).round(3)
    events = [{"ts": float(t), "value": float(v), "weight": float(w)} for t, v, w in zip(ts, values, weights)]
    with pipeline.client() as c:
        _load(pipeline, c, stream_name, events, decays=[{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}])
        cases = [({"decay": "none"}, "relative"), ({"decay": "polynomial", "alpha": "1.5"}, "relative"),
                 ({"decay": "polynomial", "alpha": "1.5", "guarantee": "additive"}, "additive"),
                 ({"decay": "exponential", "half_life": "120"}, "additive"),
                 ({"decay": "sliding", "window": "600"}, "additive")]
        for params, kind in cases:
            for tau in (0, 250, 900, 1000):
                r = c.get(f"/v1/streams/{stream_name}/decayed-sum", params={**params, "tau": tau}).json()
                ages = r["at"] - ts
                truth = float((weights * DECAYS[params["decay"]](ages) * (values >= tau)).sum())
                assert r["bound"]["kind"] == kind, r
                assert r["bound"]["lower"] - 1e-9 <= truth <= r["bound"]["upper"] + 1e-9, (params, tau, r, truth)
        for params, theorem in (({"decay": "sliding", "window": "600"}, "Theorem 4.1"),
                                ({"decay": "exponential", "half_life": "60"}, "Theorem 4.2")):
            r = c.get(f"/v1/streams/{stream_name}/decayed-sum", params={**params, "guarantee": "relative"})
            assert r.status_code == 422 and theorem in r.json()["detail"] and "additive" in r.json()["detail"]
        r = c.get(f"/v1/streams/{stream_name}/decayed-sum",
                  params={"decay": "polynomial", "alpha": "2", "guarantee": "relative"})
        assert r.status_code == 422 and "declared" in r.json()["detail"]


def test_derived_decayed_aggregates(pipeline, stream_name):
    """Range sums bracket true ages; ratio aggregates take ages in whole ticks (1 s here)."""
    rng = np.random.default_rng(6)
    n = 5000
    ts = T0 + rng.uniform(0, 1200, n)
    values = rng.choice([10.0, 20.0, 500.0, 900.0], n, p=[0.5, 0.2, 0.2, 0.1])
    weights = rng.exponential(1.0, n).round(3)
    events = [{"ts": float(t), "value": float(v), "weight": float(w)} for t, v, w in zip(ts, values, weights)]
    with pipeline.client() as c:
        _load(pipeline, c, stream_name, events, decays=[{"kind": "none"}])
        base = f"/v1/streams/{stream_name}"
        for decay in ({"decay": "none"}, {"decay": "exponential", "half_life": "300"}):
            f = DECAYS[decay["decay"]] if decay["decay"] == "none" else (lambda a: 2.0 ** (-a / 300.0))
            r = c.get(f"{base}/decayed-range-sum", params={**decay, "lo": 15, "hi": 600}).json()
            truth = float((weights * f(r["at"] - ts) * ((values >= 15) & (values <= 600))).sum())
            assert r["bound"]["lower"] <= truth <= r["bound"]["upper"], (decay, r, truth)
            at_tick = np.floor(r["at"])
            tick_w = weights * f(at_tick - np.floor(ts))
            share = float(tick_w[values == 500.0].sum() / tick_w.sum())
            fr = c.get(f"{base}/decayed-frequency", params={**decay, "value": 500}).json()
            assert fr["bound"]["lower"] - 1e-9 <= share <= fr["bound"]["upper"] + 1e-9, (decay, fr, share)
            hh = c.get(f"{base}/decayed-heavy-hitters", params={**decay, "phi": 0.3}).json()
            # Half the mass sits at 10; the relative sketch reports values as its grid's cells.
            cell = 1000 / 255
            assert any(item["value"] <= 10.0 < item["value"] + cell for item in hh["items"]), hh
            q = c.get(f"{base}/decayed-quantile", params={**decay, "phi": 0.5}).json()
            assert q["bound"]["lower"] <= q["estimate"] <= q["bound"]["upper"]
        r = c.get(f"{base}/decayed-range-sum", params={"decay": "none", "lo": 5, "hi": 1})
        assert r.status_code == 422 and "lo <= hi" in r.json()["detail"]
