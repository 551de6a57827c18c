"""Value queries from the value histogram: quantiles."""

from __future__ import annotations

import math

from app.answers import QueryError, QueryKind, register
from sketches.base import SketchError
from tidemark.summary import VALUE_BINS

METHOD = "value-histogram/pane-cells"


def _check_q(config, params: dict) -> dict:
    if not config.has_values:
        raise QueryError("quantiles need the stream's value_min and value_max declared")
    raw = params.get("q", "0.5")
    try:
        qs = [float(x) for x in str(raw).split(",") if x.strip() != ""]
    except ValueError:
        raise QueryError(f"q {raw!r} is not a comma-separated list of numbers") from None
    if not qs or any(not (0 <= q <= 1) for q in qs) or len(qs) > 1000:
        raise QueryError("each q must be in [0, 1] (up to 1000 of them)")
    return {"q": qs}


def _item(q, lower, upper, config):
    step = (config.value_max - config.value_min) / VALUE_BINS
    if math.isnan(lower):  # no event in the window: no quantile
        return {"q": q, "estimate": None, "bound": None}
    return {"q": q, "estimate": (lower + upper) / 2,
            "bound": {"lower": lower, "upper": upper, "kind": "additive", "epsilon": step,
                      "confidence": 1.0, "method": METHOD}}


def _quantiles(summary, config, window, params):
    if window.outer[0] > window.outer[1]:
        return [_item(q, math.nan, math.nan, config) for q in params["q"]]
    try:
        brackets = summary["values"].quantiles(params["q"], *window.outer, window.inner)
    except SketchError as e:
        raise QueryError(str(e)) from None
    return [_item(q, lo, hi, config) for q, (lo, hi) in zip(params["q"], brackets)]


register(QueryKind("quantiles", _quantiles,
                   lambda c, p: [_item(q, math.nan, math.nan, c) for q in p["q"]], _check_q))
