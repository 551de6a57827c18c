"""The decayed family's parts: ``decayed``, the additive multi-level sample, and one
``decayed-relative/<decay>`` weight-based merging histogram per declared decay that has a
small relative-error summary. Both are built only for a stream that declares its value
range (``value_min``, ``value_max``) and fed the events that have a value.

Cormode, G., Tirthapura, S. and Xu, B. (2009). *Time-decayed correlated aggregates over
data streams.* §3.1 (additive error for any decay, Theorem 3.2: the ``decayed`` part),
§3.2 (relative error for a declared converging, non-exponential decay, Theorems
3.3-3.5: the ``decayed-relative/`` parts), §4 (the lower bounds: no small relative
summary of a sliding window or an exponential decay, so those declare none)
(``sketches/decayed/``).

Worst-case size: the additive sample's own ``max_nbytes()`` (at most ``k`` events a
level); the relative histogram's buckets follow the oldest event's age (Theorem 3.5:
``O(β)``), bounded here for an orderly stream by O(log W / ε) buckets per value cell
(``_relative_bound``).

Query kinds: ``decayed-sum``, ``decayed-range-sum``, ``decayed-frequency`` and
``decayed-heavy-hitters`` (``app/kinds/decayed.py``).

Tested by: tests/sketches/decayed/test_additive.py, tests/sketches/decayed/test_relative.py,
tests/tidemark/test_capacity.py, tests/app/test_answers_decayed.py.
"""

from __future__ import annotations

from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from tidemark.families.parts import PartSpec, QueryFamily, any_valued, log_window
from tidemark.streams import StreamConfig

__all__ = ["FAMILY", "relative_decays"]


def relative_decays(config: StreamConfig) -> dict[str, dict]:
    """Part name -> decay spec (in ticks) of each declared decay that has a small
    relative-error sketch (§3.2): no decay, and polynomial decay at any resolution. The
    sketch's buckets follow ``(a + 1)^-α`` of ages ``a`` in ticks; answers evaluate the
    declared ``(age·res + 1)^-α`` of seconds on those buckets (app/kinds/decayed.py)."""
    out = {}
    for d in config.decays:
        if d.kind == "none":
            out["decayed-relative/none"] = {"kind": "none"}
        elif d.kind == "polynomial":
            out[f"decayed-relative/polynomial/{d.alpha:g}"] = {"kind": "polynomial", "alpha": d.alpha}
    return out


def _relative_bound(part, config: StreamConfig) -> float:
    """Weight-based merging histogram: O(log W / ε) buckets per cell."""
    return 32.0 * part.cells * (1 / config.epsilon) * log_window(config) * 4


FAMILY = QueryFamily("decayed", (
    PartSpec("decayed", DecayedAdditiveSketch,
             lambda c, seed, name: DecayedAdditiveSketch(c.epsilon, c.delta, c.value_min, c.value_max, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
             wanted=lambda c: c.has_values, fed_by=any_valued),
    PartSpec("decayed-relative/", DecayedRelativeSketch,
             lambda c, seed, name: DecayedRelativeSketch(c.epsilon, relative_decays(c)[name], c.value_min, c.value_max),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
             wanted=lambda c: c.has_values, fed_by=any_valued, instances=relative_decays,
             data_bound=_relative_bound),
))
