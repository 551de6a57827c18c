"""Windowed quantiles against DDSketch and KLL, one run, same data.

Lognormal latencies (median 30 ms, spanning about 0.1 ms – 10 s), 1 s ticks, a 1 h
max_window, 10 % of events arriving up to 10 minutes late, fed in arrival order in batches.
DDSketch (α = 0.01) and KLL (k = 200) cannot window: they are given the exact events of
each window (their best case). For windows ending at the clock of 10 s, 60 s, 10 min and
1 h, and q in {0.5, 0.9, 0.99, 0.999}, asked at 20 clocks (after each of the last 20
batches of 1,000 events, so that window edges fall anywhere): whether every bracket holds
the true quantile, the median and worst relative width (upper − lower over the estimate),
the worst rank error Δ over n_w, and each sketch's relative error at the last clock.

Speed: update events/s with batches of 20,000 and 5,000; and the per-micro-batch cycle
of the pipeline on the full 1 h summary: ``from_bytes`` + ``update(5,000 events)`` +
``to_bytes``. Run: ``python bench/bench_quantiles.py [events_per_second] [hours]``.
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
CLOCKS = 20


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


def feed(ticks, values, batch):
    sk = WindowedQuantiles(0.05, 3601, 0.01)
    start = time.perf_counter()
    for i in range(0, ticks.size, batch):
        sk.update(ticks[i : i + batch], values[i : i + batch])
    return sk, ticks.size / (time.perf_counter() - start)


def cycle(sk, ticks, values, clock, rounds=40, batch=5000):
    """Seconds per from_bytes + update(batch) + to_bytes on a full summary."""
    rng = np.random.default_rng(1)
    blob = sk.to_bytes()
    times = []
    for r in range(rounds):
        pick = rng.integers(0, ticks.size, batch)
        t = clock + 1 + r + (ticks[pick] - ticks[pick].max()) // 600  # now-ish and a little late
        start = time.perf_counter()
        one = WindowedQuantiles.from_bytes(blob)
        one.update(t, values[pick])
        out = one.to_bytes()
        times.append(time.perf_counter() - start)
        assert len(out) > 0
    return float(np.median(times))


def main() -> None:
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    hours = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    ticks, values = make_stream(rate, hours)
    feed(ticks[:3000], values[:3000], 1000)  # compile
    _, speed_5k = feed(ticks, values, 5_000)
    sk, speed_20k = feed(ticks, values, 20_000)
    per_cycle = cycle(sk, ticks, values, sk.clock)
    print(f"events {ticks.size:,} over {hours:g} h ({rate:g}/s), 10 % late up to 10 min")
    print(f"windowed quantiles (ε = 0.05, α = 0.01): {speed_20k / 1e6:.2f} M events/s "
          f"(batches of 20 k), {speed_5k / 1e6:.2f} M events/s (5 k); {sk.nbytes:,} bytes; "
          f"from_bytes + update(5 k) + to_bytes {per_cycle * 1e3:.2f} ms "
          f"({5000 / per_cycle / 1e6:.2f} M events/s)")

    # Brackets at CLOCKS clocks: the last batches of 1,000 events, fed one by one.
    head = ticks.size - CLOCKS * 1000
    sk = WindowedQuantiles(0.05, 3601, 0.01)
    for i in range(0, head, 20_000):
        sk.update(ticks[i : min(i + 20_000, head)], values[i : min(i + 20_000, head)])
    stats = {(w, q): [] for w in WINDOWS for q in QS}
    for i in range(head, ticks.size, 1000):
        sk.update(ticks[i : i + 1000], values[i : i + 1000])
        seen_t, seen_v = ticks[: i + 1000], values[: i + 1000]
        clock = sk.clock
        for w in WINDOWS:
            lo = clock - w + 1
            sel = seen_v[(seen_t >= lo) & (seen_t <= clock)]
            for q, b in zip(QS, sk.quantiles(QS, lo, clock)):
                true = truth(sel, q)
                stats[w, q].append((b.lower <= true <= b.upper, b.relative_width,
                                    abs(b.estimate - true) / true, b.rank_error / sel.size, sel.size))

    from datasketches import kll_floats_sketch
    from ddsketch import DDSketch

    clock = sk.clock
    print()
    print("| window | events | q | inside (20 clocks) | width median | width worst | Δ/n_w worst "
          "| our error | DDSketch error | KLL error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for w in WINDOWS:
        lo = clock - w + 1
        sel = values[(ticks >= lo) & (ticks <= clock)]
        dd = DDSketch(relative_accuracy=0.01)
        for x in sel.tolist():
            dd.add(x)
        kll = kll_floats_sketch(200)
        kll.update(sel.astype(np.float32))
        for q in QS:
            rows = stats[w, q]
            true = truth(sel, q)
            widths = [r[1] for r in rows]
            print(f"| {w} s | {sel.size:,} | {q} | {sum(r[0] for r in rows)}/{len(rows)} "
                  f"| {np.median(widths):.2%} | {max(widths):.2%} | {max(r[3] for r in rows):.2%} "
                  f"| {rows[-1][2]:.2%} | {abs(dd.get_quantile_value(q) - true) / true:.2%} "
                  f"| {abs(kll.get_quantile(q) - true) / true:.2%} |")
    assert all(r[0] for rows in stats.values() for r in rows), "a bracket missed its true quantile"
    print(f"\nKLL bytes (1 h window): {len(kll.serialize()):,}")


if __name__ == "__main__":
    main()
