"""How tight is each answer's interval? Per query kind, over random streams and windows:

* ``width/error`` — (upper − lower) / |estimate − truth| (larger: the interval is loose
  compared with the estimate's actual error; answers with zero error are left out),
* ``half/(eps*est)`` — the half-width over ε·estimate: 1 means the interval is exactly
  as wide as the structure's ε promises.

Usage::

    python bench/bench_tightness.py                 # this checkout, then 93b49dc ("before")
    python bench/bench_tightness.py --only-here     # this checkout only

"Before" runs the same script against ``git archive 93b49dc`` in a temporary directory
(the answer code before issue 13). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "93b49dc"


def measure(queries_per_kind: int) -> dict:
    import pyarrow as pa

    import app.kinds.decayed  # noqa: F401
    import app.kinds.keyed  # noqa: F401
    from app.answers import answer
    from tidemark.streams import StreamConfig
    from tidemark.hash_secret import HashSecret
    from tidemark.summary import StreamSummary

    rng = np.random.default_rng(2024)
    out: dict[str, dict[str, list]] = {}

    def record(kind, r, truth, eps):
        est, b = r["estimate"], r["bound"]
        d = out.setdefault(kind, {"ratio": [], "half": []})
        err = abs(est - truth)
        if err > 1e-9 * max(1.0, abs(truth)):
            d["ratio"].append((b["upper"] - b["lower"]) / err)
        if est > 0:
            d["half"].append((b["upper"] - b["lower"]) / 2 / (eps * est))

    for trial in range(queries_per_kind // 10):
        res = [0.25, 1.0, 1.0, 10.0][trial % 4]
        eps = 0.05
        config = StreamConfig(max_window=3600.0, epsilon=eps, delta=0.05, resolution=res,
                              value_min=0.0, value_max=10.0,
                              decays=[{"kind": "none"}, {"kind": "polynomial", "alpha": 1.5}])
        n = 3000
        ts = np.sort(rng.uniform(10_000, 13_600, n))
        keys = [f"k{int(k)}" for k in rng.zipf(1.5, n) % 50]
        values = rng.uniform(0, 10, n)
        weights = rng.choice([1.0, 2.0, 0.5], n)
        summaries = []
        for shard in range(2):
            s = StreamSummary.create(config, HashSecret(b"bench-tightness-secret"))
            idx = np.arange(shard, n, 2)
            s.update_table(pa.table({"ts": ts[idx], "key": pa.array([keys[i] for i in idx]),
                                     "value": values[idx], "weight": weights[idx]}))
            summaries.append(s)
        summary = summaries[0].merge(summaries[1])
        clock = float(ts.max())
        status = {"clock": clock, "sketch_version": 1, "updated_at": "t", "events": n, "late_dropped": 0}
        for _ in range(10):
            w = float(np.exp(rng.uniform(math.log(0.5), math.log(3000))))
            at = clock - float(rng.uniform(0, 3590 - w)) if rng.random() < 0.5 else clock
            start = Fraction(at) - Fraction(w)
            m = np.array([start <= Fraction(t) <= Fraction(at) for t in ts.tolist()])
            p = {"window": w, "at": at}
            record("count", answer("count", "s", config, summary, status, p), float(m.sum()), eps)
            record("sum", answer("sum", "s", config, summary, status, p), float(weights[m].sum()), eps)
            key = "k1"
            f = float(sum(1 for k, mm in zip(keys, m) if mm and k == key))
            record("frequency", answer("frequency", "s", config, summary, status, {**p, "key": key}), f, eps)
            # decayed sums as of ``at`` (the contract's meaning; before, later events counted)
            upto = ts <= at
            age = at - ts
            tau = float(rng.uniform(0, 10))
            sel = upto & (values >= tau)
            poly = float((weights[sel] * (age[sel] + 1.0) ** -1.5).sum())
            if res == 1.0:  # before, relative polynomial answers were kept only at 1 s
                r = answer("decayed-sum", "s", config, summary, status,
                           {"decay": "polynomial", "alpha": "1.5", "tau": str(tau), "guarantee": "relative",
                            "at": repr(at), "window": "1"})
                record("decayed-sum polynomial (relative)", r, poly, eps)
            r = answer("decayed-sum", "s", config, summary, status,
                       {"decay": "polynomial", "alpha": "1.5", "tau": str(tau), "guarantee": "additive",
                        "at": repr(at), "window": "1"})
            record("decayed-sum polynomial (additive)", r, poly, eps)
            lo, hi = sorted(rng.uniform(0, 10, 2).tolist())
            sel = upto & (values >= lo) & (values <= hi)
            r = answer("decayed-range-sum", "s", config, summary, status,
                       {"decay": "none", "lo": str(lo), "hi": str(hi), "guarantee": "relative",
                        "at": repr(at), "window": "1"})
            record("decayed-range-sum none (relative)", r, float(weights[sel].sum()), eps)
    return {k: {name: [float(np.median(v)) if v else math.nan, float(np.percentile(v, 99)) if v else math.nan]
                for name, v in d.items()} for k, d in out.items()}


def run_in(code_dir: Path, queries: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(queries)],
                          cwd=code_dir, env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(x: float) -> str:
    return "n/a" if x != x else (f"{x:.3g}" if x < 1000 else f"{x:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--queries", type=int, default=200, help="queries per kind")
    ap.add_argument("--only-here", action="store_true")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    after = run_in(ROOT, args.queries)
    before = {}
    if not args.only_here:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            before = run_in(Path(tmp), args.queries)
    print("| kind | width/error median (p99), before | after | half/(ε·est) median (p99), before | after |")
    print("|---|---|---|---|---|")
    for kind, a in after.items():
        b = before.get(kind, {"ratio": [math.nan] * 2, "half": [math.nan] * 2})
        cells = [f"{fmt(x['ratio'][0])} ({fmt(x['ratio'][1])})" for x in (b, a)]
        cells += [f"{fmt(x['half'][0])} ({fmt(x['half'][1])})" for x in (b, a)]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
