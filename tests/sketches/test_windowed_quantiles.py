"""Windowed quantiles against an exact oracle: the true quantile is always inside the
bracket, and the bracket is as narrow as ε (ranks) and α (values) promise."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, HEADER_SIZE, IncompatibleSketchError, SketchError
from sketches.windowed_quantiles import COLLAPSE_SHARE, WindowedQuantiles

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def true_quantile(values: np.ndarray, q: float) -> float:
    """The smallest v with at least max(q·n, 1) events of value ≤ v (q as written)."""
    v = np.sort(values)
    need = max(math.ceil(Fraction(repr(q)) * v.size), 1)
    return float(v[need - 1])


def true_rank(values: np.ndarray, x: float) -> int:
    return int(np.count_nonzero(values <= x))


@st.composite
def streams(draw):
    """Out-of-order events with bursts, duplicates, skewed, zero and negative values."""
    window = draw(st.sampled_from([8, 33, 100, 256]))
    n = draw(st.integers(1, 400))
    span = draw(st.integers(1, 3 * window))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    ticks = rng.integers(0, span, n)
    if draw(st.booleans()):  # a burst on one tick
        ticks[: n // 2] = rng.integers(0, span)
    kind = draw(st.sampled_from(["lognormal", "mixed", "few", "integers"]))
    if kind == "lognormal":
        values = rng.lognormal(0, 2, n)
    elif kind == "mixed":
        values = rng.normal(0, 10, n) * (rng.random(n) < 0.8)  # zeros and negatives
    elif kind == "few":
        values = rng.choice([-3.0, 0.0, 1.0, 1e-320, 2.5, 1e6], n)
    else:
        values = rng.integers(-5, 50, n).astype(float)
    batches = draw(st.integers(1, 5))
    order = rng.permutation(n) if draw(st.booleans()) else np.arange(n)
    eps = draw(st.sampled_from([0.05, 0.2, 0.5]))
    return window, ticks[order], values[order], batches, eps


def feed(sk, ticks, values, batches):
    for part in np.array_split(np.arange(ticks.size), batches):
        sk.update(ticks[part], values[part])


def merged_parts(eps, window, ticks, values, batches, k):
    """The merge of ``k`` sketches, event ``i`` fed to part ``i mod k``."""
    parts = []
    for s in range(k):
        sk = WindowedQuantiles(eps, window, 0.02)
        m = np.arange(ticks.size) % k == s
        if m.any():
            feed(sk, ticks[m], values[m], batches)
        parts.append(sk)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    return merged


def live_events(ticks, values, lo, hi):
    """Events in [lo, hi]. One dropped for being late was older than clock − window + 1
    when it came, below every range the sketch still answers (lo ≥ clock − window + 1)."""
    m = (ticks >= lo) & (ticks <= hi)
    return values[m]


def check_bracket(sk, ticks, values, lo, hi, qs, inner=None, vals=None):
    """Every bracket (and every key's rank bracket) holds the truth of ``vals``, the
    window's events (by default every event with a tick in ``[lo, hi]``)."""
    vals = live_events(ticks, values, lo, hi) if vals is None else vals
    brackets = sk.quantiles(qs, lo, hi, inner)
    table = sk.rank_table(lo, hi, inner)
    if vals.size == 0:
        # No event: nothing to bracket (the sketch may still be unsure there is none).
        assert table.n_lower == 0
        return
    assert table.n_lower <= vals.size <= table.n_upper
    for b, q in zip(brackets, qs):
        truth = true_quantile(vals, q)
        assert b.lower <= truth <= b.upper, (q, truth, b)
        assert b.lower <= b.estimate <= b.upper
    # Every rank bracket holds the true rank at the key's upper edge.
    for j in range(table.keys.size):
        r = true_rank(vals, table.hi_edge[j])
        assert table.cl[j] <= r <= table.cu[j]
    return brackets, table, vals


@SETTINGS
@given(streams(), st.data())
def test_true_quantile_always_inside_any_window(stream, data):
    window, ticks, values, batches, eps = stream
    sk = WindowedQuantiles(eps, window, 0.01)
    feed(sk, ticks, values, batches)
    clock = int(ticks.max())
    oldest = clock - window + 1
    lo = data.draw(st.integers(oldest, clock))
    hi = data.draw(st.integers(lo, min(clock + 3, lo + window - 1)))
    qs = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0]
    check_bracket(sk, ticks, values, lo, hi, qs)


@SETTINGS
@given(streams(), st.data())
def test_rank_and_value_widths_are_within_epsilon_and_alpha(stream, data):
    window, ticks, values, batches, eps = stream
    alpha = data.draw(st.sampled_from([0.01, 0.05]))
    sk = WindowedQuantiles(eps, window, alpha)
    feed(sk, ticks, values, batches)
    clock = int(ticks.max())
    lo = data.draw(st.integers(clock - window + 1, clock))
    out = check_bracket(sk, ticks, values, lo, clock, [0.1, 0.5, 0.9])
    if out is None:
        return
    brackets, table, vals = out
    n = vals.size
    # Theorem 1 through Lemma 1: a window ending at the clock reads ranks within ε·n_w.
    assert table.to_clock and table.rank_error <= eps * n
    assert np.all(table.cu - table.cl <= 2 * table.rank_error)
    gamma = (1 + alpha) / (1 - alpha)
    for b in brackets:
        if b.rank_error == 0 and abs(b.estimate) >= 1e-300:
            # Exact ranks: the bracket is one value bucket, γ − 1 wide relative to its
            # lower edge, and the estimate within α of every value in it.
            assert b.upper - b.lower <= (gamma - 1) * min(abs(b.lower), abs(b.upper)) * (1 + 1e-9)
            truth = true_quantile(vals, b.q)
            assert abs(b.estimate - truth) <= alpha * abs(truth) * (1 + 1e-9)


@SETTINGS
@given(streams(), st.integers(2, 6), st.data())
def test_merge_of_many_parts_keeps_the_bracket_and_epsilon(stream, k, data):
    window, ticks, values, batches, eps = stream
    merged = merged_parts(eps, window, ticks, values, batches, k)
    clock = int(ticks.max())
    lo = data.draw(st.integers(clock - window + 1, clock))
    out = check_bracket(merged, ticks, values, lo, clock, [0.0, 0.5, 0.99, 1.0])
    if out is not None:
        assert out[1].rank_error <= eps * out[2].size
    blob = merged.to_bytes()
    again = WindowedQuantiles.from_bytes(blob)
    assert again.to_bytes() == blob
    check_bracket(again, ticks, values, lo, clock, [0.5])


@SETTINGS
@given(streams(), st.data())
def test_inner_and_outer_ranges_bracket_every_range_between(stream, data):
    """A window whose edges cut ticks, or shorter than a tick: ticks inside give the lower
    ranks, ticks touching the upper — the truth is any range in between."""
    window, ticks, values, batches, eps = stream
    sk = WindowedQuantiles(eps, window, 0.01)
    feed(sk, ticks, values, batches)
    clock = int(ticks.max())
    lo = data.draw(st.integers(clock - window + 1, clock))
    hi = data.draw(st.integers(lo, min(clock, lo + window - 1)))
    inner = (lo + 1, hi - 1)
    # The truth: some events of the edge ticks (here: those with an even index).
    inside = (ticks >= lo + 1) & (ticks <= hi - 1)
    edge = ((ticks == lo) | (ticks == hi)) & (np.arange(ticks.size) % 2 == 0)
    vals = values[inside | edge]
    table = sk.rank_table(lo, hi, inner)
    assert table.n_lower <= vals.size <= table.n_upper
    for b in sk.quantiles([0.0, 0.5, 0.95], lo, hi, inner):
        if vals.size:
            assert b is not None and b.lower <= true_quantile(vals, b.q) <= b.upper


def test_empty_sketch_and_empty_window():
    sk = WindowedQuantiles(0.1, 50)
    assert sk.is_empty and sk.quantiles([0.5], 0, 10) == [None]
    sk.update(np.array([100, 101]), np.array([1.0, 2.0]))
    assert sk.quantiles([0.5], 90, 99) == [None]
    assert sk.distribution(90, 99) == []


def test_distribution_brackets_the_cdf():
    rng = np.random.default_rng(3)
    ticks = rng.integers(0, 500, 3000)
    values = rng.lognormal(0, 1, 3000)
    sk = WindowedQuantiles(0.1, 200)
    sk.update(ticks, values)
    lo, hi = 350, int(ticks.max())
    vals = values[(ticks >= lo) & (ticks <= hi)]
    rows = sk.distribution(lo, hi)
    assert rows and all(r.lower_edge < r.upper_edge for r in rows)
    for r in rows:
        assert r.cdf_lower <= true_rank(vals, r.upper_edge) <= r.cdf_upper
    assert sum(r.count for r in rows) == sk.rank_table(lo, hi).n_est


def test_decayed_quantile_brackets_the_weighted_quantile():
    rng = np.random.default_rng(5)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        n = 4000
        ticks = rng.integers(0, 2000, n)
        values = rng.lognormal(0, 1.5, n) * np.where(rng.random(n) < 0.1, -1, 1)
        sk = WindowedQuantiles(0.1, 1000)
        for part in np.array_split(rng.permutation(n), 7):
            sk.update(ticks[part], values[part])
        at = int(ticks.max())
        lo = at - 999
        m = (ticks >= lo) & (ticks <= at)
        for f in (lambda a: (a + 1.0) ** -1.0, lambda a: 2.0 ** (-a / 100.0), lambda a: np.ones_like(a)):
            w = f((at - ticks[m]).astype(float))
            v = values[m]
            order = np.argsort(v)
            cum = np.cumsum(w[order])
            for phi in (0.1, 0.5, 0.9):
                truth = v[order][np.searchsorted(cum, phi * cum[-1] * (1 - 1e-12))]
                b = sk.decayed_quantile(phi, f, at)
                assert b.lower <= truth <= b.upper, (seed, phi, truth, b)


def test_decayed_quantile_refuses_increasing_weights():
    sk = WindowedQuantiles(0.1, 100)
    sk.update(np.arange(50), np.arange(50.0))
    with pytest.raises(SketchError, match="non-increasing"):
        sk.decayed_quantile(0.5, lambda a: a + 1.0, 49)


def test_expired_ticks_and_bad_input_are_refused():
    sk = WindowedQuantiles(0.1, 10)
    sk.update(np.arange(100), np.ones(100))
    with pytest.raises(SketchError, match="expired"):
        sk.quantiles([0.5], 85, 92)
    with pytest.raises(SketchError, match="finite"):
        sk.update(np.array([5]), np.array([math.nan]))
    with pytest.raises(SketchError, match="q must be in"):
        sk.quantiles([1.5], 95, 99)
    with pytest.raises(SketchError):
        WindowedQuantiles(0.1, 10, value_accuracy=1.5)


def test_merge_refuses_itself_and_other_parameters():
    a = WindowedQuantiles(0.1, 100)
    with pytest.raises(IncompatibleSketchError, match="cannot merge a sketch with itself"):
        a.merge(a)
    with pytest.raises(IncompatibleSketchError, match="different epsilon, window or value_accuracy"):
        a.merge(WindowedQuantiles(0.1, 100, value_accuracy=0.02))
    with pytest.raises(IncompatibleSketchError, match="another WindowedQuantiles"):
        a.merge(object())


def test_bytes_grow_with_what_is_held():
    empty = WindowedQuantiles(0.05, 3600).nbytes
    sk = WindowedQuantiles(0.05, 3600)
    sk.update(np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0]))
    assert empty < 100 and sk.nbytes < empty + 100


def _sample_blob():
    rng = np.random.default_rng(9)
    sk = WindowedQuantiles(0.2, 64)
    sk.update(rng.integers(0, 200, 800), rng.lognormal(0, 1, 800) - 0.5)
    other = WindowedQuantiles(0.2, 64)
    other.update(rng.integers(100, 200, 100), rng.normal(0, 1, 100))
    return sk.merge(other).to_bytes()


def test_every_truncation_is_refused():
    blob = _sample_blob()
    for cut in range(0, len(blob), max(1, len(blob) // 300)):
        with pytest.raises(CorruptSketchError):
            WindowedQuantiles.from_bytes(blob[:cut])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_corrupt_blobs_are_refused_or_read_whole(data):
    """A flipped byte is refused, or else reads as a sketch that is valid in full (its
    bytes round-trip and its queries answer): never half-read."""
    blob = bytearray(_sample_blob())
    pos = data.draw(st.integers(HEADER_SIZE, len(blob) - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    try:
        sk = WindowedQuantiles.from_bytes(bytes(blob))
    except CorruptSketchError:
        return
    again = WindowedQuantiles.from_bytes(sk.to_bytes())
    assert again.to_bytes() == sk.to_bytes()
    if not sk.is_empty:
        sk.quantiles([0.5], sk.clock - sk.window + 1, sk.clock)


def test_bad_header_fields_are_refused():
    blob = bytearray(_sample_blob())
    bad_eps = bytes(blob[:HEADER_SIZE]) + struct.pack("<d", 2.0) + bytes(blob[HEADER_SIZE + 8 :])
    with pytest.raises(CorruptSketchError, match="parameters out of range"):
        WindowedQuantiles.from_bytes(bad_eps)
    with pytest.raises(CorruptSketchError):
        WindowedQuantiles.from_bytes(bytes(blob) + b"\0")


# -- the node structure ----------------------------------------------------------------------
@SETTINGS
@given(streams(), st.data())
def test_rank_error_within_the_collapse_share_and_exact_recent_ticks(stream, data):
    """Δ = U_lo ≤ ε'·A_lo ≤ ε'·n_w (ε' = ε·COLLAPSE_SHARE, the collapse test), and no node of two or
    more ticks reaches the α most recent ticks, so windows starting there read exact ranks."""
    from sketches.windowed_quantiles import COLLAPSE_SHARE

    window, ticks, values, batches, eps = stream
    sk = WindowedQuantiles(eps, window, 0.01)
    feed(sk, ticks, values, batches)
    clock = int(ticks.max())
    lo = data.draw(st.integers(clock - window + 1, clock))
    n = int(np.count_nonzero((ticks >= lo) & (ticks <= clock)))
    table = sk.rank_table(lo, clock)
    assert table.rank_error <= eps * COLLAPSE_SHARE * n
    if lo >= clock - sk.alpha + 1:
        assert table.rank_error == 0


@SETTINGS
@given(streams(), st.integers(2, 5))
def test_merge_is_a_union_whatever_the_order(stream, k):
    window, ticks, values, batches, eps = stream
    shards = np.arange(ticks.size) % k

    def part(s):
        sk = WindowedQuantiles(eps, window, 0.01)
        m = shards == s
        if m.any():
            feed(sk, ticks[m], values[m], batches)
        return sk

    forward, backward = part(0), part(k - 1)
    for s in range(1, k):
        forward.merge(part(s))
    for s in range(k - 2, -1, -1):
        backward.merge(part(s))
    # Every live event is kept whatever the order (a union). How far nodes were folded may
    # differ with the order, and so may which expired events still ride in a node that
    # straddles the window's start; each result must satisfy the collapse invariant (which
    # from_bytes checks before it accepts a blob) and bracket the window's true count.
    clock = int(ticks.max())
    live = clock - window + 1
    n_live = int(np.count_nonzero(ticks >= live))
    for merged in (forward, backward):
        WindowedQuantiles.from_bytes(merged.to_bytes())
        assert merged.substreams == 1
        assert merged.clock == clock
        assert n_live <= merged.count <= ticks.size
        table = merged.rank_table(live, clock)
        assert table.n_lower <= n_live <= table.n_upper
        assert table.rank_error <= eps * COLLAPSE_SHARE * n_live


def test_a_blob_breaking_the_collapse_invariant_is_refused():
    rng = np.random.default_rng(2)
    sk = WindowedQuantiles(0.1, 1000)
    sk.update(np.sort(rng.integers(0, 3000, 20_000)), rng.lognormal(0, 1, 20_000))
    wide = np.flatnonzero(sk._lg > 0)
    assert wide.size  # some nodes were collapsed
    j = int(wide[0])
    sk._cnts[sk._off[j]] += 10**6  # a collapsed node far heavier than the events after it
    sk._wt[j] += 10**6
    with pytest.raises(CorruptSketchError, match="collapse invariant"):
        WindowedQuantiles.from_bytes(sk.to_bytes())


def test_misaligned_or_unordered_nodes_are_refused():
    sk = WindowedQuantiles(0.1, 100)
    sk.update(np.array([10, 11, 12]), np.array([1.0, 2.0, 3.0]))
    bad = sk.copy()
    bad._lg = np.array([0, 1, 0], np.int64)  # [11, 12] is not aligned
    with pytest.raises(CorruptSketchError, match="misaligned"):
        WindowedQuantiles.from_bytes(bad.to_bytes())
    bad = sk.copy()
    bad._left = np.array([10, 10, 12], np.int64)  # a node twice
    with pytest.raises(CorruptSketchError):
        WindowedQuantiles.from_bytes(bad.to_bytes())


def test_format_1_blobs_are_refused():
    blob = bytearray(WindowedQuantiles(0.1, 100).to_bytes())
    blob[4] = 1  # the header's format byte
    with pytest.raises(CorruptSketchError, match="^unsupported sketch format version 1$"):
        WindowedQuantiles.from_bytes(bytes(blob))


def _same_table(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) if isinstance(getattr(a, f), np.ndarray)
               else getattr(a, f) == getattr(b, f) for f in a.__dataclass_fields__)


@st.composite
def long_streams(draw):
    """Thousands of events over several windows (collapsed nodes of many widths, nested
    after a merge), in order or not, besides ``streams``' small ones."""
    if draw(st.booleans()):
        return draw(streams())
    window = draw(st.sampled_from([256, 1024, 4096]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(rng.integers(2000, 30000))
    ticks = np.sort(rng.integers(0, 3 * window, n))
    if draw(st.booleans()):
        ticks = ticks[rng.permutation(n)]
    values = rng.lognormal(2, 1.5, n)
    return window, ticks, values, draw(st.integers(1, 6)), draw(st.sampled_from([0.2, 0.5, 0.9]))


@SETTINGS
@given(long_streams(), st.integers(1, 4), st.data())
def test_rank_tables_in_one_sweep_are_rank_table(stream, k, data):
    """Every range of a sweep (sliding windows of one length, with inner ranges a tick in
    from each edge, empty ones, ranges past the clock, expired ones refused) reads the
    table ``rank_table`` reads, array for array; merged parts included (nested nodes)."""
    window, ticks, values, batches, eps = stream
    sk = merged_parts(eps, window, ticks, values, batches, k)
    clock = int(ticks.max())
    length = data.draw(st.one_of(st.integers(1, 3), st.integers(1, window)))  # short: inside one node
    starts = data.draw(st.lists(st.integers(clock - window - 1, clock + 2), min_size=1, max_size=40))
    how = data.draw(st.sampled_from(["none", "same", "in", "empty"]))
    ranges = []
    for lo in starts:
        hi = lo + length - 1
        inner = {"none": None, "same": (lo, hi), "in": (lo + 1, hi - 1), "empty": (1, 0)}[how]
        ranges.append(((lo, hi), inner))
    for r, got in zip(ranges, sk.rank_tables(ranges)):
        try:
            expected = sk.rank_table(*r[0], r[1])
        except SketchError as e:
            assert isinstance(got, SketchError) and str(got) == str(e), (r, got, e)
            continue
        assert _same_table(got, expected), (r, got, expected)
