"""Windowed quantiles against DDSketch and KLL, one run, same data; brackets before and after
they were read from one consistent world per side.

Lognormal latencies (median 30 ms, spanning about 0.1 ms – 10 s, kept to 0.1 ms so that
values tie), 1 s ticks, 10 % of events arriving up to 10 minutes late, fed in arrival order
in batches. DDSketch (α = 0.01) and KLL (k = 200) cannot window: they are given the exact
events of each window (their best case).

Brackets: windows of 10 s, 60 s, 5 min, 15 min and 1 h ending at the clock and 15 minutes
before it (the sketch keeps 75 min for that), q in {0.5, 0.9, 0.99, 0.999}, asked at 20
clocks (after each of the last 20 batches of 1,000 events, so that window edges fall
anywhere): whether every bracket holds the true quantile, and the relative width
(upper − lower over the true value). "Before" is the sketch as it was (collapsing at ε/8)
read with the earlier rule (every straddling event on both sides at once): both kept only
here (``old_sketch``, ``old_bracket``), fed the same events in the same run; "after" is
the sketch as it answers now (collapsing at ε/32, one consistent world per side). Targets (issue 21): at the clock, windows
≥ 60 s with ≥ 1,000 events: p99 and p99.9 ≤ 5 %, median over all q ≤ 5 %; 15 minutes
before the clock: median ≤ 10 %.

Speed: update events/s with batches of 20,000 and 5,000 (1 h max_window); and the
per-micro-batch cycle of the pipeline on the full 1 h summary: ``from_bytes`` +
``update(5,000 events)`` + ``to_bytes``. Run: ``python bench/bench_quantiles.py
[events_per_second] [hours]``.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from fractions import Fraction

import numpy as np

import sketches.windowed_quantiles as wq
from sketches.windowed_quantiles import WindowedQuantiles

QS = (0.5, 0.9, 0.99, 0.999)
WINDOWS = (10, 60, 300, 900, 3600)
BEFORE_CLOCK = (0, 900)  # the window ends at the clock, or 15 minutes before it
KEEP = 4501              # ticks the bracket sketch keeps: a 1 h window 15 min back
CLOCKS = 20


@contextmanager
def collapse_share(share: float):
    """Sketches built inside collapse at ``share``·ε (before issue 21: 1/8; kept here only)."""
    now, wq.COLLAPSE_SHARE = wq.COLLAPSE_SHARE, share
    try:
        yield
    finally:
        wq.COLLAPSE_SHARE = now


def old_sketch(keep: int) -> WindowedQuantiles:
    """The sketch as it was before issue 21: collapsing at ε/8."""
    with collapse_share(1 / 8):
        return WindowedQuantiles(0.05, keep, 0.01)


def old_bracket(table, q: float) -> tuple[float, float]:
    """The rule before issue 21 (kept here only, to compare): the lower bound with the
    smallest count, the upper with the largest, each against ranks that put every
    straddling event on either side at once."""
    fq = Fraction(repr(q))
    need_low = max(math.ceil(fq * table.n_lower), 1)
    need_high = max(math.ceil(fq * table.n_upper), 1)
    last = table.keys.size - 1
    j_lo = min(int(np.searchsorted(table.cu, need_low)), last)
    j_hi = min(int(np.searchsorted(table.cl, need_high)), last)
    return float(table.lo_edge[j_lo]), float(table.hi_edge[j_hi])


def truth(values: np.ndarray, q: float) -> float:
    v = np.sort(values)
    return float(v[max(math.ceil(Fraction(repr(q)) * v.size), 1) - 1])


def make_stream(rate: float, hours: float, seed: int = 7):
    rng = np.random.default_rng(seed)
    n = int(rate * hours * 3600)
    ts = np.sort(rng.uniform(0, hours * 3600, n))
    values = np.round(np.clip(rng.lognormal(math.log(0.03), 1.5, n), 1e-4, 10.0), 4)  # 0.1 ms: ties
    arrival = ts.copy()
    late = rng.random(n) < 0.10
    arrival[late] += rng.uniform(0, 600, late.sum())
    order = np.argsort(arrival, kind="stable")
    return np.floor(ts[order]).astype(np.int64), values[order]


def feed(ticks, values, batch, keep=3601):
    sk = WindowedQuantiles(0.05, keep, 0.01)
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
    print(f"events {ticks.size:,} over {hours:g} h ({rate:g}/s), 10 % late up to 10 min")
    for label, share in (("before (ε/8)", 1 / 8), ("after (ε/32 in the 2^13 recent ticks, ε/8 behind)", wq.COLLAPSE_SHARE)):
        with collapse_share(share):
            _, speed_5k = feed(ticks, values, 5_000)
            sk, speed_20k = feed(ticks, values, 20_000)
            per_cycle = cycle(sk, ticks, values, sk.clock)
        print(f"windowed quantiles {label} (ε = 0.05, α = 0.01): {speed_20k / 1e6:.2f} M events/s "
              f"(batches of 20 k), {speed_5k / 1e6:.2f} M events/s (5 k); {sk.nbytes:,} bytes; "
              f"from_bytes + update(5 k) + to_bytes {per_cycle * 1e3:.2f} ms "
              f"({5000 / per_cycle / 1e6:.2f} M events/s)")

    # Brackets at CLOCKS clocks: the last batches of 1,000 events, fed one by one.
    head = ticks.size - CLOCKS * 1000
    sk, _ = feed(ticks[:head], values[:head], 20_000, KEEP)
    before = old_sketch(KEEP)
    for i in range(0, head, 20_000):
        before.update(ticks[i : min(i + 20_000, head)], values[i : min(i + 20_000, head)])
    stats = {(w, back, q): [] for w in WINDOWS for back in BEFORE_CLOCK for q in QS}
    for i in range(head, ticks.size, 1000):
        sk.update(ticks[i : i + 1000], values[i : i + 1000])
        before.update(ticks[i : i + 1000], values[i : i + 1000])
        seen_t, seen_v = ticks[: i + 1000], values[: i + 1000]
        for back in BEFORE_CLOCK:
            hi = sk.clock - back
            for w in WINDOWS:
                lo = hi - w + 1
                sel = seen_v[(seen_t >= lo) & (seen_t <= hi)]
                table = before.rank_table(lo, hi)
                for q, b in zip(QS, sk.quantiles(QS, lo, hi)):
                    true = truth(sel, q)
                    old_lo, old_hi = old_bracket(table, q)
                    stats[w, back, q].append((b.lower <= true <= b.upper, (b.upper - b.lower) / true,
                                              old_lo <= true <= old_hi, (old_hi - old_lo) / true,
                                              abs(b.estimate - true) / true, b.rank_error / sel.size, sel.size))
    print(f"\nbrackets: {KEEP} ticks kept; bytes before {before.nbytes:,}, after {sk.nbytes:,}")
    print_brackets(stats)
    compare_at_clock(sk, ticks, values)


def print_brackets(stats) -> None:
    print()
    print("| window | ends | events | q | inside, after (before) | width median, before | after "
          "| width worst, before | after | Δ/n_w worst |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for back in BEFORE_CLOCK:
        for w in WINDOWS:
            for q in QS:
                rows = stats[w, back, q]
                new, old = [r[1] for r in rows], [r[3] for r in rows]
                print(f"| {fmt_w(w)} | {'clock' if back == 0 else f'clock − {back // 60} min'} "
                      f"| {int(np.median([r[6] for r in rows])):,} | {q} "
                      f"| {sum(r[0] for r in rows)}/{len(rows)} ({sum(r[2] for r in rows)}/{len(rows)}) "
                      f"| {np.median(old):.2%} | **{np.median(new):.2%}** | {max(old):.2%} | {max(new):.2%} "
                      f"| {max(r[5] for r in rows):.2%} |")
    assert all(r[0] and r[2] for rows in stats.values() for r in rows), "a bracket missed its true quantile"
    # The targets.
    big = [(k, rows) for k, rows in stats.items() if k[1] == 0 and k[0] >= 60 and min(r[6] for r in rows) >= 1000]
    tails = [r[1] for (w, back, q), rows in big if q >= 0.99 for r in rows]
    tail, over = max(tails), sum(x > 0.05 for x in tails)
    at_clock = float(np.median([r[1] for _, rows in big for r in rows]))
    past = {w: [r[1] for (w2, b, q), rows in stats.items() if b == 900 and w2 == w for r in rows]
            for w in WINDOWS if w >= 60}
    back = float(np.median([x for xs in past.values() for x in xs]))
    per_window = ", ".join(f"{fmt_w(w)} {np.median(xs):.2%}" for w, xs in past.items())
    print(f"\ntargets: at the clock, windows ≥ 60 s with ≥ 1,000 events: p99/p99.9 worst width "
          f"{tail:.2%} (≤ 5 %; {over} of {len(tails)} above), median over all q {at_clock:.2%} (≤ 5 %); "
          f"15 min before the clock, windows ≥ 60 s, median {back:.2%} (≤ 10 %; per window: {per_window})")


def fmt_w(w: int) -> str:
    return f"{w} s" if w < 60 else (f"{w // 60} min" if w < 3600 else f"{w // 3600} h")


def compare_at_clock(sk, ticks, values) -> None:
    from datasketches import kll_floats_sketch
    from ddsketch import DDSketch

    clock = sk.clock
    print()
    print("| window | events | q | our error | DDSketch error | KLL error |")
    print("|---|---|---|---|---|---|")
    for w in WINDOWS:
        lo = clock - w + 1
        sel = values[(ticks >= lo) & (ticks <= clock)]
        dd = DDSketch(relative_accuracy=0.01)
        for x in sel.tolist():
            dd.add(x)
        kll = kll_floats_sketch(200)
        kll.update(sel.astype(np.float32))
        for q, b in zip(QS, sk.quantiles(QS, lo, clock)):
            true = truth(sel, q)
            print(f"| {fmt_w(w)} | {sel.size:,} | {q} | {abs(b.estimate - true) / true:.2%} "
                  f"| {abs(dd.get_quantile_value(q) - true) / true:.2%} "
                  f"| {abs(kll.get_quantile(q) - true) / true:.2%} |")
    print(f"\nKLL bytes (1 h window): {len(kll.serialize()):,}")


if __name__ == "__main__":
    main()
