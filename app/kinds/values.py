"""The values family's query kinds, from the windowed quantile sketch (Busch and
Tirthapura 2007, §2-§3, values in DDSketch's logarithmic buckets; part in
``tidemark/families/values.py``): ``quantiles`` (``q=``), ``distribution`` (the window's
CDF by value bucket, ``buckets=``) and ``decayed-quantile`` (``phi=``, ``decay=``). A rule
may watch quantiles; the Prometheus API serves quantiles (one series per ``q``) and the
decayed quantile as series, not the distribution (its rows are CDF buckets).

Every bracket states both of its errors: ``epsilon`` is the rank error (every rank the
bracket is read from is within ε·n_w of the truth for a window ending at the clock,
2ε of the events from the window's start to the clock otherwise, Theorem 1), ``rank_error``
the Δ actually read (events), ``value_accuracy`` the α of the logarithmic value buckets and
``relative_width`` the bracket's width over its estimate. No declared value range is needed.

The time grain: the ticks wholly inside the window give the lower ranks, the ticks touching
it the upper ranks, so a window whose edges cut ticks (or shorter than a tick) only widens
the bracket.

Tested by: tests/app/test_kinds.py (value kinds), tests/app/test_ranges.py and
tests/app/test_query_path.py (through app.kinds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.kinds.kind import QueryError, QueryKind, ServedFamily
from sketches.base import Estimate, SketchError
from sketches.windowed_quantiles import METHOD, relative_width
from tidemark.families import values as core
from tidemark.streams import parse_duration

_FLOAT_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class QuantileEstimate(Estimate):
    """An :class:`Estimate` whose ``bound`` also names the value error and the widths."""

    value_accuracy: float = 0.01
    rank_error: int = 0
    relative_width: float = 0.0


# -- quantiles ---------------------------------------------------------------------------------
def _check_q(config, params: dict) -> dict:
    raw = params.get("q", "0.5")
    try:
        qs = [float(x) for x in str(raw).split(",") if x.strip() != ""]
    except ValueError:
        raise QueryError(f"q {raw!r} is not a comma-separated list of numbers") from None
    if not qs or any(not (0 <= q <= 1) for q in qs) or len(qs) > 1000:
        raise QueryError("each q must be in [0, 1] (up to 1000 of them)")
    return {"q": qs}


def _bound(b, config) -> dict:
    return _bound_of(b.lower, b.upper, b.epsilon, b.value_accuracy, b.rank_error,
                     b.relative_width, b.to_clock)


def _bound_of(lower: float, upper: float, epsilon: float, value_accuracy: float, rank_error: int,
              width: float, to_clock: bool) -> dict:
    """A quantile bracket's ``bound`` from its numbers (``_bound``, ``QuantileColumns``)."""
    return {"lower": lower, "upper": upper, "kind": "additive", "epsilon": epsilon,
            "confidence": 1.0, "method": METHOD, "value_accuracy": value_accuracy,
            "rank_error": rank_error, "relative_width": _finite(width),
            "rank_basis": "window" if to_clock else "window start to clock"}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _item(q, b, config) -> dict:
    if b is None:  # no event in the window: no quantile
        return {"q": q, "estimate": None, "bound": None}
    return {"q": q, "estimate": b.estimate, "bound": _bound(b, config)}


def _ranges(window):
    inner = window.inner if window.inner[0] <= window.inner[1] else (1, 0)
    return window.outer, inner


def _quantiles(summary, config, window, params):
    if window.outer[0] > window.outer[1]:
        return [_item(q, None, config) for q in params["q"]]
    outer, inner = _ranges(window)
    brackets = summary["values"].quantiles(params["q"], *outer, inner)
    return [_item(q, b, config) for q, b in zip(params["q"], brackets)]


def _quantiles_many(summary, config, windows: list, params) -> list:
    """``_quantiles`` of each window (or the SketchError its read raises), made once per
    (outer, inner) pair of tick ranges: neighbouring instants of a range often read the
    same pair (old buckets are wide), and then share one list of items. The items are
    shared between the answers: read them, never change them (``app.answers`` copies an
    item before it marks it)."""
    made: dict = {}
    out = []
    for window in windows:
        key = (window.outer, window.inner) if window.outer[0] <= window.outer[1] else None
        got = made.get(key)
        if got is None:
            try:
                got = _quantiles(summary, config, window, params)
            except SketchError as e:
                got = e
            made[key] = got
        out.append(got)
    return out


@dataclass
class QuantileColumns:
    """``_quantiles`` of many windows as columns: ``point``, ``lower``, ``upper`` as
    (windows, q) float arrays, ``has[w]`` whether window w holds an event (else every item
    has no estimate), its ``rank_error``, ``epsilon`` and ``to_clock``; ``refused``: the
    SketchError of each window whose read is refused, by index."""

    qs: list[float]
    has: np.ndarray
    point: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    rank_error: np.ndarray
    epsilon: np.ndarray
    to_clock: np.ndarray
    value_accuracy: float
    refused: dict

    def bodies(self, ats: list[float], about: dict) -> list[dict]:
        """The answer object of each window (``app.answers.shape`` of ``_quantiles``' items,
        ``about`` its outer fields but ``at``): the same keys, in the same order, and the
        same numbers as ``_item`` and ``_bound`` write."""
        stream, query, window, as_of = about["stream"], about["query"], about["window"], about["as_of"]
        empty = [{"q": q, "estimate": None, "bound": None} for q in self.qs]
        out = []
        rows = zip(ats, self.has.tolist(), self.point.tolist(), self.lower.tolist(), self.upper.tolist(),
                   self.rank_error.tolist(), self.epsilon.tolist(), self.to_clock.tolist())
        for at, has, points, lowers, uppers, error, eps, to_clock in rows:
            items = [{"q": q, "estimate": p, "bound": _bound_of(lo, up, eps, self.value_accuracy, error,
                                                                relative_width(p, lo, up), to_clock)}
                     for q, p, lo, up in zip(self.qs, points, lowers, uppers)] if has else [dict(e) for e in empty]
            out.append({"items": items, "stream": stream, "query": query, "window": window, "at": at,
                        "as_of": as_of})
        return out


def _quantile_columns(summary, config, windows: list, params) -> QuantileColumns:
    """``_quantiles`` of every window, as columns: the rank tables of their distinct
    (outer, inner) pairs in one sweep, the brackets of all in one pass
    (``WindowedQuantiles.table_batch``, ``bracket_columns``)."""
    part, qs = summary["values"], params["q"]
    read = [_ranges(w) if w.outer[0] <= w.outer[1] else None for w in windows]
    pairs = list(dict.fromkeys(r for r in read if r is not None))
    batch, rows = part.table_batch(pairs)
    row_of = dict(zip(pairs, rows))
    live, point, lower, upper = part.bracket_columns(qs, batch)
    row = np.full(len(windows), -1, np.int64)
    refused = {}
    for j, r in enumerate(read):
        got = None if r is None else row_of[r]
        if isinstance(got, SketchError):
            refused[j] = got
        elif got is not None:
            row[j] = got
    take = np.maximum(row, 0)
    has = (row >= 0) & live[take] if len(batch) else np.zeros(len(windows), bool)
    pick = (lambda a: a[take]) if len(batch) else (lambda a: np.zeros((len(windows), *a.shape[1:]), a.dtype))
    return QuantileColumns(list(qs), has, pick(point), pick(lower), pick(upper), pick(batch.rank_error),
                           pick(batch.epsilon), pick(batch.to_clock), part.value_accuracy, refused)


QUANTILES = QueryKind("quantiles", _quantiles, lambda c, p: [_item(q, None, c) for q in p["q"]], _check_q,
                      alert=True, run_many=_quantiles_many, read_ahead=(("values", "rank-tables"),),
                      run_columns=_quantile_columns, columns_shown_by="quantiles")


# -- distribution ------------------------------------------------------------------------------
def _check_distribution(config, params: dict) -> dict:
    raw = params.get("buckets", "64")
    try:
        buckets = int(raw)
    except ValueError:
        raise QueryError(f"buckets {raw!r} is not an integer") from None
    if not 1 <= buckets <= 4096:
        raise QueryError("buckets must be between 1 and 4096")
    return {"buckets": buckets}


class _Listing(list):
    """A list answer with extra outer fields (``shape`` copies ``extra``)."""

    def __init__(self, items, **extra):
        super().__init__(items)
        self.extra = extra


def _distribution(summary, config, window, params):
    """The window's CDF: value buckets (merged to at most ``buckets`` rows, each a run of
    adjacent logarithmic buckets) with the bracket of the number of events at or below the
    row's upper edge, the bracket of their share of the window (each side from one
    consistent world, ``RankTable.shares``) and the estimated events in the row."""
    if window.outer[0] > window.outer[1]:
        return _Listing([], events={"lower": 0, "upper": 0})
    outer, inner = _ranges(window)
    table = summary["values"].rank_table(*outer, inner)
    share_lower, share_upper = table.shares()
    counts = np.diff(np.concatenate(([0], table.est)))
    rows = np.flatnonzero(counts != 0)
    groups = np.array_split(rows, min(params["buckets"], rows.size)) if rows.size else []
    items = []
    for g in groups:
        first, last = int(g[0]), int(g[-1])
        items.append({"lower_edge": float(table.lo_edge[first]), "upper_edge": float(table.hi_edge[last]),
                      "count": int(counts[first : last + 1].sum()),
                      "cdf_lower": int(table.cl[last]), "cdf_upper": int(table.cu[last]),
                      "share_lower": float(share_lower[last]), "share_upper": float(share_upper[last])})
    return _Listing(items, events={"lower": table.n_lower, "upper": table.n_upper},
                    bound={"kind": "additive", "epsilon": table.epsilon, "confidence": 1.0,
                           "method": METHOD, "rank_error": table.rank_error,
                           "value_accuracy": config.value_accuracy})


DISTRIBUTION = QueryKind("distribution", _distribution,
                         lambda c, p: _Listing([], events={"lower": 0, "upper": 0}), _check_distribution,
                         not_series="its rows are CDF buckets, not estimates: "
                                    "read GET /v1/streams/{name}/distribution",
                         read_ahead=(("values", "rank-tables"),))


# -- decayed quantile ----------------------------------------------------------------------------
DECAYS = ("none", "sliding", "exponential", "polynomial")


def _positive(params: dict, name: str, duration: bool) -> float:
    raw = params.get(name)
    if raw in (None, ""):
        raise QueryError(f"decayed-quantile with this decay needs {name}")
    try:
        x = parse_duration(raw, name) if duration else float(raw)
    except ValueError as e:
        raise QueryError(str(e)) from None
    if not (math.isfinite(x) and x > 0):
        raise QueryError(f"{name} must be positive and finite")
    return x


def _check_decayed(config, params: dict) -> dict:
    decay = params.get("decay", "none")
    if decay not in DECAYS:
        raise QueryError(f"decay must be one of {', '.join(DECAYS)}")
    try:
        phi = float(params["phi"])
    except (KeyError, ValueError):
        raise QueryError("decayed-quantile needs phi=<number>") from None
    if not 0 <= phi <= 1:
        raise QueryError("phi must be in [0, 1]")
    spec = {"kind": decay, "phi": phi}
    if decay == "sliding":
        spec["window"] = _positive(params, "window", True)
    elif decay == "exponential":
        spec["half_life"] = _positive(params, "half_life", True)
    elif decay == "polynomial":
        spec["alpha"] = _positive(params, "alpha", False)
    return spec


def _weights(spec: dict, res: float):
    """f of the age in ticks (ages in whole ticks of the stream's resolution)."""
    kind = spec["kind"]
    if kind == "none":
        return lambda a: np.ones_like(a)
    if kind == "sliding":
        return lambda a: (a * res <= spec["window"]).astype(np.float64)
    if kind == "exponential":
        return lambda a: np.exp2(-(a * res) / spec["half_life"])
    return lambda a: (a * res + 1.0) ** -spec["alpha"]


def _decayed_quantile(summary, config, window, params):
    """φ-quantile of the values weighted by f(age) over every kept event up to ``at``
    (ages in whole ticks), bracketed per bucket age range (see
    ``WindowedQuantiles.decayed_quantile``). Events count once each: ``weight`` is not held."""
    at_tick = window.now  # exactly floor(at / res): a float quotient can round up a tick
    f = _weights(params, config.resolution)
    b = summary["values"].decayed_quantile(params["phi"], f, at_tick)
    if b is None:
        return _no_events(config, params)
    return QuantileEstimate(b.estimate, b.lower, b.upper, "additive", b.epsilon, 1.0,
                            METHOD + "/decayed", b.value_accuracy, b.rank_error,
                            _finite(b.relative_width) or 0.0)


def _no_events(config, params):
    return QuantileEstimate(0.0, -_FLOAT_MAX, _FLOAT_MAX, "additive", 1.0, 1.0, "no-events",
                            config.value_accuracy, 0, 0.0)


DECAYED_QUANTILE = QueryKind("decayed-quantile", _decayed_quantile, _no_events, _check_decayed, decayed=True)

FAMILY = ServedFamily(core.FAMILY, (QUANTILES, DISTRIBUTION, DECAYED_QUANTILE))
