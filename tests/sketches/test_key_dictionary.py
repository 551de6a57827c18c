"""KeyDictionary: windowed Misra-Gries recall against an exact oracle, merges and bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches.base import CorruptSketchError, IncompatibleSketchError, SketchError
from sketches.hashing import hash_keys
from sketches.key_dictionary import KeyDictionary

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = np.array([f"key-{i}-é" for i in range(3000)], dtype=object)


def make_stream(rng, n, window, skew):
    if skew is None:
        r = rng.integers(0, 3000, n)
    else:
        p = 1.0 / np.arange(1, 3001) ** skew
        r = rng.choice(3000, n, p=p / p.sum())
    ticks = np.sort(rng.integers(0, max(1, int(window * rng.uniform(0.5, 3))), n))
    lat = rng.random(n) < 0.3
    ticks[lat] -= rng.integers(0, window + 1, int(lat.sum()))
    w = np.ones(n)
    w[rng.random(n) < 0.1] = 0
    w[rng.random(n) < 0.05] = 50
    return ticks.astype(np.int64), NAMES[r], w


def feed(kd, t, keys, w, rng):
    for part in np.array_split(np.arange(len(t)), int(rng.integers(1, 5))):
        kd.update(t[part], keys[part].tolist(), weights=w[part])
    return kd


def check_recall(kd, t, keys, w, lo, hi):
    c = kd.candidates(lo, hi)
    m = (t >= lo) & (t <= hi) & (w > 0)
    uk, inv = np.unique(keys[m], return_inverse=True)
    f = np.bincount(inv, weights=w[m]) if m.any() else np.zeros(0)
    listed = dict(zip(c.keys, zip(c.lower, c.upper)))
    for k, fk in zip(uk.tolist(), f.tolist()):
        if fk > c.threshold:
            assert k in listed  # deterministic recall
        if k in listed:
            lw, up = listed[k]
            assert lw <= fk * (1 + 1e-12) and fk <= up * (1 + 1e-12)
    # threshold <= U_tot / (k + 1): the weight of touching buckets over k + 1
    inside, strad = kd._tb.classify(lo, hi)
    assert c.threshold <= kd._tb.m[inside | strad].sum() / (kd.capacity + 1) * (1 + 1e-9)
    assert len(kd) <= kd.capacity * len(kd._tb)
    assert all(h == x for h, x in zip(hash_keys(c.keys).tolist(), c.ids.tolist()))
    # The brackets from the definition, counter by counter in bucket order: low sums the
    # inside buckets' counters of an id, up every touching one's and the threshold.
    low, up = {}, {}
    for b in np.flatnonzero(inside | strad).tolist():
        for x, n in zip(kd._ids[b].tolist(), kd._cnt[b].tolist()):
            if n > 0:
                up[x] = up.get(x, 0.0) + n
                low[x] = low.get(x, 0.0) + (n if inside[b] else 0.0)
    want = sorted(((up[x] + c.threshold, x) for x in up), key=lambda p: (-p[0], p[1]))
    assert c.ids.tolist() == [x for _, x in want]
    assert c.upper.tolist() == [u for u, _ in want] and c.lower.tolist() == [low[x] for _, x in want]


streams = st.fixed_dictionaries({
    "seed": st.integers(0, 2**31),
    "n": st.integers(0, 800),
    "window": st.sampled_from([1, 10, 300, 5000]),
    "skew": st.sampled_from([None, 0.8, 1.2, 1.5]),
    "cap": st.sampled_from([1, 4, 32]),
})


@SETTINGS
@given(streams)
def test_recall_is_deterministic(p):
    rng = np.random.default_rng(p["seed"])
    t, keys, w = make_stream(rng, p["n"], p["window"], p["skew"])
    kd = feed(KeyDictionary(p["cap"], p["window"]), t, keys, w, rng)
    if kd.is_empty:
        c = max(kd.clock, 0)
        assert kd.candidates(c, c + 10).ids.size == 0
        return
    h, c = kd.clock - kd.window + 1, kd.clock
    for lo, hi in [(h, c), (c, c), (int(rng.integers(h, c + 1)), c)]:
        check_recall(kd, t, keys, w, lo, hi)


@SETTINGS
@given(streams, st.booleans(), st.sampled_from([1.0, 0.1, 1 / 3]))
def test_many_ranges_read_together_are_each_range_read_alone(p, shuffled, unit):
    """``candidates_many`` (the ranges' counters added in one compiled call, merging each
    bucket's counters in id order) is ``candidates`` of each range, refusals included; and
    a state whose counters come in any order within a bucket (a decoded blob's may) gives
    the brackets of the definition, counter by counter in bucket order."""
    rng = np.random.default_rng(p["seed"])
    t, keys, w = make_stream(rng, p["n"], p["window"], p["skew"])
    w = w * unit * rng.uniform(0.5, 1.5, w.size)  # fractional: the order of additions shows
    kd = feed(KeyDictionary(p["cap"], p["window"]), t, keys, w, rng)
    if shuffled:
        for b in range(kd._ids.shape[0]):
            order = rng.permutation(kd._ids.shape[1])
            kd._ids[b], kd._cnt[b] = kd._ids[b][order], kd._cnt[b][order]
    c = max(kd.clock, 0)
    h = c - kd.window + 1
    ranges = [(h, c), (c, c), (h - 5, c), (c + 1, c), (c, c - 3)] + [
        tuple(sorted(int(x) for x in rng.integers(h, c + 2, 2))) for _ in range(8)]
    together = kd.candidates_many(ranges)
    for (lo, hi), got in zip(ranges, together):
        try:
            alone = kd.candidates(lo, hi)
        except SketchError as e:
            assert isinstance(got, SketchError) and str(got) == str(e)
            continue
        assert got.ids.tolist() == alone.ids.tolist() and got.keys == alone.keys
        assert got.lower.tolist() == alone.lower.tolist() and got.upper.tolist() == alone.upper.tolist()
        assert got.threshold == alone.threshold
        if not kd.is_empty and lo <= hi:
            check_recall(kd, t, keys, w, lo, hi)


@SETTINGS
@given(streams, st.integers(2, 32))
def test_merges_keep_recall(p, n_parts):
    rng = np.random.default_rng(p["seed"])
    t, keys, w = make_stream(rng, p["n"], p["window"], p["skew"])
    owner = rng.integers(0, n_parts, len(t))
    parts = [feed(KeyDictionary(p["cap"], p["window"]), t[owner == i], keys[owner == i], w[owner == i], rng)
             for i in range(n_parts)]
    while len(parts) > 1:
        parts = [parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    kd = parts[0]
    assert kd._tb.validate() is None
    if not kd.is_empty:
        check_recall(kd, t, keys, w, kd.clock - kd.window + 1, kd.clock)
    blob = kd.to_bytes()
    back = KeyDictionary.from_bytes(blob)
    assert back.to_bytes() == blob and len(blob) == kd.nbytes


def test_lookup_by_reduced_ids():
    kd = KeyDictionary(8, 100)
    kd.update(np.zeros(6, np.int64), ["a", "a", "b", "c", "c", "c"])
    full = hash_keys(["a", "b", "c", "zzz"])
    assert kd.lookup(full) == [["a"], ["b"], ["c"], []]
    assert kd.lookup(full[:1] >> np.uint64(32), bits=32) == [["a"]]
    assert sorted(sum(kd.lookup(np.arange(2, dtype=np.uint64), bits=1), [])) == ["a", "b", "c"]
    with pytest.raises(SketchError):
        kd.lookup(full, bits=0)


def test_refusals_truncations_and_validation():
    kd = KeyDictionary(4, 50)
    kd.update(np.array([1, 2, 3]), ["x", "y", "x"])
    with pytest.raises(IncompatibleSketchError, match="^cannot merge a sketch with itself$"):
        kd.merge(kd)
    with pytest.raises(IncompatibleSketchError, match="^can only merge a KeyDictionary with another KeyDictionary$"):
        kd.merge("x")
    with pytest.raises(IncompatibleSketchError,
                       match="^cannot merge key dictionaries with different capacity, window or epsilon$"):
        kd.merge(KeyDictionary(5, 50))
    with pytest.raises(SketchError):
        kd.update(np.array([1]), ["a", "b"])
    with pytest.raises(SketchError):
        KeyDictionary(0, 10)
    blob = kd.to_bytes()
    for n in range(len(blob)):
        with pytest.raises(CorruptSketchError):
            KeyDictionary.from_bytes(blob[:n])
    bad = bytearray(blob)
    bad[-1] = 0xFF  # not UTF-8
    with pytest.raises(CorruptSketchError):
        KeyDictionary.from_bytes(bytes(bad))
    assert "KeyDictionary(capacity=4" in repr(kd) and kd.copy().to_bytes() == blob


def test_heavy_keys_found_in_a_zipf_stream():
    rng = np.random.default_rng(1)
    t, keys, w = make_stream(rng, 30000, 10000, 1.3)
    kd = feed(KeyDictionary(50, 10000), t, keys, w, rng)
    lo = kd.clock - 5000
    c = kd.candidates(lo, kd.clock)
    m = (t >= lo) & (w > 0)
    assert c.threshold <= w[m].sum() * 1.1 / 51
    check_recall(kd, t, keys, w, lo, kd.clock)
    assert c.keys[0] == "key-0-é"


def _mg_rebuild_reference(n_out, k, old_ids, old_cnt, old_dest, ev_dest, ev_ids, ev_w):
    """The rebuild before untouched buckets were copied: every bucket re-aggregated."""
    rows = [dict() for _ in range(n_out)]
    for i in range(old_ids.shape[0]):
        if old_dest[i] >= 0:
            for x, c in zip(old_ids[i].tolist(), old_cnt[i].tolist()):
                if c > 0:
                    rows[old_dest[i]][x] = rows[old_dest[i]].get(x, 0.0) + c
    for d, x, c in zip(ev_dest.tolist(), ev_ids.tolist(), ev_w.tolist()):
        rows[d][x] = rows[d].get(x, 0.0) + c
    out_ids, out_cnt = np.zeros((n_out, k), np.uint64), np.zeros((n_out, k))
    for r, row in enumerate(rows):
        cut = sorted(row.values())[len(row) - k - 1] if len(row) > k else 0.0
        kept = [(x, c - cut) for x, c in sorted(row.items()) if c - cut > 0][:k]
        for j, (x, c) in enumerate(kept):
            out_ids[r, j], out_cnt[r, j] = x, c
    return out_ids, out_cnt


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 12), st.integers(0, 40))
def test_rebuild_copies_untouched_buckets_exactly(seed, k, n_old, n_ev):
    """The compiled rebuild (untouched buckets copied) equals re-aggregating every bucket,
    on old rows written by the rebuild itself, merges of rows, expiries and new events."""
    from sketches.key_dictionary import _mg_rebuild

    rng = np.random.default_rng(seed)
    pool = rng.integers(1, 2**63, 3 * k + 2, dtype=np.uint64)
    src = rng.integers(0, 4, (n_old, 3 * k))
    raw_ids, raw_cnt = pool[rng.integers(0, pool.shape[0], (n_old, 3 * k))], src * 1.0
    old_ids, old_cnt = _mg_rebuild_reference(  # rows of k counters as the rebuild writes them
        n_old, k, raw_ids, raw_cnt, np.arange(n_old), np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0))
    n_out = int(rng.integers(1, n_old + 1))
    old_dest = np.sort(rng.integers(-1, n_out, n_old))
    ev_dest = rng.integers(0, n_out, n_ev)
    ev_ids = pool[rng.integers(0, pool.shape[0], n_ev)]
    ev_w = rng.choice([0.5, 1.0, 7.0], n_ev)
    got = _mg_rebuild(n_out, k, old_ids, old_cnt, old_dest, ev_dest, ev_ids, ev_w)
    want = _mg_rebuild_reference(n_out, k, old_ids, old_cnt, old_dest, ev_dest, ev_ids, ev_w)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2**31), st.integers(0, 2)), min_size=1, max_size=8),
       st.sampled_from([3, 64, 2**64]))
def test_strings_held_follow_the_former_dictionary(steps, id_space):
    """The strings (ids increasing, strings alongside) are those of the former id -> string
    dict after every update, merge and read back: a held id keeps its string, a new one
    takes its first event's key, an id no summary holds is dropped, and on a merge an id
    both know keeps this side's string. Ids are given, some shared by several keys (the
    collisions the hash makes improbable), so which string wins is checked too."""
    def ids_of(keys):
        return np.array([int(k[1:]) % id_space if id_space < 2**64 else int(k[1:]) * 2654435761 % 2**64
                         for k in keys], np.uint64)

    def ref_update(ref, kd, keys, ids):
        held = set(np.unique(kd._ids[kd._cnt > 0]).tolist())
        for x, k in zip(ids.tolist(), keys):
            if x in held and x not in ref:
                ref[x] = k
        return {x: k for x, k in ref.items() if x in held}

    kd, ref, clock = KeyDictionary(4, 1000, 0.2), {}, 5000
    for n, seed, action in steps:
        rng = np.random.default_rng(seed)
        clock += int(rng.integers(0, 300))
        keys = [f"k{j}" for j in rng.zipf(1.3, n) % 50]
        ids, ticks = ids_of(keys), clock - rng.integers(0, 500, n)
        if action == 2:  # merge in another dictionary fed these events
            other = KeyDictionary(4, 1000, 0.2)
            other.update(ticks, keys, ids)
            other_ref = ref_update({}, other, keys, ids)
            kd.merge(KeyDictionary.from_bytes(other.to_bytes()))
            held = set(np.unique(kd._ids[kd._cnt > 0]).tolist())
            for x, k in other_ref.items():
                ref.setdefault(x, k)
            ref = {x: k for x, k in ref.items() if x in held}
        else:
            kd.update(ticks, keys, ids)
            ref = ref_update(ref, kd, keys, ids)
        assert kd._keys == ref
        assert list(kd._kid) == sorted(ref) and len(kd) == kd.n_keys == len(ref)
        if action == 1:
            back = KeyDictionary.from_bytes(kd.to_bytes())
            assert back._keys == ref and back.to_bytes() == kd.to_bytes()
            kd = back
        c = kd.candidates(clock - 999, clock)
        assert c.keys == [ref[x] for x in c.ids.tolist()]
        assert kd.lookup(c.ids) == [[ref[x]] for x in c.ids.tolist()]
