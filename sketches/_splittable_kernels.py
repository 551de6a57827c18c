"""Compiled kernels of the splittable histogram (Busch & Tirthapura 2007, §2-3).

One data structure ``D`` covers one interval of ``Wp`` ticks (a power of two), in local
time ``[0, Wp - 1]``. Level ``i`` is row ``i`` of two 2-D arrays: ``L[i, :n[i]]`` holds
its buckets' left ends in increasing order, ``M[i, :n[i]]`` their weights. ``T[i]`` is
the largest tick discarded at that level (-1 if none) and ``F[i]`` counts the rounded
floating-point operations that level has done on masses (for the rounding allowance).

Level 0 holds singleton buckets (``r = l``). At levels ``i >= 1`` the buckets tile
``[T[i] + 1, Wp - 1]`` (splits keep a tiling, discards remove a prefix), so a bucket's
right end is the next bucket's left end minus one, or ``Wp - 1`` for the last bucket.

Tested by: tests/sketches/test_splittable_histogram.py,
tests/sketches/test_compiled_codec.py (write_interval, read_interval).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sketches._codec import (
    E_VARINT, decode_varints, drop_stale_kernel_cache, get_floats, get_varint, put_floats,
    put_varint, unzigzag1, zigzag1,
)

drop_stale_kernel_cache(__file__)  # its kernels compile the codec's pieces in


@njit(cache=True)
def aggregate_sorted(ticks, weights):
    """Equal ticks of a sorted batch become one batched insertion (Algorithm 4).

    Returns the distinct ticks, their total weights and the longest run length (a sum of
    ``r`` terms is rounded at most ``r - 1`` times).
    """
    n = ticks.shape[0]
    out_t = np.empty(n, np.int64)
    out_w = np.empty(n, np.float64)
    m = 0
    run = 0
    longest = 0
    for k in range(n):
        if m > 0 and out_t[m - 1] == ticks[k]:
            out_w[m - 1] += weights[k]
            run += 1
        else:
            out_t[m] = ticks[k]
            out_w[m] = weights[k]
            m += 1
            run = 1
        if run > longest:
            longest = run
    return out_t[:m], out_w[:m], longest


@njit(cache=True)
def is_sorted(ticks):
    for k in range(1, ticks.shape[0]):
        if ticks[k] < ticks[k - 1]:
            return False
    return True


@njit(cache=True)
def insert_level0(L, M, n, T, F, ticks, masses, alpha):
    """Algorithm 4, lines 1-5 and 39-45 at level 0, for a sorted batch of distinct ticks.

    The batch is merged into the sorted singletons. When the level reaches ``2·alpha``
    buckets the oldest are discarded down to ``alpha`` (the paper discards down to alpha
    after every element; deferring it only keeps more exact buckets, and every discard
    still leaves alpha of them after ``T``, which is all Lemma 3 uses).
    """
    n0 = n[0]
    t0 = T[0]
    m = ticks.shape[0]
    tl = np.empty(n0 + m, np.int64)
    tm = np.empty(n0 + m, np.float64)
    i = 0
    j = 0
    c = 0
    flops = 0
    while i < n0 or j < m:
        if j < m and (masses[j] <= 0.0 or ticks[j] <= t0):
            j += 1  # nothing to add, or a tick this level no longer covers
            continue
        if j >= m or (i < n0 and L[0, i] < ticks[j]):
            tl[c] = L[0, i]
            tm[c] = M[0, i]
            i += 1
        elif i < n0 and L[0, i] == ticks[j]:
            tl[c] = L[0, i]
            tm[c] = M[0, i] + masses[j]
            flops += 1
            i += 1
            j += 1
        else:
            tl[c] = ticks[j]
            tm[c] = masses[j]
            j += 1
        c += 1
    start = 0
    if c >= 2 * alpha:
        start = c - alpha
        T[0] = tl[start - 1]
    for k in range(start, c):
        L[0, k - start] = tl[k]
        M[0, k - start] = tm[k]
    n[0] = c - start
    F[0] += flops


@njit(cache=True)
def _last_le(row, cnt, t):
    """Index of the last of ``row[:cnt]`` that is <= t (row[0] <= t is assumed)."""
    lo, hi = 0, cnt
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if row[mid] <= t:
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def _emit(L, M, i, lo, hi, w, st, bl, br, bm, alpha):
    """Append a finished bucket to the output; discard the oldest when 2·alpha are out.

    ``st = [s0, p0, bc, T]``: the untouched prefix is ``L[i, s0:p0]``, the rest of the
    output is ``bl/br/bm[:bc]``. Discarding down to alpha output buckets leaves at least
    alpha after the new ``T`` (more buckets follow), which is all Lemma 3 needs.
    """
    bc = st[2]
    bl[bc] = lo
    br[bc] = hi
    bm[bc] = w
    bc += 1
    s0, p0 = st[0], st[1]
    out = (p0 - s0) + bc
    if out >= 2 * alpha:
        d = out - alpha
        take = min(d, p0 - s0)
        if take > 0:
            s0 += take
            st[3] = L[i, s0] - 1  # the prefix is followed by what starts at L[i, p0]
        d -= take
        if d > 0:
            st[3] = br[d - 1]
            for j in range(bc - d):
                bl[j] = bl[j + d]
                br[j] = br[j + d]
                bm[j] = bm[j + d]
            bc -= d
        st[0] = s0
    st[2] = bc


@njit(cache=True)
def insert_level(L, M, n, T, F, i, ticks, masses, alpha, wp, cap_w, half_w, bl, br, bm, sl, sr, sm):
    """Algorithm 4, lines 6-45 at level ``i >= 1``, for a sorted batch of distinct ticks.

    ``cap_w = 2^(i+1)·unit`` and ``half_w = 2^i·unit``. A batch of mass ``v`` at tick
    ``t`` fills the bucket holding ``t`` up to ``cap_w``, splits it in two halves of
    ``half_w`` and goes on with the rest in the half holding ``t``; a singleton bucket
    takes any mass. The sum ``w + r`` is rounded once and, on a split, the remainder
    ``w + r - cap_w`` once: both are counted in ``F[i]``.

    Ticks come in increasing order, so buckets left of the current one are final: they
    are written out in order, and the right halves still ahead wait on a stack (at most
    log Wp deep). The level is rebuilt from the first bucket the batch touches, in time
    linear in the buckets after it, instead of shifting the row at every split.
    """
    cnt = n[i]
    m = ticks.shape[0]
    k = 0
    while k < m and (masses[k] <= 0.0 or ticks[k] <= T[i]):
        k += 1
    if k == m:
        return
    p0 = _last_le(L[i], cnt, ticks[k])
    st = np.empty(4, np.int64)
    st[0], st[1], st[2], st[3] = 0, p0, 0, T[i]
    q = p0
    clo = L[i, q]
    chi = L[i, q + 1] - 1 if q + 1 < cnt else wp - 1
    cw = M[i, q]
    q += 1
    top = 0
    flops = 0
    for kk in range(k, m):
        v = masses[kk]
        t = ticks[kk]
        if v <= 0.0:
            continue
        while t > chi:
            _emit(L, M, i, clo, chi, cw, st, bl, br, bm, alpha)
            if top > 0:
                top -= 1
                clo, chi, cw = sl[top], sr[top], sm[top]
            else:
                clo = L[i, q]
                chi = L[i, q + 1] - 1 if q + 1 < cnt else wp - 1
                cw = M[i, q]
                q += 1
        rem = v
        while True:
            x = cw + rem
            flops += 1
            if clo == chi or x < cap_w:
                cw = x
                break
            rem = x - cap_w
            flops += 1
            mid = clo + ((chi - clo + 1) >> 1)
            if t >= mid:
                _emit(L, M, i, clo, mid - 1, half_w, st, bl, br, bm, alpha)
                clo = mid
            else:
                sl[top], sr[top], sm[top] = mid, chi, half_w
                top += 1
                chi = mid - 1
            cw = half_w
            if rem <= 0.0:
                break
    _emit(L, M, i, clo, chi, cw, st, bl, br, bm, alpha)
    while top > 0:
        top -= 1
        _emit(L, M, i, sl[top], sr[top], sm[top], st, bl, br, bm, alpha)
    while q < cnt:
        hi = L[i, q + 1] - 1 if q + 1 < cnt else wp - 1
        _emit(L, M, i, L[i, q], hi, M[i, q], st, bl, br, bm, alpha)
        q += 1
    s0, bc = st[0], st[2]
    keep = p0 - s0
    if s0 > 0:
        for j in range(keep):
            L[i, j] = L[i, s0 + j]
            M[i, j] = M[i, s0 + j]
    for j in range(bc):
        L[i, keep + j] = bl[j]
        M[i, keep + j] = bm[j]
    n[i] = keep + bc
    T[i] = st[3]
    F[i] += flops


@njit(cache=True)
def insert_all(L, M, n, T, F, levels, ticks, masses, alpha, wp, unit):
    """Insert a sorted batch of distinct local ticks into levels 0..levels-1."""
    insert_level0(L, M, n, T, F, ticks, masses, alpha)
    size = 2 * alpha + 1
    bl = np.empty(size, np.int64)
    br = np.empty(size, np.int64)
    bm = np.empty(size, np.float64)
    depth = 66
    sl = np.empty(depth, np.int64)
    sr = np.empty(depth, np.int64)
    sm = np.empty(depth, np.float64)
    for i in range(1, levels):
        half_w = unit * 2.0**i
        insert_level(L, M, n, T, F, i, ticks, masses, alpha, wp, 2.0 * half_w, half_w,
                     bl, br, bm, sl, sr, sm)


@njit(cache=True)
def suffix_at(L, n, T, levels, t, wp, force):
    """Algorithm 3 for the suffix ``[t, Wp - 1]``.

    Returns ``(level, first, bucket)``: the smallest level whose discarded region ends
    before ``t`` (or level ``force`` if it is >= 0), the index of its first bucket with
    ``l >= t`` (``n`` if none), and at levels >= 1 the index of the bucket holding ``t``
    (-1 at level 0).
    """
    level = levels - 1
    if force >= 0:
        level = force
    else:
        for i in range(levels):
            if T[i] < t:
                level = i
                break
    cnt = n[level]
    first = cnt
    while first > 0 and L[level, first - 1] >= t:
        first -= 1
    bucket = -1
    if level > 0:
        bucket = first if first < cnt and L[level, first] == t else first - 1
    return level, first, bucket


# -- bytes -----------------------------------------------------------------------------------
# One interval is written and read in one compiled call (layout in splittable_histogram.py):
# a summary holds a few intervals of up to ~40 levels each, and a Python call per level
# and column cost more than the bytes themselves. The reader checks every level as the
# Python one did and reports the first failure as a code (``INTERVAL_ERRORS``).
INTERVAL_ERRORS = {
    1: "splittable histogram interval does not match its clock",
    2: "splittable histogram interval header out of range",
    3: "splittable histogram marked exact with a fractional unit",
    4: "splittable histogram level header out of range",
    5: "splittable histogram level discarded too early",
    6: "splittable histogram blob has a gap out of range",
    7: "splittable histogram blob has a column out of range",
    8: "splittable histogram level 0 is not valid",
    9: "splittable histogram level has a bad bucket",
    10: "splittable histogram level is not a valid split tiling",
    11: "splittable histogram marked exact with fractional weights",
    12: "splittable histogram marked exact above 2^53",
}
_GAP_LIMIT = np.uint64(2**62)


@njit(cache=True)
def _log2_exact(w):
    """log2 of a power of two (the bucket widths)."""
    b = 0
    while (np.int64(1) << np.int64(b + 1)) <= w:
        b += 1
    return b


@njit(cache=True)
def write_interval(k, exact, L, M, n, T, F, alpha, wp):
    """The bytes of one interval: each level keeps its ``alpha`` most recent buckets (the
    deferred discard of Algorithm 4, done now); level 0 as ticks, levels >= 1 as widths."""
    levels = L.shape[0]
    size = 12
    for i in range(levels):
        size += 52 + 19 * min(n[i], alpha)
    out = np.empty(size, np.uint8)
    p = put_varint(out, 0, zigzag1(k))
    out[p] = 1 if exact else 0
    out[p + 1] = levels
    p += 2
    for i in range(levels):
        cnt = n[i]
        first = max(0, cnt - alpha)
        if first == 0:
            t_mark = T[i]
        elif i == 0:
            t_mark = L[0, first - 1]
        else:
            t_mark = L[i, first] - 1
        p = put_varint(out, p, np.uint64(t_mark + 1))
        p = put_varint(out, p, np.uint64(F[i]))
        p = put_varint(out, p, np.uint64(cnt - first))
        if i == 0:
            if cnt > first:
                p = put_varint(out, p, zigzag1(L[0, first]))
                for j in range(first + 1, cnt):
                    p = put_varint(out, p, np.uint64(L[0, j] - L[0, j - 1]))
        else:
            for j in range(first, cnt):
                right = L[i, j + 1] if j + 1 < cnt else wp
                out[p] = _log2_exact(right - L[i, j])
                p += 1
        p = put_floats(out, p, np.ascontiguousarray(M[i, first:cnt]))
    return out[:p]


@njit(cache=True)
def read_interval(buf, p, k, max_levels, wp, alpha, log_w, unit, unit_integral):
    """``(code, end, exact, L, M, n, T, F)`` of the interval at ``buf[p]`` written by
    :func:`write_interval` for the interval ``k``. ``code`` 0: valid, and the rows are as
    wide as the widest level (memory follows the blob); otherwise an ``INTERVAL_ERRORS``
    key or a negative ``sketches._codec`` code. Checks: the header; every level's mark,
    flop count and size (alpha buckets after a discard, Lemma 3); level 0 increasing
    singletons after the mark with finite positive weights; levels >= 1 a split tiling of
    ``[T + 1, Wp - 1]`` (nodes of the split tree, weights in ``[2^i·ρ, 2^(i+1)·ρ)`` unless
    one tick wide, the top level never split); exact intervals integral below 2^53."""
    z1 = np.zeros((1, 1), np.int64)
    zf = np.zeros((1, 1), np.float64)
    zn = np.zeros(1, np.int64)
    u, p = get_varint(buf, p)
    if p < 0:
        return p, p, False, z1, zf, zn, zn, zn
    if p + 2 > buf.shape[0]:
        return -1, p, False, z1, zf, zn, zn, zn
    exact, levels = buf[p], np.int64(buf[p + 1])
    p += 2
    if unzigzag1(u) != k:
        return 1, p, False, z1, zf, zn, zn, zn
    if exact > 1 or not 2 <= levels <= max_levels:
        return 2, p, False, z1, zf, zn, zn, zn
    if exact == 1 and not unit_integral:
        return 3, p, False, z1, zf, zn, zn, zn
    # The levels' buckets one after the other, then rows as wide as the widest level (as
    # the blob, not alpha, says: every bucket takes a byte, so the blob bounds the total).
    room = min(levels * max(1, alpha), buf.shape[0] - p + levels)
    Lf = np.empty(room, np.int64)
    Mf = np.empty(room, np.float64)
    off = np.zeros(levels + 1, np.int64)
    n = np.zeros(levels, np.int64)
    T = np.zeros(levels, np.int64)
    F = np.zeros(levels, np.int64)
    widest = 1
    for i in range(levels):
        t1, p = get_varint(buf, p)
        if p < 0:
            return p, p, False, z1, zf, zn, zn, zn
        flops, p = get_varint(buf, p)
        if p < 0:
            return p, p, False, z1, zf, zn, zn, zn
        c, p = get_varint(buf, p)
        if p < 0:
            return p, p, False, z1, zf, zn, zn, zn
        if t1 > np.uint64(wp) or flops > np.uint64(2**62) or c > np.uint64(alpha):
            return 4, p, False, z1, zf, zn, zn, zn
        t_mark = np.int64(t1) - 1
        cnt = np.int64(c)
        if t_mark >= 0 and cnt != alpha:
            return 5, p, False, z1, zf, zn, zn, zn  # Lemma 3 relies on alpha buckets
        o = off[i]
        if o + cnt > room:
            return -1, p, False, z1, zf, zn, zn, zn  # more buckets than the blob has bytes
        off[i + 1] = o + cnt
        if i == 0:
            if cnt:
                u, p = get_varint(buf, p)
                if p < 0:
                    return p, p, False, z1, zf, zn, zn, zn
                if cnt - 1 > buf.shape[0] - p:
                    return -1, p, False, z1, zf, zn, zn, zn
                Lf[0] = unzigzag1(u)
                gaps, p = decode_varints(buf, p, cnt - 1)
                if p < 0:
                    return E_VARINT, p, False, z1, zf, zn, zn, zn
                wrapped = False
                for j in range(1, cnt):
                    g = gaps[j - 1]
                    if g >= _GAP_LIMIT:
                        return 6, p, False, z1, zf, zn, zn, zn
                    Lf[j] = np.int64(np.uint64(Lf[j - 1]) + g)
                    wrapped |= Lf[j] < Lf[j - 1]
                if wrapped:
                    return 7, p, False, z1, zf, zn, zn, zn
            weight, p = get_floats(buf, p, cnt)
            if p < 0:
                return p, p, False, z1, zf, zn, zn, zn
            if cnt:
                bad = Lf[0] <= t_mark or Lf[cnt - 1] >= wp
                for j in range(cnt):
                    bad |= not (np.isfinite(weight[j]) and weight[j] > 0.0)
                    bad |= j > 0 and Lf[j] <= Lf[j - 1]
                if bad:
                    return 8, p, False, z1, zf, zn, zn, zn
        else:
            if cnt > buf.shape[0] - p:
                return -1, p, False, z1, zf, zn, zn, zn
            logs = buf[p : p + cnt]
            p += cnt
            weight, p = get_floats(buf, p, cnt)
            if p < 0:
                return p, p, False, z1, zf, zn, zn, zn
            if cnt < 1:
                return 9, p, False, z1, zf, zn, zn, zn
            for j in range(cnt):
                if logs[j] > log_w:
                    return 9, p, False, z1, zf, zn, zn, zn
            half = unit * 2.0**i
            root = cnt == 1 and t_mark == -1  # never split
            low = 0.0 if root else half
            left = t_mark + 1
            bad = i == levels - 1 and not root  # the top level never splits (Lemma 2)
            for j in range(cnt):
                w = np.int64(1) << np.int64(logs[j])
                Lf[o + j] = left
                bad |= left % w != 0  # a node of the split tree
                bad |= not np.isfinite(weight[j]) or weight[j] < low  # halves start at 2^i·ρ
                bad |= weight[j] >= 2 * half and w > 1  # a full bucket would have split
                left += w
            if bad or left != wp:  # the tiling ends at Wp − 1
                return 10, p, False, z1, zf, zn, zn, zn
        if exact:
            for j in range(cnt):
                if weight[j] != np.floor(weight[j]):
                    return 11, p, False, z1, zf, zn, zn, zn
        Mf[o : o + cnt] = weight
        n[i], T[i], F[i] = cnt, t_mark, np.int64(flops)
        widest = max(widest, cnt)
    if exact and Mf[off[levels - 1]] >= 2.0**53:  # the top level's one bucket
        return 12, p, False, z1, zf, zn, zn, zn
    L = np.zeros((levels, widest), np.int64)
    M = np.zeros((levels, widest), np.float64)
    for i in range(levels):
        L[i, : n[i]] = Lf[off[i] : off[i + 1]]
        M[i, : n[i]] = Mf[off[i] : off[i + 1]]
    return 0, p, exact == 1, L, M, n, T, F


# -- many suffixes at once (range queries) ---------------------------------------------------
_EXACT_LIMIT = 2**53  # below it an integer sum is what fsum returns, exactly


@njit(cache=True)
def _bit_length(x):
    n = 0
    while x > 0:
        x >>= 1
        n += 1
    return n


@njit(cache=True)
def exact_suffix_terms(L, M, n, T, levels, ts, wp, log_w, unit, ok1, local_clock):
    """``SplittableHistogram._suffix`` of an *exact* interval (integer masses, integral
    ``unit``) at every local tick of ``ts``, in integers: per t its fsum ``f``, bracket
    ``[low, high]``, whether ``Δ_t ≠ 0`` (the term then errs by ε), Lemma 3's ``ok``,
    whether it is the zero term (t after the clock or the interval) and ``big`` when a
    number reaches 2^53 (fsum would round: the caller reads that t the exact way).
    ``ok1``: the interval's level-1 check (ε·weight(S_0) ≥ 2ρ(1 + log₂ Wp)), made once."""
    k = ts.size
    est = np.zeros(k, np.int64)
    low = np.zeros(k, np.int64)
    high = np.zeros(k, np.int64)
    has_delta = np.zeros(k, np.bool_)
    ok = np.ones(k, np.bool_)
    zero = np.zeros(k, np.bool_)
    big = np.zeros(k, np.bool_)
    for j in range(k):
        t = ts[j]
        if t > local_clock or t >= wp:
            zero[j] = True
            continue
        level, first, bucket = suffix_at(L, n, T, levels, t, wp, -1)
        f = 0
        for i in range(first, n[level]):
            f += np.int64(M[level, i])
        if f >= _EXACT_LIMIT or level >= 60:
            big[j] = True
            continue
        delta = 0
        if level > 0 and t > 0:
            unit_l = unit << level
            blo = L[level, bucket]
            bhi = L[level, bucket + 1] - 1 if bucket + 1 < n[level] else wp - 1
            depth = log_w - (_bit_length(bhi - blo + 1) - 1)
            zeros = _bit_length(t & -t) - 1
            ancestors = min(depth, log_w - zeros)
            delta = unit_l * (ancestors + (1 if ancestors else 0))
            if t > blo:
                delta += np.int64(M[level, bucket]) - (unit_l if depth else 0)
        if delta >= _EXACT_LIMIT:
            big[j] = True
            continue
        est[j] = f
        low[j] = max(f - delta, 0)
        high[j] = f + delta
        if delta != 0:
            has_delta[j] = True
            ok[j] = level >= 2 or (level == 1 and ok1)
    return est, low, high, has_delta, ok, zero, big
