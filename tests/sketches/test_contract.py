"""The contract every sketch keeps (after river's ``test_estimators``): a new sketch is
tested by being added to FAMILIES — how to build it, how to build one with other
parameters, and nothing else: every family is fed the same :class:`Batch`.
(``tests/sketches_extra/test_contract.py`` walks the extra library's families through the
same tests, with its own ``family`` fixture.)"""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

from sketches.base import Batch, CorruptSketchError, Estimate, IncompatibleSketchError, Sketch
from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram
from sketches.windowed_quantiles import WindowedQuantiles

rng = np.random.default_rng(0)
TICKS = np.sort(rng.integers(0, 500, 300))
KEYS = (rng.zipf(1.3, 300) % 50).astype(np.uint64)
BATCH = Batch(TICKS, weights=np.ones(TICKS.size), keys=KEYS % np.uint64(64),
              values=np.linspace(0, 1, TICKS.size), names=[f"k{k}" for k in KEYS])
POLY = {"kind": "polynomial", "alpha": 1.5}

# name: (a fresh sketch, sketches that differ from it in one parameter or seed each)
FAMILIES = {
    "splittable-histogram": (lambda: SplittableHistogram(0.1, 100), lambda: [
        SplittableHistogram(0.2, 100), SplittableHistogram(0.1, 101), SplittableHistogram(0.1, 100, max_total=1e6),
        SplittableHistogram(0.1, 100, unit=0.5)]),
    "ecm-sketch": (lambda: ECMSketch(0.1, 0.1, 100), lambda: [
        ECMSketch(0.2, 0.1, 100), ECMSketch(0.1, 0.2, 100), ECMSketch(0.1, 0.1, 101), ECMSketch(0.1, 0.1, 100, seed=1),
        ECMSketch(0.1, 0.1, 100, purpose="inner")]),
    "windowed-quantiles": (lambda: WindowedQuantiles(0.1, 100), lambda: [
        WindowedQuantiles(0.2, 100), WindowedQuantiles(0.1, 101), WindowedQuantiles(0.1, 100, value_accuracy=0.02)]),
    "randomized-wave": (lambda: RandomizedWave(0.2, 0.2, 100), lambda: [
        RandomizedWave(0.3, 0.2, 100), RandomizedWave(0.2, 0.1, 100), RandomizedWave(0.2, 0.2, 99),
        RandomizedWave(0.2, 0.2, 100, seed=1), RandomizedWave(0.2, 0.2, 100, max_distinct=10)]),
    "decayed-additive": (lambda: DecayedAdditiveSketch(0.2, 0.2, 0, 1), lambda: [
        DecayedAdditiveSketch(0.3, 0.2, 0, 1), DecayedAdditiveSketch(0.2, 0.1, 0, 1), DecayedAdditiveSketch(0.2, 0.2, 0, 2),
        DecayedAdditiveSketch(0.2, 0.2, 0, 1, seed=1), DecayedAdditiveSketch(0.2, 0.2, 0, 1, max_total=5.0)]),
    "decayed-relative": (lambda: DecayedRelativeSketch(0.2, POLY, 0, 1), lambda: [
        DecayedRelativeSketch(0.3, POLY, 0, 1), DecayedRelativeSketch(0.2, {"kind": "polynomial", "alpha": 1.0}, 0, 1),
        DecayedRelativeSketch(0.2, {"kind": "none"}, 0, 1), DecayedRelativeSketch(0.2, POLY, 0, 2),
        DecayedRelativeSketch(0.2, POLY, 0, 1, resolution=0.5)]),
    "key-dictionary": (lambda: KeyDictionary(8, 100), lambda: [
        KeyDictionary(16, 100), KeyDictionary(8, 101), KeyDictionary(8, 100, 0.2)]),
}


@pytest.fixture(params=sorted(FAMILIES), ids=sorted(FAMILIES))
def family(request):
    return (request.param, *FAMILIES[request.param])


def test_fresh_sketches_are_empty_and_fed_ones_are_not(family):
    _, make, _ = family
    sk = make()
    assert sk.is_empty
    sk.feed(BATCH)
    assert not sk.is_empty


def test_round_trip_copy_and_repr(family):
    _, make, _ = family
    sk = make()
    sk.feed(BATCH)
    blob = sk.to_bytes()
    assert type(sk).from_bytes(blob).to_bytes() == blob
    assert sk.copy().to_bytes() == blob and sk.copy() is not sk
    assert sk.nbytes == len(blob)
    assert repr(sk).startswith(f"{type(sk).__name__}(") and type(sk).__repr__ is Sketch.__repr__


def test_truncated_and_foreign_blobs_are_refused(family):
    name, make, _ = family
    sk = make()
    sk.feed(BATCH)
    blob = sk.to_bytes()
    for whole in (blob, make().to_bytes()):
        for cut in range(len(whole)):
            with pytest.raises(CorruptSketchError):
                type(sk).from_bytes(whole[:cut])
        with pytest.raises(CorruptSketchError):
            type(sk).from_bytes(whole + b"\x00")
    with pytest.raises(CorruptSketchError):
        type(sk).from_bytes("not bytes")
    for other, (make_other, _) in FAMILIES.items():
        if other != name:
            with pytest.raises(CorruptSketchError):
                type(sk).from_bytes(make_other().to_bytes())


def test_a_payload_cut_short_is_refused_whole_even_with_a_matching_header(family):
    """The header's length agrees, yet the payload ends early: the reader refuses it."""
    from sketches._bytes import HEADER_SIZE, pack_header

    _, make, _ = family
    sk = make()
    sk.feed(BATCH)
    payload = sk.to_bytes()[HEADER_SIZE:]
    for cut in sorted({0, 1, len(payload) // 3, len(payload) - 1}):
        short = pack_header(sk.FAMILY, cut, fmt=sk.FORMAT, flags=sk.HEADER_FLAGS) + payload[:cut]
        with pytest.raises(CorruptSketchError):
            type(sk).from_bytes(short)
    with pytest.raises(CorruptSketchError, match="unsupported sketch format version"):
        type(sk).from_bytes(pack_header(sk.FAMILY, len(payload), fmt=sk.FORMAT + 1, flags=sk.HEADER_FLAGS) + payload)


def test_merge_refuses_itself_with_the_fixed_message(family):
    _, make, _ = family
    sk = make()
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        sk.merge(sk)


def test_merge_refusals_share_one_check_and_one_set_of_messages(family):
    name, make, make_other = family
    sk = make()
    cls = type(sk).__name__
    article = "an" if cls[0] in "AEIOU" else "a"
    foreign = next(m() for n, (m, _) in FAMILIES.items() if n != name)
    with pytest.raises(IncompatibleSketchError, match=f"^can only merge {article} {cls} with another {cls}$"):
        sk.merge(foreign)
    for other in make_other():
        with pytest.raises(IncompatibleSketchError, match=f"^cannot merge {sk.NOUN} with different {sk.PARAMS}$"):
            sk.merge(other)
    with pytest.raises(IncompatibleSketchError, match=f"^can only merge {article} {cls} with another {cls}$"):
        sk.merge(object())
    assert type(sk).merge is Sketch.merge  # no family writes its own check


def test_merging_an_empty_sketch_changes_nothing(family):
    _, make, _ = family
    sk = make()
    sk.feed(BATCH)
    blob = sk.to_bytes()
    assert sk.merge(make()) is sk
    again = type(sk).from_bytes(blob)
    assert again.nbytes == len(blob) and not sk.is_empty


def _adversarial_batches(window: int, batches: int = 5, size: int = 4000):
    """Batches built to fill a sketch: ticks all over the window and out of order, the
    clock racing ahead, every key new, weights and values without a short exact form."""
    rng = np.random.default_rng(7)
    clock = window
    for _ in range(batches):
        clock += window // 2 + 1
        ticks = clock - rng.integers(0, window, size)
        keys = rng.integers(0, 2**63, size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        yield Batch(ticks, weights=rng.uniform(0.001, 1000.0, size), keys=keys,
                    values=rng.uniform(0.0, 1.0, size), names=[f"key-{k:x}" for k in keys.tolist()])


def test_a_sketch_never_serializes_larger_than_its_max_nbytes(family):
    """``max_nbytes()`` is an upper bound: a sketch filled adversarially, then merged with
    another filled one, never writes more (families whose space follows the data say None)."""
    _, make, _ = family
    sk, other = make(), make()
    if sk.max_nbytes() is None:
        pytest.skip(f"{type(sk).__name__}: space follows the data, no bound set by its parameters")
    window = min(getattr(sk, "window", 100), 100)
    for batch in _adversarial_batches(window):
        sk.feed(batch)
        other.feed(batch._replace(ticks=batch.ticks + 1))
        assert 0 < sk.nbytes <= sk.max_nbytes()
    sk.merge(other)
    assert sk.nbytes <= sk.max_nbytes()
    assert type(sk).from_bytes(make().to_bytes()).max_nbytes() == make().max_nbytes()  # a blob's own sizing


def test_every_structure_obeys_the_base(family):
    _, make, _ = family
    sk = make()
    assert isinstance(sk, Sketch)
    assert set(sk.BATCH) <= set(Batch._fields) and sk.BATCH[0] == "ticks"
    assert sk.WHAT and sk.NOUN and sk.PARAMS


def test_the_product_does_not_load_the_extra_sketches():
    """``sketches_extra`` is a library of its own: the API and the workers never import it."""
    code = ("import sys, app.main, workers.update, tidemark.summary; "
            "print(any(m.startswith('sketches_extra') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert importlib.import_module("sketches_extra").DeterministicWave.__module__ == "sketches_extra.deterministic_wave"


def test_estimates_keep_lower_le_estimate_le_upper():
    e = Estimate(3.0, 2.0, 4.0, "additive", 0.1, 1.0, "m")
    assert e.lower <= e.estimate <= e.upper and (e + e).upper == 8.0
