"""Hypothesis strategies for generated streams and queries, with an exact oracle.

Streams stress the edges the answers must get right: resolutions from 1 ms to 1 h
(fractional ones included), timestamps near 0 and near 2^31, events exactly on a tick's
boundary or one ulp either side, values on the relative sketch's cell edges, duplicates,
bursts, skewed keys, zero weights, several shards merged as the publisher merges them.
Queries put ``at`` on a tick, one ulp off it or anywhere, with windows shorter than a tick,
straddling ticks, or as long as the stream keeps.

The oracle decides membership in exact rationals: an event counts when
``at − window <= ts <= at`` (contract §6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

RESOLUTIONS = [0.001, 0.004, 0.1, 0.25, 0.3, 1.0, 1.5, 7.5, 60.0, 3600.0]
KEYS = ["a", "b", "c", "d", "e", "f", "g", "h", "ключ", "🙂"]
VALUE_MIN, VALUE_MAX = 0.0, 10.0
CELL = (VALUE_MAX - VALUE_MIN) / 255  # the relative sketch's default value cell
SEED = 20240613


@dataclass
class Case:
    config: StreamConfig
    ts: list[float]
    keys: list[str | None]
    values: list[float]
    weights: list[float]
    shards: list[int] = field(default_factory=list)

    @property
    def clock(self) -> float | None:
        return max(self.ts) if self.ts else None


def _near(x: float, how: int) -> float:
    return x if how == 0 else math.nextafter(x, math.inf if how > 0 else -math.inf)


@st.composite
def configs(draw, decays: bool = False) -> StreamConfig:
    res = draw(st.sampled_from(RESOLUTIONS))
    ticks = draw(st.integers(3, 200))
    return StreamConfig(
        max_window=res * ticks, epsilon=draw(st.sampled_from([0.05, 0.1, 0.2])), delta=0.1,
        value_min=VALUE_MIN, value_max=VALUE_MAX, resolution=res,
        decays=[{"kind": "none"}, {"kind": "polynomial", "alpha": 1.5}] if decays else [],
    )


@st.composite
def event_times(draw, res: float, span_ticks: int, n: int) -> list[float]:
    """Event times near 0 or near 2^31, many on tick boundaries or one ulp off them."""
    near_top = draw(st.booleans())
    base = (int(2**31 / res) - span_ticks - 2) if near_top else draw(st.integers(0, 3))
    out = []
    for _ in range(n):
        k = base + draw(st.integers(0, span_ticks))
        edge = float(k * Fraction(res))
        how = draw(st.sampled_from(["on", "below", "above", "inside"]))
        if how == "inside":
            t = float((k + Fraction(draw(st.integers(1, 999)), 1000)) * Fraction(res))
        else:
            t = _near(edge, {"on": 0, "below": -1, "above": 1}[how])
        out.append(max(t, 0.0))
    return out


@st.composite
def values(draw) -> float:
    j = draw(st.integers(0, 255))
    edge = VALUE_MIN + j * CELL
    v = draw(st.one_of(st.just(edge), st.just(math.nextafter(edge, -math.inf)),
                       st.just(math.nextafter(edge, math.inf)),
                       st.floats(VALUE_MIN, VALUE_MAX, allow_nan=False)))
    return min(max(v, VALUE_MIN), VALUE_MAX)


@st.composite
def cases(draw, decays: bool = False, max_events: int = 40) -> Case:
    config = draw(configs(decays))
    res = config.resolution
    n = draw(st.integers(0, max_events))
    span = draw(st.integers(1, config.window_ticks + 3))
    ts = draw(event_times(res, span, n))
    skew = draw(st.integers(1, 4))
    keys = [KEYS[min(draw(st.integers(0, len(KEYS) - 1)) for _ in range(skew))]
            if draw(st.integers(0, 9)) else None for _ in range(n)]
    vals = [draw(values()) for _ in range(n)]
    weights = [draw(st.sampled_from([1.0, 1.0, 2.0, 0.5, 0.0, 3.25])) for _ in range(n)]
    shards = [draw(st.integers(0, 2)) for _ in range(n)]
    return Case(config, ts, keys, vals, weights, shards)


def table(case: Case, idx) -> pa.Table:
    idx = list(idx)
    return pa.table({
        "ts": pa.array([case.ts[i] for i in idx], pa.float64()),
        "key": pa.array([case.keys[i] for i in idx], pa.string()),
        "value": pa.array([case.values[i] for i in idx], pa.float64()),
        "weight": pa.array([case.weights[i] for i in idx], pa.float64()),
    })


def secret_of(seed: int) -> HashSecret:
    """A deployment hash secret per test seed (independent hash families per seed)."""
    return HashSecret(seed.to_bytes(8, "little") + b"tidemark-tests!!")


def shard_summaries(case: Case, seed: int = SEED, secret: HashSecret | None = None) -> dict[int, StreamSummary]:
    """Each shard's summary, fed in two out-of-order batches, as a worker task builds it
    (under ``secret``, else the secret of ``seed``)."""
    parts = {}
    for shard in sorted(set(case.shards)):
        idx = [i for i, s in enumerate(case.shards) if s == shard]
        s = StreamSummary.create(case.config, secret or secret_of(seed))
        half = len(idx) // 2
        s.update_table(table(case, idx[half:]))
        s.update_table(table(case, idx[:half]))
        parts[shard] = s
    return parts


def summarize(case: Case, seed: int = SEED) -> StreamSummary | None:
    """The shard summaries merged in shard order, as the API merges them at read."""
    if not case.ts:
        return None
    first, *rest = shard_summaries(case, seed).values()
    for other in rest:
        first.merge(other)
    return first


def status(case: Case) -> dict:
    return {"clock": case.clock, "sketch_version": 1, "updated_at": "t", "events": len(case.ts),
            "late_dropped": 0}


@st.composite
def windows(draw, case: Case) -> tuple[float, float]:
    """(window seconds, at) that the stream keeps: ``at − window >= clock − max_window``."""
    config, clock = case.config, case.clock or 0.0
    res = config.resolution
    w = draw(st.one_of(
        st.sampled_from([config.max_window, res, res / 3, res * 2.5]),
        st.floats(res / 100, config.max_window)))
    w = min(w, config.max_window)
    slack = Fraction(config.max_window) - Fraction(w)
    back = draw(st.floats(0, 1)) * float(slack)
    at = clock - back
    snap = draw(st.sampled_from(["none", "on", "below", "above", "clock", "after"]))
    if snap == "clock":
        at = clock
    elif snap == "after":
        at = clock + res * draw(st.floats(0, 2))
    elif snap != "none":
        k = math.floor(Fraction(at) / Fraction(res))
        at = _near(float(k * Fraction(res)), {"on": 0, "below": -1, "above": 1}[snap])
    if Fraction(at) - Fraction(w) < Fraction(clock) - Fraction(config.max_window) or at < 0:
        at = clock
    return w, at


def arrival_order(draw, rng, n: int, span: int,
                  shapes=("random", "late", "burst", "reverse")) -> np.ndarray:
    """``n`` ticks in ``[0, span)`` arriving out of order: at random, late (heavy-tailed
    delays), in bursts on one tick, reversed, or sorted."""
    ticks = rng.integers(0, span, n)
    shape = draw(st.sampled_from(shapes))
    if shape == "late":
        ticks = ticks[np.argsort(ticks + rng.pareto(1.0, n) * span / 20)]
    elif shape == "burst":
        ticks[rng.random(n) < 0.5] = rng.integers(0, span)
    elif shape == "reverse":
        ticks = np.sort(ticks)[::-1]
    elif shape == "sorted":
        ticks = np.sort(ticks)
    return ticks


def seeded_cases(rng, config: StreamConfig, count: int, n: int, start: float, end: float,
                 key_of, shards: int):
    """``count`` random unit-weight cases of ``n`` events in ``[start, end)`` (keys drawn
    by ``key_of(rng)``, events dealt round-robin to ``shards``), each with its summary made
    with its own hash seed: independent trials for a probabilistic bound's rate."""
    for seed in range(count):
        ts = np.sort(rng.uniform(start, end, n)).tolist()
        keys = [key_of(rng) for _ in range(n)]
        case = Case(config, ts, keys, [math.nan] * n, [1.0] * n, [i % shards for i in range(n)])
        yield case, summarize(case, seed=seed + 1)


def binom_upper(n: int, p: float, alpha: float = 1e-4) -> int:
    """Smallest c with P(Binomial(n, p) > c) <= alpha: how many of ``n`` independent runs
    may miss a bound of failure probability ``p`` before the test says it is broken."""
    cdf = 0.0
    for c in range(n + 1):
        cdf += math.comb(n, c) * p**c * (1 - p) ** (n - c)
        if 1 - cdf <= alpha:
            return c
    return n


def merge_tree(parts, shape: str, rng):
    """Merge sketches in a tree of the given shape and return the root: ``chain`` (one
    after another), ``balanced`` (pairs, level by level), ``random`` (random pairs) or
    ``flat`` (one ``merge_many``). ``rng``: a NumPy generator."""
    parts = list(parts)
    if shape == "flat":
        return parts[0].merge_many(parts[1:])
    if shape == "chain":
        for p in parts[1:]:
            parts[0].merge(p)
        return parts[0]
    while len(parts) > 1:
        if shape == "balanced":
            parts = [parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        else:
            i, j = sorted(rng.choice(len(parts), 2, replace=False))
            parts[i].merge(parts.pop(j))
    return parts[0]


# -- the exact oracle -------------------------------------------------------------------------
def in_window(case: Case, w: float, at: float) -> np.ndarray:
    start = Fraction(at) - Fraction(w)
    return np.array([start <= Fraction(t) <= Fraction(at) for t in case.ts], bool)


def upto(case: Case, at: float) -> np.ndarray:
    return np.array([t <= at for t in case.ts], bool)


def frequencies(case: Case, mask) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, m in zip(case.keys, mask):
        if m and k is not None:
            out[k] = out.get(k, 0) + 1
    return out


def decay_weight(spec: dict, ages: np.ndarray) -> np.ndarray:
    """``f(age)`` of contract §6, ages in seconds (ages computed exactly, then rounded)."""
    kind = spec["kind"]
    if kind == "none":
        return np.ones_like(ages)
    if kind == "exponential":
        return np.exp2(-ages / spec["half_life"])
    if kind == "polynomial":
        return (ages + 1.0) ** -spec["alpha"]
    raise ValueError(kind)


def decayed_truth(case: Case, spec: dict, at: float, lo: float, hi: float) -> float:
    """Σ w·f(at − ts) over ts <= at and lo <= value <= hi, exact membership."""
    total = 0.0
    for t, v, w in zip(case.ts, case.values, case.weights):
        if t > at or not (lo <= v <= hi):
            continue
        age = Fraction(at) - Fraction(t)
        if spec["kind"] == "sliding":
            total += w if age <= Fraction(spec["window"]) else 0.0
        else:
            total += w * float(decay_weight(spec, np.array([float(age)]))[0])
    return total
