"""Time-decayed correlated sums (Cormode, Tirthapura & Xu 2009).

* :mod:`.decay` — decay functions, their classes (§1.2) and the relative-error refusals
  of the lower bounds (§4);
* :mod:`.additive` — ``|Ŝ − S| <= ε·S₀`` for any decay given at query time (§3.1);
* :mod:`.relative` — ``(1 − ε)S <= Ŝ <= (1 + ε)S`` for one declared converging,
  non-exponential decay (§3.2);
* :mod:`.derived` — relative frequency, range sums, heavy hitters and quantiles (§1.1).
"""

from sketches.decayed.additive import DecayedAdditiveSketch, suggest_capacity
from sketches.decayed.decay import (
    Decay,
    Exponential,
    FiniteExponential,
    NoDecay,
    Polynomial,
    SlidingWindow,
    SuperExponential,
    parse_decay,
    relative_guarantee_refusal,
)
from sketches.decayed.derived import heavy_hitters, quantile, range_sum, relative_frequency
from sketches.decayed.relative import DecayedRelativeSketch, region_count

__all__ = [
    "Decay",
    "DecayedAdditiveSketch",
    "DecayedRelativeSketch",
    "Exponential",
    "FiniteExponential",
    "NoDecay",
    "Polynomial",
    "SlidingWindow",
    "SuperExponential",
    "heavy_hitters",
    "parse_decay",
    "quantile",
    "range_sum",
    "region_count",
    "relative_frequency",
    "relative_guarantee_refusal",
    "suggest_capacity",
]
