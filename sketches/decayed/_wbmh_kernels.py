"""Compiled kernels of the relative-error sketch: regions, the bucket partition, cells.

The WBMH run with a dummy element at every tick (§3.2.5) has, at clock ``c``, a
partition of ticks ``[0, c]`` that is a closed-form function of ``c``. With ``b`` the
region boundaries and ``I`` the capacities (:mod:`.schedule`), the level-``h`` block of
tick ``s`` ends at ``e_h(s) = (⌊s/I_h⌋ + 1)·I_h − 1`` and has *entered* region ``h``
when ``c − e_h(s) >= b_h``. Entering is monotone (a block that entered region ``h + 1``
has children that entered region ``h``), so the largest such ``h`` is found by
bisection. Tick ``s`` then lies in the partial level-``(h+1)`` block made of the
level-``h`` siblings that have entered::

    F = ⌊s/I_{h+1}⌋·I_{h+1}
    L = min(F + I_{h+1} − 1, ⌊(c − b_h + 1)/I_h⌋·I_h − 1)      (h >= 1)
    F = ⌊s/I_1⌋·I_1,  L = F + I_1 − 1                            (h = 0)

which is exactly what FINDREGIONS-driven merging produces (checked in the tests).

Tested by: tests/sketches/decayed/test_relative.py, tests/sketches/decayed/test_derived.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_LIMIT = 2**62


@njit(cache=True)
def poly_boundaries(alpha, eps, limit):
    """SETBOUNDARIES (Fig. 2) for ``f(x) = (x + 1)^-α`` up to the first ``b > limit``.

    ``(1 + ε)·f(x − 1) >= f(b)`` is ``x <= (b + 1)(1 + ε)^(1/α)``; the closed form is then
    corrected by direct evaluation so the inequality holds as computed in float64.
    """
    cap = 1024
    b = np.empty(cap, np.int64)
    b[0] = 0
    n = 1
    grow = (1.0 + eps) ** (1.0 / alpha)
    while b[n - 1] <= limit:
        prev = b[n - 1]
        target = (prev + 1.0) ** (-alpha)
        guess = (prev + 1.0) * grow
        if guess >= 2.0**62:
            x = np.int64(_LIMIT) + 1
        else:
            x = np.int64(np.floor(guess))
            if x < prev + 1:
                x = prev + 1
            for _ in range(4):
                if x > prev + 1 and (1.0 + eps) * (x * 1.0) ** (-alpha) < target:
                    x -= 1
            for _ in range(4):
                if (1.0 + eps) * ((x + 1) * 1.0) ** (-alpha) >= target:
                    x += 1
        if n == cap:
            nb = np.empty(2 * cap, np.int64)
            nb[:cap] = b
            b = nb
            cap *= 2
        b[n] = x
        n += 1
    return b[:n]


@njit(cache=True)
def capacities(b):
    """Lemma 3.1 with ``m_i = max(1, ⌊|G_i|/I_i⌋)`` and capacities capped below 2^62."""
    n = b.shape[0]
    cap = np.ones(n, np.int64)
    if n > 1:
        cap[1] = b[1]
    for i in range(1, n - 1):
        m = (b[i + 1] - b[i]) // cap[i]
        if m < 1:
            m = 1
        most = _LIMIT // cap[i]
        if m > most:
            m = most if most >= 1 else 1
        cap[i + 1] = m * cap[i]
    return cap


@njit(cache=True)
def _bucket(s, c, b, cap, H):
    # largest h in [0, H-1] whose level-h block containing s entered region h
    lo = 0
    hi = H - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        e = (s // cap[mid] + 1) * cap[mid] - 1
        if c - e >= b[mid]:
            lo = mid
        else:
            hi = mid - 1
    h = lo
    if h == 0:
        F = (s // cap[1]) * cap[1]
        return F, F + cap[1] - 1
    F = (s // cap[h + 1]) * cap[h + 1]
    L = F + cap[h + 1] - 1
    last = ((c - b[h] + 1) // cap[h]) * cap[h] - 1
    if last < L:
        L = last
    return F, L


@njit(cache=True)
def buckets_of(ticks, c, b, cap, single):
    """Start and nominal end of the bucket holding each tick at clock ``c``."""
    n = ticks.shape[0]
    F = np.empty(n, np.int64)
    L = np.empty(n, np.int64)
    H = b.shape[0] - 1
    for i in range(n):
        if single:
            F[i], L[i] = 0, c
        else:
            F[i], L[i] = _bucket(ticks[i], c, b, cap, H)
    return F, L


@njit(cache=True)
def quantize(values, vmin, res, cells):
    """Cell ``j`` with ``vmin + j·res <= v < vmin + (j + 1)·res`` exactly as computed."""
    n = values.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        v = values[i]
        j = np.int64(np.floor((v - vmin) / res))
        if j < 0:
            j = 0
        if j > cells - 1:
            j = cells - 1
        while j > 0 and vmin + j * res > v:
            j -= 1
        while j < cells - 1 and vmin + (j + 1) * res <= v:
            j += 1
        out[i] = j
    return out


@njit(cache=True)
def accumulate(M, rows, cells, weights):
    for i in range(rows.shape[0]):
        M[rows[i], cells[i]] += weights[i]


@njit(cache=True)
def fold_rows(M, groups, ngroups):
    """Sum rows of ``M`` with equal group ids (consecutive) into a new matrix."""
    out = np.zeros((ngroups, M.shape[1]), np.float64)
    for i in range(M.shape[0]):
        g = groups[i]
        for j in range(M.shape[1]):
            out[g, j] += M[i, j]
    return out
