"""How often do heavy hitters answer ``complete: false``, and is every answer honest?

Through the API's answer path (``app.answers.answer``), on a stream of 60,000 keyed events
over 1 h (1 s resolution, ε = 0.05, two shards merged, 10 % of events up to 5 min late),
with key sets from skewed to flat: Zipf(1.5) and Zipf(1.1) over 10,000 keys, uniform over
200 keys and uniform over 10,000 keys. Windows 10 s – 1 h (log-uniform), ``at`` at the
clock or anywhere up to the oldest instant kept, φ in {0.001, 0.01, 0.05, 0.1}.

For each answer, against the exact counts (timestamps are binary fractions, so the window
test is exact in floats): ``complete: true`` must list every key with f ≥ φ·N; every
unlisted key must have f ≤ ``unlisted_max`` (both asserted). Reported: the share of
answers with ``complete: false``, the share that really left out a key ≥ φ·N, and
``unlisted_max`` / (φ·N) (median), which says how far from deciding the answer was.

    python bench/bench_heavy_hitters.py [--queries 60]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

KEY_SETS = {
    "Zipf(1.5), 10,000 keys": ("zipf", 1.5, 10_000),
    "Zipf(1.1), 10,000 keys": ("zipf", 1.1, 10_000),
    "uniform, 200 keys": ("flat", None, 200),
    "uniform, 10,000 keys": ("flat", None, 10_000),
}
PHIS = (0.001, 0.01, 0.05, 0.1)


def keys_of(rng, kind, s, support, n):
    if kind == "flat":
        return rng.integers(0, support, n)
    p = 1.0 / np.arange(1, support + 1) ** s
    return rng.choice(support, n, p=p / p.sum())


def measure(name: str, queries: int, rng) -> list[tuple]:
    import pyarrow as pa

    import app.kinds.keyed  # noqa: F401
    from app.answers import answer
    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary

    kind, s, support = KEY_SETS[name]
    config = StreamConfig(max_window=3600.0, epsilon=0.05, delta=0.05, resolution=1.0)
    n, t0 = 60_000, 1_760_000_000
    ts = t0 + np.round(np.sort(rng.uniform(0, 3600, n)) * 1024) / 1024
    ranks = keys_of(rng, kind, s, support, n)
    keys = np.array([f"key-{r}" for r in ranks], dtype=object)
    arrival = ts + np.where(rng.random(n) < 0.1, rng.uniform(0, 300, n), 0.0)
    order = np.argsort(arrival, kind="stable")
    secret = HashSecret(b"bench-heavy-hitters-secret")
    shards = [StreamSummary.create(config, secret) for _ in range(2)]
    for part in np.array_split(order, 30):
        for k, sh in enumerate(shards):
            mine = part[part % 2 == k]
            sh.update_table(pa.table({"ts": ts[mine], "key": pa.array(list(keys[mine]), pa.string()),
                                      "value": np.full(mine.size, np.nan), "weight": np.ones(mine.size)}))
    summary = StreamSummary.create(config, secret)
    for sh in shards:
        summary.merge(sh)
    clock = float(ts.max())
    status = {"clock": clock, "sketch_version": 1, "updated_at": "t", "events": n, "late_dropped": 0}
    rows = []
    for _ in range(queries):
        w = float(np.exp(rng.uniform(math.log(10), math.log(3600))))
        at = clock if rng.random() < 0.5 else clock - float(rng.uniform(0, 3600 - w))
        m = (ts >= at - w) & (ts <= at)
        uniq, freq = np.unique(ranks[m], return_counts=True)
        total = int(m.sum())
        for phi in PHIS:
            r = answer("heavy-hitters", "s", config, summary, status,
                       {"window": repr(w), "at": repr(at), "phi": str(phi)})
            listed = {it["key"] for it in r["items"]}
            unlisted = [(f"key-{u}", int(f)) for u, f in zip(uniq, freq) if f"key-{u}" not in listed]
            missing = [k for k, f in unlisted if f >= phi * total]
            assert all(f <= r["unlisted_max"] for _, f in unlisted), (name, phi, w, at)
            assert not (r["complete"] and missing), (name, phi, w, at, missing)
            level = phi * total
            rows.append((phi, at == clock, r["complete"], bool(missing),
                         r["unlisted_max"] / level if level > 0 else math.nan))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=60, help="windows per key set (each asked at every φ)")
    args = ap.parse_args()
    rng = np.random.default_rng(17)
    print("| key set | φ | `complete: false` (at the clock / before it) | a key ≥ φ·N really left out "
          "| unlisted_max / (φ·N), median |")
    print("|---|---|---|---|---|")
    for name in KEY_SETS:
        rows = measure(name, args.queries, rng)
        for phi in PHIS:
            mine = [r for r in rows if r[0] == phi]
            now = [r for r in mine if r[1]]
            past = [r for r in mine if not r[1]]
            share = lambda rs: f"{sum(not r[2] for r in rs) / len(rs):.0%}" if rs else "n/a"  # noqa: E731
            print(f"| {name} | {phi} | {share(mine)} ({share(now)} / {share(past)}) "
                  f"| {sum(r[3] for r in mine) / len(mine):.0%} "
                  f"| {np.nanmedian([r[4] for r in mine]):.2f} |")
    print("\nevery answer: complete ⇒ no key ≥ φ·N left out; every unlisted key ≤ unlisted_max (asserted)")


if __name__ == "__main__":
    main()
