"""Key queries from the ECM-sketch: frequency, heavy hitters, self-join, inner product."""

from __future__ import annotations

from app.answers import QueryError, QueryKind, Window, parse_window, register, shape
from sketches.base import Estimate, SketchError
from sketches.hashing import hash_keys
from tidemark.events import MAX_KEY_BYTES
from tidemark.streams import StreamConfig

METHOD = "ecm-sketch/pane-cells"


def _ranges(window: Window):
    return window.outer, window.inner


def _zero(config: StreamConfig) -> Estimate:
    return Estimate(0.0, 0.0, 0.0, "additive", config.epsilon, 1.0, METHOD)


def _guard(fn):
    def run(summary, config, window, params):
        if window.outer[0] > window.outer[1]:
            return _zero(config) if fn is not _heavy_hitters else []
        try:
            return fn(summary, config, window, params)
        except SketchError as e:
            raise QueryError(str(e)) from None
    return run


def _check_key(config: StreamConfig, params: dict) -> dict:
    key = params.get("key")
    if key is None or not 1 <= len(key.encode()) <= MAX_KEY_BYTES:
        raise QueryError(f"frequency needs key=… (1-{MAX_KEY_BYTES} UTF-8 bytes)")
    return {"key": key}


def _frequency(summary, config, window, params):
    (lo, hi), inner = _ranges(window)
    key_id = int(hash_keys([params["key"]])[0])
    return summary["keys"].frequency(key_id, lo, hi, inner)


def _check_phi(config: StreamConfig, params: dict) -> dict:
    try:
        phi = float(params.get("phi", ""))
    except ValueError:
        raise QueryError("heavy-hitters needs phi in (0, 1)") from None
    if not 0 < phi < 1:
        raise QueryError("heavy-hitters needs phi in (0, 1)")
    return {"phi": phi}


def _heavy_hitters(summary, config, window, params):
    """Every key with f ≥ φ·N is listed (while ``complete``), each with its ECM bounds; a
    listed key has an upper bound of at least φ·N_low, so one below φ·N is within them."""
    (lo, hi), inner = _ranges(window)
    ecm = summary["keys"]
    n_low, n_high = ecm.count(lo, hi, inner)
    names, unlisted_max = summary["key_candidates"].candidates(lo, hi, n_high)
    threshold = params["phi"] * n_low
    items = []
    if names:
        names = sorted(names)
        for name, key_id in zip(names, hash_keys(names)):
            e = ecm.frequency(int(key_id), lo, hi, inner)
            if e.upper >= threshold and e.upper > 0:
                items.append({"key": name, "estimate": e.estimate, "bound": e.bound()})
    items.sort(key=lambda item: -item["estimate"])
    return HeavyHitters(items, unlisted_max, unlisted_max < threshold or n_high == 0)


class HeavyHitters(list):
    """The list answer, with what it knows of keys it does not list."""

    def __init__(self, items, unlisted_max: float, complete: bool):
        super().__init__(items)
        self.extra = {"unlisted_max": unlisted_max, "complete": bool(complete)}


def _self_join(summary, config, window, params):
    (lo, hi), inner = _ranges(window)
    return summary["keys"].self_join(lo, hi, inner)


register(QueryKind("frequency", _guard(_frequency), lambda c, p: _zero(c), _check_key))
register(QueryKind("heavy-hitters", _guard(_heavy_hitters), lambda c, p: HeavyHitters([], 0.0, True), _check_phi))
register(QueryKind("self-join", _guard(_self_join), lambda c, p: _zero(c)))


def inner_product(a, b, config_a: StreamConfig, config_b: StreamConfig, window_a: Window, window_b: Window) -> Estimate:
    """Σ f_A·f_B over the window; both streams must have identically shaped sketches."""
    if (config_a.epsilon, config_a.delta, config_a.max_window, config_a.resolution) != (
            config_b.epsilon, config_b.delta, config_b.max_window, config_b.resolution):
        raise QueryError("inner-product needs two streams with the same epsilon, delta, "
                         "max_window and resolution (their sketches must have one shape)")
    if a is None or b is None or window_a.outer[0] > window_a.outer[1]:
        return _zero(config_a)
    (lo, hi), inner = _ranges(window_a)
    try:
        return a["keys"].inner_product(b["keys"], lo, hi, inner)
    except SketchError as e:
        raise QueryError(str(e)) from None



def inner_product_from_store(store, params: dict) -> dict:
    """``GET /v1/inner-product?streams=A,B``: ``at`` defaults to the later clock."""
    names = [n.strip() for n in str(params.get("streams", "")).split(",") if n.strip()]
    if len(names) != 2:
        raise QueryError("inner-product needs streams=A,B (two stream names)")
    (ca, sa), (cb, sb) = [(store.config(n), store.summary(n)) for n in names]
    (summary_a, status_a), (summary_b, status_b) = sa, sb
    clocks = [c for c in (status_a["clock"], status_b["clock"]) if c is not None]
    params = dict(params)
    if params.get("at") in (None, "") and clocks:
        params["at"] = repr(max(clocks))
    window_a = parse_window(params, ca, status_a["clock"])
    window_b = parse_window(params, cb, status_b["clock"])
    result = inner_product(summary_a, summary_b, ca, cb, window_a, window_b)
    return shape(result, streams=names, query="inner-product", window=window_a.seconds,
                 at=window_a.at, as_of={"sketch_versions": {names[0]: status_a["sketch_version"],
                                                            names[1]: status_b["sketch_version"]},
                                        "events": {names[0]: status_a["events"], names[1]: status_b["events"]}})
