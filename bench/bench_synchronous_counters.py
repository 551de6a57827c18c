"""Batched ingest throughput and serialized size of the two in-order window counters.

For ε ∈ {0.01, 0.05, 0.1}: events/s on one core (numba kernels are single-threaded) for
the exponential histogram and the deterministic wave, counting and summing, on batches of
100k in-order events (and on shuffled batches, which are sorted first); serialized bytes
next to the papers' space bounds; the observed error of a full-window query. The peer is
the exponential histogram of PyPI ``sketch-oxide`` (per-event ``insert`` calls: it has no
batch API), timed on a prefix of the same events.

    .venv/bin/python bench/bench_synchronous_counters.py [--events 4000000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from sketches_extra.deterministic_wave import DeterministicWave, suggest_max_window_weight, wave_levels
from sketches_extra.exponential_histogram import ExponentialHistogram, max_buckets

WINDOW = 3_600_000  # one hour of millisecond ticks
BATCH = 100_000


def stream(n: int, seed: int = 0):
    """~1 event per 1.5 ms, bursty (a tenth of the events share a tick), weights 0..1000."""
    rng = np.random.default_rng(seed)
    gaps = rng.geometric(0.4, n) - 1
    gaps[rng.random(n) < 0.1] = 0
    ticks = np.cumsum(gaps).astype(np.int64)
    return ticks, rng.integers(0, 1001, n).astype(np.int64), rng


def ingest_rate(make, ticks, weights, shuffle_rng=None, repeats=3):
    best, sk = math.inf, None
    for _ in range(repeats):
        sk = make()
        batches = []
        for i in range(0, ticks.size, BATCH):
            t, w = ticks[i:i + BATCH], None if weights is None else weights[i:i + BATCH]
            if shuffle_rng is not None:
                p = shuffle_rng.permutation(t.size)
                t, w = t[p], None if w is None else w[p]
            batches.append((t, w))
        start = time.perf_counter()
        for t, w in batches:
            sk.update(t, w)
        best = min(best, time.perf_counter() - start)
    return ticks.size / best, sk


def rel_err(sk, ticks, weights):
    lo = sk.clock - WINDOW
    sel = ticks >= lo
    truth = float(np.count_nonzero(sel) if weights is None else weights[sel].sum())
    e = sk.query(lo, sk.clock)
    assert e.lower <= truth <= e.upper
    return abs(e.estimate - truth) / truth, e.epsilon


def eh_paper_bytes(eps: float, u: int, window: int) -> float:
    """Datar et al. §4: (k/2 + 1)(log2(2U/k) + 1) buckets of log2 N + log2 log2 U bits."""
    k = math.ceil(1 / eps)
    buckets = (k / 2 + 1) * (math.log2(2 * u / k) + 1)
    return buckets * (math.log2(window) + math.log2(math.log2(u))) / 8


def wave_paper_bytes(eps: float, u: int) -> float:
    """Corollary 1: ℓ−1 levels of ⌈(k+1)/2⌉ and one of k+1 items, each a position and a
    rank modulo N' = 2U (2·log2(2U) bits)."""
    k = math.ceil(1 / eps)
    lv = wave_levels(eps, u)
    items = (lv - 1) * math.ceil((k + 1) / 2) + k + 1
    return items * 2 * math.log2(2 * u) / 8


def peer(ticks, eps):
    try:
        import sketch_oxide
    except ImportError:
        return None
    eh = sketch_oxide.ExponentialHistogram(WINDOW, epsilon=eps)
    t = [int(x) for x in ticks]
    start = time.perf_counter()
    for x in t:
        eh.insert(x, 1)
    rate = len(t) / (time.perf_counter() - start)
    est, lo, hi = eh.count(t[-1])  # its window is [now - window, now], as ours
    truth = np.count_nonzero(ticks >= t[-1] - WINDOW)
    return rate, len(eh.serialize()), abs(est - truth) / truth, lo <= truth <= hi


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--peer-stride", type=int, default=10,
                    help="the peer gets every n-th event (same time span, fewer events)")
    args = ap.parse_args()
    ticks, weights, rng = stream(args.events)
    rate_per_tick = 2.5  # generous: bursts put many events on one tick
    u_count = suggest_max_window_weight(rate_per_tick, WINDOW)
    u_sum = suggest_max_window_weight(rate_per_tick, WINDOW, 1000)
    in_window = np.count_nonzero(ticks >= ticks[-1] - WINDOW)
    print(f"{args.events:,} events over {ticks[-1]:,} ticks, window {WINDOW:,} ticks "
          f"({in_window:,} events in the last window); batches of {BATCH:,}\n")

    # warm the compiled kernels
    ExponentialHistogram(0.1, 10).update(ticks[:1000], weights[:1000])
    DeterministicWave(0.1, 10, 10**6).update(ticks[:1000], weights[:1000])

    print("| structure | ε | weights | M events/s | M events/s (shuffled batches) | bytes | "
          "paper bound (bytes) | our size bound | full-window rel. error | reported ε |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps in (0.01, 0.05, 0.1):
        for name in ("exponential-histogram", "deterministic-wave"):
            for label, w in (("count", None), ("sum", weights)):
                if name == "exponential-histogram":
                    def make():
                        return ExponentialHistogram(eps, WINDOW)
                    u = in_window if w is None else int(weights[ticks >= ticks[-1] - WINDOW].sum())
                    paper = eh_paper_bytes(eps, u, WINDOW)
                    ours_bound = f"{max_buckets(eps, u):,} buckets"
                else:
                    uu = u_count if w is None else u_sum
                    def make(uu=uu):
                        return DeterministicWave(eps, WINDOW, uu)
                    paper = wave_paper_bytes(eps, uu)
                    lv = wave_levels(eps, uu)
                    k = math.ceil(1 / eps)
                    ours_bound = f"{(lv - 1) * ((k + 2) // 2) + k + 1:,} items"
                rate, sk = ingest_rate(make, ticks, w)
                rate_sh, _ = ingest_rate(make, ticks, w, rng, repeats=1)
                err, rep = rel_err(sk, ticks, w)
                print(f"| {name} | {eps} | {label} | {rate / 1e6:.1f} | {rate_sh / 1e6:.1f} | "
                      f"{sk.nbytes:,} | {paper:,.0f} | {ours_bound} | {err:.4f} | {rep:.4g} |")

    sub = ticks[::args.peer_stride]
    print(f"\nPeer: sketch-oxide ExponentialHistogram (counting, one insert call per event), "
          f"on every {args.peer_stride}th event ({sub.size:,} events)\n")
    print("| ε | peer M events/s | ours M events/s | ratio ours/peer | peer bytes | ours bytes "
          "| peer rel. error | peer bracket holds | our rel. error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in (0.01, 0.05, 0.1):
        res = peer(sub, eps)
        if res is None:
            print(f"| {eps} | sketch-oxide is not installed | | | | | | | |")
            continue
        p_rate, p_bytes, p_err, p_ok = res
        ours, sk = ingest_rate(lambda: ExponentialHistogram(eps, WINDOW), sub, None)
        err, _ = rel_err(sk, sub, None)
        print(f"| {eps} | {p_rate / 1e6:.2f} | {ours / 1e6:.1f} | {ours / p_rate:.0f}x | "
              f"{p_bytes:,} | {sk.nbytes:,} | {p_err:.4f} | {p_ok} | {err:.4f} |")


if __name__ == "__main__":
    main()
