"""Windowed quantiles against DDSketch and KLL, one run, same data.

Lognormal latencies (median 30 ms, spanning about 0.1 ms – 10 s), 1 s ticks, a 1 h
max_window, 10 % of events arriving up to 10 minutes late, fed in arrival order in batches.
DDSketch (α = 0.01) and KLL (k = 200) cannot window: they are given the exact events of
each window (their best case). For windows ending at the clock of 10 s, 60 s, 10 min and
1 h, and q in {0.5, 0.9, 0.99, 0.999}: our bracket's relative width (upper − lower over
the estimate), whether it holds the true quantile, and each sketch's observed relative
error. Run: ``python bench/bench_quantiles.py [events_per_second] [hours]``.
"""

from __future__ import annotations

import math
import sys
import time
from fractions import Fraction

import numpy as np

from sketches.windowed_quantiles import WindowedQuantiles

QS = (0.5, 0.9, 0.99, 0.999)
WINDOWS = (10, 60, 600, 3600)


def truth(values: np.ndarray, q: float) -> float:
    v = np.sort(values)
    return float(v[max(math.ceil(Fraction(repr(q)) * v.size), 1) - 1])


def make_stream(rate: float, hours: float, seed: int = 7):
    rng = np.random.default_rng(seed)
    n = int(rate * hours * 3600)
    ts = np.sort(rng.uniform(0, hours * 3600, n))
    values = np.clip(rng.lognormal(math.log(0.03), 1.5, n), 1e-4, 10.0)
    arrival = ts.copy()
    late = rng.random(n) < 0.10
    arrival[late] += rng.uniform(0, 600, late.sum())
    order = np.argsort(arrival, kind="stable")
    return np.floor(ts[order]).astype(np.int64), values[order]


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    hours = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    ticks, values = make_stream(rate, hours)
    sk = WindowedQuantiles(0.05, 3601, 0.01)
    warm = WindowedQuantiles(0.05, 3601, 0.01)
    warm.update(ticks[:2000], values[:2000])  # compile
    batch = 20_000
    start = time.perf_counter()
    for i in range(0, ticks.size, batch):
        sk.update(ticks[i : i + batch], values[i : i + batch])
    elapsed = time.perf_counter() - start
    print(f"events {ticks.size:,} over {hours:g} h ({rate:g}/s), 10 % late up to 10 min")
    print(f"windowed quantiles: {ticks.size / elapsed / 1e6:.2f} M events/s, {sk.nbytes:,} bytes "
          f"(ε = 0.05, α = 0.01)")

    from datasketches import kll_floats_sketch
    from ddsketch import DDSketch

    clock = sk.clock
    rows = []
    dd_time = kll_time = 0.0
    dd_events = 0
    for w in WINDOWS:
        lo = clock - w + 1
        sel = values[(ticks >= lo) & (ticks <= clock)]
        brackets = sk.quantiles(QS, lo, clock)
        t0 = time.perf_counter()
        dd = DDSketch(relative_accuracy=0.01)
        for x in sel.tolist():
            dd.add(x)
        dd_time += time.perf_counter() - t0
        dd_events += sel.size
        t0 = time.perf_counter()
        kll = kll_floats_sketch(200)
        kll.update(sel.astype(np.float32))
        kll_time += time.perf_counter() - t0
        for q, b in zip(QS, brackets):
            true = truth(sel, q)
            rows.append((w, sel.size, q, b.lower <= true <= b.upper, b.relative_width,
                         abs(b.estimate - true) / true, b.rank_error,
                         abs(dd.get_quantile_value(q) - true) / true,
                         abs(kll.get_quantile(q) - true) / true, len(kll.serialize())))
    print(f"DDSketch {dd_events / dd_time / 1e6:.2f} M events/s (one Python call per event); "
          f"KLL {dd_events / kll_time / 1e6:.2f} M events/s (NumPy batch)")
    print()
    print("| window | events | q | inside | bracket width | our error | Δ (events) | DDSketch error | KLL error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w, n, q, inside, width, err, delta, dde, klle, _ in rows:
        print(f"| {w} s | {n:,} | {q} | {'yes' if inside else 'NO'} | {width:.2%} | {err:.2%} | {delta} "
              f"| {dde:.2%} | {klle:.2%} |")
    print(f"\nKLL bytes (1 h window): {rows[-1][-1]:,}")
    assert all(r[3] for r in rows), "a bracket missed its true quantile"


if __name__ == "__main__":
    main()
