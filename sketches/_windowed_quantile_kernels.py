"""Compiled kernels of the windowed quantile sketch (``sketches/windowed_quantiles.py``).

The state is one list of *nodes* in pre-order: ``left[n]`` (first tick), ``lg[n]`` (the
node covers the ``2^lg`` ticks from ``left``, aligned: ``left % 2^lg == 0``), sorted by
``left`` and, for equal ``left``, by decreasing ``lg`` (an enclosing node comes first);
``wt[n]`` (the node's event count), ``off[n + 1]`` (node ``j`` owns entries
``off[j]:off[j + 1]``), ``keys`` (int32 value keys, strictly increasing inside a node)
and ``cnts`` (int64, >= 1). Dyadic aligned ranges nest or are disjoint, so the nodes
inside a range form one contiguous run of the list.

Counts are integers and the collapse test is integer arithmetic: nothing rounds.

Tested by: tests/sketches/test_windowed_quantiles.py,
tests/sketches/test_quantile_brackets.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sketches._codec import put_varint, zigzag1

# -- values to keys ------------------------------------------------------------------------


@njit(cache=True)
def value_keys(values, log_gamma, min_indexed, bias):
    """Monotone int32 keys: ``bias + i`` for ``v`` in ``(γ^(i-1), γ^i]``, 0 for
    ``|v| < min_indexed``, ``-(bias + i)`` for ``-v`` in ``(γ^(i-1), γ^i]``.

    The index from ``log`` is corrected against :func:`key_edges`' own ``exp`` so that
    ``lower edge < |v| <= upper edge`` holds exactly for the edges the queries report.
    """
    n = values.shape[0]
    out = np.empty(n, np.int32)
    inv = 1.0 / log_gamma
    for k in range(n):
        v = values[k]
        a = abs(v)
        if a < min_indexed:
            out[k] = 0
            continue
        x = math.log(a) * inv
        i = int(math.ceil(x))
        if i - x < 1e-6 or i - x > 1.0 - 1e-6:  # near an edge: check against exp itself
            while math.exp(i * log_gamma) < a:
                i += 1
            while i - 1 >= 1 - bias and math.exp((i - 1) * log_gamma) >= a:
                i -= 1
        key = bias + i
        out[k] = key if v > 0 else -key
    return out


@njit(cache=True)
def key_edges(keys, log_gamma, min_indexed, bias):
    """(lower, upper) value edges of each key: every value with that key lies in
    ``(lower, upper]`` for positive keys, ``[lower, upper)`` for negative, ``[lower, upper]``
    for the zero key."""
    n = keys.shape[0]
    lo = np.empty(n, np.float64)
    hi = np.empty(n, np.float64)
    for k in range(n):
        key = keys[k]
        if key == 0:
            lo[k] = -min_indexed
            hi[k] = min_indexed
            continue
        i = abs(key) - bias
        a = math.exp((i - 1) * log_gamma)
        b = math.exp(i * log_gamma)
        if i - 1 < 1 - bias:
            a = min_indexed
        if key > 0:
            lo[k], hi[k] = a, b
        else:
            lo[k], hi[k] = -b, -a
    return lo, hi


# -- a batch becomes single-tick nodes -----------------------------------------------------


@njit(cache=True)
def _sort_small(a, lo, hi):
    """Insertion sort of ``a[lo:hi]`` (the keys of one tick: a few dozen)."""
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True)
def _counting_sort(by, lo, span, ticks, keys, out_ticks, out_keys):
    """The pairs (ticks[k], keys[k]) into ``out_*``, stably sorted by ``by[k]`` (all within
    ``[lo, lo + span)``)."""
    start = np.zeros(span + 1, np.int64)
    for k in range(by.shape[0]):
        start[np.int64(by[k]) - lo + 1] += 1
    for s in range(span):
        start[s + 1] += start[s]
    for k in range(by.shape[0]):
        s = np.int64(by[k]) - lo
        p = start[s]
        out_ticks[p] = ticks[k]
        out_keys[p] = keys[k]
        start[s] = p + 1


@njit(cache=True)
def _room(n, e):
    """Uninitialised arrays for a node list of up to ``n`` nodes and ``e`` entries, in the
    order every kernel here takes them: ``(left, lg, off, keys, cnts, wt)``."""
    return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n + 1, np.int64),
            np.empty(e, np.int32), np.empty(e, np.int64), np.empty(n, np.int64))


@njit(cache=True)
def batch_nodes(ticks, keys):
    """The batch as single-tick nodes (pre-order). Sorted by (tick, key) with two counting
    sorts when ticks and keys span little more than the batch; else by tick (counting or
    merge sort), then each tick's keys."""
    n = ticks.shape[0]
    tmin = ticks.min()
    span = ticks.max() - tmin + 1
    st = np.empty(n, np.int64)
    sk = np.empty(n, np.int32)
    kmin = keys.min()
    kspan = np.int64(keys.max()) - np.int64(kmin) + 1
    presorted = False
    if span <= 4 * n + 4096 and kspan <= 4 * n + 4096:
        # LSD radix: a stable counting sort by key, then one by tick.
        t1 = np.empty(n, np.int64)
        k1 = np.empty(n, np.int32)
        _counting_sort(keys, np.int64(kmin), kspan, ticks, keys, t1, k1)
        _counting_sort(t1, tmin, span, t1, k1, st, sk)
        presorted = True
    elif span <= 4 * n + 4096:
        _counting_sort(ticks, tmin, span, ticks, keys, st, sk)
    else:
        order = np.argsort(ticks, kind="mergesort")
        for k in range(n):
            st[k] = ticks[order[k]]
            sk[k] = keys[order[k]]
    left, lg, off, ok, oc, ow = _room(n, n)
    m = 0
    e = 0
    a = 0
    while a < n:
        b = a + 1
        while b < n and st[b] == st[a]:
            b += 1
        if presorted:
            pass
        elif b - a <= 64:
            _sort_small(sk, a, b)
        else:
            sk[a:b] = np.sort(sk[a:b])
        left[m] = st[a]
        lg[m] = 0  # a node of one tick
        off[m] = e
        ow[m] = b - a
        for k in range(a, b):
            if k > a and sk[k] == ok[e - 1]:
                oc[e - 1] += 1
            else:
                ok[e] = sk[k]
                oc[e] = 1
                e += 1
        m += 1
        a = b
    off[m] = e
    return (left[:m].copy(), lg[:m].copy(), off[: m + 1].copy(), ok[:e].copy(),
            oc[:e].copy(), ow[:m].copy())


# -- union ---------------------------------------------------------------------------------


@njit(cache=True)
def _merge_runs(ak, ac, a0, a1, bk, bc, b0, b1, ok, oc, o):
    """Merge two key-sorted runs into ``ok``/``oc`` from ``o``; returns the new end."""
    i, j = a0, b0
    while i < a1 or j < b1:
        if j >= b1 or (i < a1 and ak[i] < bk[j]):
            ok[o], oc[o] = ak[i], ac[i]
            i += 1
        elif i >= a1 or bk[j] < ak[i]:
            ok[o], oc[o] = bk[j], bc[j]
            j += 1
        else:
            ok[o], oc[o] = ak[i], ac[i] + bc[j]
            i += 1
            j += 1
        o += 1
    return o


@njit(cache=True)
def _copy_nodes(left, lg, off, keys, cnts, wt, i, j, live, ol, og, oo, ok, oc, ow, c, e):
    """Copy nodes ``i:j`` (less those wholly before ``live``) to the output at node ``c``,
    entry ``e``, a run of kept nodes at a time; returns the new ``(c, e)``."""
    while i < j:
        if left[i] + (np.int64(1) << lg[i]) - 1 < live:
            i += 1
            continue
        k = i + 1
        while k < j and left[k] + (np.int64(1) << lg[k]) - 1 >= live:
            k += 1
        m = k - i
        e0, e1 = off[i], off[k]
        ol[c : c + m] = left[i:k]
        og[c : c + m] = lg[i:k]
        ow[c : c + m] = wt[i:k]
        oo[c : c + m] = off[i:k] - e0 + e
        ok[e : e + e1 - e0] = keys[e0:e1]
        oc[e : e + e1 - e0] = cnts[e0:e1]
        c += m
        e += e1 - e0
        i = k
    return c, e


@njit(cache=True)
def union(al, ag, ao, ak, ac, aw, bl, bg, bo, bk, bc, bw, live):
    """The nodes of both lists (a node in both gets the sum of the two histograms), less
    those wholly before tick ``live``. Returns ``(left, lg, off, keys, cnts, wt)``."""
    na = al.shape[0]
    nb = bl.shape[0]
    ol, og, oo, ok, oc, ow = _room(na + nb, ak.shape[0] + bk.shape[0])
    i = j = c = e = 0
    while i < na or j < nb:
        if j >= nb:
            c, e = _copy_nodes(al, ag, ao, ak, ac, aw, i, na, live, ol, og, oo, ok, oc, ow, c, e)
            break
        if i >= na:
            c, e = _copy_nodes(bl, bg, bo, bk, bc, bw, j, nb, live, ol, og, oo, ok, oc, ow, c, e)
            break
        if al[i] < bl[j] or (al[i] == bl[j] and ag[i] > bg[j]):
            k = i + 1  # the run of a's nodes before b's next one
            while k < na and (al[k] < bl[j] or (al[k] == bl[j] and ag[k] > bg[j])):
                k += 1
            c, e = _copy_nodes(al, ag, ao, ak, ac, aw, i, k, live, ol, og, oo, ok, oc, ow, c, e)
            i = k
        elif bl[j] < al[i] or (bl[j] == al[i] and bg[j] > ag[i]):
            c, e = _copy_nodes(bl, bg, bo, bk, bc, bw, j, j + 1, live, ol, og, oo, ok, oc, ow, c, e)
            j += 1
        else:
            if al[i] + (np.int64(1) << ag[i]) - 1 >= live:
                ol[c], og[c], ow[c], oo[c] = al[i], ag[i], aw[i] + bw[j], e
                e = _merge_runs(ak, ac, ao[i], ao[i + 1], bk, bc, bo[j], bo[j + 1], ok, oc, e)
                c += 1
            i += 1
            j += 1
    oo[c] = e
    return ol[:c], og[:c], oo[: c + 1], ok[:e], oc[:e], ow[:c]  # views: no second copy


# -- collapse ------------------------------------------------------------------------------


@njit(cache=True)
def _first_at_least(left, x):
    lo, hi = 0, left.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if left[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _sum_by_key(keys, cnts, e0, e1, nk, nc, e):
    """Entries ``e0:e1`` (several key-sorted runs) summed by key, in key order, written
    from ``e``; a dense tally when the keys span little more than the entries."""
    kmin = keys[e0]
    kmax = keys[e0]
    for x in range(e0, e1):
        kmin = min(kmin, keys[x])
        kmax = max(kmax, keys[x])
    span = np.int64(kmax) - np.int64(kmin) + 1
    if span <= 4 * (e1 - e0) + 256:
        tally = np.zeros(span, np.int64)
        for x in range(e0, e1):
            tally[np.int64(keys[x]) - kmin] += cnts[x]
        for d in range(span):
            if tally[d]:
                nk[e], nc[e] = kmin + d, tally[d]
                e += 1
        return e
    order = np.argsort(keys[e0:e1], kind="mergesort")
    for x in range(order.shape[0]):
        k = keys[e0 + order[x]]
        v = cnts[e0 + order[x]]
        if x > 0 and nk[e - 1] == k:
            nc[e - 1] += v
        else:
            nk[e], nc[e] = k, v
            e += 1
    return e


@njit(cache=True)
def collapse(left, lg, off, keys, cnts, wt, top_lg, exact_from, num, shift, strict_from, num_strict):
    """Greedy top-down collapse: a dyadic block B = [l, r] (``r < exact_from``) holding two
    or more nodes becomes one node holding all their events when

        (P_anc + S_B) · 2^shift <= num_B · R_(r+1)

    (P_anc: events of the nodes strictly enclosing B, S_B: events of the nodes inside B,
    R_x: events of the nodes that start at or after x; ``num_B`` is ``num_strict`` when
    ``r >= strict_from``, else ``num``). Otherwise its halves are tried. Returns the new
    lists (the inputs themselves when nothing collapses)."""
    n = left.shape[0]
    cw = np.zeros(n + 1, np.int64)
    for i in range(n):
        cw[i + 1] = cw[i] + wt[i]
    total = cw[n]
    op0 = np.empty(n, np.int64)
    op1 = np.empty(n, np.int64)
    opl = np.empty(n, np.int64)
    opg = np.empty(n, np.int64)
    nops = 0
    depth = 2 * top_lg + 4
    sl = np.empty(depth, np.int64)
    sg = np.empty(depth, np.int64)
    sa = np.empty(depth, np.int64)
    idx = 0
    while idx < n:
        tb = (left[idx] >> top_lg) << top_lg
        top = 1
        sl[0], sg[0], sa[0] = tb, top_lg, 0
        while top > 0:
            top -= 1
            bl, bd, anc = sl[top], sg[top], sa[top]
            br = bl + (np.int64(1) << bd) - 1
            i0 = _first_at_least(left, bl)
            while i0 < n and left[i0] == bl and lg[i0] > bd:
                i0 += 1  # enclosing nodes that start with B
            i1 = _first_at_least(left, br + 1)
            if i1 - i0 < 2 or bl >= exact_from:
                continue
            if br < exact_from:
                need = (anc + cw[i1] - cw[i0]) << shift
                share = num_strict if br >= strict_from else num
                if need <= share * (total - cw[i1]):
                    op0[nops], op1[nops], opl[nops], opg[nops] = i0, i1, bl, bd
                    nops += 1
                    continue
            own = wt[i0] if (left[i0] == bl and lg[i0] == bd) else 0
            half = np.int64(1) << (bd - 1)
            sl[top], sg[top], sa[top] = bl + half, bd - 1, anc + own
            top += 1
            sl[top], sg[top], sa[top] = bl, bd - 1, anc + own
            top += 1
        idx = _first_at_least(left, tb + (np.int64(1) << top_lg))
    if nops == 0:
        return left, lg, off, keys, cnts, wt
    nl, ng, no, nk, nc, nw = _room(n, keys.shape[0])
    width = 1
    for q in range(nops):
        width = max(width, off[op1[q]] - off[op0[q]])
    ak = np.empty(width, np.int32)  # scratch for the merges
    bk = np.empty(width, np.int32)
    ac = np.empty(width, np.int64)
    bc = np.empty(width, np.int64)
    c = e = 0
    i = 0
    for q in range(nops + 1):
        stop = op0[q] if q < nops else n
        c, e = _copy_nodes(left, lg, off, keys, cnts, wt, i, stop, -(2**62), nl, ng, no, nk, nc, nw, c, e)
        if q == nops:
            break
        e0, e1 = off[op0[q]], off[op1[q]]
        nl[c], ng[c], no[c] = opl[q], opg[q], e
        if op1[q] - op0[q] <= 6:  # a few sorted runs: merge them one by one (no allocation)
            m0 = op0[q]
            z = off[m0 + 1] - off[m0]
            ak[:z] = keys[off[m0] : off[m0 + 1]]
            ac[:z] = cnts[off[m0] : off[m0 + 1]]
            for r in range(m0 + 1, op1[q]):
                z = _merge_runs(ak, ac, 0, z, keys, cnts, off[r], off[r + 1], bk, bc, 0)
                ak, bk = bk, ak
                ac, bc = bc, ac
            nk[e : e + z] = ak[:z]
            nc[e : e + z] = ac[:z]
            e += z
        else:
            e = _sum_by_key(keys, cnts, e0, e1, nk, nc, e)
        nw[c] = cw[op1[q]] - cw[op0[q]]
        c += 1
        i = op1[q]
    no[c] = e
    return nl[:c], ng[:c], no[: c + 1], nk[:e], nc[:e], nw[:c]


@njit(cache=True)
def invariant_holds(left, lg, wt, exact_from, num, shift):
    """Every node X of two or more ticks ends before ``exact_from`` and has
    ``P_X · 2^shift <= num · R_(r(X)+1)``, P_X the events of X and the nodes enclosing it."""
    n = left.shape[0]
    cw = np.zeros(n + 1, np.int64)
    for i in range(n):
        cw[i + 1] = cw[i] + wt[i]
    total = cw[n]
    sr = np.empty(n + 1, np.int64)
    sp = np.empty(n + 1, np.int64)
    top = 0
    for i in range(n):
        while top > 0 and sr[top - 1] < left[i]:
            top -= 1
        if lg[i] == 0:
            continue
        r = left[i] + (np.int64(1) << lg[i]) - 1
        if r >= exact_from:
            return False
        p = wt[i] + (sp[top - 1] if top > 0 else 0)
        i1 = _first_at_least(left, r + 1)
        if (p << shift) > num * (total - cw[i1]):
            return False
        sr[top], sp[top] = r, p
        top += 1
    return True


# -- bytes -----------------------------------------------------------------------------------


@njit(cache=True)
def key_gaps(keys, off):
    """Per node: zig-zag of the first key, then ``key − previous − 1`` (keys increase)."""
    out = np.empty(keys.shape[0], np.uint64)
    for j in range(off.shape[0] - 1):
        for x in range(off[j], off[j + 1]):
            if x == off[j]:
                k = np.int64(keys[x])
                out[x] = np.uint64((k << 1) ^ (k >> 63))
            else:
                out[x] = np.uint64(np.int64(keys[x]) - np.int64(keys[x - 1]) - 1)
    return out


@njit(cache=True)
def keys_from_gaps(gaps, off, max_key):
    """Inverse of :func:`key_gaps`; ``ok`` is False when a key leaves ``[-max_key, max_key]``."""
    keys = np.empty(gaps.shape[0], np.int32)
    for j in range(off.shape[0] - 1):
        prev = np.int64(0)
        for x in range(off[j], off[j + 1]):
            g = gaps[x]
            if g > np.uint64(2 * max_key + 2):
                return keys, False
            if x == off[j]:
                u = np.int64(g)
                k = (u >> 1) ^ -(u & 1)
            else:
                k = prev + np.int64(g) + 1
            if k > max_key or k < -max_key:
                return keys, False
            keys[x] = k
            prev = k
    return keys, True


# -- the value keys a read meets (windowed_quantiles._universe) ---------------------------------
@njit(cache=True)
def key_span(keys):
    """(smallest, largest) of a non-empty key array, as int64."""
    lo = hi = np.int64(keys[0])
    for k in keys:
        lo = min(lo, np.int64(k))
        hi = max(hi, np.int64(k))
    return lo, hi


@njit(cache=True)
def key_ranks(keys, lo, hi):
    """The distinct keys in order (keys' dtype) and, for each value ``v`` of ``[lo, hi]``,
    ``rank[v − lo]``: its position among them (−1 for a value no key has)."""
    rank = np.zeros(hi - lo + 1, np.int64)
    for k in keys:
        rank[np.int64(k) - lo] = 1
    n = 0
    for x in range(rank.shape[0]):
        if rank[x]:
            rank[x] = n
            n += 1
        else:
            rank[x] = -1
    universe = np.empty(n, keys.dtype)
    for x in range(rank.shape[0]):
        if rank[x] >= 0:
            universe[rank[x]] = x + lo
    return universe, rank


@njit(cache=True)
def dense_unique(keys, lo, hi):
    """``np.unique(keys, return_inverse=True)`` by a tally over ``[lo, hi]`` (keys within it):
    the distinct keys in order (keys' dtype) and each key's position among them (intp)."""
    universe, rank = key_ranks(keys, lo, hi)
    inv = np.empty(keys.shape[0], np.intp)
    for i in range(keys.shape[0]):
        inv[i] = rank[np.int64(keys[i]) - lo]
    return universe, inv


# -- rank tables of many ranges (WindowedQuantiles.rank_tables) ------------------------------
@njit(cache=True)
def _add_entries(n, off, keys, kmin, rank, cnts, into):
    for e in range(off[n], off[n + 1]):
        into[rank[keys[e] - kmin]] += cnts[e]


@njit(cache=True)
def sweep_tables(first, last, off, keys, kmin, rank, cnts, wt, m, by_last, by_first, upto, before, ptr,
                 los, tops, modes, ilos, itops, direct):
    """``rank_tables``' sweep: the table of every range ``r`` (``los[r]``, ``tops[r]``,
    taken in this order: ``tops`` and ``los`` never decrease) in one call.

    Entry ``e``'s value key is the ``rank[keys[e] − kmin]``-th of the ``m`` keys held
    (``key_ranks``). ``upto``/``before`` (int64 per value key) hold the nodes with ``last <=
    top`` and with ``first < lo`` so far, ``ptr`` how many of each order they are (kept by the caller, so
    that a long sweep can be made in several calls, each holding ``ranges × keys`` numbers:
    its output is allocated once, since an array grown in the loop slows it fourfold).
    ``direct``: for a few ranges, the inside histogram is summed from the nodes met alone
    (the running sums would add every entry up to the last range's top).

    A range's table on the keys present is the same numbers as
    ``WindowedQuantiles.rank_table``: nodes classified as its ``_classify`` does (``modes[r]``
    0: the inner range is the range, 1: it is empty, 2: it is ``[ilos[r], itops[r]]``), the
    inside histogram ``upto − before + spanning nodes``, and the cut nodes' shares summed per
    key in node order (the float sums ``rank_table`` takes). Only the nodes that can meet the
    range are visited: those whose ``first`` lies in ``[lo − widest + 1, top]`` (the list is
    sorted by ``first``; module notes), so a range costs its own nodes and the value keys.

    Returns the tables laid end to end: (key positions, est, cl, cu), ``starts`` (range
    ``r`` owns ``starts[r]:starts[r + 1]``) and each range's Δ."""
    N, R = first.shape[0], los.shape[0]
    widest = np.int64(1)
    for n in range(N):
        widest = max(widest, last[n] - first[n] + 1)
    inside_h = np.empty(m, np.int64)
    cut_h = np.empty(m, np.int64)
    drop_h = np.empty(m, np.int64)
    share_h = np.empty(m, np.float64)
    pos = np.empty(R * m, np.int64)
    est = np.empty(R * m, np.int64)
    cl = np.empty(R * m, np.int64)
    cu = np.empty(R * m, np.int64)
    starts = np.empty(R + 1, np.int64)
    deltas = np.empty(R, np.int64)
    p_last, p_first, j = ptr[0], ptr[1], 0
    for r in range(R):
        lo, top, mode, ilo, itop = los[r], tops[r], modes[r], ilos[r], itops[r]
        while not direct and p_last < N and last[by_last[p_last]] <= top:
            _add_entries(by_last[p_last], off, keys, kmin, rank, cnts, upto)
            p_last += 1
        while not direct and p_first < N and first[by_first[p_first]] < lo:
            _add_entries(by_first[p_first], off, keys, kmin, rank, cnts, before)
            p_first += 1
        for k in range(m):
            inside_h[k] = upto[k] - before[k]  # (0 when direct)
            cut_h[k] = 0
            drop_h[k] = 0
            share_h[k] = 0.0
        delta_o = 0
        delta_i = 0
        for n in range(_first_at_least(first, lo - widest + 1), N):
            f, l = first[n], last[n]
            if f > top:
                break
            meets = l >= lo
            inside = meets and f >= lo and l <= top
            if direct and inside:
                _add_entries(n, off, keys, kmin, rank, cnts, inside_h)
            if meets and not inside:
                delta_o += wt[n]
                share = (min(l, top) - max(f, lo) + 1) / (l - f + 1)
                for e in range(off[n], off[n + 1]):
                    k = rank[keys[e] - kmin]
                    cut_h[k] += cnts[e]
                    share_h[k] += np.float64(cnts[e]) * share
            if not direct and f < lo and l > top:  # spanning the range: in ``before``, not in ``upto``
                _add_entries(n, off, keys, kmin, rank, cnts, inside_h)
            if mode == 2:
                i_meets = l >= ilo and f <= itop
                i_inside = i_meets and f >= ilo and l <= itop
                if i_meets and not i_inside:
                    delta_i += wt[n]
                if inside and not i_inside:
                    _add_entries(n, off, keys, kmin, rank, cnts, drop_h)
        if mode == 0:
            delta_i = delta_o
        starts[r] = j
        c_in = 0
        c_cut = 0
        c_i = 0
        c_share = 0.0
        for k in range(m):
            c_in += inside_h[k]
            c_cut += cut_h[k]
            c_share += share_h[k]
            if mode == 2:
                c_i += inside_h[k] - drop_h[k]
            if inside_h[k] + cut_h[k] > 0:
                pos[j] = k
                cu[j] = c_in + c_cut
                cl[j] = c_in if mode == 0 else (0 if mode == 1 else c_i)
                e = np.int64(np.floor((c_in + c_share) + 0.5))
                est[j] = min(max(e, c_in), c_in + c_cut)
                j += 1
        deltas[r] = max(delta_o, delta_i)
    starts[R] = j
    ptr[0], ptr[1] = p_last, p_first
    return pos[:j], est[:j], cl[:j], cu[:j], starts, deltas


@njit(cache=True)
def bracket_tables(cu, cl, est, starts, n_lower, n_upper, n_est, nums, dens):
    """:func:`bracket_keys` of every table laid end to end as :func:`sweep_tables` returns
    them (table ``r`` owns ``starts[r]:starts[r + 1]``, its counts ``n_*[r]``): the
    positions, each inside its table, as arrays of (tables, q)."""
    R, Q = starts.shape[0] - 1, nums.shape[0]
    j_lo = np.zeros((R, Q), np.int64)
    j_hi = np.zeros((R, Q), np.int64)
    j_est = np.zeros((R, Q), np.int64)
    for r in range(R):
        a, b = starts[r], starts[r + 1]
        j_lo[r], j_hi[r], j_est[r] = bracket_keys(cu[a:b], cl[a:b], est[a:b], n_lower[r],
                                                  n_upper[r], n_est[r], nums, dens)
    return j_lo, j_hi, j_est


@njit(cache=True)
def bracket_keys(cu, cl, est, n_lower, n_upper, n_est, nums, dens):
    """Per ``q = nums[i]/dens[i]``: the first key j with ``cu[j] ≥ max(q·(n_lower + cu[j] −
    cl[j]), 1)`` (a bracket's lower side), the first with ``cl[j] ≥ max(q·(n_upper − cu[j] +
    cl[j]), 1)`` (its upper side), each a binary search on its test (monotone in j: cl ≤ cu,
    both non-decreasing), and the estimate's key (``est`` searched for ``max(⌈q·n_est⌉,
    1)``; 0 when ``n_est`` is 0). The caller keeps every product below 2^63."""
    m, n = nums.shape[0], cu.shape[0]
    j_lo = np.empty(m, np.int64)
    j_hi = np.empty(m, np.int64)
    j_est = np.zeros(m, np.int64)
    for i in range(m):
        num, den = nums[i], dens[i]
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if cu[mid] >= 1 and cu[mid] * den >= (n_lower + cu[mid] - cl[mid]) * num:
                hi = mid
            else:
                lo = mid + 1
        j_lo[i] = lo
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if cl[mid] >= 1 and cl[mid] * den >= (n_upper - cu[mid] + cl[mid]) * num:
                hi = mid
            else:
                lo = mid + 1
        j_hi[i] = lo
        if n_est > 0:
            j_est[i] = np.searchsorted(est, max(-((-num * n_est) // den), 1))
    return j_lo, j_hi, j_est


@njit(cache=True)
def write_pages(left, lg, off, gaps, cnts, starts):
    """The nodes' pages (``WindowedQuantiles._payload_pieces``) in one buffer: ``(bytes,
    end of each page)``. Per page (varints): its node count, node lefts (first zig-zag,
    then gaps), log₂ widths, entry counts, key gaps (``key_gaps``), counts − 1."""
    n = left.shape[0]
    pages = starts.shape[0]
    out = np.empty(pages * 10 + n * 30 + gaps.shape[0] * 20, np.uint8)
    ends = np.empty(pages, np.int64)
    p = 0
    for j in range(pages):
        a = starts[j]
        b = starts[j + 1] if j + 1 < pages else n
        p = put_varint(out, p, np.uint64(b - a))
        p = put_varint(out, p, zigzag1(left[a]))
        for i in range(a + 1, b):
            p = put_varint(out, p, np.uint64(left[i] - left[i - 1]))
        for i in range(a, b):
            p = put_varint(out, p, np.uint64(lg[i]))
        for i in range(a, b):
            p = put_varint(out, p, np.uint64(off[i + 1] - off[i]))
        for x in range(off[a], off[b]):
            p = put_varint(out, p, gaps[x])
        for x in range(off[a], off[b]):
            p = put_varint(out, p, np.uint64(cnts[x] - 1))
        ends[j] = p
    return out[:p], ends
