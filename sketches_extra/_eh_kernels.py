"""Compiled kernels of the exponential histogram (and the batch scan shared with the wave).

Buckets live in three parallel arrays ordered oldest first: ``st`` (first tick), ``en``
(last tick) and ``w`` (total weight, float64). Ticks of different buckets never overlap
except that two buckets may share one boundary tick after a time-disjoint merge.

Tested by: tests/sketches_extra/test_exponential_histogram.py,
tests/sketches_extra/test_deterministic_wave.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Ticks must stay in this range so that ``tick - window`` and ``tick - 1`` never overflow.
TICK_LIMIT = 1 << 62


@njit(cache=True)
def scan_batch(ticks, weights):
    """One pass over a batch: (status, sorted, all_integral, positives, max_weight, sum).

    ``status`` is 0 when fine, 1 for a tick outside ±2^62, 2 for a weight that is
    negative, NaN or infinite.
    """
    n = ticks.shape[0]
    srt = True
    integral = True
    pos = 0
    wmax = 0.0
    total = 0.0
    for i in range(n):
        t = ticks[i]
        if t >= TICK_LIMIT or t <= -TICK_LIMIT:
            return 1, srt, integral, pos, wmax, total
        if i > 0 and t < ticks[i - 1]:
            srt = False
        x = weights[i]
        if not (x >= 0.0) or x == np.inf:
            return 2, srt, integral, pos, wmax, total
        if x > 0.0:
            pos += 1
            total += x
            if x > wmax:
                wmax = x
            if integral and x != np.floor(x):
                integral = False
    return 0, srt, integral, pos, wmax, total


@njit(cache=True)
def compress(st, en, w, m, two_eps, horizon):
    """Greedy newest-to-oldest merge pass; drops buckets ending before ``horizon``.

    A bucket absorbs the next older one when the result spans one tick (exact) or its
    weight stays within ``two_eps`` times the weight of all newer buckets (invariant 1 of
    ECM §3 in its real-valued form). Merging never changes the newer-weight of any other
    bucket, so the invariant keeps holding for all of them. Returns the new count.
    """
    if m == 0 or en[m - 1] < horizon:
        return 0
    out = m  # results are written downwards from the top; out - 1 > k always holds
    newer = 0.0
    gs = st[m - 1]
    ge = en[m - 1]
    gw = w[m - 1]
    k = m - 2
    while k >= 0:
        bs = st[k]
        be = en[k]
        bw = w[k]
        if be < horizon:
            break
        if bs == ge and gs == ge:
            gs = bs  # the same single tick: merging is exact
            gw += bw
        elif gw + bw <= two_eps * newer:
            gs = bs
            gw += bw
        else:
            out -= 1
            st[out] = gs
            en[out] = ge
            w[out] = gw
            newer += gw
            gs = bs
            ge = be
            gw = bw
        k -= 1
    out -= 1
    st[out] = gs
    en[out] = ge
    w[out] = gw
    cnt = m - out
    for i in range(cnt):
        st[i] = st[out + i]
        en[i] = en[out + i]
        w[i] = w[out + i]
    return cnt


@njit(cache=True)
def ingest(st, en, w, m, ticks, weights, i0, two_eps, window, limit):
    """Append sorted events from index ``i0``; returns (next index, bucket count, limit).

    Compresses in place when ``limit`` buckets are reached; the next limit is twice what
    is left (at least 64), so the work per event is O(1) amortized and the result depends
    on the buckets only, never on the capacity of the arrays. Control goes back to the
    caller (to grow the arrays) when the new limit exceeds their capacity.
    """
    cap = st.shape[0]
    n = ticks.shape[0]
    i = i0
    while i < n:
        t = ticks[i]
        x = weights[i]
        if x > 0.0:
            if m > 0 and st[m - 1] == t and en[m - 1] == t:
                w[m - 1] += x  # a burst on the newest tick stays one exact bucket
            else:
                if m >= limit:
                    m = compress(st, en, w, m, two_eps, t - window)
                    limit = max(64, 2 * m)
                    if limit > cap:
                        return i, m, limit
                st[m] = t
                en[m] = t
                w[m] = x
                m += 1
        i += 1
    return n, m, limit


@njit(cache=True)
def suffix(st, en, w, m, lo):
    """(a, s): weight of buckets starting at or after ``lo``, and of buckets straddling it.

    Sums newest first, the order in which :func:`compress` summed the newer weight.
    """
    a = 0.0
    s = 0.0
    k = m - 1
    while k >= 0:
        if en[k] < lo:
            break
        if st[k] >= lo:
            a += w[k]
        else:
            s += w[k]
        k -= 1
    return a, s


@njit(cache=True)
def reconstruct(st, en, w, m, horizon):
    """ECM §5.1: half of each bucket at its first tick, half at its last tick.

    Points before ``horizon`` can never be inside a query and are left out.
    """
    pt = np.empty(2 * m, np.int64)
    pw = np.empty(2 * m, np.float64)
    n = 0
    for k in range(m):
        if st[k] == en[k]:
            if st[k] >= horizon:
                pt[n] = st[k]
                pw[n] = w[k]
                n += 1
        else:
            half = w[k] * 0.5
            if st[k] >= horizon:
                pt[n] = st[k]
                pw[n] = half
                n += 1
            if en[k] >= horizon:
                pt[n] = en[k]
                pw[n] = w[k] - half
                n += 1
    return pt[:n], pw[:n]


@njit(cache=True)
def check_invariant(st, en, w, m, two_eps):
    """True when buckets are ordered, positive, and every multi-tick one obeys invariant 1."""
    newer = 0.0
    for k in range(m - 1, -1, -1):
        if not (w[k] > 0.0) or w[k] == np.inf or st[k] > en[k]:
            return False
        if k > 0 and en[k - 1] > st[k]:
            return False
        if st[k] < en[k] and not (w[k] <= two_eps * newer):
            return False
        newer += w[k]
    return True
