"""Bytes of a stream summary, part by part, and the cost of one per-batch rewrite.

    .venv/bin/python bench/bench_summary_bytes.py [--json]

The typical stream of issue #11: max_window 7d, ε = δ = 0.05, values 0–10,000, one
polynomial decay α = 1.5, resolution 1 s. Cases:

* ``empty``: a declared stream with no events;
* ``one key``: 10,000 events of one key over 10,000 s, with values;
* ``zipf``: 200,000 events over one hour, keys Zipf(1.16) over 10^6 ranks (≈ 48 K distinct),
  values log-normal clipped to the declared range, weights 1.

Then the per-batch cycle of the worker on the ``zipf`` summary: ``from_bytes`` + update
with 5,000 new events (the hour after) + ``to_bytes``, timed over several batches.
"""

from __future__ import annotations

from tidemark.hash_secret import HashSecret
SECRET = HashSecret(b"tidemark-bench-secret")

import argparse
import json
import time

import numpy as np
import pyarrow as pa

from tidemark.summary import StreamSummary
from tidemark.streams import StreamConfig

CONFIG = StreamConfig(max_window="7d", epsilon=0.05, delta=0.05, value_min=0, value_max=10_000,
                      decays=[{"kind": "polynomial", "alpha": 1.5}], resolution=1.0)
SEED = 0x7D1DE
T0 = 1_700_000_000.0


def events(n: int, keys: np.ndarray, start: float, span: float, rng) -> pa.Table:
    ts = T0 + start + np.sort(rng.uniform(0, span, n))
    values = np.clip(rng.lognormal(6.0, 1.2, n), 0, 10_000)
    return pa.table({"ts": ts, "key": pa.array([f"k{k}" for k in keys], pa.string()),
                     "value": values, "weight": np.ones(n)})


def zipf_keys(n: int, rng) -> np.ndarray:
    return (rng.zipf(1.16, n) % 1_000_000).astype(np.int64)


def cases(rng) -> dict[str, StreamSummary]:
    out = {"empty": StreamSummary.create(CONFIG, SECRET)}
    one = StreamSummary.create(CONFIG, SECRET)
    one.update_table(events(10_000, np.zeros(10_000, np.int64), 0, 10_000, rng))
    out["one key"] = one
    big = StreamSummary.create(CONFIG, SECRET)
    keys = zipf_keys(200_000, rng)
    for i in range(0, 200_000, 20_000):  # as a worker would see it: in batches
        big.update_table(events(20_000, keys[i : i + 20_000], 3600 * i / 200_000, 360, rng))
    out["zipf"] = big
    print(f"zipf case: {len(np.unique(keys)):,} distinct keys")
    return out


def part_bytes(summary: StreamSummary) -> dict[str, int]:
    sizes = {name: len(part.to_bytes()) for name, part in summary.parts.items()}
    sizes["total"] = len(summary.to_bytes())
    return sizes


def cycle(summary: StreamSummary, rng, batches: int = 10, n: int = 5_000) -> dict[str, float]:
    """Seconds per batch of decode, update and encode (medians)."""
    blob = summary.to_bytes()
    dec, upd, enc = [], [], []
    StreamSummary.from_bytes(blob, SECRET).update_table(events(n, zipf_keys(n, rng), 3600, 1, rng))  # warm up
    for b in range(batches):
        table = events(n, zipf_keys(n, rng), 3600 + b * 10, 10, rng)
        t0 = time.perf_counter()
        s = StreamSummary.from_bytes(blob, SECRET)
        t1 = time.perf_counter()
        s.update_table(table)
        t2 = time.perf_counter()
        blob = s.to_bytes()
        t3 = time.perf_counter()
        dec.append(t1 - t0), upd.append(t2 - t1), enc.append(t3 - t2)
    med = lambda xs: float(np.median(xs))  # noqa: E731
    total = med([a + b + c for a, b, c in zip(dec, upd, enc)])
    return {"from_bytes_ms": med(dec) * 1e3, "update_ms": med(upd) * 1e3, "to_bytes_ms": med(enc) * 1e3,
            "cycle_ms": total * 1e3, "events_per_s": n / total}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args()
    rng = np.random.default_rng(11)
    summaries = cases(rng)
    sizes = {case: part_bytes(s) for case, s in summaries.items()}
    timing = cycle(summaries["zipf"], rng)
    if args.json:
        print(json.dumps({"bytes": sizes, "cycle": timing}))
        return
    names = list(sizes["zipf"])
    print("| part | " + " | ".join(sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{sizes[c].get(name, 0):,}" for c in sizes) + " |")
    print()
    print("batch of 5,000 events on the 200,000-event summary (median of 10):")
    print(" | ".join(f"{k} {v:,.1f}" for k, v in timing.items()))


if __name__ == "__main__":
    main()
