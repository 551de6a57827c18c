"""Deterministic wave against an exact oracle: the deterministic bound never fails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, SketchError
from sketches.extra.deterministic_wave import DeterministicWave, suggest_max_window_weight, wave_levels
from tests.strategies import merge_tree

SETTINGS = settings(max_examples=250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EPS = st.sampled_from([0.01, 0.05, 0.1, 0.3, 0.07])


class Oracle:
    """All events, answered exactly with Python integers."""

    def __init__(self, ticks, weights):
        order = np.argsort(ticks, kind="stable")
        self.t = np.asarray(ticks)[order]
        self.w = [int(x) for x in np.asarray(weights)[order]]
        self.c = [0]
        for x in self.w:
            self.c.append(self.c[-1] + x)

    def __call__(self, lo, hi):
        i, j = np.searchsorted(self.t, lo, "left"), np.searchsorted(self.t, hi, "right")
        return self.c[j] - self.c[i]

    def max_window(self, window):
        """Largest weight of any window + 1 consecutive ticks (the true U)."""
        if not self.t.size:
            return 0
        j = np.searchsorted(self.t, self.t + window, "right")
        return max(self.c[b] - self.c[a] for a, b in zip(range(len(self.t)), j))


@st.composite
def streams(draw, max_n=2500):
    """In-order streams: random gaps, bursts on one tick, duplicates, big and zero weights."""
    # sizes are drawn from a ladder: hypothesis alone would mostly draw tiny streams
    n = min(max_n, draw(st.sampled_from([0, 1, 3, 20, 200, 1000, 2500])) + draw(st.integers(0, 9)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = draw(st.sampled_from(["random", "burst", "sparse", "dense"]))
    gaps = {
        "random": rng.integers(0, 5, n),
        "burst": np.where(rng.random(n) < 0.9, 0, rng.integers(1, 50, n)),
        "sparse": rng.integers(0, 400, n),
        "dense": (rng.random(n) < 0.5).astype(np.int64),
    }[shape]
    ticks = np.cumsum(gaps) + draw(st.integers(-10**6, 10**6))
    kind = draw(st.sampled_from(["ones", "ints", "heavy", "zeros", "mixed"]))
    weights = {
        "ones": np.ones(n, np.int64),
        "ints": rng.integers(0, 1000, n),
        "heavy": np.minimum(rng.pareto(0.7, n) * 1e6, 1e12).astype(np.int64),
        "zeros": np.zeros(n, np.int64),
        "mixed": np.where(rng.random(n) < 0.3, 0, rng.integers(1, 10**6, n)),
    }[kind]
    return ticks.astype(np.int64), weights.astype(np.int64), rng


def feed(sketch, ticks, weights, rng, check=None):
    """Feed in random batch sizes, each batch shuffled (the sketch sorts a batch)."""
    i = 0
    while i < ticks.size:
        j = min(ticks.size, i + int(rng.integers(1, 700)))
        perm = rng.permutation(j - i)
        sketch.update(ticks[i:j][perm], weights[i:j][perm])
        i = j
        if check is not None:
            check(sketch, j)


def check_query(sk, oracle, lo, hi, nominal=True):
    """Bracket always; the ε bound when the window weight stayed within U (``nominal``)."""
    e = sk.query(lo, hi)
    truth = oracle(lo, min(hi, sk.clock))
    assert e.lower <= truth <= e.upper, (lo, hi, truth, e)
    assert e.lower <= e.estimate <= e.upper
    assert e.confidence == 1.0 and e.method == "deterministic-wave"
    if hi >= sk.clock:
        assert e.kind == "relative"
        assert abs(e.estimate - truth) <= e.epsilon * truth * (1 + 1e-9)
        if nominal:
            assert e.epsilon <= sk.epsilon_bound * (1 + 1e-9)
            if e.epsilon < 1:
                assert e.upper - e.lower <= 2 * e.epsilon * truth / (1 - e.epsilon) * (1 + 1e-9)
    else:
        assert e.kind == "additive"
        whole = oracle(lo, sk.clock)
        assert abs(e.estimate - truth) <= e.epsilon * whole * (1 + 1e-9)
    return e


def queries(sk, rng, k=40):
    """Window edges, every lo for small windows, and random ranges."""
    c, w = sk.clock, sk.window
    los = list(range(c - w, c + 1)) if w <= 60 else [c - w, c - w + 1, c - 1, c]
    los += [int(x) for x in rng.integers(c - w, c + 1, k)]
    out = [(lo, c) for lo in los]
    for lo in rng.integers(c - w, c + 1, k):
        out.append((int(lo), int(rng.integers(lo, c + 2))))
    return out + [(c + 1, c + 5), (c - w, c + 10**6)]


@SETTINGS
@given(streams(), EPS, st.sampled_from([0, 1, 7, 50, 1000, 10**5]), st.sampled_from([1, 10**3, 10**9, 2**50]))
def test_bounds_hold_at_every_point_of_the_stream(data, eps, window, u):
    ticks, weights, rng = data
    weights = np.minimum(weights, u)
    sk = DeterministicWave(eps, window, u)
    nominal = Oracle(ticks, weights).max_window(window) <= u

    def check(sk, j):
        part = Oracle(ticks[:j], weights[:j])
        for lo, hi in queries(sk, rng, 10):
            check_query(sk, part, lo, hi, nominal)
        assert sk.overflowed <= (not nominal)
        assert sk.items <= int(sk._caps.sum())

    feed(sk, ticks, weights, rng, check)
    assert sk.nbytes == len(sk.to_bytes())


@SETTINGS
@given(streams(600), EPS, st.sampled_from([0, 3, 40]))
def test_overflowed_wave_still_brackets_and_reports_its_real_error(data, eps, window):
    """A window heavier than U loses the ε promise but never the bracket (or the truth)."""
    ticks, weights, rng = data
    weights = np.minimum(weights, 50)
    sk = DeterministicWave(eps, window, max_window_weight=50)
    oracle = Oracle(ticks, weights)
    feed(sk, ticks, weights, rng)
    if ticks.size:
        for lo, hi in queries(sk, rng, 20):
            check_query(sk, oracle, lo, hi, nominal=oracle.max_window(window) <= 50)


def split(ticks, weights, rng, parts, how):
    """Order-preserving split of one stream into ``parts`` in-order sub-streams."""
    if how == "random":
        owner = rng.integers(0, parts, ticks.size)
    else:
        owner = np.minimum(np.arange(ticks.size) * parts // max(ticks.size, 1), parts - 1)
    return [(ticks[owner == i], weights[owner == i]) for i in range(parts)]


@SETTINGS
@given(streams(1500), EPS, st.sampled_from([5, 300, 10**5]), st.integers(2, 64),
       st.sampled_from(["flat", "chain", "balanced", "random"]), st.sampled_from(["random", "time"]))
def test_merged_bounds_hold(data, eps, window, parts, shape, how):
    ticks, weights, rng = data
    u = 2**50
    sketches = []
    for t, w in split(ticks, weights, rng, parts, how):
        s = DeterministicWave(eps, window, u)
        s.update(t, w)
        sketches.append(s)
    root = merge_tree(sketches, shape, rng)
    if not ticks.size:
        assert root.is_empty
        return
    assert root.clock == ticks.max() and not root.overflowed
    oracle = Oracle(ticks, weights)
    for lo, hi in queries(root, rng, 20):
        e = check_query(root, oracle, lo, hi)
        if hi >= root.clock and e.upper > 0:
            assert e.epsilon >= root.epsilon_bound - 1e-12
    later = np.arange(root.clock, root.clock + 50)
    root.update(later)
    oracle = Oracle(np.concatenate([ticks, later]), np.concatenate([weights, np.ones(50, np.int64)]))
    for lo, hi in queries(root, rng, 5):
        check_query(root, oracle, lo, hi)


def test_composed_epsilon_matches_section_5_1():
    a = DeterministicWave(0.1, 100, 1000)
    b = DeterministicWave(0.1, 100, 1000)
    a.update(np.arange(0, 100, 2))
    b.update(np.arange(1, 100, 2))
    a.merge(b)
    assert a.eta == pytest.approx(0.1)
    assert a.query(50, 99).epsilon == pytest.approx(0.1 + 0.1 + 0.01)  # ε + ε' + εε'
    c = DeterministicWave(0.1, 100, 1000)
    c.update(np.arange(0, 100, 3))
    c.merge(a)
    assert c.query(50, 99).epsilon == pytest.approx(1.1**3 - 1)
    # a part with no events in the window adds no error
    d = DeterministicWave(0.1, 100, 1000)
    d.update(np.array([0, 1]))
    e = DeterministicWave(0.1, 100, 1000)
    e.update(np.array([500, 501]))
    assert d.merge(e).eta == 0.0 and d.clock == 501


def test_duplicated_positions_across_batches():
    """Corollary 1: many items on one tick, arriving in several batches."""
    sk = DeterministicWave(0.1, 10, 10**6)
    ticks, weights = [], []
    rng = np.random.default_rng(5)
    for t in range(0, 200, 3):
        for _ in range(int(rng.integers(1, 6))):
            w = rng.integers(0, 20, int(rng.integers(1, 30)))
            sk.update(np.full(w.size, t), w)
            ticks.append(np.full(w.size, t))
            weights.append(w)
    oracle = Oracle(np.concatenate(ticks), np.concatenate(weights))
    for lo in range(sk.clock - 10, sk.clock + 1):
        check_query(sk, oracle, lo, sk.clock)


def test_rebase_keeps_sums_exact():
    """Partial sums are shifted before int64 overflow; the answers do not change."""
    u = 2**58
    sk = DeterministicWave(0.05, 3, u)
    rng = np.random.default_rng(1)
    ticks = np.sort(rng.integers(0, 2000, 400))
    ticks = np.unique(ticks)
    weights = rng.integers(2**50, 2**55, ticks.size)
    oracle = Oracle(ticks, weights)
    for i in range(0, ticks.size, 37):
        sk.update(ticks[i:i + 37], weights[i:i + 37])
    assert sum(int(x) for x in weights) > 2**62  # the lifetime total passed int64's range
    assert oracle.max_window(3) <= u
    for lo in range(sk.clock - 3, sk.clock + 1):
        check_query(sk, oracle, lo, sk.clock)
    assert DeterministicWave.from_bytes(sk.to_bytes()).to_bytes() == sk.to_bytes()


@SETTINGS
@given(streams(800), EPS, st.sampled_from([0, 20, 10**4]))
def test_bytes_round_trip(data, eps, window):
    ticks, weights, rng = data
    sk = DeterministicWave(eps, window, 2**45)
    feed(sk, ticks, weights, rng)
    blob = sk.to_bytes()
    back = DeterministicWave.from_bytes(blob)
    assert back.to_bytes() == blob and len(blob) == sk.nbytes
    assert back.is_empty == sk.is_empty and back.clock == sk.clock
    if ticks.size:
        for lo, hi in queries(sk, rng, 10):
            assert back.query(lo, hi) == sk.query(lo, hi)
        more = np.arange(sk.clock, sk.clock + 200)
        sk.update(more, np.arange(200))
        back.update(more, np.arange(200))
        assert back.to_bytes() == sk.to_bytes()
        for lo, hi in queries(sk, rng, 10):
            assert back.query(lo, hi) == sk.query(lo, hi)


def small_sketch():
    sk = DeterministicWave(0.3, 40, 100)
    sk.update(np.array([1, 2, 2, 5, 9, 10, 11, 30, 31, 40, 41, 45, 47]),
              np.array([1, 2, 0, 3, 1, 1, 7, 1, 1, 2, 9, 4, 4]))
    return sk


def test_corrupt_bytes_never_crash():
    blob = small_sketch().to_bytes()
    rng = np.random.default_rng(11)
    for pos in range(len(blob)):
        for _ in range(3):
            bad = bytearray(blob)
            bad[pos] ^= int(rng.integers(1, 256))
            try:
                sk = DeterministicWave.from_bytes(bytes(bad))
            except CorruptSketchError:
                continue
            if not sk.is_empty:
                e = sk.query(sk.clock - sk.window, sk.clock)
                assert 0 <= e.lower <= e.estimate <= e.upper


def test_specific_corruptions_are_refused():
    sk = small_sketch()
    blob = sk.to_bytes()
    n = sk.items
    o = 16 + 76

    def refused(offset, value, fmt="<i8"):
        bad = bytearray(blob)
        raw = np.array([value], dtype=fmt).tobytes()
        bad[offset: offset + len(raw)] = raw
        with pytest.raises(CorruptSketchError):
            DeterministicWave.from_bytes(bytes(bad))

    refused(16, 0.0, "<f8")  # epsilon
    refused(16 + 16, 2**60)  # U above 2^58
    refused(o + 8 * n, 0)  # a stored value of 0
    refused(o + 16 * n, 10**12)  # a partial sum above the total
    refused(o, -10**6)  # an item before the window
    refused(o + 24 * n, 200, "u1")  # a level out of range
    bad = bytearray(blob)
    bad[16 + 56: 16 + 64] = np.array([np.nan]).tobytes()
    with pytest.raises(CorruptSketchError):
        DeterministicWave.from_bytes(bytes(bad))


def test_out_of_order_is_refused_and_leaves_state_unchanged():
    sk = DeterministicWave(0.1, 100, 1000)
    sk.update(np.array([5, 3, 9]))
    before = sk.to_bytes()
    with pytest.raises(SketchError, match="out-of-order"):
        sk.update(np.array([10, 8]))
    assert sk.to_bytes() == before
    sk.update(np.array([9, 9]))
    assert sk.query(9, 9).estimate == 3


def test_invalid_input_is_refused():
    sk = DeterministicWave(0.1, 100, 1000)
    for bad in ([-1], [1.5], [np.nan], [1001]):
        with pytest.raises(SketchError):
            sk.update(np.array([1]), np.array(bad))
    with pytest.raises(SketchError):
        sk.update(np.array([1.0]))
    with pytest.raises(SketchError):
        sk.update(np.array([-2**62]))
    for args in ((0.0, 1, 10), (1.0, 1, 10), (0.1, -1, 10), (0.1, 1, 0), (0.1, 1, 2**59)):
        with pytest.raises(SketchError):
            DeterministicWave(*args)
    assert sk.is_empty and sk.query(0, 10).upper == 0
    sk.update(np.array([100]), np.array([4.0]))  # integral floats are fine
    with pytest.raises(SketchError):
        sk.query(-1, 100)
    with pytest.raises(SketchError):
        sk.query(50, 40)
    assert sk.query(0, 100).estimate == 4 and sk.query(101, 200).upper == 0


def test_sizing_helpers_and_levels():
    assert wave_levels(0.1, 1) == 1
    # the top level spans at least U: k·2^(ℓ−1) >= U (Corollary 1)
    for eps in (0.01, 0.05, 0.1, 0.3):
        for u in (1, 10, 10**6, 2**40):
            lv = wave_levels(eps, u)
            k = DeterministicWave(eps, 5, u)._k
            assert k * 2 ** (lv - 1) >= u or lv == 1
            assert lv == 1 or k * 2 ** (lv - 2) < u
    assert suggest_max_window_weight(2.5, 99, 10) == 2500
    sk = DeterministicWave(0.07, 5, 100)
    assert sk.epsilon_wave == pytest.approx(1 / 15) and sk.epsilon_wave <= 0.07


def test_copy_repr_and_estimate_is_useful():
    sk = small_sketch()
    cp = sk.copy()
    cp.update(np.array([50, 51]))
    assert sk.clock == 47 and cp.clock == 51
    assert "DeterministicWave(epsilon=0.3, window=40" in repr(sk)
    rng = np.random.default_rng(3)
    ticks = np.sort(rng.integers(0, 10**6, 200_000))
    for eps in (0.01, 0.1):
        wave = DeterministicWave(eps, 10**5, 10**6)
        wave.update(ticks)
        for lo in rng.integers(wave.clock - 10**5, wave.clock, 50):
            truth = np.count_nonzero(ticks >= lo)
            e = wave.query(int(lo), wave.clock)
            assert e.lower <= truth <= e.upper
            assert e.upper - e.lower <= 2 * eps * truth


@SETTINGS
@given(streams(2000), EPS, st.sampled_from([3, 60, 2000]))
def test_reconstructed_log_is_within_rho(data, eps, window):
    """ECM §5.1 Lemma 1 for waves: the log read off a wave errs by at most ρ·x at any lo."""
    ticks, weights, rng = data
    sk = DeterministicWave(eps, window, 2**50)
    feed(sk, ticks, weights, rng)
    if not ticks.size:
        return
    oracle = Oracle(ticks, weights)
    pt, pw, rho = sk._reconstruct(sk.clock)
    assert rho <= sk.epsilon_wave * (1 + 1e-12)
    order = np.argsort(pt)
    rebuilt = Oracle(pt[order], pw[order])
    for lo in range(sk.clock - window, sk.clock + 1, max(1, window // 60)):
        truth = oracle(lo, sk.clock)
        assert abs(rebuilt(lo, sk.clock) - truth) <= rho * truth
