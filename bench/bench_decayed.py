"""Decayed correlated sums: batched ingest per core and bytes versus the paper's bounds.

    .venv/bin/python bench/bench_decayed.py

Workload: 2 M events over 4 hours with late arrivals (Pareto delays), integer values in
[0, 255] (value cells of width 1), exponential weights; batches of 100 000. Two clock
resolutions: 1 s (many events per tick, as in production) and 1 ms (nearly one event per
tick). No PyPI peer implements decayed correlated sums, so there is no peer column.

* additive (§3.1): ``k`` samples per level; Theorem 3.2 space ``O(ε⁻² log(1/δ) log M)``
  events, printed with constant 1 (``M`` = total weight) next to the events stored.
* relative (§3.2, polynomial α = 1.5): Theorem 3.5 space ``β·(Z + log n)`` bits with
  ``β = ⌈log_{1+ε}(f(0)/f(n))⌉`` and ``Z = cells·64`` bits for our exact bucket sketch
  (``n`` = the oldest age).
"""

from __future__ import annotations

import math
import time

import numpy as np

from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.decayed.decay import Polynomial

N = 2_000_000
BATCH = 100_000


def _events(resolution_ms: int, rng):
    seconds = rng.uniform(0, 4 * 3600, N)
    late = rng.pareto(1.5, N) * 2.0
    order = np.argsort(seconds + late)
    ticks = (seconds[order] * 1000 // resolution_ms).astype(np.int64)
    values = rng.integers(0, 256, N).astype(np.float64)
    weights = rng.exponential(1.0, N)
    return ticks, values, weights


def _rate(sk, ticks, values, weights) -> float:
    warm = type(sk).from_bytes(sk.to_bytes())  # compile on a throwaway copy
    warm.update(ticks[:1000], values[:1000], weights[:1000])
    start = time.perf_counter()
    for i in range(0, ticks.size, BATCH):
        sk.update(ticks[i : i + BATCH], values[i : i + BATCH], weights[i : i + BATCH])
    return ticks.size / (time.perf_counter() - start)


def _query_ms(fn, reps: int = 20) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1000


def main() -> None:
    rng = np.random.default_rng(0)
    rows_a, rows_r = [], []
    for res_ms, label in ((1000, "1 s"), (1, "1 ms")):
        ticks, values, weights = _events(res_ms, rng)
        at = int(ticks.max())
        total = float(weights.sum())
        for eps in (0.05, 0.1):
            sk = DecayedAdditiveSketch(eps, 0.01, 0, 255, max_total=1e9)
            rate = _rate(sk, ticks, values, weights)
            bound = 1 / eps**2 * math.log(1 / 0.01) * math.log2(total)
            q = _query_ms(lambda: sk.query({"kind": "polynomial", "alpha": 1.5}, 128.0, at))
            rows_a.append(f"| {eps} | {label} | {rate:,.0f} | {sk.k:,} | {sk.stored:,} | {bound:,.0f} "
                          f"| {sk.nbytes:,} | {q:.1f} |")
        for eps in (0.05, 0.1):
            sk = DecayedRelativeSketch(eps, {"kind": "polynomial", "alpha": 1.5}, 0, 255, resolution=1)
            rate = _rate(sk, ticks, values, weights)
            n_age = at - int(ticks.min())
            f = Polynomial(1.5)
            beta = math.ceil(math.log(float(f(np.array([0]))[0] / f(np.array([n_age]))[0])) / math.log(1 + eps))
            bound = beta * (sk.cells * 64 + math.ceil(math.log2(n_age + 1))) // 8
            q = _query_ms(lambda: sk.query(128.0, at))
            rows_r.append(f"| {eps} | {label} | {rate:,.0f} | {sk.buckets:,} | {beta:,} | {sk.nbytes:,} "
                          f"| {bound:,} | {q:.1f} |")
    print("additive (δ = 0.01), any decay at query time")
    print()
    print("| ε | resolution | events/s (1 core) | k | events stored | Thm 3.2 ε⁻²·ln(1/δ)·log₂M | bytes | query ms |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows_a))
    print()
    print("relative, polynomial α = 1.5, 256 value cells")
    print()
    print("| ε | resolution | events/s (1 core) | buckets | β (Thm 3.5) | bytes | Thm 3.5 β·(Z + log n) bytes | query ms |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows_r))
    print()
    print("peer: none (no PyPI package implements decayed correlated sums)")


if __name__ == "__main__":
    main()
