"""Tidemark's sketch library: mergeable summaries of event streams with honest bounds.

Pure: it imports nothing from ``app``, ``workers``, ``frontend`` or ``tidemark``. Every
sketch is a :class:`sketches.base.Sketch` and speaks the verbs described there.

This package holds what the product serves; structures that no stream uses live in the
separate ``sketches_extra`` library.
"""

from sketches.base import Batch, CorruptSketchError, Estimate, IncompatibleSketchError, Sketch, SketchError
from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram
from sketches.windowed_quantiles import WindowedQuantiles

__all__ = [
    "Batch",
    "CorruptSketchError",
    "DecayedAdditiveSketch",
    "DecayedRelativeSketch",
    "ECMSketch",
    "Estimate",
    "IncompatibleSketchError",
    "KeyDictionary",
    "RandomizedWave",
    "Sketch",
    "SketchError",
    "SplittableHistogram",
    "WindowedQuantiles",
]
