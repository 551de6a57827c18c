"""What one batch of a busy stream costs once its window is full: bytes written and
published, CPU (issue #33).

    .venv/bin/python bench/bench_batch_bytes.py [--windows 1h,7d] [--rate 100] [--batches 20]
        [--compare /work/prev] [--json]

Steady state, not a warm-up: one stream (ε = δ = 0.05, values 0–10,000, one polynomial
decay α = 1.5, resolution 1 s; keys Zipf(1.16) over 10^6 ranks, values log-normal) is
first given its whole ``max_window`` in order at ``--rate`` events/s (fed in batches of
a 360th of the window), then ``--batches`` one-second batches of ``--rate`` events are
timed, each as the worker pays it in Python: the update, the encode, the cut into
published segments (``tidemark.segments.split``) and their digests. Reported per batch:

* **new bytes**: the segments whose digest the previous version did not hold — what the
  publish sends (content-addressed, ``tidemark/segments.py``) and a state store keyed by
  segment would write;
* **manifest**: the JSON naming every segment (the status the publish writes), which
  follows the number of segments;
* the share of the summary those are, by part, and the CPU milliseconds (p50).

``--compare TREE`` runs the same measurement with TREE's code first (this script, that
tree's modules), so both rows come from one invocation on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(window: str, rate: int, batches: int) -> dict:
    import numpy as np
    import pyarrow as pa

    from tidemark import segments
    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary

    cfg = StreamConfig(max_window=window, epsilon=0.05, delta=0.05, value_min=0, value_max=10_000,
                       decays=[{"kind": "polynomial", "alpha": 1.5}], resolution=1.0)
    span = int(cfg.max_window)
    rng = np.random.default_rng(0x33)
    t0 = 1_700_000_000.0

    def events(start: float, seconds: float, n: int) -> pa.Table:
        ts = t0 + start + np.sort(rng.uniform(0, seconds, n))
        keys = rng.zipf(1.16, n) % 1_000_000
        return pa.table({"ts": ts, "key": pa.array([f"k{k}" for k in keys.tolist()]),
                         "value": np.clip(rng.lognormal(6, 1.2, n), 0, 1e4), "weight": np.ones(n)})

    summary = StreamSummary.create(cfg, HashSecret(b"tidemark-bench-secret"))
    step = max(10, span // 360)
    started = time.perf_counter()
    for a in range(0, span + 60, step):
        summary.update_table(events(a, step, rate * step))
    filled = time.perf_counter() - started
    held = {segments.digest(b) for _, b in segments.split(summary.to_bytes())}
    cpu, new, manifest, total, pieces = [], [], [], [], []
    by_part_new, by_part_all = {}, {}
    for i in range(batches):
        table = events(span + 60 + i, 1, rate)
        c = time.process_time()
        summary.update_table(table)
        parts = [(name, segments.digest(b), b) for name, b in segments.split(summary.to_bytes())]
        cpu.append((time.process_time() - c) * 1e3)
        fresh = [(n, b) for n, d, b in parts if d not in held]
        held = {d for _, d, _ in parts}
        new.append(sum(len(b) for _, b in fresh))
        manifest.append(len(json.dumps([[n, d] for n, d, _ in parts], separators=(",", ":"))))
        total.append(sum(len(b) for _, _, b in parts))
        pieces.append(len(parts))
        for n, _, b in parts:
            by_part_all[n.split("@")[0]] = by_part_all.get(n.split("@")[0], 0) + len(b)
        for n, b in fresh:
            by_part_new[n.split("@")[0]] = by_part_new.get(n.split("@")[0], 0) + len(b)
    med = lambda xs: float(np.median(xs))  # noqa: E731
    return {"window": window, "rate": rate, "filled_s": round(filled, 1), "summary_kb": med(total) / 1e3,
            "segments": med(pieces), "new_kb": med(new) / 1e3, "manifest_kb": med(manifest) / 1e3,
            "share_new": med(new) / med(total), "share_with_manifest": (med(new) + med(manifest)) / med(total),
            "cpu_ms_p50": med(cpu), "by_part": {n: [by_part_all[n] / batches / 1e3, by_part_new.get(n, 0) / by_part_all[n]]
                                              for n in by_part_all}}


def run_tree(tree: Path, args) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(HERE / "bench_batch_bytes.py"), "--windows", args.windows, "--rate", str(args.rate),
           "--batches", str(args.batches), "--json", "--here"]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="1h,7d")
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--compare", type=Path, help="another tree, measured first in the same invocation")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.here:
        sys.path.insert(0, os.getcwd())
        print(json.dumps([measure(w, args.rate, args.batches) for w in args.windows.split(",")]))
        return
    rows = []
    for label, tree in ([("compare", args.compare)] if args.compare else []) + [("this tree", HERE.parent)]:
        print(f"measuring {label} ({tree}) ...", file=sys.stderr, flush=True)
        rows += [{"tree": label, **r} for r in run_tree(tree, args)]
    if args.json:
        print(json.dumps(rows))
        return
    print("| tree | window | summary KB | segments | new KB / batch | manifest KB | new / summary | "
          "with manifest | CPU ms p50 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['window']} | {r['summary_kb']:.0f} | {r['segments']:.0f} | {r['new_kb']:.1f} | "
              f"{r['manifest_kb']:.1f} | {100 * r['share_new']:.1f} % | {100 * r['share_with_manifest']:.1f} % | "
              f"{r['cpu_ms_p50']:.1f} |")
    for r in rows:
        parts = ", ".join(f"{n} {kb:.0f} KB {100 * s:.0f} %" for n, (kb, s) in r["by_part"].items())
        print(f"- {r['tree']}, {r['window']}: {parts}")


if __name__ == "__main__":
    main()
