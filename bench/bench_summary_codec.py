"""Cost of writing and reading one stream summary, whole and part by part (issue #22).

    .venv/bin/python bench/bench_summary_codec.py [--batches 600] [--compare OTHER_TREE]

The worker rewrites one summary per (stream, shard) that received events each micro-batch:
it decodes the summary from its state-store blob (unless the Python worker kept it), inserts
the events, encodes it again and publishes it; the API decodes published segments with the
same code. This times those steps on the typical small stream of issue #22 (max_window 1 h,
ε = δ = 0.05, events with ``ts`` and one of 1,000 string keys, no value; parts count, sum,
distinct, keys, key_candidates; about 150 KB), fed ``--batches`` batches of 1,000 events.

``--compare DIR`` runs the same measurement on another checkout (e.g. the previous main) in
alternating subprocesses, so before and after share the machine's load; the figures are the
best of the rounds (the machine is shared: the minimum is the least disturbed run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best_ms(fn, repeat: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat * 1000)
    return best


def measure(batches: int, repeat: int) -> dict:
    """Figures of the tree first on ``sys.path`` (run in a fresh process)."""
    import numpy as np
    import pyarrow as pa

    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary, warm_up

    warm_up()
    cfg = StreamConfig(max_window="1h", epsilon=0.05, delta=0.05)
    secret = HashSecret(b"x" * 32)
    rng = np.random.default_rng(0)

    def table(t0: float, n: int) -> pa.Table:
        ts = t0 + np.sort(rng.random(n))
        keys = [f"k{k}" for k in rng.integers(0, 1000, n)]
        return pa.table({"ts": pa.array(ts), "key": pa.array(keys),
                         "value": pa.array(np.full(n, np.nan)), "weight": pa.array(np.ones(n))})

    s = StreamSummary.create(cfg, secret)
    t = 1.7e9
    for i in range(batches):
        s.update_table(table(t + i, 1000))
    blob, sizes = s.encode()
    StreamSummary.from_bytes(blob, secret)  # load every kernel before timing
    out = {"bytes": len(blob), "sizes": sizes,
           "decode": _best_ms(lambda: StreamSummary.from_bytes(blob, secret), repeat),
           "encode": _best_ms(s.encode, repeat), "parts": {}}
    for name, part in s.parts.items():
        b = part.to_bytes()
        cls = type(part)
        out["parts"][name] = {"encode": _best_ms(part.to_bytes, repeat),
                              "decode": _best_ms(lambda: cls.from_bytes(b), repeat)}
    tb = table(t + batches + 1, 500)
    out["update500"] = _best_ms(lambda: s.update_table(tb), repeat)
    return out


def _run(tree: str, batches: int, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--batches", str(batches),
                          "--repeat", str(repeat)], env=env, cwd=tree, capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _merge_best(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    out = dict(b)
    for k in ("decode", "encode", "update500"):
        out[k] = min(a[k], b[k])
    out["parts"] = {n: {k: min(a["parts"][n][k], v) for k, v in p.items()} for n, p in b["parts"].items()}
    return out


def _table(rows: list[tuple[str, dict]]) -> str:
    names = list(rows[0][1]["parts"])
    head = "| step | " + " | ".join(label for label, _ in rows) + " |"
    lines = [head, "|---" * (len(rows) + 1) + "|"]
    for key in ("decode", "encode", "update500"):
        lines.append(f"| summary {key} ms | " + " | ".join(f"{r[key]:.2f}" for _, r in rows) + " |")
    for n in names:
        for key in ("decode", "encode"):
            lines.append(f"| {n} {key} ms | " + " | ".join(f"{r['parts'][n][key]:.3f}" for _, r in rows) + " |")
    lines.append("| blob bytes | " + " | ".join(f"{r['bytes']:,}" for _, r in rows) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="alternating subprocess rounds per tree")
    ap.add_argument("--compare", help="another checkout to measure in the same run (before)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.batches, args.repeat)))
        return
    trees = ([("before", os.path.abspath(args.compare))] if args.compare else []) + [("this tree", ROOT)]
    best: dict[str, dict | None] = {label: None for label, _ in trees}
    for _ in range(args.rounds):
        for label, tree in trees:
            best[label] = _merge_best(best[label], _run(tree, args.batches, args.repeat))
    rows = [(label, best[label]) for label, _ in trees]
    if args.compare and rows[0][1]["bytes"] != rows[1][1]["bytes"]:
        print("WARNING: the two trees wrote blobs of different sizes")
    print(_table(rows))


if __name__ == "__main__":
    main()
