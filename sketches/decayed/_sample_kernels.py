"""Compiled kernels of the multi-level sample (additive decayed correlated sums, §3.1).

Stored elements are kept in one set of parallel arrays sorted by the key
``(tick, r)`` in *descending* order (newest first, ``r`` a random tie-break). Element
``j`` is sampled at levels ``0..m_j``. Scanning keys from the top, the *pointer*
``λ_j`` is the lowest level that has fewer than ``k`` sampled elements above ``j``;
the sample keeps ``j`` iff ``m_j >= λ_j``. Dropped elements only ever bump counters of
levels below the pointer, which the scan never reads again, so re-scanning the kept
elements reproduces every ``λ_j`` exactly: merges and re-compactions are exact.

Tested by: tests/sketches/decayed/test_additive.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sketches._codec import E_TRUNCATED, get_floats, get_varint, put_floats, put_varint

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def draw(weights, stream, counter, key_u, key_r, theta_unit, top):
    """Per element: its top sampled level ``m`` and its tie-break ``r``.

    Element ``i`` hashes ``x = stream + (counter + i)·φ`` (φ the golden-ratio odd
    constant), so no two elements of one stream share an input. ``u ∈ (0, 1]`` takes 53
    bits of ``mix(x ^ key_u)``; level ``ℓ >= 1`` (threshold ``θ_ℓ = θ_unit·2^ℓ``) samples
    the element iff ``u·θ_ℓ <= w``, i.e. with probability ``min(1, w/θ_ℓ)`` (up to the
    2^-53 grid of ``u``). Level 0 samples every element of positive weight.
    """
    n = weights.shape[0]
    levels = np.empty(n, np.uint8)
    rs = np.empty(n, np.uint64)
    scale = 1.0 / 9007199254740992.0  # 2^-53
    big = 2.0**top
    for i in range(n):
        x = stream + (counter + np.uint64(i)) * _GOLDEN
        hu = _mix(x ^ key_u)
        rs[i] = _mix(x ^ key_r)
        u = (np.float64(hu >> np.uint64(11)) + 1.0) * scale
        ratio = weights[i] / (u * theta_unit)
        if ratio >= big:
            m = top
        elif ratio < 2.0:
            m = 0
        else:
            m = int(np.floor(np.log2(ratio)))
            if m > top:
                m = top
            # log2 rounding: make m the exact largest level with 2^m <= ratio
            while m > 1 and 2.0**m > ratio:
                m -= 1
            while m < top and 2.0 ** (m + 1) <= ratio:
                m += 1
        levels[i] = m
    return levels, rs


@njit(cache=True)
def _less(t1, r1, t2, r2):
    return t1 < t2 or (t1 == t2 and r1 < r2)


@njit(cache=True)
def prefilter(ticks, rs, levels, cut_t, cut_r, top):
    """Drop batch elements that the next compaction would drop anyway.

    ``cut_ℓ`` is a key with at least ``k`` level-ℓ samples above it, so an element below
    ``cut_{m}`` has pointer > m and is dropped; below ``cut_top`` it is also *uncovered*
    (no level has room for it). Returns the keep mask and the newest uncovered tick.
    """
    n = ticks.shape[0]
    keep = np.ones(n, np.bool_)
    ovf = -1
    for i in range(n):
        m = levels[i]
        if cut_t[m] >= 0 and _less(ticks[i], rs[i], cut_t[m], cut_r[m]):
            keep[i] = False
            if cut_t[top] >= 0 and _less(ticks[i], rs[i], cut_t[top], cut_r[top]):
                if ticks[i] > ovf:
                    ovf = ticks[i]
    return keep, ovf


@njit(cache=True)
def merge_compact(at, ar, av, aw, al, bt, br, bv, bw, bl, k, top):
    """Merge two key-descending runs and keep the elements with ``m >= λ``.

    Returns the kept arrays, the cut keys per level (``-1`` = none) and the newest
    uncovered tick (``-1`` = none). An element is uncovered when every level already has
    ``k`` samples above it (pointer past the top level).
    """
    na = at.shape[0]
    nb = bt.shape[0]
    n = na + nb
    ot = np.empty(n, np.int64)
    orr = np.empty(n, np.uint64)
    ov = np.empty(n, np.float64)
    ow = np.empty(n, np.float64)
    ol = np.empty(n, np.uint8)
    L = top + 1
    hist = np.zeros(L, np.int64)
    cut_t = np.full(L, -1, np.int64)
    cut_r = np.zeros(L, np.uint64)
    ptr = 0
    cnt = 0  # processed elements with level >= ptr
    ovf = -1
    i = 0
    j = 0
    out = 0
    prev_t = np.int64(-1)
    prev_r = np.uint64(0)
    for _ in range(n):
        if j >= nb or (i < na and not _less(at[i], ar[i], bt[j], br[j])):
            t, r, v, w, m = at[i], ar[i], av[i], aw[i], al[i]
            i += 1
        else:
            t, r, v, w, m = bt[j], br[j], bv[j], bw[j], bl[j]
            j += 1
        while ptr < L and cnt >= k:
            cut_t[ptr] = prev_t
            cut_r[ptr] = prev_r
            cnt -= hist[ptr]
            ptr += 1
        prev_t, prev_r = t, r
        if ptr >= L:
            if ovf < 0:
                ovf = t
            continue
        hist[m] += 1
        if m >= ptr:
            cnt += 1
            ot[out], orr[out], ov[out], ow[out], ol[out] = t, r, v, w, m
            out += 1
    while ptr < L and cnt >= k:  # a later element below every kept one
        cut_t[ptr] = prev_t
        cut_r[ptr] = prev_r
        cnt -= hist[ptr]
        ptr += 1
    return ot[:out], orr[:out], ov[:out], ow[:out], ol[:out], cut_t, cut_r, ovf


@njit(cache=True)
def contributions(levels, weights, g, theta_unit, k, top):
    """Horvitz-Thompson contribution ``g_j · max(w_j, θ_{λ_j})`` of each kept element.

    Level 0 keeps exact weights (``θ_0 = 0``). Returns the contributions and False if
    ``g`` is not a valid decay along the scan (outside ``[0, 1]`` or growing with age).
    """
    y = coefficients(levels, weights, theta_unit, k, top)
    ok = True
    prev = 1.0
    for j in range(y.shape[0]):
        gj = g[j]
        if not (gj >= 0.0 and gj <= prev):
            ok = False
        prev = gj
        y[j] = gj * y[j]
    return y, ok


@njit(cache=True)
def is_descending(ticks, rs):
    for j in range(1, ticks.shape[0]):
        if not _less(ticks[j], rs[j], ticks[j - 1], rs[j - 1]):
            return False
    return True


@njit(cache=True)
def coefficients(levels, weights, theta_unit, k, top):
    """``max(w_j, θ_{λ_j})`` of each kept element (``w_j`` at level 0): the factor
    ``contributions`` multiplies by ``g_j``, which depends on the scan alone, not on the
    decay (so a sketch computes it once for every query)."""
    n = levels.shape[0]
    L = top + 1
    y = np.empty(n, np.float64)
    hist = np.zeros(L, np.int64)
    ptr = 0
    cnt = 0
    for j in range(n):
        while ptr < L and cnt >= k:
            cnt -= hist[ptr]
            ptr += 1
        m = levels[j]
        w = weights[j]
        if ptr == 0:
            y[j] = w
        else:
            theta = theta_unit * 2.0**ptr
            y[j] = w if w > theta else theta
        hist[m] += 1
        if m >= ptr:
            cnt += 1
    return y


@njit(cache=True)
def write_pages(t, r, v, w, lev, starts):
    """The events' pages (``DecayedAdditiveSketch._payload_pieces``) in one buffer:
    ``(bytes, end of each page)``. Per page: its count, first tick and tick gaps
    (varints), tiebreaks (u64 little endian), the value and weight float columns, levels."""
    n = t.shape[0]
    pages = starts.shape[0]
    out = np.empty(pages * 40 + n * 44, np.uint8)
    ends = np.empty(pages, np.int64)
    p = 0
    for j in range(pages):
        a = starts[j]
        b = starts[j + 1] if j + 1 < pages else n
        p = put_varint(out, p, np.uint64(b - a))
        p = put_varint(out, p, np.uint64(t[a]))
        for i in range(a + 1, b):
            p = put_varint(out, p, np.uint64(t[i - 1] - t[i]))
        for i in range(a, b):
            x = r[i]
            for q in range(8):
                out[p] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
                p += 1
        p = put_floats(out, p, v[a:b])
        p = put_floats(out, p, w[a:b])
        for i in range(a, b):
            out[p] = lev[i]
            p += 1
        ends[j] = p
    return out[:p], ends


# Why a page run is refused (``read_pages``'s positive codes; negative ones are the codec's).
PAGE_ERRORS = {1: "decayed additive sketch has a bad page",
               2: "decayed additive sketch events are not valid",
               3: "decayed additive sketch has a bad event count",
               4: "decayed additive sketch blob has a count out of range"}


@njit(cache=True)
def read_pages(buf, p, n, pages, tick_limit):
    """What :func:`write_pages` wrote, ``pages`` pages of ``n`` events in all, bounds-checked
    in one compiled pass (a page read from Python cost a dispatch per column per page):
    ``(code, end, t, r, v, w, lev, starts)``, code 0 or a key of ``PAGE_ERRORS``, or
    negative for a short or malformed buffer."""
    t = np.empty(n, np.int64)
    r = np.empty(n, np.uint64)
    v = np.empty(n, np.float64)
    w = np.empty(n, np.float64)
    lev = np.empty(n, np.uint8)
    starts = np.empty(pages, np.int64)
    x = 0
    for j in range(pages):
        m, p = get_varint(buf, p)
        if p < 0:
            return p, p, t, r, v, w, lev, starts
        if m > np.uint64(n):
            return 4, p, t, r, v, w, lev, starts
        if m < 1 or 10 * np.int64(m) > buf.shape[0] - p:
            return 1, p, t, r, v, w, lev, starts
        m = np.int64(m)
        if x + m > n:
            return 3, p, t, r, v, w, lev, starts
        first, p = get_varint(buf, p)
        if p < 0:
            return p, p, t, r, v, w, lev, starts
        if first > np.uint64(tick_limit - 1):
            return 4, p, t, r, v, w, lev, starts
        starts[j] = x
        t[x] = np.int64(first)
        below = np.float64(0.0)
        for i in range(1, m):
            g, p = get_varint(buf, p)
            if p < 0:
                return p, p, t, r, v, w, lev, starts
            below += np.float64(g)
            if below > np.float64(first):
                return 2, p, t, r, v, w, lev, starts
            t[x + i] = t[x + i - 1] - np.int64(g)
        if 8 * m > buf.shape[0] - p:
            return E_TRUNCATED, p, t, r, v, w, lev, starts
        for i in range(m):
            y = np.uint64(0)
            for q in range(8):
                y |= np.uint64(buf[p + q]) << np.uint64(8 * q)
            r[x + i] = y
            p += 8
        col, p = get_floats(buf, p, m)
        if p < 0:
            return p, p, t, r, v, w, lev, starts
        v[x : x + m] = col
        col, p = get_floats(buf, p, m)
        if p < 0:
            return p, p, t, r, v, w, lev, starts
        w[x : x + m] = col
        if m > buf.shape[0] - p:
            return E_TRUNCATED, p, t, r, v, w, lev, starts
        for i in range(m):
            lev[x + i] = buf[p + i]
        p += m
        x += m
    if x != n:
        return 3, p, t, r, v, w, lev, starts
    return 0, p, t, r, v, w, lev, starts


# -- the estimator's sums over the ticks held (DecayedAdditiveSketch._estimates) ------------
@njit(cache=True)
def decayed_sums(g, table, at, g0, total, sums, ticks, untils):
    """Per query ``i``: ``(Ŝ₀, Ŝ, ok)``, ``Σ_j x_ij·total[j]`` and ``Σ_{ticks[j] <=
    untils[i]} x_ij·sums[j]`` each summed in tick order (newest first: ``T − 1`` roundings,
    the module notes of ``additive``), ``x_ij`` the query's decay of tick ``j``; ``ok``:
    every ``x_ij`` in [0, 1] and never growing along the ticks, and ``g0[i]`` (the decay
    at age 0) in [0, 1]. ``x_ij`` is ``g[i, j]`` (queries × ticks), or, with a ``table``
    (queries sharing one decay of whole ages, ``table[a]`` that of age ``a``; ``g`` then
    unread), ``table[max(at[i] − ticks[j], 0)]``, read where it is summed."""
    R, T = at.shape[0], ticks.shape[0]
    shared = table.shape[0] > 0
    s0, est, ok = np.empty(R), np.empty(R), np.empty(R, np.bool_)
    for i in range(R):
        good = 0.0 <= g0[i] <= 1.0
        a, b, prev, until = 0.0, 0.0, 1.0, untils[i]
        for j in range(T):
            x = table[max(at[i] - ticks[j], 0)] if shared else g[i, j]
            if not (0.0 <= x <= prev):  # (a NaN fails too)
                good = False
            prev = x
            a += x * total[j]
            if ticks[j] <= until:
                b += x * sums[j]
        s0[i], est[i], ok[i] = a, b, good
    return s0, est, ok
