"""Dyadic hierarchy of ECM sketches over integer ids: ranges, quantiles, heavy hitters.

ECM-sketch paper §6.1 (Thm 5, after Cormode & Muthukrishnan's Count-Min range sums):
level ``l`` counts the dyadic ranges ``[i 2^l, (i+1) 2^l - 1]`` of a domain of ``2^L`` ids,
so a range is a sum of at most two nodes per level and heavy hitters are found by group
testing from the top. All levels share one set of dyadic time buckets (one
:class:`~sketches._ecm_kernels.TimeBuckets`): the time partition depends only on the
event weights, which are the same at every level.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numba as nb
import numpy as np

from sketches.base import CorruptSketchError, Estimate, Reader, SketchError, seed_value, unit_interval, window_ticks
from sketches.ecm import TICK_LIMIT, CellSketch, as_batch, cell_index

__all__ = ["DyadicECM"]

METHOD = "dyadic-ecm/dyadic-exponential-histogram"
_MAX_FRONTIER = 1 << 20


@nb.njit(cache=True)
def _node_vals(lo_vec, hi_vec, node, c0, c1, tables, shift, table, offset, width):
    """(min upper, min lower, min midpoint) of one node over its level's slots."""
    u = np.inf
    lw = np.inf
    md = np.inf
    for c in range(c0, c1):
        cell = cell_index(node, c, tables, shift, table, offset, width)
        u = min(u, hi_vec[cell])
        lw = min(lw, lo_vec[cell])
        md = min(md, 0.5 * (lo_vec[cell] + hi_vec[cell]))
    return u, lw, md


@nb.njit(cache=True)
def _level_vals(lo_vec, hi_vec, nodes, c0, c1, tables, shift, table, offset, width):
    n = nodes.shape[0]
    up, low, mid = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        up[i], low[i], mid[i] = _node_vals(lo_vec, hi_vec, nodes[i], c0, c1, tables, shift, table, offset, width)
    return up, low, mid


@nb.njit(cache=True)
def _descend(vec_a, vec_b, use_mid, n_levels, target, from_left, slot_lo, slot_hi,
             tables, shift, table, offset, width):
    """Group-testing walk from the root to a leaf.

    ``from_left``: go left when ``acc + value(left) >= target`` (else add it and go right);
    the leaf reached is the first whose prefix sum reaches ``target``. Otherwise walk from
    the right: go left when ``acc + value(right) <= target`` (adding it), else go right.
    ``value`` is the node's smallest upper cell (``use_mid``: smallest midpoint)."""
    node = np.uint64(0)
    acc = 0.0
    for lev in range(n_levels - 1, -1, -1):
        left = node << np.uint64(1)
        right = left | np.uint64(1)
        probe = left if from_left else right
        u, lw, md = _node_vals(vec_a, vec_b, probe << np.uint64(lev), slot_lo[lev], slot_hi[lev],
                               tables, shift, table, offset, width)
        v = md if use_mid else u
        if from_left:
            if acc + v >= target:
                node = left
            else:
                acc += v
                node = right
        else:
            if acc + v <= target:
                acc += v
                node = left
            else:
                node = right
    return node


def _floor(x: Fraction) -> float:
    """The largest float <= ``x`` (thresholds must never round up past the truth)."""
    f = float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


def _float_down(v: int) -> float:
    """``v`` as a float no larger than ``v`` (ids above 2^53 are not all floats)."""
    f = float(v)
    return math.nextafter(f, -math.inf) if f > v else f


def _float_up(v: int) -> float:
    f = float(v)
    return math.nextafter(f, math.inf) if f < v else f


def _decompose(a: int, b: int, levels: int) -> list[tuple[int, int]]:
    """Dyadic nodes ``(level, index)`` covering ``[a, b]`` (at most two per level; the
    root ``(levels, 0)`` when the range is the whole domain)."""
    out = []
    lev = 0
    while a <= b:
        if lev == levels:
            out.append((levels, 0))
            break
        if a & 1:
            out.append((lev, a))
            a += 1
        if not b & 1:
            out.append((lev, b))
            b -= 1
        a >>= 1  # a is even and b odd now: the parents cover [a/2, (b-1)/2]
        b >>= 1
        lev += 1
    return out


class DyadicECM(CellSketch):
    """A hierarchy of ECM sketches, one per dyadic level of a ``2^levels`` id domain (§6.1).

    Each level is a Count-Min array (``d`` rows of width ``w``) or, when the level has at
    most ``d w`` nodes, an exact table. Parameters: ``R = eps/2`` for the time buckets,
    ``eps_cm (1 + R) + R <= eps`` for the arrays, ``d = ceil(ln(2 L / (eps delta)))``
    (Thm 5's union bound over the nodes group testing visits).

    Notation as in :class:`~sketches.ecm.ECMSketch`: range ``[lo, hi]``, ``count`` its
    weight, ``N`` the weight from ``lo`` to the clock, ``k = 1`` when ``hi >= clock`` else 2,
    ``S <= k R N`` the weight of straddling buckets (Lemma A), ``U_tot`` the weight of
    buckets touching the range, ``L_h`` the number of hashed levels. For every node, its
    smallest upper cell ``U(node)`` is >= its true count, always.

    * ``frequency(id)``: ``|f_hat - f| <= (k R/2 + eps_cm) N`` w.p. 1 - delta (Thm 1).
    * ``range_count(a, b)``: the bracket ``[L_tot - sum U(complement nodes),
      min(U_tot, sum U(range nodes))]`` holds **always**; its width is
      ``<= (k R + n_h eps_cm (1 + k R)) N`` w.p. ``1 - n_h e^-d`` (``n_h``: hashed nodes used),
      because the nodes partition the domain, so their excesses add to at most the
      straddling weight plus one collision term per node.
    * ``quantiles(q)``: ``[v_lo, v_hi]`` contains the true q-quantile **always**
      (``v_lo``: walk to the first prefix whose upper sum reaches ``q L_tot``; ``v_hi``:
      walk from the right while the suffix upper sum stays ``<= L_tot - q U_tot``). Rank
      error of both ends ``<= (2 k R + L_h eps_cm (1 + k R)) N`` w.p. ``1 - 2 L_h e^-d``
      (the divergence argument: a wrong turn implies a fixed prefix of hashed nodes
      whose upper sum is too large).
    * ``heavy_hitters(phi)``: every id with ``f >= phi count`` (and ``f > 0``) is listed,
      **always** (a node is kept while ``U(node) >= phi L_tot``); for ``hi >= clock`` no id
      with ``f < (phi - eps) count`` is listed, w.p. ``>= hh_confidence(phi)``
      ``= 1 - 2 L_h e^-d / (phi - eps)`` (``>= 1 - delta`` for ``phi >= 2 eps``): such an id
      has a light highest ancestor, a child of one of the ``<= 2 L_h / (phi - eps)`` heavy
      hashed nodes, whose collisions then exceed ``eps_cm U_tot`` in every row.
    * Merge: lossless, as for :class:`~sketches.ecm.ECMSketch`.

    Keys as ids. To find heavy *keys*, use the top ``L`` bits of their 64-bit hash
    (``hash_keys(keys) >> (64 - L)``) as ids, and map ids back to strings with
    :meth:`sketches.key_dictionary.KeyDictionary.lookup` (``bits=L``). Keys sharing a
    reduced id are counted together: the id's weight is the sum of its keys' weights, so
    recall still holds for keys (a ``phi``-heavy key makes its id ``phi``-heavy) and the
    id's upper bound bounds each of its keys, but its lower bound and the precision
    guarantee apply to the sum. With ``n`` distinct keys in the window about
    ``n (n - 1) / 2^(L + 1)`` pairs collide (``L = 32``, 100 K keys: about 1.2 pairs);
    per-key brackets come from an :class:`~sketches.ecm.ECMSketch` over the full ids.

    Examples
    --------
    >>> import numpy as np
    >>> dy = DyadicECM(0.1, 0.1, window=100, levels=8, seed=1)
    >>> ids = np.array([3] * 60 + list(range(100, 140)), dtype=np.uint64)
    >>> dy.update(np.zeros(100, np.int64), ids)
    >>> [int(i) for i, _ in dy.heavy_hitters(0.3, 0, 0)]
    [3]
    >>> q = dy.quantiles(np.array([0.5]), 0, 0)[0][1]
    >>> q.lower <= 3 <= q.upper
    True
    >>> r = dy.range_count(100, 139, 0, 0)
    >>> r.lower <= 40 <= r.upper
    True
    """

    HEADER_FLAGS = 1  # header flags: which class of the ECM family the blob holds
    WHAT, NOUN = "dyadic ECM sketch", "dyadic ECM sketches"
    PARAMS = "epsilon, delta, window, levels or seed"
    SHOWN = ("epsilon", "delta", "window", "levels", "depth", "width", "hashed_levels", "n_buckets", "clock_tick",
             "merge_depth", "nbytes")

    _SALT = 0xD7AD
    _method = METHOD
    # parameters (little endian): f64 epsilon | f64 delta | i64 window | u64 seed | u8 levels | 7 x u8 zero
    _PARAMS = struct.Struct("<ddqQB7x")

    def __init__(self, epsilon: float, delta: float, window: int, levels: int, seed: int = 0):
        self.epsilon = unit_interval("epsilon", epsilon)
        self.delta = unit_interval("delta", delta)
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not (1 <= levels <= 64):
            raise SketchError("levels must be an integer in [1, 64]")
        self.levels = int(levels)
        ratio = self.epsilon / 2
        cm_target = ratio / (1 + ratio)
        self.width = math.ceil(math.e / (cm_target * (1 - 1e-6)))
        self.depth = max(1, math.ceil(math.log(2 * self.levels / (self.epsilon * self.delta))))
        self.eps_cm_eff = math.nextafter(math.e * (1.0 / self.width + 2.0**-32), math.inf)
        slots, lo, hi, exact = [], [], [], []
        off = 0
        for lev in range(self.levels):
            n_nodes = 1 << (self.levels - lev)
            lo.append(len(slots))
            if n_nodes <= self.depth * self.width:
                slots.append((lev, -1, off, n_nodes))
                off += n_nodes
                exact.append(True)
            else:
                for j in range(self.depth):
                    slots.append((lev, sum(1 for s in slots if s[1] >= 0), off, self.width))
                    off += self.width
                exact.append(False)
            hi.append(len(slots))
        if off * 8 > 2**31:
            raise SketchError("epsilon or delta too small for this many levels")
        self._slot_lo, self._slot_hi = np.array(lo, np.int64), np.array(hi, np.int64)
        self._exact = np.array(exact)
        self.hashed_levels = int((~self._exact).sum())
        self._setup(window_ticks(window, TICK_LIMIT - 1), ratio, seed_value(seed), slots)

    @property
    def hh_epsilon(self) -> float:
        """The proven heavy-hitter margin ``R + eps_cm (1 + R)`` (``<= epsilon``)."""
        r = self._tb.ratio
        return r + self.eps_cm_eff * (1 + r)

    # -- updates ------------------------------------------------------------------------
    def update(self, ticks, ids, weights=None) -> None:
        """Add a batch of events with ids in ``[0, 2^levels)``."""
        t, x, w = as_batch(ticks, ids, weights)
        if self.levels < 64 and x.size and int(x.max()) >> self.levels:
            raise SketchError(f"ids must be below 2^{self.levels}")
        self._ingest(t, x, w)

    # -- queries ------------------------------------------------------------------------
    def _prep(self, lo, hi):
        r = self._range(lo, hi)
        if r is None:
            return None
        inside, strad, low, high, k = r
        lo_vec, hi_vec = self._vectors(inside, strad)
        return lo_vec, hi_vec, low, high, k

    def _vals(self, p, level: int, nodes: np.ndarray):
        lo_vec, hi_vec, _, high, _ = p
        if level == self.levels:  # the root: the whole domain
            n = nodes.shape[0]
            low = p[2]
            return np.full(n, high), np.full(n, low), np.full(n, 0.5 * (low + high))
        # a node is looked up through its first id: the slots shift ids by the level
        first = nodes.astype(np.uint64) << np.uint64(level)
        up, low, mid = _level_vals(lo_vec, hi_vec, first, self._slot_lo[level],
                                   self._slot_hi[level], self._tables, self._shift, self._table,
                                   self._offset, self._width)
        if not self._exact[level]:
            low = np.maximum(0.0, low - self.eps_cm_eff * high)
        return up, low, mid

    def _check_id(self, x, name="id") -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not (0 <= int(x) < (1 << self.levels)):
            raise SketchError(f"{name} must be an integer in [0, 2^{self.levels})")
        return int(x)

    def frequency(self, id: int, lo: int, hi: int) -> Estimate:
        """Weight of one id among events with tick in ``[lo, hi]``."""
        x = self._check_id(id)
        p = self._prep(lo, hi)
        if p is None:
            return self._zero(self._method)
        up, low, mid = self._vals(p, 0, np.array([x]))
        eps = p[4] * self._tb.ratio / 2 + (0.0 if self._exact[0] else self.eps_cm_eff)
        return self._bracket(mid[0], low[0], up[0], eps, 1.0 - self.delta)

    def range_count(self, a: int, b: int, lo: int, hi: int) -> Estimate:
        """Weight of events with id in ``[a, b]`` and tick in ``[lo, hi]``."""
        a, b = self._check_id(a, "a"), self._check_id(b, "b")
        if a > b:
            raise SketchError("range_count needs a <= b")
        p = self._prep(lo, hi)
        if p is None:
            return self._zero(self._method)
        top = (1 << self.levels) - 1
        inner = _decompose(a, b, self.levels)
        outer = (_decompose(0, a - 1, self.levels) if a > 0 else []) + \
            (_decompose(b + 1, top, self.levels) if b < top else [])
        up_in, mid_in, n_h = 0.0, 0.0, 0
        for lev, node in inner:
            u, _, md = self._vals(p, lev, np.array([node]))
            up_in += u[0]
            mid_in += md[0]
            n_h += lev < self.levels and not self._exact[lev]
        up_out = 0.0
        for lev, node in outer:
            u, _, _ = self._vals(p, lev, np.array([node]))
            up_out += u[0]
            n_h += not self._exact[lev]
        low, high, k = p[2], p[3], p[4]
        upper = min(high, up_in)
        lower = max(0.0, low - up_out)
        r = self._tb.ratio
        eps = k * r + n_h * self.eps_cm_eff * (1 + k * r)
        conf = max(0.0, 1.0 - n_h * math.exp(-self.depth))
        return self._bracket(mid_in, lower, upper, eps, min(conf, 1.0 - self.delta) if n_h else 1.0 - self.delta)

    def _walk(self, p, target: float, from_left: bool, use_mid: bool) -> int:
        lo_vec, hi_vec = p[0], p[1]
        return int(_descend(lo_vec, hi_vec, use_mid, self.levels, target, from_left, self._slot_lo,
                            self._slot_hi, self._tables, self._shift, self._table, self._offset, self._width))

    def quantiles(self, qs, lo: int, hi: int) -> list[tuple[float, Estimate]]:
        """For each ``q``: an :class:`Estimate` over ids whose ``[lower, upper]`` contains the
        true q-quantile, the smallest id ``v`` with ``weight(id <= v) >= q * count``."""
        qs = np.atleast_1d(np.asarray(qs, dtype=np.float64))
        if qs.ndim != 1 or not np.all((qs >= 0) & (qs <= 1)):
            raise SketchError("quantiles need q values in [0, 1]")
        p = self._prep(lo, hi)
        if p is None:  # no event: the smallest id satisfies the definition
            return [(float(q), Estimate(0.0, 0.0, 0.0, "additive", 0.0, 1.0, self._method)) for q in qs]
        low, high, k = p[2], p[3], p[4]
        g = self._rounding()
        lowc, highc = low * (1 - g), high * (1 + g)
        top = (1 << self.levels) - 1
        r = self._tb.ratio
        eps = 2 * k * r + self.hashed_levels * self.eps_cm_eff * (1 + k * r)
        conf = max(0.0, min(1.0 - self.delta, 1.0 - 2 * self.hashed_levels * math.exp(-self.depth)))
        out = []
        for q in qs:
            q = float(q)
            if q == 0:  # the smallest id satisfies "weight(id <= v) >= 0"
                out.append((q, Estimate(0.0, 0.0, 0.0, "additive", 0.0, 1.0, self._method)))
                continue
            # v_lo: walk to the first prefix whose upper sum reaches q L_tot <= q count
            t_lo = _floor(Fraction(q) * Fraction(lowc)) * (1 - g)
            v_lo = 0 if t_lo <= 0 else self._walk(p, t_lo, True, False)
            # v_hi: cut off a suffix whose upper sum stays <= L_tot - q U_tot
            room = Fraction(lowc) - Fraction(q) * Fraction(highc)
            v_hi = top if room < 0 else self._walk(p, _floor(room) * (1 - g), False, False)
            v_est = self._walk(p, q * 0.5 * (low + high), True, True) if q > 0 else 0
            v_est = min(max(v_est, v_lo), v_hi)
            out.append((q, Estimate(float(v_est), _float_down(v_lo), _float_up(v_hi), "additive", eps, conf,
                                    self._method)))
        return out

    def hh_confidence(self, phi: float) -> float:
        """Probability that ``heavy_hitters(phi)`` lists no id below ``(phi - epsilon) count``."""
        if phi <= self.epsilon:
            return 1.0
        return max(0.0, 1.0 - 2 * self.hashed_levels * math.exp(-self.depth) / (phi - self.epsilon))

    def heavy_hitters(self, phi: float, lo: int, hi: int) -> list[tuple[int, Estimate]]:
        """Ids with ``weight >= phi * count`` in ``[lo, hi]`` (group testing, §6.1), each with
        its frequency bracket, largest first."""
        try:
            phi = float(phi)
        except (TypeError, ValueError):
            raise SketchError("phi must be a number in (0, 1]") from None
        if not (0.0 < phi <= 1.0):
            raise SketchError("phi must be in (0, 1]")
        p = self._prep(lo, hi)
        if p is None:
            return []
        g = self._rounding()
        thresh = _floor(Fraction(phi) * Fraction(p[2] * (1 - g)))
        nodes = np.zeros(1, np.int64)
        for lev in range(self.levels - 1, -1, -1):
            kids = np.empty(2 * nodes.shape[0], np.int64)
            kids[0::2], kids[1::2] = 2 * nodes, 2 * nodes + 1
            up, _, _ = self._vals(p, lev, kids)
            up = up * (1 + g)
            nodes = kids[(up >= thresh) & (up > 0)]
            if nodes.shape[0] > _MAX_FRONTIER:
                raise SketchError("too many candidate heavy hitters: raise phi or query a window ending at the clock")
        if nodes.shape[0] == 0:
            return []
        up, low, mid = self._vals(p, 0, nodes)
        eps = p[4] * self._tb.ratio / 2 + (0.0 if self._exact[0] else self.eps_cm_eff)
        res = [(int(x), self._bracket(md, lw, u, eps, 1.0 - self.delta)) for x, u, lw, md in zip(nodes, up, low, mid)]
        res.sort(key=lambda t: (-t[1].estimate, t[0]))
        return res

    # -- merging, bytes -----------------------------------------------------------------
    def _params(self) -> tuple:
        return (self.epsilon, self.delta, self.window, self.levels, self.seed)

    # Blob: 16-byte header (family ECM, flags = 1) | parameters (_PARAMS) | state block
    # (drawn in sketches.ecm.CellSketch).
    def _payload(self) -> bytes:
        return self._PARAMS.pack(self.epsilon, self.delta, self.window, self.seed, self.levels) + self._state_bytes()

    @classmethod
    def _read(cls, rd: Reader) -> "DyadicECM":
        raw = rd.take(cls._PARAMS.size)
        eps, delta, window, seed, levels = cls._PARAMS.unpack(raw)
        if raw[-7:] != bytes(7):
            raise CorruptSketchError("dyadic ECM blob has non-zero padding")
        sk = cls(eps, delta, window, levels, seed)
        sk._load_state(rd)
        return sk

