"""The tests the two in-order window sums (exponential histogram, deterministic wave) share,
run on each: exact-oracle bounds through merges of many parts, bytes, order refusal."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, SketchError
from sketches_extra.deterministic_wave import DeterministicWave
from sketches_extra.exponential_histogram import ExponentialHistogram
from tests.sketches_extra.in_order import (
    EPS, SETTINGS, Oracle, check_query, feed, queries, small_histogram, small_wave, split, streams)
from tests.strategies import merge_tree


@dataclass(frozen=True)
class InOrder:
    make: Callable  # (epsilon, window) -> a fresh sketch
    integral: bool  # integer weights only
    small: Callable  # () -> a small fed sketch
    compact: Callable  # (sketch, epsilon) -> True when its state is as small as proven
    merged: Callable  # (root, how, shape) -> None: the family's own checks of a merge


def _eh_merged(root, how, shape):
    if how == "time" and shape != "random":
        assert root.depth == 0  # time-disjoint parts concatenate without error


def _wave_merged(root, how, shape):
    assert not root.overflowed


FAMILIES = {
    "exponential-histogram": InOrder(ExponentialHistogram, False, small_histogram,
                                     lambda sk, eps: sk.buckets < 6 / eps * math.log(10**5), _eh_merged),
    "deterministic-wave": InOrder(lambda eps, window: DeterministicWave(eps, window, 2**50), True, small_wave,
                                  lambda sk, eps: sk.items <= int(sk._caps.sum()), _wave_merged),
}


@pytest.fixture(params=sorted(FAMILIES))
def family(request):
    return FAMILIES[request.param]


@pytest.mark.parametrize("name", sorted(FAMILIES))
@SETTINGS
@given(data=st.data(), eps=EPS, window=st.sampled_from([5, 300, 10**5]), parts=st.integers(2, 64),
       shape=st.sampled_from(["flat", "chain", "balanced", "random"]), how=st.sampled_from(["random", "time"]))
def test_merged_bounds_hold(name, data, eps, window, parts, shape, how):
    fam = FAMILIES[name]
    ticks, weights, rng = data.draw(streams(1500, fam.integral))
    sketches = []
    for t, w in split(ticks, weights, rng, parts, how):
        s = fam.make(eps, window)
        s.update(t, w)
        sketches.append(s)
    root = merge_tree(sketches, shape, rng)
    if not ticks.size:
        assert root.is_empty
        return
    assert root.clock == ticks.max()
    fam.merged(root, how, shape)
    oracle = Oracle(ticks, weights)
    for lo, hi in queries(root, rng, 20):
        e = check_query(root, oracle, lo, hi)
        if hi >= root.clock and e.upper > 0:
            # the composed epsilon is the one the state's lineage gives
            assert root.epsilon_bound - 1e-12 <= e.epsilon <= root.epsilon_bound * (1 + 1e-6) + 1e-12
    # the aggregate keeps working: later events fold in
    later = np.arange(root.clock, root.clock + 50)
    root.update(later, np.ones(50, weights.dtype))
    oracle = Oracle(np.concatenate([ticks, later]), np.concatenate([weights, np.ones(50, weights.dtype)]))
    for lo, hi in queries(root, rng, 5):
        check_query(root, oracle, lo, hi)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@SETTINGS
@given(data=st.data(), eps=EPS, window=st.sampled_from([0, 20, 10**4]))
def test_bytes_round_trip(name, data, eps, window):
    fam = FAMILIES[name]
    ticks, weights, rng = data.draw(streams(800, fam.integral))
    sk = fam.make(eps, window)
    feed(sk, ticks, weights, rng)
    blob = sk.to_bytes()
    back = type(sk).from_bytes(blob)
    assert back.to_bytes() == blob and len(blob) == sk.nbytes == back.nbytes
    assert back.is_empty == sk.is_empty and back.clock == sk.clock
    if ticks.size:
        for lo, hi in queries(sk, rng, 10):
            assert back.query(lo, hi) == sk.query(lo, hi)
        # both keep evolving identically
        more = np.arange(sk.clock, sk.clock + 200)
        sk.update(more, np.arange(200))
        back.update(more, np.arange(200))
        assert back.to_bytes() == sk.to_bytes()
        for lo, hi in queries(sk, rng, 10):
            assert back.query(lo, hi) == sk.query(lo, hi)


def test_corrupt_bytes_never_crash(family):
    """A flipped byte is refused, or the blob reads as a valid sketch whose queries work."""
    blob = family.small().to_bytes()
    cls = type(family.small())
    rng = np.random.default_rng(11)
    for pos in range(len(blob)):
        for _ in range(3):
            bad = bytearray(blob)
            bad[pos] ^= int(rng.integers(1, 256))
            try:
                sk = cls.from_bytes(bytes(bad))
            except CorruptSketchError:
                continue
            if not sk.is_empty:
                e = sk.query(sk.clock - sk.window, sk.clock)
                assert 0 <= e.lower <= e.estimate <= e.upper


def test_out_of_order_is_refused_and_leaves_state_unchanged(family):
    sk = family.make(0.1, 100)
    sk.update(np.array([5, 3, 9]))  # within a batch order does not matter
    before = sk.to_bytes()
    with pytest.raises(SketchError, match="out-of-order"):
        sk.update(np.array([10, 8]))
    assert sk.to_bytes() == before
    sk.update(np.array([9, 9]))  # the clock tick itself is fine (duplicated positions)
    assert sk.query(9, 9).estimate == 3


def test_copy_is_independent_and_repr_names_the_parameters(family):
    sk = family.small()
    cp = sk.copy()
    cp.update(np.array([sk.clock + 3, sk.clock + 4]))
    assert cp.clock == sk.clock + 4 and sk.to_bytes() == family.small().to_bytes()
    assert f"{type(sk).__name__}(epsilon={sk.epsilon}, window=40" in repr(sk)


def test_estimate_is_useful_not_trivial(family):
    """A sketch answering [0, inf] would fail: the bracket width tracks ε on a long stream."""
    rng = np.random.default_rng(3)
    ticks = np.sort(rng.integers(0, 10**6, 200_000))
    for eps in (0.01, 0.1):
        sk = family.make(eps, 10**5)
        sk.update(ticks)
        for lo in rng.integers(sk.clock - 10**5, sk.clock, 50):
            truth = np.count_nonzero(ticks >= lo)
            e = sk.query(int(lo), sk.clock)
            assert e.lower <= truth <= e.upper
            assert e.upper - e.lower <= 2 * eps * truth
        assert family.compact(sk, eps)
