"""Quantile, share and decayed-quantile brackets read from one consistent world per side
(``sketches/windowed_quantiles.py``, module notes **Bracket**) against an exact oracle:
adversarial ties and gaps in values, events on the ticks where nodes are cut, windows at
and before the clock, many shards merged, empty windows. A bracket never misses the truth,
always lies inside the earlier both-sides-at-once bracket, and is strictly narrower where
the straddle decides it."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.windowed_quantiles import WindowedQuantiles
from tests.sketches.test_windowed_quantiles import check_bracket, true_quantile

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
QS = [0.0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0, 0.1234567890123456]  # last: a big denominator


def old_bracket(table, q: float) -> tuple[int, int]:
    """The earlier reading (every straddling event on both sides at once): key indices."""
    fq = Fraction(repr(q))
    need_low = max(math.ceil(fq * table.n_lower), 1)
    need_high = max(math.ceil(fq * table.n_upper), 1)
    last = table.keys.size - 1
    return (min(int(np.searchsorted(table.cu, need_low)), last),
            min(int(np.searchsorted(table.cl, need_high)), last))


@st.composite
def adversarial(draw):
    """Events that make straddling nodes matter: ties (a few values, or one), gaps (values
    at two far ends), a heavy tail, bursts on single ticks, many shards, any order."""
    window = draw(st.sampled_from([16, 64, 200, 1000]))
    n = draw(st.integers(1, 600))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    span = draw(st.integers(1, 3 * window))
    ticks = rng.integers(0, span, n)
    if draw(st.booleans()):
        ticks[rng.random(n) < 0.3] = rng.integers(0, span)  # a burst on one tick
    kind = draw(st.sampled_from(["one", "ties", "gap", "tail", "latency"]))
    if kind == "one":
        values = np.full(n, draw(st.sampled_from([0.0, 1.0, -2.5, 1e-320])))
    elif kind == "ties":
        values = rng.choice([1.0, 2.0, 2.0, 3.0], n)
    elif kind == "gap":
        values = np.where(rng.random(n) < draw(st.sampled_from([0.5, 0.99, 0.999])), 1.0, 1e6)
    elif kind == "tail":
        values = np.where(rng.random(n) < 0.98, rng.lognormal(0, 0.2, n), rng.lognormal(8, 1, n))
    else:
        values = np.round(rng.lognormal(3, 1, n), 1)  # latencies in 0.1 ms: many ties
    shards = draw(st.integers(1, 12))
    eps = draw(st.sampled_from([0.02, 0.1, 0.5]))
    return window, ticks, values, shards, eps, rng


def build(window, ticks, values, shards, eps, rng, accuracy=0.01):
    parts = []
    owner = rng.integers(0, shards, ticks.size)
    for s in range(shards):
        sk = WindowedQuantiles(eps, window, accuracy)
        idx = np.flatnonzero(owner == s)
        for part in np.array_split(rng.permutation(idx), int(rng.integers(1, 4))):
            sk.update(ticks[part], values[part])
        parts.append(sk)
    order = rng.permutation(len(parts))  # any merge order
    merged = parts[order[0]]
    for p in order[1:]:
        merged = merged.merge(parts[p])
    return merged


def cut_ticks(sk):
    """Ticks where a node of two or more ticks begins, ends, or is cut in its middle."""
    first, last = sk._spans()
    wide = last > first
    mid = (first[wide] + last[wide] + 1) // 2
    return sorted({int(x) for x in np.concatenate((first[wide], last[wide] + 1, mid, mid + 1))})


def mid_ticks(sk):
    """A tick in the middle of each node of two or more ticks: a range starting there
    cuts it, so its events straddle."""
    first, last = sk._spans()
    wide = last > first
    return sorted({int(x) for x in (first[wide] + last[wide] + 1) // 2})


def draw_range(data, sk, window):
    clock = sk.clock
    oldest = clock - window + 1
    edges = [t for t in cut_ticks(sk) if oldest <= t <= clock]
    pick = st.sampled_from(edges) if edges and data.draw(st.booleans()) else st.integers(oldest, clock)
    lo = data.draw(pick)
    at_clock = data.draw(st.booleans())
    hi = clock if at_clock else data.draw(st.integers(lo - 1, clock))  # lo - 1: empty range
    return lo, hi


def check_against_truth(sk, ticks, values, lo, hi, inner, truth_mask):
    """Every bracket holds the truth, lies inside the old one, and shares bracket F."""
    if hi < lo:
        return
    checked = check_bracket(sk, ticks, values, lo, hi, QS, inner, vals=values[truth_mask])
    if checked is None:  # no event in the window
        return
    brackets, table, vals = checked
    for q, b in zip(QS, brackets):
        j_lo, j_hi = old_bracket(table, q)
        assert b.lower >= np.nextafter(table.lo_edge[j_lo], -np.inf)
        assert b.upper <= np.nextafter(table.hi_edge[j_hi], np.inf)
    low, high = table.shares()
    sv = np.sort(vals)
    for j in range(table.keys.size):
        share = Fraction(int(np.searchsorted(sv, table.hi_edge[j], side="right")), vals.size)
        assert Fraction(float(low[j])) <= share <= Fraction(float(high[j])), (j, share, low[j], high[j])
        # never wider than the count brackets divided by the count brackets
        assert low[j] >= np.nextafter(table.cl[j] / table.n_upper, -np.inf) * (1 - 1e-15)
        if table.n_lower:
            assert high[j] <= min(1.0, np.nextafter(table.cu[j] / table.n_lower, np.inf)) * (1 + 1e-15)


@settings(SETTINGS, max_examples=2 * SETTINGS.max_examples)
@given(adversarial(), st.data(), st.sampled_from([None, 0.0, 0.5, 1.0]))
def test_brackets_hold_on_adversarial_streams_and_any_share_of_the_edge_ticks(stream, data, edge_share):
    """Adversarial streams and edges; with an ``edge_share``, a window whose edges cut
    ticks: any subset of the edge ticks' events is in it."""
    window, ticks, values, shards, eps, rng = stream
    sk = build(window, ticks, values, shards, eps, rng)
    lo, hi = draw_range(data, sk, window)
    if edge_share is None:
        check_against_truth(sk, ticks, values, lo, hi, None, (ticks >= lo) & (ticks <= hi))
        return
    if hi < lo + 1:
        return
    inner = (lo + 1, hi - 1) if hi - 1 >= lo + 1 else (1, 0)
    keep_edge = rng.random(ticks.size) < edge_share
    edge = (ticks == lo) | (ticks == hi)
    truth = (ticks > lo) & (ticks < hi) | (edge & keep_edge)
    check_against_truth(sk, ticks, values, lo, hi, inner, truth)


@settings(SETTINGS, max_examples=SETTINGS.max_examples // 2)
@given(adversarial(), st.data())
def test_the_brackets_of_many_tables_at_once_are_each_tables_own(stream, data):
    """``brackets_of`` over a batch (empty tables, ranges refused, inner ranges) gives
    each table the brackets it gets alone; and the compiled search (q of small
    denominators) agrees with the one in Python integers (a q of a big denominator in the
    same call sends every q there)."""
    window, ticks, values, shards, eps, rng = stream
    sk = build(window, ticks, values, shards, eps, rng)
    ranges = []
    for _ in range(data.draw(st.integers(1, 12))):
        lo, hi = draw_range(data, sk, window)
        inner = data.draw(st.sampled_from([None, (lo + 1, hi - 1), (1, 0)]))
        ranges.append(((lo, hi), inner if inner is None or inner[0] <= inner[1] or inner == (1, 0) else (1, 0)))
    batch, rows = sk.table_batch(ranges)
    small, big = [0.0, 0.1, 0.5, 0.99, 1.0], [0.1234567890123456]
    compiled, slow = sk.brackets_of(small, batch), sk.brackets_of(small + big, batch)
    for r, row in zip(ranges, rows):
        if not isinstance(row, int):
            continue
        alone = sk.quantiles(small + big, *r[0], r[1])
        assert compiled[row] == alone[:len(small)] and slow[row] == alone, (r, compiled[row], alone)


def test_empty_window_and_empty_sketch_have_no_bracket():
    sk = WindowedQuantiles(0.1, 100)
    assert sk.quantiles(QS, 0, 10) == [None] * len(QS)
    sk.update(np.array([500, 501]), np.array([1.0, 2.0]))
    assert sk.quantiles([0.5], 410, 499) == [None]
    low, high = sk.rank_table(410, 499).shares()
    assert low.size == high.size == 0


def _latency_sketch(seed=7, n=40_000, window=3600):
    """A latency-like stream (lognormal, 0.1 ms ties) over an hour of ticks: nodes are
    collapsed far behind the clock, so windows starting there cut a straddling node."""
    rng = np.random.default_rng(seed)
    ticks = np.sort(rng.integers(0, window, n))
    values = np.round(rng.lognormal(3, 0.8, n), 1)
    sk = WindowedQuantiles(0.05, window, 0.01)
    for part in np.array_split(np.arange(n), 40):
        sk.update(ticks[part], values[part])
    return sk, ticks, values


def test_new_brackets_are_strictly_narrower_where_the_straddle_decides():
    """The tightening cannot regress silently: on a latency stream, windows whose start
    cuts a collapsed node give p99 and p99.9 brackets strictly inside the old ones, a few
    value buckets wide, where the old ones reached the largest value held."""
    sk, ticks, values = _latency_sketch()
    clock = sk.clock
    gamma = sk.gamma
    narrower = 0
    for lo in [t for t in mid_ticks(sk) if t > clock - 3000][::8][:12]:
        table = sk.rank_table(lo, clock)
        if table.rank_error == 0:
            continue
        vals = values[ticks >= lo]
        for q, b in zip([0.99, 0.999], sk.quantiles([0.99, 0.999], lo, clock)):
            j_lo, j_hi = old_bracket(table, q)
            old_width = table.hi_edge[j_hi] - table.lo_edge[j_lo]
            assert b.lower <= true_quantile(vals, q) <= b.upper
            assert b.upper - b.lower <= old_width * (1 + 1e-12)
            if b.upper - b.lower < old_width * 0.5:
                narrower += 1
            assert b.upper / b.lower <= gamma ** 4  # a few buckets: the straddle is ≤ ε'·n
    assert narrower >= 4


def test_decayed_quantile_is_narrower_and_holds():
    sk, ticks, values = _latency_sketch(seed=11, n=20_000)
    at = sk.clock
    m = ticks >= at - 3599
    for f in (lambda a: np.exp2(-a / 300.0), lambda a: (a + 1.0) ** -0.5, lambda a: (a <= 900).astype(float)):
        w = f((at - ticks[m]).astype(float))
        order = np.argsort(values[m])
        cum = np.cumsum(w[order])
        for phi in (0.5, 0.9, 0.99):
            truth = values[m][order][np.searchsorted(cum, phi * cum[-1] * (1 - 1e-12))]
            b = sk.decayed_quantile(phi, f, at)
            assert b.lower <= truth <= b.upper, (phi, truth, b)
            assert b.upper / b.lower <= sk.gamma ** 6, (phi, b)


@SETTINGS
@given(adversarial(), st.data())
def test_decayed_quantile_holds_on_adversarial_streams(stream, data):
    window, ticks, values, shards, eps, rng = stream
    sk = build(window, ticks, values, shards, eps, rng)
    at = data.draw(st.integers(sk.clock - window + 1, sk.clock + 5))
    live = sk.clock - window + 1
    m = (ticks >= live) & (ticks <= at)
    spec = data.draw(st.sampled_from(["exp", "poly", "slide", "none"]))
    f = {"exp": lambda a: np.exp2(-a / 7.0), "poly": lambda a: (a + 1.0) ** -1.5,
         "slide": lambda a: (a <= 10).astype(float), "none": lambda a: np.ones_like(a)}[spec]
    b = sk.decayed_quantile(data.draw(st.sampled_from([0.0, 0.5, 0.99, 1.0])), f, at)
    w = f((at - ticks[m]).astype(float))
    if not m.any() or w.sum() <= 0:
        return
    assert b is not None
    v = values[m]
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    phi = b.q
    need = max(phi * cum[-1], 1e-300)
    # the truth, read generously around float sums: every v whose W(≤v) is within 1e-12 of φ·W
    lo_i = int(np.searchsorted(cum, need * (1 - 1e-12)))
    hi_i = min(int(np.searchsorted(cum, need * (1 + 1e-12))), v.size - 1)
    assert b.lower <= v[order][lo_i] and v[order][hi_i] <= b.upper, (phi, b)


def test_blobs_collapsed_at_the_earlier_share_are_read_and_merged(monkeypatch):
    """Blobs written before issue 21 collapsed at ε/8: they are still accepted, merge with
    sketches collapsing at ε/32, and every bracket still holds."""
    import sketches.windowed_quantiles as wq

    rng = np.random.default_rng(4)
    ticks = np.sort(rng.integers(0, 3000, 30_000))
    values = np.round(rng.lognormal(3, 1, 30_000), 1)
    monkeypatch.setattr(wq, "COLLAPSE_SHARE", wq.ACCEPTED_SHARE)
    old = WindowedQuantiles(0.05, 2000, 0.01)
    old.update(ticks[::2], values[::2])
    monkeypatch.undo()
    new = WindowedQuantiles(0.05, 2000, 0.01)
    new.update(ticks[1::2], values[1::2])
    read = WindowedQuantiles.from_bytes(old.to_bytes())
    assert read.nodes < new.nodes  # the earlier share kept fewer, wider nodes
    merged = read.merge(new)
    clock = merged.clock
    for lo in (clock - 1999, clock - 1500, clock - 700, clock - 10):
        vals = values[ticks >= lo]
        for q, b in zip(QS, merged.quantiles(QS, lo, clock)):
            assert b.lower <= true_quantile(vals, q) <= b.upper
        assert merged.rank_table(lo, clock).rank_error <= 0.05 * wq.ACCEPTED_SHARE * vals.size


def test_rank_error_is_finer_in_the_recent_ticks():
    """Blocks ending in the STRICT_TICKS most recent ticks collapse at ε/32, older ones at
    ε/8: windows starting in the recent ticks read Δ ≤ ε/32·n_w, any window Δ ≤ ε/8·n_w."""
    import sketches.windowed_quantiles as wq

    rng = np.random.default_rng(9)
    span = 3 * wq.STRICT_TICKS
    ticks = np.sort(rng.integers(0, span, 150_000))
    values = np.round(rng.lognormal(3, 1, ticks.size), 1)
    sk = WindowedQuantiles(0.05, span, 0.01)
    for part in np.array_split(np.arange(ticks.size), 30):  # in time order, by batches
        sk.update(ticks[part], values[part])
    clock = sk.clock
    recent = clock - wq.STRICT_TICKS + 1
    wide = sk._lg > 0
    assert wide.any() and (sk._left[wide] < recent).any()  # old nodes were collapsed too
    for lo in list(range(recent, clock, 997)) + list(range(clock - span + 1, recent, 1499)):
        n = int(np.count_nonzero(ticks >= lo))
        share = wq.COLLAPSE_SHARE if lo >= recent else wq.ACCEPTED_SHARE
        assert sk.rank_table(lo, clock).rank_error <= 0.05 * share * n, (lo, recent)
