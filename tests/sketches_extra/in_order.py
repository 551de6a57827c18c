"""What the tests of the two in-order window sums (exponential histogram, deterministic
wave) share: generated in-order streams, an exact oracle, batch feeding, the queries to
ask and the checks every answer must pass."""

from __future__ import annotations

import math
from itertools import accumulate

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sketches_extra.deterministic_wave import DeterministicWave
from sketches_extra.exponential_histogram import ExponentialHistogram

SETTINGS = settings(max_examples=250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EPS = st.sampled_from([0.01, 0.05, 0.1, 0.3, 0.07])


class Oracle:
    """All events, answered exactly: Python integers for integer weights, otherwise
    math.fsum (the correctly rounded real sum)."""

    def __init__(self, ticks, weights):
        order = np.argsort(ticks, kind="stable")
        self.t = np.asarray(ticks)[order]
        w = np.asarray(weights)[order]
        self.w = w.astype(np.float64)
        self.c = list(accumulate((int(x) for x in w), initial=0)) if w.dtype.kind in "iu" else None

    def __call__(self, lo, hi):
        i, j = np.searchsorted(self.t, lo, "left"), np.searchsorted(self.t, hi, "right")
        return self.c[j] - self.c[i] if self.c is not None else math.fsum(self.w[i:j])

    def max_window(self, window):
        """Largest weight of any window + 1 consecutive ticks (the true U); integer weights."""
        if not self.t.size:
            return 0
        j = np.searchsorted(self.t, self.t + window, "right")
        return max(self.c[b] - self.c[a] for a, b in zip(range(len(self.t)), j))


@st.composite
def streams(draw, max_n=2500, integral=False):
    """In-order streams: random gaps, bursts on one tick, duplicates, big and zero weights
    (int64 weights when ``integral``, as the wave takes)."""
    # sizes are drawn from a ladder: hypothesis alone would mostly draw tiny streams
    n = min(max_n, draw(st.sampled_from([0, 1, 3, 20, 200, 1000, 2500])) + draw(st.integers(0, 9)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from(["random", "burst", "sparse", "dense"]))
    gaps = {
        "random": lambda: rng.integers(0, 5, n),
        "burst": lambda: np.where(rng.random(n) < 0.9, 0, rng.integers(1, 50, n)),
        "sparse": lambda: rng.integers(0, 400, n),
        "dense": lambda: (rng.random(n) < 0.5).astype(np.int64),
    }[shape]()
    ticks = np.cumsum(gaps) + draw(st.integers(-10**6, 10**6))
    if integral:
        kinds = {
            "ones": lambda: np.ones(n, np.int64),
            "ints": lambda: rng.integers(0, 1000, n),
            "heavy": lambda: np.minimum(rng.pareto(0.7, n) * 1e6, 1e12).astype(np.int64),
            "zeros": lambda: np.zeros(n, np.int64),
            "mixed": lambda: np.where(rng.random(n) < 0.3, 0, rng.integers(1, 10**6, n)),
        }
    else:
        kinds = {
            "ones": lambda: np.ones(n),
            "ints": lambda: rng.integers(0, 1000, n).astype(np.float64),
            "real": lambda: rng.random(n) * 10,
            "heavy": lambda: rng.pareto(0.7, n) * 1e12,
            "zeros": lambda: np.zeros(n),
            "mixed": lambda: np.where(rng.random(n) < 0.3, 0.0, rng.random(n)) * 10.0 ** rng.integers(-30, 200, n),
        }
    weights = kinds[draw(st.sampled_from(sorted(kinds)))]()
    return ticks.astype(np.int64), weights.astype(np.int64 if integral else np.float64), rng


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


def check_query(sk, oracle, lo, hi, width=True):
    """The bracket always; a suffix ``[lo, clock]`` within ε of its truth (and, with
    ``width``, no wider than ε allows), any other range within ε of ``[lo, clock]``."""
    e = sk.query(lo, hi)
    truth = oracle(lo, min(hi, sk.clock))
    assert e.lower <= truth <= e.upper, (lo, hi, truth, e)
    assert e.lower <= e.estimate <= e.upper
    assert e.confidence == 1.0 and e.method == sk.METHOD
    if hi >= sk.clock:
        assert e.kind == "relative"
        assert abs(e.estimate - truth) <= e.epsilon * truth * (1 + 1e-9) + 1e-300
        if width and e.epsilon < 1:
            assert e.upper - e.lower <= 2 * e.epsilon * truth / (1 - e.epsilon) * (1 + 1e-9) + 1e-300
    else:
        assert e.kind == "additive"
        whole = oracle(lo, sk.clock)
        assert abs(e.estimate - truth) <= e.epsilon * whole * (1 + 1e-9) + 1e-300
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


def split(ticks, weights, rng, parts, how):
    """Order-preserving split of one stream into ``parts`` in-order sub-streams: ``random``
    owners, or contiguous time ranges (``time``: the exact, concatenating merge)."""
    if how == "random":
        owner = rng.integers(0, parts, ticks.size)
    else:
        owner = np.minimum(np.arange(ticks.size) * parts // max(ticks.size, 1), parts - 1)
    return [(ticks[owner == i], weights[owner == i]) for i in range(parts)]


def small_histogram() -> ExponentialHistogram:
    sk = ExponentialHistogram(0.2, 40)
    sk.update(np.array([1, 2, 2, 5, 9, 10, 11, 30, 31, 40]), np.array([1, 2, 0.5, 3, 1, 1, 7, 1, 1, 2.0]))
    return sk


def small_wave() -> DeterministicWave:
    sk = DeterministicWave(0.3, 40, 100)
    sk.update(np.array([1, 2, 2, 5, 9, 10, 11, 30, 31, 40, 41, 45, 47]),
              np.array([1, 2, 0, 3, 1, 1, 7, 1, 1, 2, 9, 4, 4]))
    return sk
