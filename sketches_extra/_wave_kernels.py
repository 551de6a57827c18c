"""Compiled kernels of the deterministic wave (Gibbons and Tirthapura 2004, §3.2-3.3).

Level ``j`` is a circular queue (row ``j`` of ``qp``/``qv``/``qz``: tick, value, partial
sum through the item) of capacity ``caps[j]``; ``qn[j]`` entries are valid (slots
``0..qn[j]-1``) and ``qh[j]`` is the slot written next. ``sc`` holds the scalars:
``sc[0]`` clock, ``sc[1]`` total, ``sc[2]``/``sc[3]`` tick and partial sum of the newest
item known to lie before every admissible query (the "largest discarded 1-rank" of
Fig. 4/5; initially one tick before the first event with partial sum 0), ``sc[4]`` 1
once an event was seen, ``sc[5]`` 1 once the top level evicted an item still inside the
window (the weight bound U was exceeded).

Tested by: tests/sketches/test_randomized_wave.py,
tests/sketches_extra/test_deterministic_wave.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def msb(h):
    """Position of the most significant 1-bit of ``h > 0``, by a 6-step binary search."""
    j = 0
    s = 32
    while s > 0:
        if h >> s:
            h >>= s
            j += s
        s >>= 1
    return j


@njit(cache=True)
def level_of(old, new, top):
    """Fig. 5 step 3(a): largest j with a multiple of 2^j in (old, new], capped at ``top``."""
    j = msb(~old & new)
    return top if j > top else j


@njit(cache=True)
def insert(qp, qv, qz, qn, qh, caps, sc, t, v, window):
    """One item of value ``v > 0`` at tick ``t >= clock``: O(1) worst case (Fig. 5)."""
    top = caps.shape[0] - 1
    old = sc[1]
    new = old + v
    j = level_of(old, new, top)
    sc[1] = new
    k = qh[j]
    if qn[j] == caps[j]:
        p = qp[j, k]
        if p < t - window:
            # An expired item leaves the queue: remember it if it is the newest such.
            if qz[j, k] > sc[3]:
                sc[2] = p
                sc[3] = qz[j, k]
        elif j == top:
            sc[5] = 1
    else:
        qn[j] += 1
    qp[j, k] = t
    qv[j, k] = v
    qz[j, k] = new
    k += 1
    qh[j] = 0 if k == caps[j] else k


@njit(cache=True)
def ingest(qp, qv, qz, qn, qh, caps, sc, ticks, weights, window):
    """Sorted batch; the weight of each run of equal ticks enters as one item."""
    n = ticks.shape[0]
    i = 0
    while i < n:
        t = ticks[i]
        v = weights[i]
        i += 1
        while i < n and ticks[i] == t:
            v += weights[i]
            i += 1
        if sc[4] == 0:
            sc[4] = 1
            sc[2] = t - 1
            sc[3] = sc[1]
        sc[0] = t
        if v > 0:
            insert(qp, qv, qz, qn, qh, caps, sc, t, v, window)


@njit(cache=True)
def bracket(qp, qv, qz, qn, sc, lo):
    """(lower, upper) of the weight in ``[lo, clock]`` (Fig. 5 query, any ``lo``).

    p1 is the newest known item before ``lo`` (a stored one or ``sc[2:4]``), p2 the oldest
    stored item at or after ``lo``; every item after p1 is in the window or was evicted
    before p2, so the weight is in ``[total − z2 + v2, total − z1]``. Without p2 no item
    lies in the window: the newest item of a level is never evicted.
    """
    z1 = sc[3]
    z2 = -1
    v2 = 0
    for j in range(qn.shape[0]):
        for k in range(qn[j]):
            z = qz[j, k]
            if qp[j, k] < lo:
                if z > z1:
                    z1 = z
            elif z2 < 0 or z < z2:
                z2 = z
                v2 = qv[j, k]
    if z2 < 0:
        return 0, 0
    return sc[1] - z2 + v2, sc[1] - z1


@njit(cache=True)
def live(qp, qv, qz, qn, sc, horizon):
    """Items with tick >= horizon (sorted by partial sum, with their level) and the floor.

    The floor is the newest known item before ``horizon``: ``(tick, partial sum)``.
    """
    cnt = 0
    for j in range(qn.shape[0]):
        for k in range(qn[j]):
            if qp[j, k] >= horizon:
                cnt += 1
    lv = np.empty(cnt, np.int64)
    p = np.empty(cnt, np.int64)
    v = np.empty(cnt, np.int64)
    z = np.empty(cnt, np.int64)
    fp = sc[2]
    fz = sc[3]
    i = 0
    for j in range(qn.shape[0]):
        for k in range(qn[j]):
            if qp[j, k] >= horizon:
                lv[i] = j
                p[i] = qp[j, k]
                v[i] = qv[j, k]
                z[i] = qz[j, k]
                i += 1
            elif qz[j, k] > fz:
                fp = qp[j, k]
                fz = qz[j, k]
    order = np.argsort(z)
    return lv[order], p[order], v[order], z[order], fp, fz


@njit(cache=True)
def load(qp, qv, qz, qn, qh, caps, lv, p, v, z):
    """Fill empty queues with items sorted by partial sum (oldest first per level)."""
    for i in range(lv.shape[0]):
        j = lv[i]
        k = qh[j]
        qp[j, k] = p[i]
        qv[j, k] = v[i]
        qz[j, k] = z[i]
        if qn[j] < caps[j]:
            qn[j] += 1
        k += 1
        qh[j] = 0 if k == caps[j] else k


@njit(cache=True)
def check_items(lv, p, v, z, fp, fz, total, clock, horizon, top):
    """True when stored items are consistent: what the reader relies on."""
    prev_p = fp
    prev_z = fz
    for i in range(lv.shape[0]):
        if v[i] <= 0 or p[i] < horizon or p[i] > clock or p[i] <= fp:
            return False
        if p[i] < prev_p or z[i] - v[i] < prev_z or z[i] > total:
            return False
        if lv[i] != level_of(z[i] - v[i], z[i], top):
            return False
        prev_p = p[i]
        prev_z = z[i]
    return True
