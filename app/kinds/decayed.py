"""The decayed family's query kinds (parts in ``tidemark/families/decayed.py``):
``decayed-sum``: Σ weight · f(at − ts) over events with value ≥ τ and ts ≤ at (Cormode,
Tirthapura and Xu 2009), and its derived aggregates (§1.1): ``decayed-range-sum``
(``lo``, ``hi``), ``decayed-frequency`` (``value``), ``decayed-heavy-hitters`` (``phi``).
Each takes ``decay`` (none, sliding, exponential, polynomial) with its parameter,
``guarantee`` and ``tau``. A rule may watch the decayed sum; the Prometheus API serves all
four as series (the heavy hitters one per ``value``).

* ``guarantee=additive`` — the multi-level sample sketch (§3.1): any non-increasing decay
  chosen now, |Ŝ − S| ≤ ε·S₀ᶠ with probability 1 − δ.
* ``guarantee=relative`` — the weight-based merging histogram of a decay declared in the
  stream's ``decays`` (§3.2): (1 − ε)·S ≤ Ŝ ≤ (1 + ε)·S. Sliding windows, exponential and
  other finite or super-exponential decays have no small relative summary (Theorems
  4.1–4.3): asking for one is a 422 that says why and offers the additive answer.
* No ``guarantee``: relative when a declared sketch fits the decay, else additive.

Time (:mod:`tidemark.ticks`): sketches keep ticks of the stream's resolution. Events after
``at`` never count: the lower reading counts the ticks wholly at or before ``at``, the
upper those that may hold such an event. ``none`` and ``sliding`` are windows, read as
tick ranges (no age arithmetic at all). A continuous decay is read with every event as
old as it can be (lower) and as young as it can be (upper): ``age_decays``. A relative
polynomial sketch keeps buckets of ``(a + 1)^-α`` in ticks and is read with the declared
``(age + 1)^-α`` of seconds; for a resolution ≤ 1 s that decay falls no faster, so the
bucket ratio stays within 1 + ε (Theorem 3.3); above 1 s the bracket still holds.

Values: the relative sketch keeps value cells. A cell counts in the lower reading when all
of its values satisfy the predicate, in the upper when some may (``_cells``).

Tested by: tests/app/test_answers_decayed.py (against an exact oracle),
tests/app/test_answers_windows.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from app.kinds.kind import QueryError, QueryKind, ServedFamily, bracket
from sketches.base import Estimate
from tidemark.families import decayed as core
from tidemark.families.decayed import relative_decays
from tidemark.streams import parse_duration
from tidemark.ticks import EMPTY_RANGE, ROUNDING, age_decays, age_decays_rows

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
    return {"spec": spec, "tau": tau, "part": part if guarantee != "additive" else None,
            "chosen": guarantee is None}


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
    return (f"a relative decayed sum needs this decay declared in the stream's decays "
            f"(declared: {[d.model_dump(exclude_none=True) for d in config.decays] or 'none'}); "
            + offer)


def _tick_decay(spec: dict, res: float):
    """The decay as a function of ages in whole ticks (the derived ratio kinds)."""
    from sketches.decayed import parse_decay
    from sketches.decayed.decay import CallableDecay

    decay_kind = spec["kind"]
    if decay_kind == "none":
        return parse_decay({"kind": "none"})
    if decay_kind == "exponential":
        return parse_decay({"kind": "exponential", "half_life": spec["half_life"] / res})
    if decay_kind == "polynomial" and res == 1.0:
        return parse_decay({"kind": "polynomial", "alpha": spec["alpha"]})
    if decay_kind == "polynomial":
        alpha = spec["alpha"]
        return CallableDecay(lambda a: (np.maximum(a, 0) * res + 1.0) ** -alpha)
    # age·res <= window, exactly: the whole-tick ages up to floor(window / res) (no float product).
    last = math.floor(Fraction(spec["window"]) / Fraction(res))
    return CallableDecay(lambda a: (np.maximum(a, 0) <= last).astype(np.float64))


def _seconds_decay(spec: dict):
    """A continuous decay as a function of ages in seconds (None for windows)."""
    if spec["kind"] == "exponential":
        h = spec["half_life"]
        return lambda x: np.exp2(-np.asarray(x, np.float64) / h)
    if spec["kind"] == "polynomial":
        alpha = spec["alpha"]
        return lambda x: (np.asarray(x, np.float64) + 1.0) ** -alpha
    return None


def _readings(spec: dict, window) -> tuple[tuple, tuple]:
    """(lower, upper) readings ``(decay in ticks or None, at tick, until tick)``; ``None``
    for a reading that counts nothing. ``decay`` None means the relative sketch's own."""
    from sketches.decayed import parse_decay
    from sketches.decayed.decay import CallableDecay

    decay_kind = spec["kind"]
    if decay_kind in ("none", "sliding"):
        if decay_kind == "none":
            ranges = [(0, t) for t in window.last]
        else:
            ranges = list(window.covering(spec["window"]))

        def reading(r):
            if r == EMPTY_RANGE or r[1] < 0:
                return None
            lo, hi = max(r[0], 0), r[1]
            d = (parse_decay({"kind": "none"}) if decay_kind == "none"
                 else parse_decay({"kind": "sliding", "window": hi - lo}))
            return d, hi, hi

        return reading(ranges[0]), reading(ranges[1])
    older, younger = age_decays(_seconds_decay(spec), window, window.resolution)
    low_until, high_until = window.last
    low = (CallableDecay(older), window.now, low_until) if low_until >= 0 else None
    high = (CallableDecay(younger), window.now, high_until) if high_until >= 0 else None
    return low, high


def _cells(sk, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(cells all of whose values are in [lo, hi], cells that may hold one). A cell holds
    the floats the sketch's quantizer maps to it, a monotone map, so its values are all
    ≥ lo iff its left edge is, and all ≤ hi iff the float after hi lies in a later cell."""
    idx = np.arange(sk.cells)
    if hi < sk.value_min or lo > sk.value_max:
        none = np.zeros(sk.cells, bool)
        return none, none
    up = (idx >= sk.cell_of(lo)) & (idx <= sk.cell_of(hi))
    after = math.nextafter(hi, math.inf)
    below_hi = idx < sk.cell_of(after) if after <= sk.value_max else np.ones(sk.cells, bool)
    return (sk.edges >= lo) & below_hi, up


def _zero(guarantee: str, config) -> Estimate:
    return Estimate(0.0, 0.0, 0.0, guarantee, config.epsilon, 1.0,
                    "wbmh-value-grid" if guarantee == "relative" else "multilevel-sample")


def _decayed(summary, config, window, params, lo: float, hi: float) -> Estimate:
    """Σ w·f(at − ts) over ts ≤ at and value in [lo, hi], bracketed over the time grain
    (and, for the relative sketch, the value cells)."""
    spec = params["spec"]
    low_read, high_read = _readings(spec, window)
    if params["part"] and params.get("chosen") and spec["kind"] == "none" \
            and window.last[0] < summary[params["part"]].clock_tick:
        # The undecayed relative sketch is one bucket up to its clock: as of an earlier
        # ``at`` its lower bound is 0. Unasked, answer from the sample instead (a choice
        # made before reading either sketch's values).
        params = {**params, "part": None}
    guarantee = "relative" if params["part"] else "additive"
    if params["part"]:
        sk = summary[params["part"]]
        inside, touching = _cells(sk, lo, hi)
        own = spec["kind"] == "none"  # the declared decay; polynomial is read in seconds

        def read(r, mask):
            if r is None:
                return _zero(guarantee, config)
            return sk.select(mask, r[1], None if own else r[0], r[2])

        low, high = read(low_read, inside), read(high_read, touching)
    else:
        sk = summary["decayed"]

        def read(r):
            if r is None:
                return _zero(guarantee, config)
            return sk.range_sum(r[0], lo, hi, r[1], r[2])

        low, high = read(low_read), read(high_read)
    return _bracketed(low, high, spec)


def _bracketed(low: Estimate, high: Estimate, spec: dict) -> Estimate:
    result = bracket(low, high)
    if spec["kind"] in ("exponential", "polynomial"):  # f evaluated at float ages
        lower, upper = result.lower * (1 - ROUNDING), result.upper * (1 + ROUNDING)
        result = Estimate(min(max(result.estimate, lower), upper), lower, upper, result.guarantee,
                          result.epsilon, result.confidence, result.method)
    return result


def _decayed_many(summary, config, windows: list, params, lo: float, hi: float) -> list | None:
    """``_decayed`` of every window, for the additive sample and a continuous decay: each
    reading (``_readings``: the older and the younger ages of the window's instant) made
    for all windows in one pass over the sample (``range_sums``), with the same float
    operations as one window's. None for the other cases (each window is read alone)."""
    spec = params["spec"]
    if params["part"] or spec["kind"] not in ("exponential", "polynomial") or not windows:
        return None
    sk = summary["decayed"]
    older, younger = age_decays_rows(_seconds_decay(spec), np.array([w.offset for w in windows]),
                                     windows[0].resolution)
    nows = [w.now for w in windows]
    lows = sk.range_sums(older, lo, hi, nows, [w.last[0] for w in windows])
    highs = sk.range_sums(younger, lo, hi, nows, [w.last[1] for w in windows])
    if lows is None or highs is None:
        return None
    out = []
    for w, low, high in zip(windows, lows, highs):
        low = _zero("additive", config) if w.last[0] < 0 else low
        high = _zero("additive", config) if w.last[1] < 0 else high
        failed = next((r for r in (low, high) if isinstance(r, Exception)), None)
        out.append(failed if failed is not None else _bracketed(low, high, spec))
    return out


def _run(summary, config, window, params) -> Estimate:
    return _decayed(summary, config, window, params, params["tau"], math.inf)


def _run_many(summary, config, windows, params) -> list | None:
    return _decayed_many(summary, config, windows, params, params["tau"], math.inf)


def _empty(config, params) -> Estimate:
    guarantee = "relative" if params["part"] else "additive"
    return Estimate(0.0, 0.0, 0.0, guarantee, config.epsilon, 1.0,
                    "wbmh-value-grid" if params["part"] else "multilevel-sample")


DECAYED_SUM = QueryKind("decayed-sum", _run, _empty, _check, alert=True, run_many=_run_many, monotone=True,
                        decayed=True)


# -- derived aggregates (§1.1) -----------------------------------------------------------
# Ratios of decayed sums are not monotone in the ages, so these take ages in whole ticks of
# the stream's resolution: an event's age is now − its tick (``at = now·res + offset``).
# They count the ticks wholly at or before ``at`` (every event when ``at >= clock``), so
# no event after ``at`` counts. Their bounds are the sketches' own for that quantity (see
# sketches/decayed/derived.py).

def _derived_sketch(summary, config, params):
    """(sketch, decay in ticks): a relative sketch knows its own decay (None) when its
    ticks are seconds; at another resolution it is read with the declared decay of
    seconds (see the module docstring)."""
    if params["part"]:
        own = params["spec"]["kind"] == "none" or config.resolution == 1.0
        return summary[params["part"]], None if own else _tick_decay(params["spec"], config.resolution)
    return summary["decayed"], _tick_decay(params["spec"], config.resolution)


def _at_tick(window, config) -> int:
    return window.now


def _until(window) -> int:
    return window.last[0]


def _check_range(config, params):
    checked = _check(config, params)
    checked["lo"], checked["hi"] = _number(params, "lo"), _number(params, "hi")
    if checked["hi"] < checked["lo"]:
        raise QueryError("decayed-range-sum needs lo <= hi")
    return checked


def _range_sum(summary, config, window, params):
    """Monotone in the ages like ``decayed-sum``: bracketed over the time grain the same way."""
    return _decayed(summary, config, window, params, params["lo"], params["hi"])


def _range_sum_many(summary, config, windows, params):
    return _decayed_many(summary, config, windows, params, params["lo"], params["hi"])


def _check_value(config, params):
    checked = _check(config, params)
    checked["value"] = _number(params, "value")
    return checked


def _frequency(summary, config, window, params):
    from sketches.decayed import relative_frequency

    sk, decay = _derived_sketch(summary, config, params)
    return relative_frequency(sk, params["value"], window.now, decay, _until(window))


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
    found = heavy_hitters(sk, params["phi"], window.now, decay, _until(window))
    return [{"value": v, "estimate": e.estimate, "bound": e.bound()} for v, e in found]


def _empty_ratio(config, params):
    return Estimate(0.0, 0.0, 1.0, "additive", 1.0, 1.0, "no-events")


FAMILY = ServedFamily(core.FAMILY, (
    DECAYED_SUM,
    QueryKind("decayed-range-sum", _range_sum, _empty, _check_range, run_many=_range_sum_many, monotone=True,
              decayed=True),
    QueryKind("decayed-frequency", _frequency, _empty_ratio, _check_value, decayed=True),  # a ratio
    QueryKind("decayed-heavy-hitters", _heavy, lambda c, p: [], _check_phi, decayed=True),
))
# decayed-quantile is answered by the windowed quantile sketch: the values family (app/kinds/values.py).
