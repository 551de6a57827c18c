"""Tidemark's sketch library: mergeable summaries of event streams with honest bounds.

Pure: it imports nothing from ``app``, ``workers``, ``frontend`` or ``tidemark``. Every
sketch speaks the verbs described in :mod:`sketches.base`.
"""

from sketches.base import CorruptSketchError, Estimate, IncompatibleSketchError, SketchError
from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.deterministic_wave import DeterministicWave
from sketches.dyadic import DyadicECM
from sketches.ecm import ECMSketch
from sketches.exponential_histogram import ExponentialHistogram
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram
from sketches.windowed_quantiles import WindowedQuantiles

__all__ = [
    "CorruptSketchError",
    "DecayedAdditiveSketch",
    "DecayedRelativeSketch",
    "DeterministicWave",
    "DyadicECM",
    "ECMSketch",
    "Estimate",
    "ExponentialHistogram",
    "IncompatibleSketchError",
    "KeyDictionary",
    "RandomizedWave",
    "SketchError",
    "SplittableHistogram",
    "WindowedQuantiles",
]
