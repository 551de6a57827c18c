"""How tight is each answer's interval? Per query kind, over random streams and windows:

* ``width/error`` — (upper − lower) / |estimate − truth| (larger: the interval is loose
  compared with the estimate's actual error; answers with zero error are left out),
* ``half/(eps*est)`` — the half-width over ε·estimate: 1 means the interval is exactly
  as wide as the structure's ε promises.

Quantiles (issue 21): the relative width (upper − lower) / true value of the ``quantiles``
answer, through the same answer path as the API, on a latency stream (lognormal, kept to
0.1 ms so values tie, timestamps anywhere within 1 s ticks, two shards merged), q in
{0.5, 0.9, 0.99, 0.999}, windows 10 s – 1 h ending at the clock (the default ``at``) or 15
minutes before it; the clock falls anywhere within a 1 s tick, so a window's edges cut
ticks as live queries' do (the events of a cut tick may be in or out: the time grain);
"before" is the answer code of e6eb037 (brackets that put every straddling event on both
sides at once).

Usage::

    python bench/bench_tightness.py                 # this checkout, then 93b49dc / e6eb037 ("before")
    python bench/bench_tightness.py --only-here     # this checkout only
    python bench/bench_tightness.py --quantiles-only

"Before" runs the same script against ``git archive <rev>`` in a temporary directory
(93b49dc: the answer code before issue 13; e6eb037 for quantiles). Prints Markdown tables.
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
QUANTILES_BEFORE = "e6eb037"
QS = (0.5, 0.9, 0.99, 0.999)
Q_WINDOWS = (10, 60, 300, 900, 3600)
Q_BACK = (0, 900)


def measure_quantiles(clocks: int) -> dict:
    """Relative widths of quantile brackets, per (window, seconds before the clock, q)."""
    import pyarrow as pa

    import app.kinds.values  # noqa: F401
    from app.answers import answer
    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary

    rng = np.random.default_rng(21)
    config = StreamConfig(max_window=4510.0, epsilon=0.05, delta=0.05, resolution=1.0,
                          value_min=0.0, value_max=100.0)
    t0, span, rate = 1_760_000_000, 4800, 30
    n = span * rate
    ts = t0 + np.round(np.sort(rng.uniform(0, span, n)) * 1024) / 1024  # exact binary fractions
    values = np.round(np.clip(rng.lognormal(np.log(0.03), 1.5, n), 1e-4, 10.0), 4)
    arrival = ts + np.where(rng.random(n) < 0.1, rng.uniform(0, 600, n), 0.0)
    order = np.argsort(arrival, kind="stable")
    secret = HashSecret(b"bench-tightness-secret")
    shards = [StreamSummary.create(config, secret) for _ in range(2)]
    head = n - clocks * 1000
    out: dict[str, list] = {}
    summary = None
    for start in list(range(0, head, 20_000)) + list(range(head, n, 1000)):
        stop = min(start + (20_000 if start < head else 1000), head if start < head else n)
        idx = order[start:stop]
        for k, s in enumerate(shards):
            mine = idx[idx % 2 == k]
            if mine.size:
                s.update_table(pa.table({"ts": ts[mine], "key": pa.nulls(mine.size, pa.string()),
                                         "value": values[mine], "weight": np.ones(mine.size)}))
        if start < head:
            continue
        summary = StreamSummary.create(config, secret)  # merge folds into its receiver
        for s in shards:
            summary.merge(s)
        seen = order[:stop]
        seen_ts, seen_v = ts[seen], values[seen]
        clock = float(seen_ts.max())
        status = {"clock": clock, "sketch_version": 1, "updated_at": "t", "events": int(stop), "late_dropped": 0}
        for back in Q_BACK:
            at = clock - back  # the default ``at``, and 15 minutes before it
            for w in Q_WINDOWS:
                sel = np.sort(seen_v[(seen_ts >= at - w) & (seen_ts <= at)])
                r = answer("quantiles", "s", config, summary, status,
                           {"window": str(w), "at": repr(at), "q": ",".join(map(str, QS))})
                for q, item in zip(QS, r["items"]):
                    true = float(sel[max(math.ceil(Fraction(repr(q)) * sel.size), 1) - 1])
                    b = item["bound"]
                    out.setdefault(f"{w}/{back}/{q}", []).append(
                        [(b["upper"] - b["lower"]) / true, b["lower"] <= true <= b["upper"], int(sel.size)])
    return out


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


def run_in(code_dir: Path, queries: int, what: str = "--measure") -> dict:
    env = {**os.environ, "PYTHONPATH": str(code_dir)}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), what, str(queries)],
                          cwd=code_dir, env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checkout(rev: str, tmp: str) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
    return Path(tmp)


def quantile_table(after: dict, before: dict) -> None:
    print("| window | ends | events | q | held, before | after | width median, before | after | width worst, before | after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for back in Q_BACK:
        for w in Q_WINDOWS:
            for q in QS:
                key = f"{w}/{back}/{q}"
                a, b = after[key], before.get(key)
                wa = [r[0] for r in a]
                wb = [r[0] for r in b] if b else [math.nan]
                held_b = f"{sum(r[1] for r in b)}/{len(b)}" if b else "n/a"
                ends = "clock" if back == 0 else f"clock − {back // 60} min"
                span = f"{w} s" if w < 60 else (f"{w // 60} min" if w < 3600 else "1 h")
                print(f"| {span} | {ends} | {int(np.median([r[2] for r in a])):,} | {q} | {held_b} "
                      f"| {sum(r[1] for r in a)}/{len(a)} | {np.median(wb):.2%} | **{np.median(wa):.2%}** "
                      f"| {max(wb):.2%} | {max(wa):.2%} |")
    assert all(r[1] for rows in after.values() for r in rows), "a quantile bracket missed the truth"
    for label, rows_of in (("before", before), ("after", after)):
        if not rows_of:
            continue
        big = {k: v for k, v in rows_of.items()
               if k.split("/")[1] == "0" and int(k.split("/")[0]) >= 60 and min(r[2] for r in v) >= 1000}
        tails = [r[0] for k, v in big.items() if float(k.split("/")[2]) >= 0.99 for r in v]
        past = [r[0] for k, v in rows_of.items()
                if k.split("/")[1] == "900" and int(k.split("/")[0]) >= 60 for r in v]
        print(f"\n{label}: at the clock, windows ≥ 60 s with ≥ 1,000 events: p99/p99.9 worst "
              f"{max(tails):.2%} ({sum(x > 0.05 for x in tails)} of {len(tails)} above 5 %), median over all q "
              f"{np.median([r[0] for v in big.values() for r in v]):.2%}; 15 min before the clock, "
              f"windows ≥ 60 s: median {np.median(past):.2%}")


def fmt(x: float) -> str:
    return "n/a" if x != x else (f"{x:.3g}" if x < 1000 else f"{x:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--queries", type=int, default=200, help="queries per kind")
    ap.add_argument("--measure-quantiles", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--clocks", type=int, default=10, help="clocks the quantile brackets are asked at")
    ap.add_argument("--only-here", action="store_true")
    ap.add_argument("--quantiles-only", action="store_true")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    if args.measure_quantiles:
        print(json.dumps(measure_quantiles(args.measure_quantiles)))
        return
    q_after = run_in(ROOT, args.clocks, "--measure-quantiles")
    q_before = {}
    if not args.only_here:
        with tempfile.TemporaryDirectory() as tmp:
            q_before = run_in(checkout(QUANTILES_BEFORE, tmp), args.clocks, "--measure-quantiles")
    quantile_table(q_after, q_before)
    if args.quantiles_only:
        return
    print()
    after = run_in(ROOT, args.queries)
    before = {}
    if not args.only_here:
        with tempfile.TemporaryDirectory() as tmp:
            before = run_in(checkout(BEFORE, tmp), args.queries)
    print("| kind | width/error median (p99), before | after | half/(ε·est) median (p99), before | after |")
    print("|---|---|---|---|---|")
    for kind, a in after.items():
        b = before.get(kind, {"ratio": [math.nan] * 2, "half": [math.nan] * 2})
        cells = [f"{fmt(x['ratio'][0])} ({fmt(x['ratio'][1])})" for x in (b, a)]
        cells += [f"{fmt(x['half'][0])} ({fmt(x['half'][1])})" for x in (b, a)]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
