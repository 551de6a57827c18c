"""``decayed-sum``: Σ weight · f(at − ts) over events with value ≥ τ (Cormode, Tirthapura
and Xu 2009).

* ``guarantee=additive`` — the multi-level sample sketch (§3.1): any non-increasing decay
  chosen now, |Ŝ − S| ≤ ε·S₀ᶠ with probability 1 − δ.
* ``guarantee=relative`` — the weight-based merging histogram of a decay declared in the
  stream's ``decays`` (§3.2): (1 − ε)·S ≤ Ŝ ≤ (1 + ε)·S. Sliding windows, exponential and
  other finite or super-exponential decays have no small relative summary (Theorems
  4.1–4.3): asking for one is a 422 that says why and offers the additive answer.
* No ``guarantee``: relative when a declared sketch fits the decay, else additive.

Ages are seconds; sketches keep ticks of the stream's resolution. An event in tick k is
between k·res and (k+1)·res, so its age is known to within one tick either way; for a
non-increasing f the lower bound reads the sketch one tick later and the upper bound one
tick earlier, which brackets every true age. The relative sketch keeps values on a grid
(left cell edges): the cells at or above τ give its lower bound, and the cell holding τ
and those above it the upper bound.
"""

from __future__ import annotations

import math

import numpy as np

from app.answers import QueryError, QueryKind, bracket, register
from sketches.base import Estimate, SketchError
from tidemark.streams import parse_duration
from tidemark.summary import relative_decays

DECAYS = ("none", "sliding", "exponential", "polynomial")
_PARAM = {"sliding": "window", "exponential": "half_life", "polynomial": "alpha"}


def _number(params: dict, name: str) -> float:
    try:
        x = float(params[name])
    except (KeyError, ValueError):
        raise QueryError(f"decayed-sum needs {name}=<number>") from None
    if not math.isfinite(x):
        raise QueryError(f"{name} must be finite")
    return x


def _check(config, params: dict) -> dict:
    if not config.has_values:
        raise QueryError("decayed-sum needs the stream's value_min and value_max declared")
    decay = params.get("decay", "none")
    if decay not in DECAYS:
        raise QueryError(f"decay must be one of {', '.join(DECAYS)}")
    spec: dict = {"kind": decay}
    if decay == "sliding":
        spec["window"] = _seconds(params.get("window"), "window")
    elif decay == "exponential":
        spec["half_life"] = _seconds(params.get("half_life"), "half_life")
    elif decay == "polynomial":
        alpha = _number(params, "alpha")
        if alpha <= 0:
            raise QueryError("alpha must be > 0")
        spec["alpha"] = alpha
    tau = _number(params, "tau") if params.get("tau") not in (None, "") else config.value_min
    guarantee = params.get("guarantee") or None
    if guarantee not in (None, "relative", "additive"):
        raise QueryError("guarantee must be 'relative' or 'additive'")
    part = _relative_part(config, spec)
    if guarantee == "relative" and part is None:
        raise QueryError(_refusal(config, spec))
    return {"spec": spec, "tau": tau, "part": part if guarantee != "additive" else None}


def _seconds(raw, name: str) -> float:
    if raw in (None, ""):
        raise QueryError(f"decayed-sum with this decay needs {name}=<seconds>")
    try:
        return parse_duration(raw, name)
    except ValueError as e:
        raise QueryError(str(e)) from None


def _relative_part(config, spec: dict) -> str | None:
    for name, decay in relative_decays(config).items():
        if decay["kind"] == spec["kind"] and decay.get("alpha") == spec.get("alpha"):
            return name
    return None


def _refusal(config, spec: dict) -> str:
    from sketches.decayed import parse_decay, relative_guarantee_refusal

    offer = "ask with guarantee=additive for |Ŝ − S| ≤ ε·S₀ᶠ (Theorem 3.2)"
    if spec["kind"] == "sliding":
        return ("no small summary gives a relative error for a sliding-window decayed sum: "
                "Theorem 4.1 (Cormode, Tirthapura and Xu 2009) needs space linear in the window; "
                + offer)
    if spec["kind"] == "exponential":
        message = relative_guarantee_refusal(parse_decay({"kind": "exponential", "half_life": 1.0}))
        return ("no small summary gives a relative error for exponential decay: Theorem 4.2 "
                "(Cormode, Tirthapura and Xu 2009) needs space linear in the value domain; "
                + offer + (f" ({message})" if message else ""))
    if spec["kind"] == "polynomial" and config.resolution != 1.0:
        return ("a relative polynomial decayed sum is kept only for streams with a 1 s "
                "resolution; " + offer)
    return (f"a relative decayed sum needs this decay declared in the stream's decays "
            f"(declared: {[d.model_dump(exclude_none=True) for d in config.decays] or 'none'}); "
            + offer)


def _tick_decay(spec: dict, res: float):
    """The decay as a function of ages in ticks."""
    from sketches.decayed import parse_decay
    from sketches.decayed.decay import CallableDecay

    kind = spec["kind"]
    if kind == "none":
        return parse_decay({"kind": "none"})
    if kind == "exponential":
        return parse_decay({"kind": "exponential", "half_life": spec["half_life"] / res})
    if kind == "polynomial" and res == 1.0:
        return parse_decay({"kind": "polynomial", "alpha": spec["alpha"]})
    if kind == "polynomial":
        alpha = spec["alpha"]
        return CallableDecay(lambda a: (np.maximum(a, 0) * res + 1.0) ** -alpha)
    window = spec["window"]
    return CallableDecay(lambda a: (np.maximum(a, 0) * res <= window).astype(np.float64))


def _call(fn):
    """Run a sketch query; its SketchError is the caller's mistake (a 422)."""
    try:
        return fn()
    except SketchError as e:
        raise QueryError(str(e)) from None


def _age_ticks(at: float, res: float) -> tuple[int, int]:
    """(older, younger): query times in ticks at which every event reads at least as old,
    and at most as old, as it truly is at ``at`` (an event is somewhere in its tick)."""
    exact_tick = math.isclose(at / res, round(at / res), rel_tol=0, abs_tol=1e-9)
    base = round(at / res) if exact_tick else math.floor(at / res)
    return (base, base - 1) if exact_tick else (base + 1, base - 1)


def _cell_edge(sk, value: float) -> float:
    """Left edge of the relative sketch's value cell holding ``value``."""
    return float(sk.edges[min(max(np.searchsorted(sk.edges, value, side="right") - 1, 0),
                              len(sk.edges) - 1)])


def _run(summary, config, window, params) -> Estimate:
    older, younger = _age_ticks(window.at, config.resolution)
    tau = params["tau"]
    if params["part"]:
        sk = summary[params["part"]]
        low = _call(lambda: sk.query(tau, older))
        high = _call(lambda: sk.query(min(_cell_edge(sk, tau), tau), younger))
    else:
        decay, sk = _tick_decay(params["spec"], config.resolution), summary["decayed"]
        low, high = _call(lambda: sk.query(decay, tau, older)), _call(lambda: sk.query(decay, tau, younger))
    return bracket(low, high)


def _empty(config, params) -> Estimate:
    kind = "relative" if params["part"] else "additive"
    return Estimate(0.0, 0.0, 0.0, kind, config.epsilon, 1.0,
                    "wbmh-value-grid" if params["part"] else "multilevel-sample")


register(QueryKind("decayed-sum", _run, _empty, _check))


# -- derived aggregates (§1.1) -----------------------------------------------------------
# Ratios of decayed sums are not monotone in the ages, so these take ages in whole ticks of
# the stream's resolution: an event's age is at_tick − its tick. Their bounds are the
# sketches' own for that quantity (see sketches/decayed/derived.py).

def _derived_sketch(summary, config, params):
    """(sketch, decay in ticks): a relative sketch knows its own decay (None)."""
    if params["part"]:
        return summary[params["part"]], None
    return summary["decayed"], _tick_decay(params["spec"], config.resolution)


def _at_tick(window, config) -> int:
    return math.floor(window.at / config.resolution)


def _check_range(config, params):
    checked = _check(config, params)
    checked["lo"], checked["hi"] = _number(params, "lo"), _number(params, "hi")
    if checked["hi"] < checked["lo"]:
        raise QueryError("decayed-range-sum needs lo <= hi")
    return checked


def _range_sum(summary, config, window, params):
    """Monotone in the ages like ``decayed-sum``: bracketed over the time grain the same way."""
    from sketches.decayed import range_sum

    older, younger = _age_ticks(window.at, config.resolution)
    lo, hi = params["lo"], params["hi"]
    if params["part"]:
        sk = summary[params["part"]]
        low = _call(lambda: sk.range_sum(lo, hi, older))
        high = _call(lambda: sk.range_sum(_cell_edge(sk, lo), hi, younger))
    else:
        decay, sk = _tick_decay(params["spec"], config.resolution), summary["decayed"]
        low = _call(lambda: range_sum(sk, lo, hi, older, decay))
        high = _call(lambda: range_sum(sk, lo, hi, younger, decay))
    return bracket(low, high)


def _check_value(config, params):
    checked = _check(config, params)
    checked["value"] = _number(params, "value")
    return checked


def _frequency(summary, config, window, params):
    from sketches.decayed import relative_frequency

    sk, decay = _derived_sketch(summary, config, params)
    return _call(lambda: relative_frequency(sk, params["value"], _at_tick(window, config), decay))


def _check_phi(config, params):
    checked = _check(config, params)
    phi = _number(params, "phi")
    if not 0 < phi < 1:
        raise QueryError("phi must be in (0, 1)")
    checked["phi"] = phi
    return checked


def _heavy(summary, config, window, params):
    from sketches.decayed import heavy_hitters

    sk, decay = _derived_sketch(summary, config, params)
    found = _call(lambda: heavy_hitters(sk, params["phi"], _at_tick(window, config), decay))
    return [{"value": v, "estimate": e.estimate, "bound": e.bound()} for v, e in found]


def _empty_ratio(config, params):
    return Estimate(0.0, 0.0, 1.0, "additive", 1.0, 1.0, "no-events")


register(QueryKind("decayed-range-sum", _range_sum, _empty, _check_range))
register(QueryKind("decayed-frequency", _frequency, _empty_ratio, _check_value))
register(QueryKind("decayed-heavy-hitters", _heavy, lambda c, p: [], _check_phi))
# decayed-quantile is answered by the windowed quantile sketch: app/kinds/values.py.
