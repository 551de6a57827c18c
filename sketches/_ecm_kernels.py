"""Compiled core of the ECM family: dyadic time buckets shared by every counter cell.

An ECM-sketch (Papapetrou, Garofalakis & Deligiannakis, VLDB 2012, §4) is a Count-Min
array whose cells are sliding-window counters. Here all cells of a sketch share one
partition of time into buckets, so the whole sketch is two flat arrays:

* bucket metadata ``lvl, idx, s, e, m`` (one entry per bucket), and
* ``counts[bucket, cell]`` (float64), the weight each cell received from the events of
  that bucket.

Each cell's sliding-window counter is a column of ``counts``; there is no Python object
per cell, and every update, merge and query is a numba kernel or a vectorised NumPy step.

Buckets are *dyadic time intervals*: bucket ``(lvl, idx)`` may only hold events whose
tick lies in ``[idx * 2**lvl, (idx + 1) * 2**lvl - 1]``; ``[s, e]`` is the tight hull of
the ticks it really holds and ``m`` its total weight. Distinct buckets have distinct
positions, so any two buckets are nested or disjoint (a laminar family). This is what
makes the structure correct for *asynchronous* streams (events arriving out of order,
Busch & Tirthapura 2007): a late event becomes a single-tick leaf bucket, which never
straddles a query boundary, and is folded into a coarser bucket only when the invariant
below still holds. A bucket is never split, so nothing is ever guessed.

Invariant (C), for every stored bucket ``v`` of level >= 1::

    m_v + sum(m_u : u stored, u's interval strictly contains v's)
        <= R * sum(m_b : b stored, start(b) > end(v))                       (C)

where ``start``/``end`` are the ends of the dyadic intervals. Consequence (Lemma A):
for every ``lo`` inside the window, with ``S(lo)`` the weight of buckets whose hull
straddles ``lo`` (``s < lo <= e``) and ``N(lo)`` the true weight of events with tick >= lo,

    S(lo) <= R * sum(m_b : s_b >= lo) <= R * N(lo).

Proof: the buckets whose *dyadic interval* straddles ``lo`` form a chain (laminar
family); let ``v`` be its deepest member. Hull straddlers are interval straddlers, whose
total is ``m_v`` plus the masses of ``v``'s stored ancestors; (C) for ``v`` bounds it by
``R`` times the weight of buckets starting after ``end(v) >= lo``, all of whose events are
at ticks >= lo. Leaves (level 0) hold a single tick and never straddle.

(C) is preserved by every operation:

* inserting a leaf adds weight to right-hand sides only;
* expiring a bucket whose hull ends before the window drops a term that is on no
  right-hand side of a surviving bucket (its start precedes every surviving end);
* the union of two sketches (merge) adds both sides of (C) position by position, because
  positions and dyadic ends do not depend on the data: (C) for A and for B imply (C) for
  A + B. Merging therefore adds **no** error, unlike the EH aggregation of §5.1 (Thm 4),
  whose reconstructed stream costs an extra ``eps'`` per level of aggregation;
* ``compress`` folds a set of sibling buckets into their parent only after checking (C)
  for the parent; that move changes the terms of no bucket outside the parent (masses
  stay inside it), so one bottom-up pass keeps (C) everywhere.

Hashing: row ``j`` of a Count-Min array maps a ``uint64`` key with simple tabulation
hashing (8 tables of 256 random words, XOR), which is 3-wise independent, then reduces
its top 32 bits to ``[0, w)`` by multiply-shift; for distinct keys
``Pr[h(x) = h(y)] <= 1/w + 2**-32``.

Tested by: tests/sketches/test_ecm.py, tests/sketches/test_key_dictionary.py,
tests/sketches/test_compiled_codec.py (bucket columns).
"""

from __future__ import annotations

import functools
import math

import numba as nb
import numpy as np

from sketches._codec import (
    E_VARINT, decode_varints, drop_stale_kernel_cache, get_floats, get_gaps, get_varint,
    put_floats, put_varint, unzigzag1, zigzag1,
)

drop_stale_kernel_cache(__file__)  # its kernels compile the codec's pieces in

__all__ = [
    "MAX_LEVEL",
    "NO_CLOCK",
    "TICK_LIMIT",
    "TimeBuckets",
    "hash_tables",
    "cells_of",
    "materialize",
    "add_leaves",
    "straddle_ratio",
]

MAX_LEVEL = 62  # highest bucket level; ticks are limited so shifts never overflow
TICK_LIMIT = 1 << 61  # |tick| must stay below this
NO_CLOCK = int(np.iinfo(np.int64).min)  # clock of a sketch that never saw an event
_SLACK = 1.0 - 1e-12  # (C) is checked with this margin so float rounding cannot break it


# --------------------------------------------------------------------------------------
# hashing
# --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def hash_tables(seed: int, salt: int, n: int) -> np.ndarray:
    """``n`` independent simple-tabulation tables (n, 8, 256) derived from ``seed``."""
    gen = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, salt, n])))
    tables = gen.bit_generator.random_raw(n * 8 * 256).astype(np.uint64).reshape(n, 8, 256)
    tables.setflags(write=False)
    return tables


@nb.njit(cache=True, inline="always")
def _tab(x, tables, t):
    h = np.uint64(0)
    for b in range(8):
        h ^= tables[t, b, np.intp((x >> np.uint64(8 * b)) & np.uint64(0xFF))]
    return h


@nb.njit(cache=True, inline="always")
def cell_index(x, c, tables, shift, table, offset, width):
    y = x >> shift[c]
    t = table[c]
    if t < 0:  # an exact slot: the shifted id is the cell
        return offset[c] + np.int64(y)
    # Lemire's multiply-shift range reduction of the top 32 bits: each cell has
    # floor or ceil(2^32 / w) preimages, so Pr[h(x) = h(y)] <= 1/w + 2^-32
    return offset[c] + np.int64(((_tab(y, tables, t) >> np.uint64(32)) * width[c]) >> np.uint64(32))


@nb.njit(cache=True)
def cells_of(ids, tables, shift, table, offset, width):
    """Cell index of every id in every slot: ``int64[len(ids), n_slots]``."""
    n, c_n = ids.shape[0], shift.shape[0]
    out = np.empty((n, c_n), np.int64)
    for i in range(n):
        for c in range(c_n):
            out[i, c] = cell_index(ids[i], c, tables, shift, table, offset, width)
    return out


@nb.njit(cache=True)
def key_readings(counts, inside, strad, cells, collisions, shrink, grow):
    """``ECMSketch.frequency_arrays``' numbers for the keys whose cells are ``cells`` (one
    row per key): each cell's count over the buckets ``inside`` the range and over those
    ``strad``-dling it added in bucket order (as NumPy sums a matrix's rows), then per key
    the smallest of its rows: ``(estimates, lowers, uppers)`` with the lower bound less
    ``collisions`` (ε_cm·the touching weight), then the float sums' rounding ``g``
    (``CellSketch._rounding``): the lower bound times ``shrink`` = 1 − g, the upper times
    ``grow`` = 1 + g, the estimate clamped between them."""
    n, d = cells.shape
    ests = np.empty(n)
    lowers = np.empty(n)
    uppers = np.empty(n)
    for i in range(n):
        low_min, high_min, mid_min = np.inf, np.inf, np.inf
        for j in range(d):
            c = cells[i, j]
            low = 0.0
            for b in inside:
                low += counts[b, c]
            cut = 0.0
            for b in strad:
                cut += counts[b, c]
            high = low + cut
            low_min = min(low_min, low)
            high_min = min(high_min, high)
            mid_min = min(mid_min, 0.5 * (low + high))
        lower = max(0.0, max(0.0, low_min - collisions) * shrink)
        upper = high_min * grow
        lowers[i], uppers[i] = lower, upper
        ests[i] = min(max(mid_min, lower), upper)
    return ests, lowers, uppers


@nb.njit(cache=True)
def key_readings_many(counts, in_start, inside, st_start, strad, cells, cell_start, collisions, shrink, grow):
    """``key_readings`` of many reads in one call: read ``q`` takes the buckets
    ``inside[in_start[q]:in_start[q + 1]]`` and ``strad[st_start[q]:st_start[q + 1]]``, the
    keys of ``cells[cell_start[q]:cell_start[q + 1]]`` and ``collisions[q]``; its numbers
    are at the same positions of the outputs."""
    n = cells.shape[0]
    ests = np.empty(n)
    lowers = np.empty(n)
    uppers = np.empty(n)
    for q in range(collisions.shape[0]):
        a, b = cell_start[q], cell_start[q + 1]
        e, lo, up = key_readings(counts, inside[in_start[q]:in_start[q + 1]], strad[st_start[q]:st_start[q + 1]],
                                 cells[a:b], collisions[q], shrink, grow)
        ests[a:b] = e
        lowers[a:b] = lo
        uppers[a:b] = up
    return ests, lowers, uppers


@nb.njit(cache=True)
def summed_rows(counts, masks):
    """``counts[mask].sum(axis=0)`` of each row of ``masks``: the rows of ``counts`` it
    selects added in their order, from the first (NumPy's reduction over the first axis),
    so the floats are the same."""
    out = np.zeros((masks.shape[0], counts.shape[1]))
    for k in range(masks.shape[0]):
        first = True
        for b in range(masks.shape[1]):
            if masks[k, b]:
                if first:
                    out[k, :] = counts[b, :]
                    first = False
                else:
                    out[k, :] += counts[b, :]
    return out


@nb.njit(cache=True)
def materialize(n_out, old_counts, old_dest, ev_dest, ev_ids, ev_w, tables, shift, table, offset, width):
    """New ``counts``: old rows added into their destination rows, then every event
    added to its cell in each slot of its destination row (rows of ``-1`` are dropped)."""
    k = old_counts.shape[1]
    out = np.zeros((n_out, k))
    for i in range(old_counts.shape[0]):
        r = old_dest[i]
        if r >= 0:
            for c in range(k):
                out[r, c] += old_counts[i, c]
    for i in range(ev_ids.shape[0]):
        r = ev_dest[i]
        x = ev_ids[i]
        w = ev_w[i]
        for c in range(shift.shape[0]):
            out[r, cell_index(x, c, tables, shift, table, offset, width)] += w
    return out


@nb.njit(cache=True)
def add_leaves(lvl, idx, s, e, m, ticks, weights, horizon):
    """The first half of ``TimeBuckets.plan_update`` in one compiled pass: the events kept
    (positive weight, tick >= ``horizon``), their distinct ticks (sorted) with each kept
    event's group and each group's weight (summed in event order, as ``np.bincount``
    does), the buckets still alive (``e >= horizon``), and those buckets with each
    group's weight added to the leaf of its tick, or a new leaf appended (in tick order).

    Returns ``(sel, inv, keep, leaf_at, lvl, idx, s, e, m)``; ``leaf_at[j]`` is the row of
    group j's leaf among the returned buckets."""
    n = ticks.shape[0]
    cnt = 0
    for i in range(n):
        if weights[i] > 0 and ticks[i] >= horizon:
            cnt += 1
    sel = np.empty(cnt, np.int64)
    c = 0
    for i in range(n):
        if weights[i] > 0 and ticks[i] >= horizon:
            sel[c] = i
            c += 1
    ts = ticks[sel]
    order = np.argsort(ts)
    inv = np.empty(cnt, np.int64)
    u = 0
    for r in range(cnt):
        if r == 0 or ts[order[r]] != ts[order[r - 1]]:
            u += 1
        inv[order[r]] = u - 1
    ut = np.empty(u, np.int64)
    lm = np.zeros(u)
    for i in range(cnt):
        ut[inv[i]] = ts[i]
        lm[inv[i]] += weights[sel[i]]
    nb_old = lvl.shape[0]
    alive = 0
    for i in range(nb_old):
        if e[i] >= horizon:
            alive += 1
    keep = np.empty(alive, np.int64)
    nleaf = 0
    c = 0
    for i in range(nb_old):
        if e[i] >= horizon:
            keep[c] = i
            c += 1
            if lvl[i] == 0:
                nleaf += 1
    leaves = np.empty(nleaf, np.int64)  # rows (among the kept) of the leaves, by tick
    c = 0
    for r in range(alive):
        if lvl[keep[r]] == 0:
            leaves[c] = r
            c += 1
    leaf_at = np.empty(u, np.int64)
    found = np.zeros(u, np.bool_)
    n_new = 0
    for j in range(u):
        lo, hi = 0, nleaf  # first leaf with tick >= ut[j]
        while lo < hi:
            mid = (lo + hi) // 2
            if idx[keep[leaves[mid]]] < ut[j]:
                lo = mid + 1
            else:
                hi = mid
        if lo < nleaf and idx[keep[leaves[lo]]] == ut[j]:
            found[j] = True
            leaf_at[j] = leaves[lo]
        else:
            n_new += 1
    total = alive + n_new
    lvl2 = np.zeros(total, np.int64)
    idx2 = np.empty(total, np.int64)
    s2 = np.empty(total, np.int64)
    e2 = np.empty(total, np.int64)
    m2 = np.empty(total)
    for r in range(alive):
        i = keep[r]
        lvl2[r], idx2[r], s2[r], e2[r], m2[r] = lvl[i], idx[i], s[i], e[i], m[i]
    c = alive
    for j in range(u):
        if found[j]:
            m2[leaf_at[j]] += lm[j]
        else:
            leaf_at[j] = c
            idx2[c], s2[c], e2[c], m2[c] = ut[j], ut[j], ut[j], lm[j]
            c += 1
    return sel, inv, keep, leaf_at, lvl2, idx2, s2, e2, m2


# --------------------------------------------------------------------------------------
# the time-bucket structure
# --------------------------------------------------------------------------------------
@nb.njit(cache=True)
def _ancestry(lvl, idx, m):
    """Dyadic ends, nearest stored strict ancestor, ancestor-inclusive masses, and the
    start-sorted suffix sums that give ``sum(m_b : start(b) > x)``."""
    n = lvl.shape[0]
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    for i in range(n):
        start[i] = idx[i] << lvl[i]
        end[i] = start[i] + ((np.int64(1) << lvl[i]) - 1)
    o = np.argsort(start, kind="mergesort")
    ss = start[o]
    suf = np.zeros(n + 1)
    for k in range(n - 1, -1, -1):
        suf[k] = suf[k + 1] + m[o[k]]
    # preorder: start ascending, level descending (an ancestor before its descendants)
    o2 = np.argsort(-lvl, kind="mergesort")
    o2 = o2[np.argsort(start[o2], kind="mergesort")]
    par = np.full(n, -1, np.int64)
    anc = np.zeros(n)
    stack = np.empty(n, np.int64)
    top = 0
    dup = False
    for k in range(n):
        i = o2[k]
        while top > 0 and end[stack[top - 1]] < start[i]:
            top -= 1
        if top > 0:
            p = stack[top - 1]
            if start[p] == start[i] and lvl[p] == lvl[i]:
                dup = True
            par[i] = p
            anc[i] = m[i] + anc[p]
        else:
            anc[i] = m[i]
        stack[top] = i
        top += 1
    return start, end, par, anc, ss, suf, dup


@nb.njit(cache=True)
def _pst(ss, suf, x):
    return suf[np.searchsorted(ss, x, side="right")]


@nb.njit(cache=True)
def invariant_excess(lvl, idx, m, ratio):
    """Largest ``lhs - ratio * rhs`` of (C) over stored buckets of level >= 1 (<= 0 when
    (C) holds), and whether two buckets share a position."""
    start, end, par, anc, ss, suf, dup = _ancestry(lvl, idx, m)
    worst = -np.inf
    for i in range(lvl.shape[0]):
        if lvl[i] >= 1:
            v = anc[i] - ratio * _pst(ss, suf, end[i])
            if v > worst:
                worst = v
    return worst, dup


@nb.njit(cache=True)
def _find(uf, i):
    r = i
    while uf[r] != r:
        r = uf[r]
    while uf[i] != r:
        nxt = uf[i]
        uf[i] = r
        i = nxt
    return r


@nb.njit(cache=True)
def _columns(n):
    """Six columns of ``n`` rows: four int64, the float64 mass, one int64."""
    return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64),
            np.empty(n), np.empty(n, np.int64))


@nb.njit(cache=True, inline="always")
def _put_row(c0, c1, c2, c3, c4, k, v0, v1, v2, v3, v4):
    """Row ``k`` of five parallel columns (a frontier's or the output's); returns k + 1."""
    c0[k] = v0
    c1[k] = v1
    c2[k] = v2
    c3[k] = v3
    c4[k] = v4
    return k + 1


@nb.njit(cache=True)
def compress(lvl, idx, s, e, m, ratio):
    """One bottom-up pass folding sibling buckets into their parent wherever (C) allows.

    Input: buckets with distinct positions. Output: the new buckets (``lvl, idx, s, e, m``)
    and ``dest[i]``, the output bucket that input bucket ``i`` went into.

    At each level, for each parent position ``p`` whose stored descendants have all been
    folded into its children (no "blocked" child), the children and ``p``'s own bucket
    are folded into ``p`` if ``m' + anc(p) <= ratio * Pst(end(p))``. ``anc`` and ``Pst`` are
    computed once on the input: folding moves mass only inside the parent, so neither
    changes for any position that is checked later (see the module docstring).
    """
    n = lvl.shape[0]
    start, end, par, anc, ss, suf, dup = _ancestry(lvl, idx, m)
    # initial buckets grouped by level, by idx within a level
    o3 = np.argsort(idx, kind="mergesort")
    o3 = o3[np.argsort(lvl[o3], kind="mergesort")]
    lvl_lo = np.zeros(MAX_LEVEL + 3, np.int64)
    for i in range(n):
        lvl_lo[lvl[i] + 1] += 1
    for k in range(1, MAX_LEVEL + 3):
        lvl_lo[k] += lvl_lo[k - 1]
    uf = np.arange(n)
    out_no = np.full(n, -1, np.int64)
    o_lvl, o_idx, o_s, o_e, o_m, _ = _columns(n)  # the output: level, position, hull, mass
    n_out = 0
    # frontier at the current level (f) and the next (g): rep (initial bucket, -1 = blocked
    # marker), position, hull, mass, nearest stored ancestor
    f_rep, f_idx, f_s, f_e, f_m, f_nsa = _columns(n)
    g_rep, g_idx, g_s, g_e, g_m, g_nsa = _columns(n)
    nf = 0
    lam_done = 0
    for k in range(lvl_lo[0], lvl_lo[1]):
        i = o3[k]
        f_nsa[nf] = par[i]
        nf = _put_row(f_rep, f_idx, f_s, f_e, f_m, nf, i, idx[i], s[i], e[i], m[i])
    for lam in range(MAX_LEVEL):
        plev = lam + 1
        b, bend = lvl_lo[plev], lvl_lo[plev + 1]
        live = False
        for k in range(nf):
            if f_rep[k] >= 0:
                live = True
                break
        if not live and b == bend and lvl_lo[plev + 1] == n:
            nf = 0
            break
        a = 0
        ng = 0
        while a < nf or b < bend:
            if a < nf and (b >= bend or (f_idx[a] >> 1) <= idx[o3[b]]):
                p = f_idx[a] >> 1
            else:
                p = idx[o3[b]]
            k1 = -1
            k2 = -1
            if a < nf and (f_idx[a] >> 1) == p:
                k1 = a
                a += 1
                if a < nf and (f_idx[a] >> 1) == p:
                    k2 = a
                    a += 1
            own = -1
            if b < bend and idx[o3[b]] == p:
                own = o3[b]
                b += 1
            if k1 < 0:  # only the parent's own bucket: carry it up unchanged
                g_nsa[ng] = par[own]
                ng = _put_row(g_rep, g_idx, g_s, g_e, g_m, ng, own, p, s[own], e[own], m[own])
                continue
            blocked = f_rep[k1] < 0 or (k2 >= 0 and f_rep[k2] < 0)
            if not blocked:
                mm = f_m[k1]
                lo_s = f_s[k1]
                hi_e = f_e[k1]
                if k2 >= 0:
                    mm += f_m[k2]
                    lo_s = min(lo_s, f_s[k2])
                    hi_e = max(hi_e, f_e[k2])
                if own >= 0:
                    mm += m[own]
                    lo_s = min(lo_s, s[own])
                    hi_e = max(hi_e, e[own])
                    nsa = par[own]
                else:
                    nsa = f_nsa[k1]
                a_mass = anc[nsa] if nsa >= 0 else 0.0
                endp = ((p + 1) << plev) - 1
                if mm + a_mass <= ratio * _pst(ss, suf, endp) * _SLACK:
                    rep = f_rep[k1]
                    if k2 >= 0:
                        uf[f_rep[k2]] = rep
                    if own >= 0:
                        uf[own] = rep
                    g_nsa[ng] = nsa
                    ng = _put_row(g_rep, g_idx, g_s, g_e, g_m, ng, rep, p, lo_s, hi_e, mm)
                    continue
            # the parent cannot absorb: its children and own bucket are final
            for k in (k1, k2):
                if k >= 0 and f_rep[k] >= 0:
                    out_no[f_rep[k]] = n_out
                    n_out = _put_row(o_lvl, o_idx, o_s, o_e, o_m, n_out, lam, f_idx[k], f_s[k], f_e[k], f_m[k])
            if own >= 0:
                out_no[own] = n_out
                n_out = _put_row(o_lvl, o_idx, o_s, o_e, o_m, n_out, plev, p, s[own], e[own], m[own])
            g_rep[ng] = -1
            g_idx[ng] = p
            ng += 1
        f_rep, g_rep = g_rep, f_rep
        f_idx, g_idx = g_idx, f_idx
        f_s, g_s = g_s, f_s
        f_e, g_e = g_e, f_e
        f_m, g_m = g_m, f_m
        f_nsa, g_nsa = g_nsa, f_nsa
        nf = ng
        lam_done = plev
    for k in range(nf):  # what is left at the top level is final
        if f_rep[k] >= 0:
            out_no[f_rep[k]] = n_out
            n_out = _put_row(o_lvl, o_idx, o_s, o_e, o_m, n_out, lam_done, f_idx[k], f_s[k], f_e[k], f_m[k])
    dest = np.empty(n, np.int64)
    for i in range(n):
        dest[i] = out_no[_find(uf, i)]
    return o_lvl[:n_out], o_idx[:n_out], o_s[:n_out], o_e[:n_out], o_m[:n_out], dest


class TimeBuckets:
    """The shared time partition of one sketch: bucket metadata and the clock.

    Holds events with tick in ``[clock - window + 1, clock]``. ``ratio`` is the ``R`` of
    invariant (C). Owners (ECM cells, key dictionaries) keep one payload row per bucket and
    re-map their rows with the ``dest`` arrays that :meth:`plan_update` and
    :meth:`plan_union` return.
    """

    __slots__ = ("window", "ratio", "lvl", "idx", "s", "e", "m", "clock")

    def __init__(self, window: int, ratio: float):
        self.window = int(window)
        self.ratio = float(ratio)
        self.lvl = np.zeros(0, np.int64)
        self.idx = np.zeros(0, np.int64)
        self.s = np.zeros(0, np.int64)
        self.e = np.zeros(0, np.int64)
        self.m = np.zeros(0)
        self.clock = NO_CLOCK

    def __len__(self) -> int:
        return int(self.lvl.shape[0])

    def copy(self) -> "TimeBuckets":
        other = TimeBuckets(self.window, self.ratio)
        for name in ("lvl", "idx", "s", "e", "m"):
            setattr(other, name, getattr(self, name).copy())
        other.clock = self.clock
        return other

    @property
    def horizon(self) -> int:
        """Oldest tick still kept."""
        return self.clock - self.window + 1

    def _adopt(self, lvl, idx, s, e, m, dest):
        """Store compressed buckets in canonical order (start ascending, level descending);
        return ``dest`` re-mapped to that order."""
        start = idx << lvl
        order = np.lexsort((-lvl, start))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        self.lvl, self.idx, self.s, self.e, self.m = lvl[order], idx[order], s[order], e[order], m[order]
        out = np.full(dest.shape[0], -1, np.int64)
        ok = dest >= 0
        out[ok] = rank[dest[ok]]
        return out

    def plan_update(self, ticks: np.ndarray, weights: np.ndarray):
        """Insert a batch; return ``(sel, ev_dest, old_dest, n_out)``: the indices of the
        events kept (positive weight, inside the window), the bucket each goes to, the new
        row of each old bucket (-1: expired) and the number of buckets."""
        n_old = len(self)
        clock = max(self.clock, int(ticks.max())) if ticks.shape[0] else self.clock
        horizon = clock - self.window + 1
        # (an empty structure's horizon is below int64: every tick and bucket is after it)
        sel, inv, keep, leaf_at, lvl, idx, s, e, m = add_leaves(
            self.lvl, self.idx, self.s, self.e, self.m, ticks, weights, max(horizon, NO_CLOCK))
        out = compress(lvl, idx, s, e, m, self.ratio)
        self.clock = clock
        dest = self._adopt(*out)
        old_dest = np.full(n_old, -1, np.int64)
        old_dest[keep] = dest[: keep.shape[0]]
        return sel, dest[leaf_at][inv], old_dest, len(self)

    def plan_union(self, other: "TimeBuckets"):
        """Fold ``other``'s buckets in; return ``(dest_self, dest_other, n_out)``."""
        clock = max(self.clock, other.clock)
        horizon = clock - self.window + 1
        lvl = np.concatenate([self.lvl, other.lvl])
        idx = np.concatenate([self.idx, other.idx])
        s = np.concatenate([self.s, other.s])
        e = np.concatenate([self.e, other.e])
        m = np.concatenate([self.m, other.m])
        alive = np.flatnonzero(e >= horizon)
        pre = np.full(lvl.shape[0], -1, np.int64)
        if alive.shape[0]:
            key = np.lexsort((idx[alive], lvl[alive]))
            a = alive[key]
            first = np.ones(a.shape[0], bool)
            first[1:] = (lvl[a][1:] != lvl[a][:-1]) | (idx[a][1:] != idx[a][:-1])
            grp = np.cumsum(first) - 1
            pre[a] = grp
            g = int(grp[-1]) + 1
            heads = a[first]
            cm = np.zeros(g)
            np.add.at(cm, grp, m[a])
            cs = np.full(g, np.iinfo(np.int64).max)
            np.minimum.at(cs, grp, s[a])
            ce = np.full(g, np.iinfo(np.int64).min)
            np.maximum.at(ce, grp, e[a])
            out = compress(lvl[heads], idx[heads], cs, ce, cm, self.ratio)
        else:
            out = (np.zeros(0, np.int64),) * 4 + (np.zeros(0), np.zeros(0, np.int64))
        n_self = len(self)
        self.clock = clock
        dest = self._adopt(*out)
        full = np.full(lvl.shape[0], -1, np.int64)
        ok = pre >= 0
        full[ok] = dest[pre[ok]]
        return full[:n_self], full[n_self:], len(self)

    def classify(self, lo: int, hi: int):
        """Masks of the buckets inside ``[lo, hi]`` and of those straddling its ends."""
        inside = (self.s >= lo) & (self.e <= hi)
        touching = (self.e >= lo) & (self.s <= hi)
        return inside, touching & ~inside

    def validate(self) -> str | None:
        """Why the metadata is not a valid state, or None (used by ``from_bytes``)."""
        lvl, idx, s, e, m = self.lvl, self.idx, self.s, self.e, self.m
        n = lvl.shape[0]
        if n == 0:
            return None
        if self.clock == NO_CLOCK or abs(self.clock) >= TICK_LIMIT:
            return CHECK_ERRORS[1]
        code = check_buckets(lvl, idx, s, e, m, self.clock, self.horizon)
        if code:
            return CHECK_ERRORS[code]
        worst, dup = invariant_excess(lvl, idx, m, self.ratio)
        if dup:
            return "two buckets share a position"
        if worst > 1e-9 * float(m.sum()):
            return "bucket masses violate the merge invariant"
        return None


def straddle_ratio(tb: TimeBuckets, lo: int) -> float:
    """``S(lo) / sum(m_b : s_b >= lo)`` (0 when both are 0): what Lemma A bounds by ``R``."""
    strad = float(tb.m[(tb.s < lo) & (tb.e >= lo)].sum())
    after = float(tb.m[tb.s >= lo].sum())
    return 0.0 if strad == 0 else (math.inf if after == 0 else strad / after)


# -- bytes -----------------------------------------------------------------------------------
# The time buckets (shared by the ECM and key-dictionary blobs, layout in sketches/ecm.py)
# and the ECM's cells are written and read in one compiled call each, and the structural
# checks of ``TimeBuckets.validate`` run in one compiled pass: a Python call per column and
# per check cost more than the columns. The readers report failures as codes.
BUCKET_ERRORS = {1: "buckets out of range", 2: "bucket does not start at its dyadic position"}
CHECK_ERRORS = {
    1: "clock out of range",
    2: "bucket level out of range",
    3: "bucket masses must be finite and positive",
    4: "bucket position out of range",
    5: "bucket hull outside its interval",
    6: "bucket outside the window",
    7: "buckets not in canonical order",
}


@nb.njit(cache=True)
def write_bucket_columns(lvl, idx, s, e, m):
    """u8 level | varint± first start, start steps | varint s − start | varint e − s |
    float column m (start = idx·2^level), column by column."""
    b = lvl.shape[0]
    out = np.empty(13 + 39 * b, np.uint8)
    p = 0
    for i in range(b):
        out[p] = np.uint8(lvl[i])
        p += 1
    prev = np.int64(0)
    for i in range(b):
        start = idx[i] << lvl[i]
        p = put_varint(out, p, zigzag1(start) if i == 0 else np.uint64(start - prev))
        prev = start
    for i in range(b):
        p = put_varint(out, p, np.uint64(s[i] - (idx[i] << lvl[i])))
    for i in range(b):
        p = put_varint(out, p, np.uint64(e[i] - s[i]))
    p = put_floats(out, p, m)
    return out[:p]


@nb.njit(cache=True)
def read_bucket_columns(buf, p, b):
    """``(code, end, lvl, idx, s, e, m)`` of ``b`` buckets written by
    :func:`write_bucket_columns`; refuses positions out of range (checked in floats with a
    wide margin first, so the int64 sums cannot overflow) or off their dyadic grid."""
    if b > buf.shape[0] - p:  # checked before allocating: b may be hostile
        b = 0
        p = -1
    lvl = np.zeros(b, np.int64)
    start = np.zeros(b, np.int64)
    s = np.zeros(b, np.int64)
    e = np.zeros(b, np.int64)
    m = np.zeros(b)
    if p < 0:
        return -1, p, lvl, start, s, e, m
    for i in range(b):
        lvl[i] = buf[p + i]
    p += b
    steps = np.empty(b, np.uint64)
    s_off = np.empty(b, np.uint64)
    width = np.empty(b, np.uint64)
    u, p = get_varint(buf, p)
    if p < 0:
        return p, p, lvl, start, s, e, m
    first = unzigzag1(u)
    for col, n in ((steps, b - 1), (s_off, b), (width, b)):
        if n > buf.shape[0] - p:
            return -1, p, lvl, start, s, e, m
        vals, p = decode_varints(buf, p, n)
        if p < 0:
            return E_VARINT, p, lvl, start, s, e, m
        col[:n] = vals
    bad = False
    acc = 0.0
    limit = 2.0**62
    for i in range(b):  # the float checks of the Python reader, in its order of operations
        if i > 0:
            acc += np.float64(steps[i - 1])
        start_f = np.float64(first) + acc
        s_f = start_f + np.float64(s_off[i])
        bad |= lvl[i] > MAX_LEVEL or abs(start_f) > limit or abs(s_f) > limit
        bad |= s_f + np.float64(width[i]) > limit
    if bad:
        return 1, p, lvl, start, s, e, m
    idx = start
    st = first
    for i in range(b):
        if i > 0:
            st += np.int64(steps[i - 1])
        if st & ((np.int64(1) << lvl[i]) - 1):
            return 2, p, lvl, idx, s, e, m
        s[i] = st + np.int64(s_off[i])
        e[i] = s[i] + np.int64(width[i])
        idx[i] = st >> lvl[i]
    m, p = get_floats(buf, p, b)
    return (0 if p >= 0 else p), p, lvl, idx, s, e, m


@nb.njit(cache=True)
def check_buckets(lvl, idx, s, e, m, clock, horizon):
    """The structural checks of ``TimeBuckets.validate`` in one pass: a ``CHECK_ERRORS``
    key, or 0 (the merge invariant is checked after, by :func:`invariant_excess`)."""
    n = lvl.shape[0]
    if clock == NO_CLOCK or clock >= TICK_LIMIT or clock <= -TICK_LIMIT:
        return 1
    for i in range(n):
        if lvl[i] < 0 or lvl[i] > MAX_LEVEL:
            return 2
    for i in range(n):
        if not (np.isfinite(m[i]) and m[i] > 0):
            return 3
    for i in range(n):
        if ((idx[i] << lvl[i]) >> lvl[i]) != idx[i]:
            return 4
    for i in range(n):
        start = idx[i] << lvl[i]
        if s[i] > e[i] or s[i] < start or e[i] > start + ((np.int64(1) << lvl[i]) - 1):
            return 5
    for i in range(n):
        if e[i] < horizon or e[i] > clock or s[i] < -TICK_LIMIT:
            return 6
    for i in range(1, n):  # start ascending, then level descending (ties stay in place)
        a, b = idx[i - 1] << lvl[i - 1], idx[i] << lvl[i]
        if a > b or (a == b and lvl[i - 1] < lvl[i]):
            return 7
    return 0


@nb.njit(cache=True)
def write_cells(flat):
    """The non-zero cells of the row-major counts: varint count | first flat index, then
    (gap − 1) | float column of their values."""
    n = 0
    for i in range(flat.shape[0]):
        if flat[i] != 0.0:
            n += 1
    vals = np.empty(n)
    out = np.empty(10 + 10 * n + 12 + 8 * n, np.uint8)
    p = put_varint(out, 0, np.uint64(n))
    c = 0
    last = np.int64(-1)
    for i in range(flat.shape[0]):
        if flat[i] != 0.0:
            p = put_varint(out, p, np.uint64(i - last - 1))
            last = i
            vals[c] = flat[i]
            c += 1
    p = put_floats(out, p, vals)
    return out[:p]


@nb.njit(cache=True)
def read_cells(buf, p, size):
    """``(code, end, counts)`` of the cells :func:`write_cells` wrote for ``size`` cells;
    code 1: an index out of range, 2: a count not finite and positive."""
    counts = np.zeros(size)
    nnz, p = get_varint(buf, p)
    if p < 0:
        return p, p, counts
    if nnz > np.uint64(size):
        return 3, p, counts
    n = np.int64(nnz)
    ok, p, flat = get_gaps(buf, p, n, size)
    if p < 0:
        return p, p, counts
    if not ok:
        return 1, p, counts
    vals, p = get_floats(buf, p, n)
    if p < 0:
        return p, p, counts
    for j in range(n):
        if not (np.isfinite(vals[j]) and vals[j] > 0):
            return 2, p, counts
        counts[flat[j]] = vals[j]
    return 0, p, counts


# -- the state's pages (``CellSketch._state_pieces``), written and read in one call each ------
@nb.njit(cache=True)
def write_state_pages(lvl, idx, s, e, m, counts, starts):
    """The buckets' pages in one buffer: ``(bytes, end of each page)``. Per page: varint
    bucket count, its bucket columns (:func:`write_bucket_columns`), its cells
    (:func:`write_cells` of its rows of ``counts``)."""
    b = lvl.shape[0]
    pages = starts.shape[0]
    parts = nb.typed.List()
    for j in range(pages):
        lo = starts[j]
        hi = starts[j + 1] if j + 1 < pages else b
        head = np.empty(10, np.uint8)
        parts.append(head[: put_varint(head, 0, np.uint64(hi - lo))])
        parts.append(write_bucket_columns(lvl[lo:hi], idx[lo:hi], s[lo:hi], e[lo:hi], m[lo:hi]))
        parts.append(write_cells(np.ascontiguousarray(counts[lo:hi]).ravel()))
    total = 0
    for part in parts:
        total += part.shape[0]
    out = np.empty(total, np.uint8)
    ends = np.empty(pages, np.int64)
    p = 0
    for i in range(len(parts)):
        part = parts[i]
        out[p : p + part.shape[0]] = part
        p += part.shape[0]
        if i % 3 == 2:
            ends[i // 3] = p
    return out, ends


@nb.njit(cache=True)
def read_state_pages(buf, p, b, pages, k):
    """What :func:`write_state_pages` wrote: ``pages`` pages of ``b`` buckets of ``k`` cells
    in all. ``(code, which, end, lvl, idx, s, e, m, counts, sizes)``: ``which`` 0 for the
    pages themselves (code 1: an empty page, 2: more buckets than ``b``, 3: fewer), 1 for a
    bucket column's code (``BUCKET_ERRORS``), 2 for a cell column's; negative codes are the
    codec's. Nothing is allocated on ``b``: only on what the pages hold."""
    cols = nb.typed.List()
    rows = nb.typed.List()
    sizes = np.zeros(pages, np.int64)
    seen = 0
    code, which = 0, 0
    for j in range(pages):
        mm, p = get_varint(buf, p)
        if p < 0:
            code = p
            break
        if mm < 1:
            code = 1
            break
        if mm > np.uint64(b - seen):
            code = 2
            break
        n = np.int64(mm)
        c, p2, lvl, idx, s, e, m = read_bucket_columns(buf, p, n)
        if c:
            code, which, p = c, (1 if c > 0 else 0), p2
            break
        c, p2, cells = read_cells(buf, p2, n * k)
        if c:
            code, which, p = c, (2 if c > 0 else 0), p2
            break
        p = p2
        cols.append(np.stack((lvl, idx, s, e)))
        rows.append(m)
        rows.append(cells)
        sizes[j] = n
        seen += n
    if code == 0 and seen != b:
        code = 3
    total = seen
    lvl = np.empty(total, np.int64)
    idx = np.empty(total, np.int64)
    s = np.empty(total, np.int64)
    e = np.empty(total, np.int64)
    m = np.empty(total)
    counts = np.empty((total, k))
    q = 0
    for j in range(len(cols)):
        c4 = cols[j]
        n = c4.shape[1]
        lvl[q : q + n] = c4[0]
        idx[q : q + n] = c4[1]
        s[q : q + n] = c4[2]
        e[q : q + n] = c4[3]
        m[q : q + n] = rows[2 * j]
        counts[q : q + n] = rows[2 * j + 1].reshape(n, k)
        q += n
    return code, which, p, lvl, idx, s, e, m, counts, sizes
