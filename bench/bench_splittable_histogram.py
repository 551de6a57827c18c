"""Splittable histogram: batched ingest per core, bytes against the paper's space bound,
and the exponential histogram of PyPI ``sketch-oxide`` as a peer.

    .venv/bin/python bench/bench_splittable_histogram.py

Workloads (2 M events over 4 hours, a 1-hour window, batches of 100 000):

* ``1 s``      — 1 s ticks, arrivals late by a Pareto delay (scale 2 s): many events per tick;
* ``1 ms``     — the same at 1 ms ticks: nearly every event on its own tick;
* ``1 ms, 10 min late`` — every event late by up to 10 minutes, uniformly (heavy disorder).

Bytes are ``len(to_bytes())`` after the run; the paper's bound is Theorem 2's
2 intervals × (M + 1) levels × α buckets × (2·log₂ Wp + M) bits, with B the largest
interval total of the run (the tightest B valid for it). The peer only takes in-order
events, one call each (``insert(t, 1)``), so both are timed on the sorted 1 ms events.
"""

from __future__ import annotations

import time

import numpy as np

from sketches.splittable_histogram import SplittableHistogram, paper_space_bits

N = 2_000_000
BATCH = 100_000
HOUR_MS = 3600 * 1000
EPSILONS = (0.01, 0.05, 0.1)


def _workloads(rng) -> dict[str, tuple[np.ndarray, int]]:
    seconds = rng.uniform(0, 4 * 3600, N)
    order = np.argsort(seconds + rng.pareto(1.5, N) * 2.0)
    late_ms = seconds[order] * 1000
    disorder = np.sort(rng.uniform(0, 4 * HOUR_MS, N)) - rng.uniform(0, 600_000, N)
    return {
        "1 s": ((late_ms // 1000).astype(np.int64), 3600),
        "1 ms": (late_ms.astype(np.int64), HOUR_MS),
        "1 ms, 10 min late": (disorder.clip(0).astype(np.int64), HOUR_MS),
    }


def _ingest(sk: SplittableHistogram, ticks: np.ndarray) -> float:
    start = time.perf_counter()
    for i in range(0, ticks.size, BATCH):
        sk.update(ticks[i : i + BATCH])
    return ticks.size / (time.perf_counter() - start)


def _largest_interval_total(ticks: np.ndarray, window: int) -> int:
    wp = 1 << max(0, (window - 1).bit_length())
    return int(np.bincount(ticks // wp).max())


def _check(sk: SplittableHistogram, ticks: np.ndarray) -> float:
    """Worst |Ŷ − S|/S over 50 suffix windows (also asserts the interval)."""
    c = sk.clock
    worst = 0.0
    for lo in np.linspace(c - sk.window + 1, c, 50).astype(np.int64):
        truth = int(np.count_nonzero(ticks >= lo))
        e = sk.query(int(lo), c)
        assert e.lower <= truth <= e.upper, (lo, truth, e)
        worst = max(worst, abs(e.estimate - truth) / truth)
    return worst


def _peer(ticks: np.ndarray, window: int, eps: float):
    try:
        import sketch_oxide  # type: ignore[import-not-found]
    except ImportError:
        return None
    eh = sketch_oxide.ExponentialHistogram(window, epsilon=eps)
    start = time.perf_counter()
    for t in ticks.tolist():
        eh.insert(t, 1)
    rate = ticks.size / (time.perf_counter() - start)
    return rate, len(eh.serialize())


def main() -> None:
    rng = np.random.default_rng(0)
    SplittableHistogram(0.1, 8).update(np.arange(100))  # compile the kernels
    print("| workload | ε | events/s (1 core) | bytes | paper bound (bytes) | bytes / bound "
          "| worst rel. error |")
    print("|---|---|---|---|---|---|---|")
    workloads = _workloads(rng)
    for name, (ticks, window) in workloads.items():
        b = _largest_interval_total(ticks, window)
        for eps in EPSILONS:
            sk = SplittableHistogram(eps, window)
            rate = _ingest(sk, ticks)
            bound = paper_space_bits(eps, window, b) // 8
            # Suffix checks need every event inside the interval pair: all ticks here.
            worst = _check(sk, ticks)
            print(f"| {name} | {eps} | {rate:,.0f} | {sk.nbytes:,} | {bound:,} "
                  f"| {sk.nbytes / bound:.2f} | {worst:.4f} |")

    print()
    in_order = np.sort(workloads["1 ms"][0])[:200_000]
    print("In-order 1 ms events (200 000), the same events for both:")
    print()
    print("| ε | splittable histogram (batched) events/s | sketch-oxide EH (per event) events/s "
          "| ratio | SH bytes | EH bytes |")
    print("|---|---|---|---|---|---|")
    for eps in EPSILONS:
        sk = SplittableHistogram(eps, HOUR_MS)
        ours = _ingest(sk, in_order)
        peer = _peer(in_order, HOUR_MS, eps)
        if peer is None:
            print(f"| {eps} | {ours:,.0f} | sketch-oxide not installed | – | {sk.nbytes:,} | – |")
        else:
            print(f"| {eps} | {ours:,.0f} | {peer[0]:,.0f} | {ours / peer[0]:.1f}× "
                  f"| {sk.nbytes:,} | {peer[1]:,} |")


if __name__ == "__main__":
    main()
