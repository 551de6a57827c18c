"""Compiled kernels of the windowed quantile sketch (Busch & Tirthapura 2007, §2-3, with a
value histogram in every bucket).

One level of one interval is six arrays: ``left[n]`` (bucket left ends, increasing; local
ticks in ``[0, Wp - 1]``), ``wt[n]`` (bucket counts), ``off[n + 1]`` (bucket ``j`` owns
entries ``off[j]:off[j + 1]``), ``keys`` (int32 value-bucket keys, strictly increasing
inside a bucket) and ``cnts`` (int64 counts, >= 1), plus ``T`` (largest discarded tick,
-1 if none). Level 0 holds single ticks; at levels >= 1 the buckets tile ``[T + 1, Wp - 1]``.

Counts are integers, so no operation rounds: the state is exactly Algorithm 4's.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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
    for k in range(n):
        v = values[k]
        a = abs(v)
        if a < min_indexed:
            out[k] = 0
            continue
        i = int(math.ceil(math.log(a) / log_gamma))
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


# -- batches -------------------------------------------------------------------------------


@njit(cache=True)
def group_cells(ticks, keys):
    """A batch sorted by (tick, key) becomes cells: distinct ticks with offsets into the
    distinct keys of each tick and their counts."""
    n = ticks.shape[0]
    ut = np.empty(n, np.int64)
    uoff = np.empty(n + 1, np.int64)
    ck = np.empty(n, np.int32)
    cc = np.empty(n, np.int64)
    m = 0
    c = 0
    for k in range(n):
        if m == 0 or ut[m - 1] != ticks[k]:
            ut[m] = ticks[k]
            uoff[m] = c
            m += 1
            ck[c] = keys[k]
            cc[c] = 1
            c += 1
        elif ck[c - 1] == keys[k]:
            cc[c - 1] += 1
        else:
            ck[c] = keys[k]
            cc[c] = 1
            c += 1
    uoff[m] = c
    return ut[:m], uoff[: m + 1], ck[:c], cc[:c]


# -- level 0 -------------------------------------------------------------------------------


@njit(cache=True)
def _merge_sorted(ak, ac, a0, a1, bk, bc, b0, b1, ok, oc, o):
    """Merge two key-sorted runs into ok/oc from ``o``; returns the new end."""
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
def insert_level0(left, wt, off, keys, cnts, T, bt, boff, bk, bc, alpha):
    """Algorithm 4, lines 1-5 and 39-45, at level 0: the batch's ticks merge into the
    exact singletons; at 2·alpha ticks the oldest are discarded down to alpha (a deferred
    discard: alpha ticks after ``T`` remain, all Lemma 3 uses). Returns the new level."""
    n = left.shape[0]
    m = bt.shape[0]
    nl = np.empty(n + m, np.int64)
    nw = np.empty(n + m, np.int64)
    no = np.empty(n + m + 1, np.int64)
    nk = np.empty(keys.shape[0] + bk.shape[0], np.int32)
    nc = np.empty(keys.shape[0] + bk.shape[0], np.int64)
    i = j = c = o = 0
    while i < n or j < m:
        if j < m and bt[j] <= T:
            j += 1  # a tick this level no longer covers
            continue
        no[c] = o
        if j >= m or (i < n and left[i] < bt[j]):
            nl[c] = left[i]
            o = _merge_sorted(keys, cnts, off[i], off[i + 1], bk, bc, 0, 0, nk, nc, o)
            i += 1
        elif i >= n or bt[j] < left[i]:
            nl[c] = bt[j]
            o = _merge_sorted(keys, cnts, 0, 0, bk, bc, boff[j], boff[j + 1], nk, nc, o)
            j += 1
        else:
            nl[c] = left[i]
            o = _merge_sorted(keys, cnts, off[i], off[i + 1], bk, bc, boff[j], boff[j + 1], nk, nc, o)
            i += 1
            j += 1
        s = 0
        for e in range(no[c], o):
            s += nc[e]
        nw[c] = s
        c += 1
    no[c] = o
    start = 0
    if c >= 2 * alpha:
        start = c - alpha
        T = nl[start - 1]
    e0 = no[start]
    return (nl[start:c].copy(), nw[start:c].copy(), no[start : c + 1] - e0,
            nk[e0:o].copy(), nc[e0:o].copy(), T)


# -- levels >= 1 -----------------------------------------------------------------------------


@njit(cache=True)
def _compact(ck, cc, n):
    """Sort the accumulator's entries by key and add equal keys; returns the new length."""
    if n <= 1:
        return n
    sorted_ = True
    for k in range(1, n):
        if ck[k] <= ck[k - 1]:
            sorted_ = False
            break
    if not sorted_:
        order = np.argsort(ck[:n], kind="mergesort")
        tk = ck[:n][order]
        tc = cc[:n][order]
        ck[:n] = tk
        cc[:n] = tc
    m = 0
    for k in range(n):
        if m > 0 and ck[m - 1] == ck[k]:
            cc[m - 1] += cc[k]
        else:
            ck[m] = ck[k]
            cc[m] = cc[k]
            m += 1
    return m


@njit(cache=True)
def _emit(ol, ow, oo, ok, oc, st, lo, w, ck, cc, c0, c1):
    """Append bucket (lo, w) with entries ck/cc[c0:c1] to the output. ``st = [buckets, entries]``."""
    b, e = st[0], st[1]
    ol[b] = lo
    ow[b] = w
    oo[b] = e
    for k in range(c0, c1):
        ok[e] = ck[k]
        oc[e] = cc[k]
        e += 1
    oo[b + 1] = e
    st[0] = b + 1
    st[1] = e


@njit(cache=True)
def insert_level(left, wt, off, keys, cnts, T, bt, boff, bk, bc, alpha, wp, log_w, half):
    """Algorithm 4, lines 6-45, at level ``i >= 1`` (``half = 2^i``), for a batch of
    distinct sorted ticks with their key cells. Returns the new level.

    A tick's ``r`` events fill the bucket holding it up to ``2·half``; the bucket then
    splits into two halves of ``half`` events each, and the rest goes on into the half
    holding the tick. Which ``half`` events each child keeps is free (the proof of Lemma 1
    assigns elements to children arbitrarily): the left child keeps the ``half`` smallest
    values, the right child the rest, so children hold narrower value ranges and fewer
    entries. Only events already in the parent are divided; the tick's remaining events
    are added to the child afterwards (Theorem 3's batches).
    """
    n = left.shape[0]
    m = bt.shape[0]
    cap_b = n + m * (log_w + 2) + 2
    cap_e = keys.shape[0] + bk.shape[0] + cap_b + 2
    ol = np.empty(cap_b, np.int64)
    ow = np.empty(cap_b, np.int64)
    oo = np.empty(cap_b + 1, np.int64)
    ok = np.empty(cap_e, np.int32)
    oc = np.empty(cap_e, np.int64)
    st = np.zeros(2, np.int64)
    # The current bucket: (clo, chi, cw) and its entries ck/cc[:cl] (maybe unsorted).
    ck = np.empty(cap_e, np.int32)
    cc = np.empty(cap_e, np.int64)
    # Pending right halves: a stack of buckets whose entries are in a pool.
    depth = log_w + 2
    sl = np.empty(depth, np.int64)
    sh = np.empty(depth, np.int64)
    sw = np.empty(depth, np.int64)
    so = np.empty(depth + 1, np.int64)
    pk = np.empty(cap_e, np.int32)
    pc = np.empty(cap_e, np.int64)
    top = 0
    so[0] = 0
    cap = 2 * half
    q = 0  # next untouched bucket of the old level
    have = False
    clo = chi = cw = 0
    cl = 0
    k = 0
    while k < m and bt[k] <= T:
        k += 1
    for kk in range(k, m):
        t = bt[kk]
        while not have or t > chi:
            if have:
                cl = _compact(ck, cc, cl)
                _emit(ol, ow, oo, ok, oc, st, clo, cw, ck, cc, 0, cl)
            if top > 0:
                top -= 1
                clo, chi, cw = sl[top], sh[top], sw[top]
                cl = 0
                for e in range(so[top], so[top + 1]):
                    ck[cl] = pk[e]
                    cc[cl] = pc[e]
                    cl += 1
            else:
                # Untouched buckets wholly before t are copied as they are.
                while q + 1 < n and left[q + 1] <= t:
                    _emit(ol, ow, oo, ok, oc, st, left[q], wt[q], keys, cnts, off[q], off[q + 1])
                    q += 1
                clo = left[q]
                chi = left[q + 1] - 1 if q + 1 < n else wp - 1
                cw = wt[q]
                cl = 0
                for e in range(off[q], off[q + 1]):
                    ck[cl] = keys[e]
                    cc[cl] = cnts[e]
                    cl += 1
                q += 1
            have = True
        # Insert the tick's cells, cell by cell, splitting when the bucket fills.
        e = boff[kk]
        e_end = boff[kk + 1]
        part = 0  # events of cell e already inserted
        r = 0
        for x in range(e, e_end):
            r += bc[x]
        while r > 0:
            if clo == chi or cw + r < cap:
                take = r
            else:
                take = cap - cw
            got = 0
            while got < take:
                avail = bc[e] - part
                use = min(avail, take - got)
                ck[cl] = bk[e]
                cc[cl] = use
                cl += 1
                got += use
                part += use
                if part == bc[e]:
                    e += 1
                    part = 0
            cw += take
            r -= take
            if cw < cap or clo == chi:
                continue
            # Split: the left child keeps the `half` smallest values.
            cl = _compact(ck, cc, cl)
            acc = 0
            cut = 0
            while acc + cc[cut] <= half:
                acc += cc[cut]
                cut += 1
                if acc == half:
                    break
            # Entries [0, cut) go left, plus `half - acc` of entry `cut`.
            mid = clo + ((chi - clo + 1) >> 1)
            rest = half - acc
            if t >= mid:
                if rest > 0:
                    # Emit the left child with a partial entry.
                    _emit(ol, ow, oo, ok, oc, st, clo, half, ck, cc, 0, cut)
                    b = st[0] - 1
                    ok[st[1]] = ck[cut]
                    oc[st[1]] = rest
                    st[1] += 1
                    oo[b + 1] = st[1]
                    cc[cut] -= rest
                else:
                    _emit(ol, ow, oo, ok, oc, st, clo, half, ck, cc, 0, cut)
                # The right child is the current bucket: entries [cut, cl).
                nn = 0
                for x in range(cut, cl):
                    ck[nn] = ck[x]
                    cc[nn] = cc[x]
                    nn += 1
                cl = nn
                clo = mid
                cw = half
            else:
                # Push the right child; the left child becomes the current bucket.
                sl[top], sh[top], sw[top] = mid, chi, half
                pe = so[top]
                if rest > 0:
                    pk[pe] = ck[cut]
                    pc[pe] = cc[cut] - rest
                    pe += 1
                for x in range(cut + 1 if rest > 0 else cut, cl):
                    pk[pe] = ck[x]
                    pc[pe] = cc[x]
                    pe += 1
                top += 1
                so[top] = pe
                if rest > 0:
                    cc[cut] = rest
                    cl = cut + 1
                else:
                    cl = cut
                chi = mid - 1
                cw = half
    if have:
        cl = _compact(ck, cc, cl)
        _emit(ol, ow, oo, ok, oc, st, clo, cw, ck, cc, 0, cl)
        while top > 0:
            top -= 1
            _emit(ol, ow, oo, ok, oc, st, sl[top], sw[top], pk, pc, so[top], so[top + 1])
    while q < n:
        _emit(ol, ow, oo, ok, oc, st, left[q], wt[q], keys, cnts, off[q], off[q + 1])
        q += 1
    c, o = st[0], st[1]
    start = 0
    if c >= 2 * alpha:
        start = c - alpha
        T = ol[start] - 1
    e0 = oo[start]
    return (ol[start:c].copy(), ow[start:c].copy(), oo[start : c + 1] - e0,
            ok[e0:o].copy(), oc[e0:o].copy(), T)


# -- bytes -----------------------------------------------------------------------------------


@njit(cache=True)
def put_varints(values, out, pos):
    """LEB128 of non-negative int64 values into ``out`` from ``pos``; returns the end."""
    for k in range(values.shape[0]):
        v = values[k]
        while v >= 0x80:
            out[pos] = (v & 0x7F) | 0x80
            v >>= 7
            pos += 1
        out[pos] = v
        pos += 1
    return pos


@njit(cache=True)
def get_varints(data, pos, count, out):
    """Read ``count`` LEB128 values; returns the end, or -1 if truncated or over 62 bits."""
    n = data.shape[0]
    for k in range(count):
        v = 0
        shift = 0
        while True:
            if pos >= n or shift > 56:
                return -1
            b = data[pos]
            pos += 1
            v |= np.int64(b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out[k] = v
    return pos
