"""The contract every sketch keeps: a new sketch is tested by being added to FAMILIES."""

from __future__ import annotations

import numpy as np
import pytest

from sketches.base import CorruptSketchError, IncompatibleSketchError
from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.deterministic_wave import DeterministicWave
from sketches.dyadic import DyadicECM
from sketches.ecm import ECMSketch
from sketches.exponential_histogram import ExponentialHistogram
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram
from sketches.windowed_quantiles import WindowedQuantiles

rng = np.random.default_rng(0)
TICKS = np.sort(rng.integers(0, 500, 300))
KEYS = (rng.zipf(1.3, 300) % 50).astype(np.uint64)

FAMILIES = {
    "splittable-histogram": (lambda: SplittableHistogram(0.1, 100), lambda s: s.update(TICKS)),
    "exponential-histogram": (lambda: ExponentialHistogram(0.1, 100), lambda s: s.update(TICKS)),
    "deterministic-wave": (lambda: DeterministicWave(0.1, 100), lambda s: s.update(TICKS)),
    "ecm-sketch": (lambda: ECMSketch(0.1, 0.1, 100), lambda s: s.update(TICKS, KEYS)),
    "windowed-quantiles": (lambda: WindowedQuantiles(0.1, 100),
                           lambda s: s.update(TICKS, np.linspace(-1, 1, TICKS.size))),
    "randomized-wave": (lambda: RandomizedWave(0.2, 0.2, 100), lambda s: s.update(TICKS, KEYS)),
    "decayed-additive": (lambda: DecayedAdditiveSketch(0.2, 0.2, 0, 1),
                         lambda s: s.update(TICKS, np.linspace(0, 1, TICKS.size))),
    "decayed-relative": (lambda: DecayedRelativeSketch(0.2, {"kind": "polynomial", "alpha": 1.5}, 0, 1),
                         lambda s: s.update(TICKS, np.linspace(0, 1, TICKS.size))),
    "dyadic-ecm": (lambda: DyadicECM(0.2, 0.2, 100, levels=6), lambda s: s.update(TICKS, KEYS % np.uint64(64))),
    "key-dictionary": (lambda: KeyDictionary(8, 100), lambda s: s.update(TICKS, [f"k{k}" for k in KEYS])),
}


@pytest.fixture(params=sorted(FAMILIES), ids=sorted(FAMILIES))
def family(request):
    return FAMILIES[request.param]


def test_fresh_sketches_are_empty_and_fed_ones_are_not(family):
    make, feed = family
    sk = make()
    assert sk.is_empty
    feed(sk)
    assert not sk.is_empty


def test_round_trip_copy_and_repr(family):
    make, feed = family
    sk = make()
    feed(sk)
    blob = sk.to_bytes()
    assert type(sk).from_bytes(blob).to_bytes() == blob
    assert sk.copy().to_bytes() == blob and sk.copy() is not sk
    assert sk.nbytes == len(blob)
    assert type(sk).__name__ in repr(sk)


def test_truncated_and_foreign_blobs_are_refused(family):
    make, feed = family
    sk = make()
    feed(sk)
    blob = sk.to_bytes()
    for cut in (0, 3, 15, 16, len(blob) // 2, len(blob) - 1):
        with pytest.raises(CorruptSketchError):
            type(sk).from_bytes(blob[:cut])
    with pytest.raises(CorruptSketchError):
        type(sk).from_bytes(blob + b"\x00")
    other = next(f for name, f in FAMILIES.items() if f is not family)[0]()
    with pytest.raises(CorruptSketchError):
        type(sk).from_bytes(other.to_bytes())


def test_merge_refuses_itself_with_the_fixed_message(family):
    make, _ = family
    sk = make()
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        sk.merge(sk)
