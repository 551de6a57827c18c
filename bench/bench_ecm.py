"""Benchmark of the ECM family: batched ingest per core, serialized size, observed error.

    .venv/bin/python bench/bench_ecm.py [--events N]

Stream: N events over 100 K distinct keys, Zipf(1.1), 20 events per tick, 10 % of them
arriving late by up to half the window (the in-order peers get the same events sorted).
Peers, timed on the same events in the same run when installed:

* ``probstructs.ExponentialCountMinSketch`` (C++ ECM-sketch with EH cells; one Python
  call per event, in-order ticks only, no serialization),
* DataSketches ``frequent_items_sketch`` (not windowed: it is fed only the events of the
  query window, so its errors are for that window's stream).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from sketches_extra.dyadic import DyadicECM
from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary


def id_of(rank) -> int:
    """The uint64 id of a key rank (the same scattering as ``make_stream``)."""
    return int((np.uint64(rank) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xABCDEF))


def make_stream(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    support = 100_000
    p = 1.0 / np.arange(1, support + 1) ** 1.1
    ranks = rng.choice(support, n, p=p / p.sum())
    ids = (ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0xABCDEF)
    ticks = np.arange(n, dtype=np.int64) // 20
    window = int(ticks[-1] // 2)
    late = rng.random(n) < 0.1
    ticks_async = ticks.copy()
    ticks_async[late] -= rng.integers(0, window // 2, int(late.sum()))
    return ranks, ids, ticks, ticks_async, window


def observed(est_fn, ranks, ticks, lo, hi, probe):
    m = (ticks >= lo) & (ticks <= hi)
    f = np.bincount(ranks[m], minlength=100_000)
    n = f.sum()
    errs = np.array([abs(est_fn(r) - f[r]) / n for r in probe])
    return float(errs.mean()), float(errs.max())


def time_batched(make, ticks, ids, chunk=200_000):
    warm = make()
    warm.update(ticks[:1000], ids[:1000])  # compile / load the kernels once
    sk = make()
    t0 = time.perf_counter()
    for i in range(0, len(ticks), chunk):
        sk.update(ticks[i:i + chunk], ids[i:i + chunk])
    return sk, len(ticks) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=2_000_000)
    args = ap.parse_args()
    ranks, ids, ticks, ticks_async, window = make_stream(args.events)
    rng = np.random.default_rng(2)
    probe = np.concatenate([np.arange(50), rng.integers(50, 100_000, 50)])
    hi = int(ticks[-1])
    lo = hi - window + 1
    rows = []
    for eps in (0.05, 0.1):
        sk, rate = time_batched(lambda: ECMSketch(eps, eps, window), ticks_async, ids)
        cover = 0
        for r in probe:
            e = sk.frequency(id_of(r), lo, hi)
            f = int(((ticks_async >= lo) & (ranks == r)).sum())
            cover += e.lower <= f <= e.upper
        mean, mx = observed(lambda r: sk.frequency(id_of(r), lo, hi).estimate, ranks, ticks_async, lo, hi, probe)
        rows.append(("ECMSketch (ours, async)", eps, rate, sk.nbytes, mean, mx, f"{cover}/{len(probe)}", rate))
        ours = rate
        sk2, rate2 = time_batched(lambda: ECMSketch(eps, eps, window), ticks, ids)
        mean2, mx2 = observed(lambda r: sk2.frequency(id_of(r), lo, hi).estimate, ranks, ticks, lo, hi, probe)
        rows.append(("ECMSketch (ours, in order)", eps, rate2, sk2.nbytes, mean2, mx2, "", ours))
        try:
            import probstructs

            n_peer = min(len(ticks), 1_000_000)
            keys = [str(int(x)) for x in ids[:n_peer]]
            tk = ticks[:n_peer].tolist()
            pe = probstructs.ExponentialCountMinSketch(sk.width, sk.depth, window)
            t0 = time.perf_counter()
            for k, t in zip(keys, tk):
                pe.inc(k, t, 1)
            prate = n_peer / (time.perf_counter() - t0)
            phi = tk[-1]
            plo = phi - window + 1
            pm, px = observed(lambda r: pe.get(str(id_of(r)), window, phi), ranks[:n_peer],
                              ticks[:n_peer], plo, phi, probe)
            rows.append((f"probstructs ECM (in order, {n_peer // 1000}K ev)", eps, prate, None, pm, px, "", ours))
        except ImportError:
            rows.append(("probstructs ECM: not installed", eps, None, None, None, None, "", ours))
        try:
            import datasketches

            lg = max(3, math.ceil(math.log2(3.5 / eps)))  # error ~ 3.5 N / max_k
            fi = datasketches.frequent_items_sketch(lg)
            m = (ticks >= lo) & (ticks <= hi)
            wkeys = [str(int(x)) for x in ids[m]]
            t0 = time.perf_counter()
            for k in wkeys:
                fi.update(k)
            frate = len(wkeys) / (time.perf_counter() - t0)
            fm, fx = observed(lambda r: fi.get_estimate(str(id_of(r))), ranks, ticks, lo, hi, probe)
            rows.append((f"datasketches frequent_items lg_k={lg} (window only, not windowed)", eps, frate,
                         fi.get_serialized_size_bytes(datasketches.PyStringsSerDe()), fm, fx, "", ours))
        except ImportError:
            rows.append(("datasketches: not installed", eps, None, None, None, None, "", ours))
    dy, drate = time_batched(lambda: DyadicECM(0.1, 0.1, window, 16), ticks_async, ids >> np.uint64(48))
    rows.append(("DyadicECM levels=16", 0.1, drate, dy.nbytes, None, None, "", drate))
    kd = KeyDictionary(64, window)
    keys = np.array([str(int(x)) for x in ids], dtype=object)
    t0 = time.perf_counter()
    for i in range(0, len(ids), 200_000):
        kd.update(ticks_async[i:i + 200_000], keys[i:i + 200_000].tolist(), ids=ids[i:i + 200_000])
    krate = len(ids) / (time.perf_counter() - t0)
    rows.append(("KeyDictionary capacity=64", 0.1, krate, kd.nbytes, None, None, "", krate))

    def fmt(v, spec):
        return "n/a" if v is None else format(v, spec)

    print(f"{args.events} events, 100K keys Zipf(1.1), window {window} ticks; errors are |est - f| / N "
          f"over 50 top + 50 random keys, N = window count\n")
    print("| sketch | eps = delta | ingest ev/s (1 core) | vs ours | bytes | mean err | max err | bracket holds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, eps, rate, nbytes, mean, mx, cover, ours in rows:
        ratio = "" if rate is None else f"{rate / ours:.2f}x"
        print(f"| {name} | {eps} | {fmt(rate, ',.0f')} | {ratio} | {fmt(nbytes, ',')} | "
              f"{fmt(mean, '.4f')} | {fmt(mx, '.4f')} | {cover} |")


if __name__ == "__main__":
    main()
