"""Splittable histogram: batched ingest per core and bytes versus the paper's space bound.

    .venv/bin/python bench/bench_window_counters.py

Two workloads per ε: a 1-hour window at 1 s resolution (many events per tick, as in
production) and 1 ms resolution (nearly every event on its own tick, the worst case).
The peer, when it installs, is the exponential histogram of PyPI ``sketch-oxide``, fed the
same events in order (it cannot take them out of order).
"""

from __future__ import annotations

import math
import time

import numpy as np

from sketches.splittable_histogram import SplittableHistogram, suggest_alpha

N = 2_000_000


def _events(resolution_ms: int, rng) -> np.ndarray:
    seconds = rng.uniform(0, 4 * 3600, N)  # 4 hours of arrivals, a 1-hour window
    late = rng.pareto(1.5, N) * 2.0
    order = np.argsort(seconds + late)
    return (seconds[order] * 1000 // resolution_ms).astype(np.int64)


def _rate(sk, ticks, batch=100_000) -> float:
    sk.update(ticks[:1000])  # compile
    start = time.perf_counter()
    for i in range(0, ticks.size, batch):
        sk.update(ticks[i : i + batch])
    return ticks.size / (time.perf_counter() - start)


def _peer(ticks):
    try:
        import sketch_oxide  # type: ignore[import-not-found]
    except ImportError:
        return None
    eh = sketch_oxide.ExponentialHistogram(3600 * 1000, epsilon=0.05)
    in_order = np.sort(ticks)[:200_000]
    start = time.perf_counter()
    for t in in_order:
        eh.insert(int(t), 1)
    return in_order.size / (time.perf_counter() - start)


def main() -> None:
    rng = np.random.default_rng(0)
    print("| ε | resolution | events/s (1 core) | bytes | paper bound (bytes) |")
    print("|---|---|---|---|---|")
    for res_ms, label in ((1000, "1 s"), (1, "1 ms")):
        ticks = _events(res_ms, rng)
        window = 3600 * 1000 // res_ms
        for eps in (0.01, 0.05, 0.1):
            sk = SplittableHistogram(eps, window + 1)
            rate = _rate(sk, ticks)
            log_w = math.ceil(math.log2(window + 1))
            levels = math.ceil(math.log2(N)) + 1
            # Theorem 2: (M+1) levels × alpha buckets of O(log W + log B) bits, for D_j and D_j+1.
            bound = 2 * levels * suggest_alpha(eps, window + 1) * (2 * log_w + 64) // 8
            print(f"| {eps} | {label} | {rate:,.0f} | {sk.nbytes:,} | {bound:,} |")
    peer = _peer(_events(1, rng))
    print()
    print("peer sketch-oxide ExponentialHistogram:",
          "not installed" if peer is None else f"{peer:,.0f} events/s in order (per-event calls)")


if __name__ == "__main__":
    main()
