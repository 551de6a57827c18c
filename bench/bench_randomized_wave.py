"""Randomized wave: batched ingest per core, bytes and observed error, δ = 0.05.

    .venv/bin/python bench/bench_randomized_wave.py

Workload: 2 M events over 4 hours at 1 ms resolution with heavy-tailed lateness (so
arrivals are out of order), keys drawn 70 % uniformly from 1 M ids and 30 % from a Zipf
hot set; the query is the distinct count of the last hour (about 350 k keys, well above
C for every ε, so the randomized path is what is measured). The peer, when it installs,
is Apache DataSketches HLL (``pip install datasketches``), which has no window: it is fed
the same keys (one Python call per key, its only API) and compared with the distinct
count of the whole stream.
"""

from __future__ import annotations

import time

import numpy as np

from sketches.hashing import splitmix64
from sketches.randomized_wave import RandomizedWave

N = 2_000_000
HOUR = 3_600_000  # ticks of 1 ms
DELTA = 0.05


def _events(rng) -> tuple[np.ndarray, np.ndarray]:
    ms = rng.uniform(0, 4 * HOUR, N)
    late = rng.pareto(1.5, N) * 2_000.0
    order = np.argsort(ms + late)
    ticks = ms[order].astype(np.int64)
    ids = np.where(rng.random(N) < 0.7, rng.integers(0, 1_000_000, N), rng.zipf(1.2, N) % 50_000)
    return ticks, splitmix64(ids.astype(np.uint64), seed=7)


REPEATS = 3  # best of: the machine may be shared with another process


def _ingest(eps: float, ticks, keys, batch=100_000) -> tuple[RandomizedWave, float]:
    warm = RandomizedWave(eps, DELTA, HOUR)
    warm.update(ticks[:1000], keys[:1000])  # compile (cached after the first run)
    best = 0.0
    for _ in range(REPEATS):
        sk = RandomizedWave(eps, DELTA, HOUR)
        start = time.perf_counter()
        for i in range(0, N, batch):
            sk.update(ticks[i : i + batch], keys[i : i + batch])
        best = max(best, N / (time.perf_counter() - start))
    return sk, best


def _peer(keys, truth_all):
    try:
        import datasketches  # type: ignore[import-not-found]
    except ImportError:
        return None
    items = keys.view(np.int64).tolist()  # its update takes one Python int at a time
    rate = 0.0
    for _ in range(REPEATS):
        hll = datasketches.hll_sketch(12, datasketches.tgt_hll_type.HLL_8)
        start = time.perf_counter()
        for k in items:
            hll.update(k)
        rate = max(rate, N / (time.perf_counter() - start))
    err = abs(hll.get_estimate() - truth_all) / truth_all
    return rate, err, len(hll.serialize_compact())


def main() -> None:
    rng = np.random.default_rng(0)
    ticks, keys = _events(rng)
    print("| ε | k × C | events/s (1 core) | bytes | window distinct | estimate | "
          "observed error | bracket | query ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    rates = {}
    for eps in (0.01, 0.05, 0.1):
        sk, rate = _ingest(eps, ticks, keys)
        rates[eps] = rate
        lo = sk.clock - HOUR + 1
        truth = np.unique(keys[ticks >= lo]).size
        start = time.perf_counter()
        e = sk.query(lo, sk.clock)
        q_ms = (time.perf_counter() - start) * 1000
        err = abs(e.estimate - truth) / truth
        print(f"| {eps} | {sk.instances} × {sk.capacity:,} | {rate:,.0f} | {sk.nbytes:,} | "
              f"{truth:,} | {e.estimate:,.0f} | {err:.4f} | [{e.lower:,.0f}, {e.upper:,.0f}] "
              f"(conf {e.confidence}) | {q_ms:.1f} |")
    truth_all = np.unique(keys).size
    peer = _peer(keys, truth_all)
    print()
    if peer is None:
        print("peer datasketches HLL: not installed")
    else:
        rate, err, nbytes = peer
        print(f"peer datasketches HLL (lg_k=12, HLL_8, no window, whole stream of {truth_all:,} "
              f"distinct): {rate:,.0f} events/s, observed error {err:.4f}, {nbytes:,} bytes")
        print("speed ratio randomized wave / HLL: "
              + ", ".join(f"ε={e}: {r / rate:.2f}" for e, r in rates.items()))


if __name__ == "__main__":
    main()
