"""Compiled kernels of the splittable histogram (Busch & Tirthapura 2007, Algorithms 3-4).

One data structure ``D`` covers one interval of ``Wp`` ticks (a power of two) in local
time ``[0, Wp - 1]``. Level ``i`` is a row of the 2-D arrays: ``L[i, :n[i]]``,
``R[i, :n[i]]``, ``M[i, :n[i]]`` are its buckets' left ends, right ends and masses,
sorted by ``L``; ``T[i]`` is the largest right end discarded at that level (-1 if none).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _search_left(L, n, t):
    """First index in L[:n] whose value is >= t."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if L[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _insert_level0(L, R, M, n, T, t, v, alpha):
    # Algorithm 4, lines 1-5: exact singleton buckets.
    if t <= T[0]:
        return  # that tick was discarded from level 0 already
    cnt = n[0]
    pos = _search_left(L[0], cnt, t)
    if pos < cnt and L[0, pos] == t:
        M[0, pos] += v
        return
    for j in range(cnt, pos, -1):
        L[0, j] = L[0, j - 1]
        R[0, j] = R[0, j - 1]
        M[0, j] = M[0, j - 1]
    L[0, pos] = t
    R[0, pos] = t
    M[0, pos] = v
    n[0] = cnt + 1
    _discard_overflow(L, R, M, n, T, 0, alpha)


@njit(cache=True)
def _insert_level(L, R, M, n, T, i, t, v, alpha):
    # Algorithm 4, lines 6-37: batched insertion of mass v at tick t with splits.
    cnt = n[i]
    pos = _search_left(L[i], cnt, t + 1) - 1  # last bucket with L <= t
    if pos < 0 or R[i, pos] < t:
        return  # t lies in a discarded region of this level
    cap = 2.0 ** (i + 1)
    half = 2.0 ** i
    rem = v
    while rem > 0.0:
        if L[i, pos] == R[i, pos] or rem + M[i, pos] < cap:
            M[i, pos] += rem
            rem = 0.0
        else:
            rem = rem + M[i, pos] - cap
            lo, hi = L[i, pos], R[i, pos]
            mid = (lo + hi + 1) // 2
            cnt = n[i]
            for j in range(cnt, pos + 1, -1):
                L[i, j] = L[i, j - 1]
                R[i, j] = R[i, j - 1]
                M[i, j] = M[i, j - 1]
            L[i, pos], R[i, pos], M[i, pos] = lo, mid - 1, half
            L[i, pos + 1], R[i, pos + 1], M[i, pos + 1] = mid, hi, half
            n[i] = cnt + 1
            if t >= mid:
                pos += 1
    _discard_overflow(L, R, M, n, T, i, alpha)


@njit(cache=True)
def _discard_overflow(L, R, M, n, T, i, alpha):
    # Algorithm 4, lines 39-45: keep the alpha most recent buckets. Discarding is
    # deferred until a level holds 2·alpha buckets, so the shift is amortised O(1) per
    # insertion. Keeping more than alpha recent buckets only lowers T_i: Lemma 1 does not
    # depend on it, and Lemma 3 needs at least alpha buckets after T_i, which holds.
    if n[i] < 2 * alpha:
        return
    extra = n[i] - alpha
    T[i] = R[i, extra - 1]
    for j in range(alpha):
        L[i, j] = L[i, j + extra]
        R[i, j] = R[i, j + extra]
        M[i, j] = M[i, j + extra]
    n[i] = alpha


@njit(cache=True)
def insert_batch(L, R, M, n, T, levels, ticks, masses, alpha):
    """Insert (tick, mass) pairs, ticks local to the interval, into every level."""
    for k in range(ticks.shape[0]):
        v = masses[k]
        if v <= 0.0:
            continue
        t = ticks[k]
        _insert_level0(L, R, M, n, T, t, v, alpha)
        for i in range(1, levels):
            _insert_level(L, R, M, n, T, i, t, v, alpha)


@njit(cache=True)
def choose_level(T, levels, a):
    """Algorithm 3, line 1: the smallest level that has kept every bucket at or after a."""
    for i in range(levels):
        if T[i] < a:
            return i
    return levels - 1


@njit(cache=True)
def range_mass(L, M, n, level, a, b):
    """e_a − e_(b+1) at a level: the mass of buckets whose left end is in [a, b]
    (Definition 2), summed directly so no large suffix is subtracted from another."""
    total = 0.0
    for j in range(n[level] - 1, -1, -1):
        if L[level, j] < a:
            break
        if L[level, j] <= b:
            total += M[level, j]
    return total
