"""Regions and the merge schedule of the weight-based merging histogram (WBMH).

Cormode, Tirthapura & Xu (2009), §3.2.1-3.2.3 and §3.2.5, after Cohen & Strauss.

* :func:`set_boundaries` — SETBOUNDARIES (Fig. 2): ``b_0 = 0`` and
  ``b_i = max{x : (1 + ε₁)·f(x − 1) >= f(b_{i−1})}``; region ``G_i = [b_i, b_{i+1})`` of ages.
* :func:`capacities` — Lemma 3.1: ``I_1 = |G_0| = b_1``, ``I_{i+1} = m_i·I_i`` with
  ``m_i = ⌊|G_i| / I_i⌋`` (taken as 1 when ``|G_i| < I_i``: such a region never merges).
* :class:`FindRegions` — INITIALIZEFINDREGIONS / FINDREGIONS (Figs. 5-6): a hash table
  from time to the regions that merge then, refilled from Lemma 3.2.
* :class:`ReferenceWBMH` — PROCESSELEMENT (Fig. 3) run tick by tick with a dummy element
  at every idle tick (§3.2.5). The sketch itself never runs it: it uses the closed form
  of the same partition (:mod:`._wbmh_kernels`), which the tests check against it.

Tick convention: ticks start at 0 and a bucket created at tick ``t`` (``t mod b_1 = 0``)
covers ``[t, t + b_1 − 1]``. The capacity-``I_i`` block ``q`` (ticks
``[q·I_i, (q + 1)·I_i − 1]``) lies wholly in region ``G_i`` from tick
``b_i + (q + 1)·I_i − 1`` on, so Lemma 3.2's merge times read, in ticks,
``b_i + (k·m_i + j)·I_i − 1`` for ``2 <= j <= m_i``, ``k >= 0`` (the paper counts from 1).

Examples
--------
>>> from sketches.decayed.decay import Polynomial
>>> set_boundaries(Polynomial(1.0), 0.5, 40).tolist()
[0, 1, 3, 6, 10, 16, 25, 39, 60]
>>> capacities(set_boundaries(Polynomial(1.0), 0.5, 40)).tolist()
[1, 1, 2, 2, 4, 4, 8, 8, 16]

Tested by: tests/sketches/decayed/test_relative.py (set_boundaries, capacities,
merge_time_after).
"""

from __future__ import annotations

import numpy as np

__all__ = ["set_boundaries", "capacities", "merge_time_after", "FindRegions", "ReferenceWBMH"]


def set_boundaries(decay, eps1: float, limit: int) -> np.ndarray:
    """SETBOUNDARIES (Fig. 2) until the first boundary beyond ``limit``.

    ``b_i`` is found by galloping then bisection on the integer ``x`` with the decay's own
    floating-point values, so ``(1 + ε₁)·f(b_i − 1) >= f(b_{i−1})`` holds as computed.
    """

    def f(x: int) -> float:
        return float(decay(np.array([x]))[0])

    def ok(x: int, target: float) -> bool:
        return (1 + eps1) * f(x - 1) >= target

    b = [0]
    while b[-1] <= limit:
        prev = b[-1]
        target = f(prev)
        lo, step = prev + 1, 1  # x = prev + 1 always qualifies
        while ok(lo + step, target):
            lo += step
            step *= 2
        hi = lo + step  # fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid, target):
                lo = mid
            else:
                hi = mid
        b.append(lo)
    return np.array(b, dtype=np.int64)


def capacities(b: np.ndarray) -> np.ndarray:
    """Lemma 3.1: ``I[0] = 1``, ``I[1] = b_1``, ``I[i+1] = max(1, ⌊|G_i|/I_i⌋)·I_i``."""
    n = len(b)
    cap = np.ones(n, dtype=np.int64)
    if n > 1:
        cap[1] = b[1]
    for i in range(1, n - 1):
        m = max(1, int(b[i + 1] - b[i]) // int(cap[i]))
        m = min(m, max(1, (2**62) // int(cap[i])))
        cap[i + 1] = m * cap[i]
    return cap


def merge_time_after(i: int, t: int, b, cap) -> int | None:
    """The first tick ``>= t`` at which region ``i`` merges two buckets (Lemma 3.2)."""
    m = int(b[i + 1] - b[i]) // int(cap[i])
    if i == 0 or m < 2:
        return None
    base, step = int(b[i]) - 1, int(cap[i])  # times are base + q·I_i with q = k·m + j
    q = max(2, -(-(t - base) // step))
    while q % m == 1:  # j = 1 starts a new parent: no merge
        q += 1
    return base + q * step


class FindRegions:
    """INITIALIZEFINDREGIONS (Fig. 5) and FINDREGIONS (Fig. 6) with a hash table.

    ``T`` maps a tick to the regions that have two buckets to merge then; each call
    ``find(t)`` pops ``T[t]`` and re-inserts every returned region at its next merge time:
    ``t + 2·I_i`` after the last merge of a cycle (``j = m_i``), else ``t + I_i``.
    """

    def __init__(self, b, cap, start: int = 0):
        self.b, self.cap = b, cap
        self.T: dict[int, set[int]] = {}
        for i in range(1, len(b) - 1):
            t = merge_time_after(i, start, b, cap)
            if t is not None:
                self.T.setdefault(t, set()).add(i)

    def find(self, t: int) -> list[int]:
        regions = sorted(self.T.pop(t, ()))
        for i in regions:
            m = int(self.b[i + 1] - self.b[i]) // int(self.cap[i])
            step = int(self.cap[i])
            last_of_cycle = ((t - int(self.b[i]) + 1) // step) % m == 0
            nxt = t + (2 * step if last_of_cycle else step)
            self.T.setdefault(nxt, set()).add(i)
        return regions


class ReferenceWBMH:
    """PROCESSELEMENT (Fig. 3) on a strictly synchronous stream of dummy elements.

    ``advance()`` moves one tick: a new bucket every ``b_1`` ticks, then, for each region
    FINDREGIONS returns, the two buckets wholly inside that region are merged. Buckets
    are ``[F, L]`` tick ranges, oldest first.
    """

    def __init__(self, b, cap):
        self.b, self.cap = b, cap
        self.regions = FindRegions(b, cap, 0)
        self.buckets: list[list[int]] = []
        self.t = -1

    def advance(self) -> None:
        self.t += 1
        t, b = self.t, self.b
        if t % int(b[1]) == 0:
            self.buckets.append([t, t + int(b[1]) - 1])
        for g in self.regions.find(t):
            lo, hi = int(b[g]), int(b[g + 1]) - 1
            inside = [k for k, (F, L) in enumerate(self.buckets) if lo <= t - L and t - F <= hi]
            if len(inside) != 2 or inside[1] != inside[0] + 1:
                raise AssertionError(f"region {g} at tick {t} holds buckets {inside}, not two adjacent")
            k = inside[0]
            self.buckets[k : k + 2] = [[self.buckets[k][0], self.buckets[k + 1][1]]]

    def partition(self) -> list[tuple[int, int]]:
        return [(F, L) for F, L in self.buckets]
