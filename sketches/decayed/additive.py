"""Additive-error decayed correlated sums for any decay chosen at query time.

Cormode, Tirthapura & Xu (2009), §3.1, Theorems 3.1-3.2: the multi-level sample of
Cormode-Tirthapura-Xu (SIAM J. Comput. 2009, ref. [8]) answers the decayed correlated
sum ``S_τ = Σ_{v >= τ} w·f(at − t)`` within ``ε·S₀`` (``S₀`` = the decayed sum of all
events) for every non-increasing ``f`` given at query time, over asynchronous streams.

Structure
---------
Each event of weight ``w > 0`` draws ``u ∈ (0, 1]`` and a tie-break ``r`` from a
counter-based hash. There are 64 nested levels: level 0 samples every event; level
``ℓ >= 1`` samples it iff ``u·θ_ℓ <= w`` with ``θ_ℓ = θ_unit·2^ℓ`` — each successive level
keeps an event with half the probability, in proportion to its weight. The top
threshold is ``θ_63 = 2C·max_total/k``. Every level retains its ``k`` newest samples
(key ``(tick, r)``); the sketch stores their union, each event once with its top level.

Estimator
---------
Scan events newest first. ``λ_j`` is the lowest level with fewer than ``k`` samples
above ``j``; then ``j``, if sampled at ``λ_j``, is among that level's ``k`` newest and is
stored. With ``c_j = f(max(0, at − t_j))·1[v_j ∈ selection] ∈ [0, 1]``::

    Ŝ = Σ_j c_j · 1[j sampled at λ_j] · max(w_j, θ_{λ_j})        (θ_0 = 0)

Proof of the bound
------------------
Model the hashed ``u`` and ``r`` as independent uniforms, fix the query (decay, ``at``,
selection) and the tie-breaks, and order events by key, newest first.
``λ_j`` depends only on the ``u`` of earlier events, so ``X_j = c_j(ŵ_j − w_j)`` are
martingale differences (Horvitz-Thompson: ``E[ŵ_j | past] = w_j``).

*Good event G.* For each level ``ℓ ∈ [1, 62]``, the longest prefix of weight below
``k·θ_ℓ/C`` holds fewer than ``k`` level-ℓ samples. Its expected count is below ``k/C``,
so by Chernoff ``P(¬G) <= 62·exp(−k(ln C − 1 + 1/C))``. On G, ``λ_j = ℓ >= 2`` means level
``ℓ − 1`` has ``k`` samples above ``j``, so the weight ``W_{<j}`` above ``j`` is at least
``k·θ_{ℓ−1}/C`` and ``θ_{λ_j} <= max(θ_1, 2C·W_{<j}/k)``. As ``f`` does not increase with
age, ``g_j·W_{<j} <= Σ_{i<j} g_i w_i <= S₀``; hence ``c_j·θ_{λ_j} <= R := max(θ_1, 2C·S₀/k)``.

*Freedman.* Truncate ``X_j`` at the predictable event ``c_j θ_{λ_j} <= R`` (true on G):
increments are at most ``R`` and conditional variances sum to at most ``R·S₀``, so::

    P(|Ŝ − S| >= a) <= P(¬G) + 2·exp(−a² / (2(R·S₀ + R·a/3)))

which is ``P(¬G) + 2δ_t`` at ``a(S₀) = Rℓ/3 + sqrt((Rℓ/3)² + 2R·S₀·ℓ)``, ``ℓ = ln(1/δ_t)``.

*Interval.* The lower tail for the whole stream gives ``Ŝ₀ >= S₀ − a(S₀)``, so
``S₀ <= x̄ = max{x : x − a(x) <= Ŝ₀}`` (closed form) and ``|Ŝ − S| <= a(x̄)``. With
``δ_t = (δ − P(¬G))/3`` the returned interval ``Ŝ ∓ a(x̄)`` holds with probability
``>= 1 − δ``. :func:`suggest_capacity` picks ``k >= 4C(1 + ε/3)·ln(1/δ_t)/ε²`` (and ``C``
to minimise it), which makes ``a(x) <= ε·x`` once ``2C·S₀/k >= θ_1``, i.e.
``S₀ >= max_total·2^-62``: that is
Theorem 3.2, ``|Ŝ − S| <= ε·S₀`` with probability ``>= 1 − δ``. This replaces the paper's
``Ŝ·Q̂`` composition of Theorem 3.1 (whose constants live in [8]) by a direct
estimator of ``S_τ`` from the same structure, with explicit constants.

*Uncovered events.* An event with ``k`` samples above it at every level (top overflow,
impossible on G while the total weight is at most ``2·max_total``) is dropped; the
newest such tick ``t_o`` is kept and the interval widens by ``f(at − t_o)·W_total``.

*Merges and arrival order.* The stored set is a function of the multiset of
``(key, level)`` pairs (see :mod:`._sample_kernels`), so merging — union, then one
re-scan — yields exactly the sketch of the union stream with the same draws: merges of
any depth add no error, and arrival order does not matter.

Floating point: a sum ``Σ_j c_j·m_j`` (``m_j = max(w_j, θ_{λ_j})``) is taken tick by
tick, as ``Σ_t f(at − t)·M_t`` with ``M_t`` the sum of the ``m_j`` of the elements of tick
``t`` (all of a tick's elements share their age): each exact term ``f·m_j`` reaches the
result through at most ``(m_t − 1) + 1 + (T − 1) <= n`` roundings (its tick's ``m_t``
elements summed, one product, ``T`` ticks summed), no more than a per-element product
and an ``n``-term sum would take, so the interval widens by ``(n + 8)·2^-52·Ŝ₀``. The
``M_t`` depend on the state alone: kept once per state, a query (or a range of ``at``)
evaluates the decay once per tick, not once per element.
"""

from __future__ import annotations

import math
import secrets
import struct

import numpy as np

from sketches._bytes import HEADER_SIZE, Reader, Writer
from sketches._pages import PAGE_MIN, mix64, page_bytes, page_starts
from sketches._codec import max_float_column_size, varint_size
from sketches.base import CorruptSketchError, Estimate, Family, IncompatibleSketchError, Sketch, SketchError
from sketches.base import integer_ticks, seed_value, unit_interval
from sketches.decayed import _sample_kernels as K
from sketches.decayed._sample_kernels import (
    PAGE_ERRORS,
    coefficients,
    contributions,
    draw,
    is_descending,
    merge_compact,
    prefilter,
    read_pages,
    write_pages,
)
from sketches.decayed._view import View
from sketches.decayed.decay import as_decay
from sketches.hashing import splitmix64

__all__ = ["DecayedAdditiveSketch", "suggest_capacity"]

METHOD = "multilevel-sample"
TOP = 63  # levels 0..63
_GOOD_LEVELS = TOP - 1  # the levels 1..62 the good event G speaks about
_TICK_LIMIT = 2**62
_ULP = 2.0**-52
_NO_TABLE, _NO_ROWS = np.zeros(0), np.zeros((0, 0))  # (``K.decayed_sums``' unread argument)


def _untils(untils) -> np.ndarray:
    """The last tick each query counts (None: every tick), as ``K.decayed_sums`` takes them."""
    return np.array([np.iinfo(np.int64).max if u is None else int(u) for u in untils], np.int64)


def _h(c: float) -> float:
    return math.log(c) - 1.0 + 1.0 / c


def _p_bad(k: int, c: float) -> float:
    """``P(¬G) <= 62·exp(−k·(ln C − 1 + 1/C))`` (Chernoff, see the module proof)."""
    return _GOOD_LEVELS * math.exp(-k * _h(c))


def suggest_capacity(epsilon: float, delta: float) -> tuple[int, float]:
    """Samples kept per level ``k`` and Chernoff constant ``C`` for an (ε, δ) target.

    ``k = max(⌈ln(8·62/δ)/(ln C − 1 + 1/C)⌉, ⌈4C(1 + ε/3)·ln(3/(δ − δ/8))/ε²⌉)``,
    minimised over ``C`` in ``[1.01, 4]``: the first term makes ``P(¬G) <= δ/8``, the second
    makes ``a(x) <= ε·x`` (module proof).

    >>> suggest_capacity(0.1, 0.01)[0]
    2655
    """
    epsilon, delta = unit_interval("epsilon", epsilon), unit_interval("delta", delta)
    best = None
    for c in np.round(np.arange(1.01, 4.0, 0.01), 2):
        c = float(c)
        k_good = math.ceil(math.log(8 * _GOOD_LEVELS / delta) / _h(c))
        lg = math.log(3.0 / (delta - delta / 8))
        k_main = math.ceil(4 * c * (1 + epsilon / 3) * lg / epsilon**2)
        k = max(k_good, k_main, 2)
        if best is None or k < best[0]:
            best = (k, c)
    return best


def _as_ticks(ticks) -> np.ndarray:
    t = integer_ticks(ticks).astype(np.int64)
    if t.size and (t.min() < 0 or t.max() >= _TICK_LIMIT):
        raise SketchError("ticks must be in [0, 2^62)")
    return t


def check_batch(ticks, values, weights, vmin: float, vmax: float):
    """Validate one batch; returns int64 ticks and float64 values and weights."""
    t = _as_ticks(ticks)
    v = np.asarray(values, dtype=np.float64)
    w = np.ones(t.size, np.float64) if weights is None else np.asarray(weights, dtype=np.float64)
    if v.shape != t.shape or w.shape != t.shape:
        raise SketchError("ticks, values and weights must have the same length")
    if t.size:
        if not np.all(np.isfinite(v)) or v.min() < vmin or v.max() > vmax:
            raise SketchError(f"values must be finite and within [{vmin}, {vmax}]")
        if not np.all(np.isfinite(w)) or w.min() < 0:
            raise SketchError("weights must be finite and >= 0")
    return t, v, w


def check_range(vmin, vmax) -> tuple[float, float]:
    try:
        lo, hi = float(vmin), float(vmax)
    except (TypeError, ValueError):
        raise SketchError("value range must be numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise SketchError("value range must be finite with value_min < value_max")
    return lo, hi


def check_at(at) -> int:
    if isinstance(at, bool) or not isinstance(at, (int, np.integer)):
        raise SketchError("query time must be an integer tick")
    at = int(at)
    if not 0 <= at < _TICK_LIMIT:
        raise SketchError("query time must be in [0, 2^62)")
    return at


def _key(seed: int, which: int) -> np.uint64:
    return splitmix64(np.array([seed], np.uint64), seed=which)[0]


class DecayedAdditiveSketch(Sketch):
    """Decayed correlated sums with additive error, any decay given at query time.

    For a decay ``f`` (non-increasing, ``f(0) = 1``), a threshold ``τ`` and a query time
    ``at``, with ``S₀`` the decayed sum over all events (§3.1, Theorem 3.2)::

        |Ŝ_τ − S_τ| <= ε · S₀        with probability >= 1 − δ,  when S₀ >= max_total·2^-62

    and the returned ``[lower, upper]`` (``Ŝ ∓ a(x̄)`` of the module proof) contains
    ``S_τ`` with probability ``>= 1 − δ`` (``confidence``) for every ``S₀``, its half-width
    being at most ``ε(1 + ε)/(1 − ε)·S₀`` above that floor. Each query is one fixed event
    (chosen without looking at the sketch's random draws). ``range_sum`` has the same
    bound for the values in ``[lo, hi]``. Ages are ``max(0, at − tick)``: an event stamped after
    ``at`` counts with ``f(0)`` unless ``until`` leaves it out. Merges add no error (exact union); arrival order does not
    matter.

    Parameters
    ----------
    epsilon, delta : float
        Additive error (as a share of ``S₀``) and failure probability, both in (0, 1).
    value_min, value_max : float
        Declared value range; values outside it are refused.
    seed : int
        Hash key of the sampling; only sketches with the same seed merge.
    max_total : float
        Bound on the total (undecayed) weight; sizes the top level so that it does not
        overflow on the good event while the total stays below ``2·max_total``.
    stream : int, optional
        Id of this sketch's random stream. By default a fresh 64-bit id is drawn from
        the OS at the first update; pass one only for reproducible tests, and never
        give two sketches that will be merged the same id.

    Examples
    --------
    >>> import numpy as np
    >>> sk = DecayedAdditiveSketch(0.1, 0.01, value_min=0.0, value_max=100.0, stream=7)
    >>> sk.update(np.arange(1000), np.arange(1000) % 100.0)
    >>> e = sk.query({"kind": "sliding", "window": 99}, tau=50.0, at=999)
    >>> e.lower <= 50 <= e.upper, e.kind, e.confidence
    (True, 'additive', 0.99)
    """

    FAMILY, FORMAT = Family.DECAYED_ADDITIVE, 3  # format 3: events in content-defined pages
    WHAT, NOUN = "decayed additive sketch", "decayed additive sketches"
    PARAMS = "parameters or seed"
    BATCH = ("ticks", "values", "weights")
    SHOWN = ("epsilon", "delta", "value_min", "value_max", "k", "stored", "total_weight")

    def __init__(self, epsilon, delta, value_min, value_max, seed=0, max_total: float = 2**48,
                 *, stream: int | None = None):
        self.epsilon, self.delta = unit_interval("epsilon", epsilon), unit_interval("delta", delta)
        self.value_min, self.value_max = check_range(value_min, value_max)
        self.seed = seed_value(seed)
        mt = float(max_total)
        if not (math.isfinite(mt) and 1e-200 < mt < 1e200):
            raise SketchError("max_total must be in (1e-200, 1e200)")
        self.max_total = mt
        if stream is not None and not (isinstance(stream, (int, np.integer)) and 0 <= int(stream) < 2**64):
            raise SketchError("stream must be an integer in [0, 2^64)")
        self.k, self.c = suggest_capacity(self.epsilon, self.delta)
        self.theta_top = 2.0 * self.c * self.max_total / self.k
        self.theta_unit = self.theta_top / 2.0**TOP
        self.p_bad = _p_bad(self.k, self.c)
        self._key_u, self._key_r = _key(self.seed, 1), _key(self.seed, 2)
        self._stream = None if stream is None else int(stream)
        self._counter = 0
        self._total = 0.0
        self._inserted = 0
        self._ovf = -1
        self._set(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0), np.zeros(0), np.zeros(0, np.uint8))
        self._cut_t = np.full(TOP + 1, -1, np.int64)
        self._cut_r = np.zeros(TOP + 1, np.uint64)

    def _set(self, t, r, v, w, lev) -> None:
        self._t, self._r, self._v, self._w, self._lev = t, r, v, w, lev
        self._ticks = None  # per tick sums of the state (``_by_tick``), kept until it changes

    def _params(self) -> tuple:
        return (self.epsilon, self.delta, self.value_min, self.value_max, self.seed, self.max_total)

    # -- updates ---------------------------------------------------------------------------
    def update(self, ticks, values, weights=None) -> None:
        """Insert a batch (any order, duplicates, bursts, zero or huge weights)."""
        t, v, w = check_batch(ticks, values, weights, self.value_min, self.value_max)
        n = t.size
        if n == 0:
            return
        total = self._total + float(w.sum())
        if not math.isfinite(total):
            raise SketchError("total weight overflows float64")
        if self._stream is None:
            self._stream = secrets.randbits(64)
        lev, r = draw(w, np.uint64(self._stream), np.uint64(self._counter % 2**64),
                      self._key_u, self._key_r, self.theta_unit, TOP)
        self._counter = (self._counter + n) % 2**64
        self._total = total
        self._inserted += n
        pos = w > 0
        t, r, v, w, lev = t[pos], r[pos], v[pos], w[pos], lev[pos]
        keep, ovf = prefilter(t, r, lev, self._cut_t, self._cut_r, TOP)
        self._ovf = max(self._ovf, int(ovf))
        t, r, v, w, lev = t[keep], r[keep], v[keep], w[keep], lev[keep]
        order = np.lexsort((r, t))[::-1]
        self._absorb(t[order], r[order], v[order], w[order], lev[order])

    def _absorb(self, t, r, v, w, lev) -> None:
        out = merge_compact(self._t, self._r, self._v, self._w, self._lev, t, r, v, w, lev, self.k, TOP)
        self._set(*out[:5])
        self._cut_t, self._cut_r = out[5], out[6]
        self._ovf = max(self._ovf, int(out[7]))

    # -- queries -----------------------------------------------------------------------------
    def _contrib(self, decay, at: int):
        d = as_decay(decay)
        at = check_at(at)
        g = np.asarray(d(np.maximum(at - self._t, 0)), dtype=np.float64)
        if g.shape != self._t.shape:
            raise SketchError("decay function must return one value per age")
        y, ok = contributions(self._lev, self._w, g, self.theta_unit, self.k, TOP)
        g0 = float(np.asarray(d(np.zeros(1)))[0])
        if not ok or not 0.0 <= g0 <= 1.0:
            raise SketchError("decay must take values in [0, 1] and never increase with age")
        unc = 0.0
        if self._ovf >= 0:
            f_ovf = float(np.asarray(d(np.array([max(at - self._ovf, 0)])))[0])
            unc = f_ovf * self._total * (1 + (self._inserted + 2) * _ULP)
        return y, unc

    def _deviation(self, s0_hat: float, tails: int) -> tuple[float, float]:
        """``(a(x̄), x̄)``: the half-width and the upper bound on S₀ of the module proof."""
        dt = (self.delta - self.p_bad) / tails
        lg = math.log(1.0 / dt)
        rho = 2.0 * self.c * lg / self.k
        alpha = rho / 3 + math.sqrt(rho * rho / 9 + 2 * rho)  # a(x)/x when R = 2C·x/k
        th = 2.0 * self.theta_unit  # θ_1
        b = th * lg / 3
        x_lin = s0_hat / (1 - alpha) if alpha < 1 else math.inf
        big = b + s0_hat + th * lg
        x_flr = big + math.sqrt(max(big * big - (b + s0_hat) * (b + s0_hat) + b * b, 0.0))
        x = max(x_lin, x_flr)
        a = max(alpha * x, b + math.sqrt(b * b + 2 * th * x * lg))
        return a * (1 + 1e-12), x

    def _half_widths(self, s0_hat: np.ndarray, tails: int) -> np.ndarray:
        """``_deviation(s, tails)[0]`` of each ``s`` of ``s0_hat``: the same operations in
        the same order, on arrays (IEEE arithmetic and square roots are correctly rounded
        alike in Python and NumPy, so each is the scalar's)."""
        dt = (self.delta - self.p_bad) / tails
        lg = math.log(1.0 / dt)
        rho = 2.0 * self.c * lg / self.k
        alpha = rho / 3 + math.sqrt(rho * rho / 9 + 2 * rho)
        th = 2.0 * self.theta_unit
        b = th * lg / 3
        x_lin = s0_hat / (1 - alpha) if alpha < 1 else np.full(s0_hat.shape, math.inf)
        big = b + s0_hat + th * lg
        x_flr = big + np.sqrt(np.maximum(big * big - (b + s0_hat) * (b + s0_hat) + b * b, 0.0))
        x = np.maximum(x_lin, x_flr)
        a = np.maximum(alpha * x, b + np.sqrt(b * b + 2 * th * x * lg))
        return a * (1 + 1e-12)

    def _alpha(self, tails: int) -> float:
        lg = math.log(tails / (self.delta - self.p_bad))
        rho = 2.0 * self.c * lg / self.k
        return rho / 3 + math.sqrt(rho * rho / 9 + 2 * rho)

    def _interval_fn(self, s0_hat: float, unc: float, n: int):
        def interval(est, lo, hi, tails):
            a, _ = self._deviation(s0_hat, tails)
            rnd = (n + 8) * _ULP * s0_hat
            return np.maximum(est - a - rnd, 0.0), est + a + rnd + unc
        return interval

    def _upto(self, until: int | None) -> np.ndarray:
        """Events with tick ``<= until``. Dropping the later ones is one more fixed selection
        (``c_j = 0`` for them): the proof is unchanged, ``S₀`` still counts every event."""
        return np.ones(self._t.shape, bool) if until is None else self._t <= int(until)

    def _by_tick(self, selection, mask_fn):
        """``(ticks, M, M_sel)``: the distinct ticks held (newest first: the state is
        sorted by key), the sum of ``max(w_j, θ_{λ_j})`` of each tick's elements, and the
        same over the elements ``mask_fn`` selects (module notes, floating point). Kept
        per state and per ``selection`` (a hashable name of ``mask_fn``'s test)."""
        kept = self._ticks
        if kept is None:
            coef = coefficients(self._lev, self._w, self.theta_unit, self.k, TOP)
            starts = np.flatnonzero(np.concatenate(([True], self._t[1:] != self._t[:-1])))
            kept = self._ticks = (self._t[starts], starts, coef, np.add.reduceat(coef, starts), {})
        ticks, starts, coef, total, selected = kept
        sums = selected.get(selection)
        if sums is None:
            if len(selected) >= 16:
                selected.clear()
            sums = selected[selection] = np.add.reduceat(np.where(mask_fn(self._v), coef, 0.0), starts)
        return ticks, total, sums

    def _estimate(self, decay, at, mask_fn, until: int | None = None, selection=None) -> Estimate:
        if self.is_empty:
            return Estimate(0.0, 0.0, 0.0, "additive", self.epsilon, 1.0, METHOD)
        if self._t.size == 0:
            y, unc = self._contrib(decay, at)
            return self._interval(0.0, 0.0, unc, 0)
        ticks, total, sums = self._by_tick(selection, mask_fn)
        d = as_decay(decay)
        at = check_at(at)
        g = np.asarray(d(np.maximum(at - ticks, 0)), dtype=np.float64)
        if g.shape != ticks.shape:
            raise SketchError("decay function must return one value per age")
        g0 = float(np.asarray(d(np.zeros(1)))[0])
        # ``contributions``' check, tick by tick (a tick's elements share g): in [0, 1] and
        # never growing along the scan, newest first; and the sums (``K.decayed_sums``)
        s0, est, ok = K.decayed_sums(np.ascontiguousarray(g)[None, :], _NO_TABLE, np.array([at], np.int64),
                                     np.array([g0]), total, sums, ticks, _untils([until]))
        if not ok[0]:
            raise SketchError("decay must take values in [0, 1] and never increase with age")
        unc = 0.0
        if self._ovf >= 0:
            f_ovf = float(np.asarray(d(np.array([max(at - self._ovf, 0)])))[0])
            unc = f_ovf * self._total * (1 + (self._inserted + 2) * _ULP)
        return self._interval(float(s0[0]), float(est[0]), unc, self._t.size)

    def _estimates(self, decay, ats, untils, mask_fn, selection) -> list | None:
        """:meth:`_estimate` of many queries at once: query i reads row i of ``decay``, a
        function of a 2-D array of ages (a decay per row), at ``ats[i]`` counting ticks
        ``<= untils[i]``. The same float operations as one query's, row by row (the
        decay's values, each row's sums in one compiled call, ``K.decayed_sums``), so each
        result is the one :meth:`_estimate` gives; the decay is evaluated on a block of rows
        at a time, or read from one table of whole ages for rows that share it. Each entry
        is an Estimate or the SketchError that query raises; None when the sample holds
        nothing (ask one at a time)."""
        n = len(ats)
        if self.is_empty:
            return [Estimate(0.0, 0.0, 0.0, "additive", self.epsilon, 1.0, METHOD)] * n
        if self._t.size == 0:
            return None
        try:
            at = np.array([check_at(a) for a in ats], np.int64)
        except SketchError:
            return None
        last = _untils(untils)
        ticks, total, sums = self._by_tick(selection, mask_fn)
        newest_first = bool(np.all(ticks[1:] < ticks[:-1]))
        out: list = [None] * n
        block = max(1, (1 << 16) // max(ticks.size, 1))  # rows per block: 512 KB of floats, in cache
        for rows, table in self._row_blocks(decay, at, ticks, block):
            g0 = self._rows_of(decay, np.zeros((rows.size, 1)), rows)[:, 0]
            if table is None:
                # Ticks at or after every instant of the block are of age 0 in each row: their
                # decay is the row's decay at 0, so it is evaluated for the older ticks alone
                # (with the ticks newest first, the young ones lead every row).
                young = 0 if not newest_first else int(np.searchsorted(-ticks, -int(at[rows].max()), "right"))
                g = np.empty((g0.size, ticks.size))
                g[:, :young] = g0[:, None]
                g[:, young:] = self._rows_of(decay, np.maximum(at[rows, None] - ticks[None, young:], 0), rows)
                s0, est, ok = K.decayed_sums(g, _NO_TABLE, at[rows], g0, total, sums, ticks, last[rows])
            else:
                s0, est, ok = K.decayed_sums(_NO_ROWS, table, at[rows], g0, total, sums, ticks, last[rows])
            unc = np.zeros(rows.size)
            if self._ovf >= 0:
                f_ovf = self._rows_of(decay, np.maximum(at[rows, None] - self._ovf, 0), rows)[:, 0]
                unc = f_ovf * self._total * (1 + (self._inserted + 2) * _ULP)
            # ``_interval`` of every row: its half-width and roundings, on arrays
            a = self._half_widths(s0, 3)
            rnd = (self._t.size + 8) * _ULP * s0
            lower, upper = np.maximum(est - a - rnd, 0.0), est + a + rnd + unc
            for j, i in enumerate(rows.tolist()):
                out[i] = (Estimate(float(est[j]), float(lower[j]), float(upper[j]), "additive", self.epsilon,
                                   1.0 - self.delta, METHOD) if ok[j] else
                          SketchError("decay must take values in [0, 1] and never increase with age"))
        return out

    def _row_blocks(self, decay, at: np.ndarray, ticks: np.ndarray, block: int):
        """The queries in blocks of at most ``block`` rows, ``(rows, table)``: ``table[a]``
        the decay of whole age ``a`` for every row of the block, or None (evaluate it per
        row). A decay that says the rows share it (``decay.shared``: the row's key, and
        the decay of that key on a 1-D array of ages: ``tidemark.ticks.age_decays_rows``,
        rows of instants with one offset) gets its rows grouped by key and each group's
        ages evaluated once, when they span fewer values than the group's rows hold: the
        instants of a range on a step of whole seconds share one offset, and their rows
        read the same ages, shifted. The same operations on the same operands, so each
        row's values are those it evaluates alone."""
        n = at.size
        shared = getattr(decay, "shared", None)
        if shared is None or len(shared[0]) != n:  # (a key for each query, or none shared)
            for first in range(0, n, block):
                yield np.arange(first, min(n, first + block)), None
            return
        keys, of_key = shared
        order = np.argsort(keys, kind="stable")
        bounds = np.flatnonzero(np.diff(keys[order]) != 0) + 1
        lo_tick = int(ticks.min()) if ticks.size else 0
        alone = []  # the rows of groups too small to share: in blocks as they come
        for group in np.split(order, bounds):
            top = max(int(at[group].max()) - lo_tick, 0)  # the group's oldest age
            # (a table pays where its ages are a quarter of the group's evaluations or fewer,
            # and the group fills blocks of half the size or more)
            if group.size < max(2, block // 2) or not top + 1 < group.size * ticks.size // 4:
                alone.append(group)
                continue
            table = np.asarray(of_key(keys[group[0]], np.arange(top + 1, dtype=np.float64)), np.float64)
            if table.shape != (top + 1,):
                raise SketchError("decay function must return one value per age")
            for first in range(0, group.size, block):
                yield np.sort(group[first:first + block]), table
        rest = np.sort(np.concatenate(alone)) if alone else np.zeros(0, np.int64)
        for first in range(0, rest.size, block):
            yield rest[first:first + block], None

    @staticmethod
    def _rows_of(decay, ages: np.ndarray, rows: slice) -> np.ndarray:
        """The decay of each row's ages (``CallableDecay``'s reading of one query's, row by
        row: ages as floats; they are at least 0 here, so its clamp at 0 changes none)."""
        a = np.asarray(ages, dtype=np.float64)
        g = np.asarray(decay(a, rows), dtype=np.float64)
        if g.shape != a.shape:
            raise SketchError("decay function must return one value per age")
        return g

    def range_sums(self, decay, lo_value, hi_value, ats, untils) -> list | None:
        """:meth:`range_sum` of many queries (:meth:`_estimates`): ``decay(ages, rows)`` gives
        the decays of the queries ``rows`` (a slice) on their rows of ``ages``."""
        lo, hi = float(lo_value), float(hi_value)
        if math.isnan(lo) or math.isnan(hi) or hi < lo:
            raise SketchError("value range must be numbers with lo <= hi")
        return self._estimates(decay, ats, untils, lambda v: (v >= lo) & (v <= hi), ("in", lo, hi))

    def _interval(self, s0: float, est: float, unc: float, n: int) -> Estimate:
        lower, upper = self._interval_fn(s0, unc, n)(est, est, est, 3)
        return Estimate(est, float(lower), float(upper), "additive", self.epsilon, 1.0 - self.delta, METHOD)

    def query(self, decay, tau: float, at: int, until: int | None = None) -> Estimate:
        """Decayed sum of the events with value ``>= tau`` at time ``at`` (Theorem 3.2),
        counting ticks ``<= until`` only (all by default)."""
        tau = float(tau)
        if math.isnan(tau):
            raise SketchError("tau must be a number")
        return self._estimate(decay, at, lambda v: v >= tau, until, (">=", tau))

    def range_sum(self, decay, lo_value, hi_value, at, until: int | None = None) -> Estimate:
        """Decayed sum of the events with value in ``[lo_value, hi_value]``, same bound."""
        lo, hi = float(lo_value), float(hi_value)
        if math.isnan(lo) or math.isnan(hi) or hi < lo:
            raise SketchError("value range must be numbers with lo <= hi")
        return self._estimate(decay, at, lambda v: (v >= lo) & (v <= hi), until, ("in", lo, hi))

    def _view(self, decay, at, until: int | None = None) -> View:
        """The §1.1 view at ``at`` for the derived aggregates (see :mod:`.derived`),
        counting ticks ``<= until`` only (all by default; the interval keeps ``S₀`` of all)."""
        if self.is_empty:
            z = np.zeros(0)
            return View(z, z, z, z, "additive", METHOD, lambda e, lo, hi, tails: (e * 0, e * 0),
                        1.0, lambda tails: self.epsilon)
        y, unc = self._contrib(decay, at)
        points, inv = np.unique(self._v, return_inverse=True)
        mass = np.bincount(inv, weights=np.where(self._upto(until), y, 0.0), minlength=points.size)
        return View(points, mass, mass, mass, "additive", METHOD,
                    self._interval_fn(float(y.sum()), unc, y.size), 1.0 - self.delta, self._alpha)

    # -- merging -------------------------------------------------------------------------------
    def _merge(self, other: "DecayedAdditiveSketch") -> "DecayedAdditiveSketch":
        """Fold ``other`` in: the exact sketch of the union stream (no added error)."""
        if self._stream is not None and self._stream == other._stream:
            raise IncompatibleSketchError("cannot merge sketches that share a random stream")
        total = self._total + other._total
        if not math.isfinite(total):
            raise SketchError("total weight overflows float64")
        self._absorb(other._t, other._r, other._v, other._w, other._lev)
        self._total = total
        self._inserted += other._inserted
        self._ovf = max(self._ovf, other._ovf)
        return self

    @property
    def is_empty(self) -> bool:
        return self._inserted == 0

    @property
    def stored(self) -> int:
        """Events held (the union of the levels' samples)."""
        return int(self._t.size)

    @property
    def total_weight(self) -> float:
        return self._total


    # -- bytes ---------------------------------------------------------------------------------
    # payload (format 3, little endian; varints are LEB128, see sketches._codec):
    #   f64 epsilon | f64 delta | f64 value_min | f64 value_max | u64 seed | f64 max_total
    #   u8 has_stream | u64 stream | u64 counter | f64 total_weight | u64 events
    #   i64 uncovered_tick (-1 = none) | u32 n | varint pages
    #   the n events in strictly descending (tick, tiebreak) order, in content-defined
    #   pages (sketches._pages: a page begins at an event whose (tick, tiebreak) hashes to
    #   a cut point), each page column by column:
    #   varint m | varint first tick, m−1 varint tick gaps | m × u64 tiebreak |
    #   float column value | float column weight | m × u8 level
    #   (a float column is one constant, scaled integers or raw f64, whichever is exact)
    # A batch adds events at the newest end and drops each level's oldest: those pages are
    # rewritten, the others keep their bytes (Sketch.pieces).

    def max_nbytes(self) -> int:
        """At most ``k`` events a level are kept, ``(TOP + 1)·k`` in all (the reader refuses
        more), each written in at most 10 (tick) + 8 + 8 + 8 + 1 bytes, plus per page (at
        most ``n // PAGE_MIN + 1`` of them, ``sketches._pages``) its count and two float
        columns' heads."""
        n = (TOP + 1) * self.k
        pages = n // PAGE_MIN + 1
        return (HEADER_SIZE + _HEAD.size + _STATE.size + 10 + n * 35
                + pages * (varint_size(n) + 2 * max_float_column_size(0)))

    def _page_starts(self, t: np.ndarray, r: np.ndarray) -> np.ndarray:
        return page_starts(mix64(t.view(np.uint64)) ^ r)

    def _payload_pieces(self) -> list[bytes]:
        t, r = self._t, self._r
        starts = self._page_starts(t, r) if self.stored else np.zeros(0, np.int64)
        head = Writer().raw(_HEAD.pack(*self._params()))
        head.pack(_STATE, self._stream is not None, self._stream or 0, self._counter, self._total,
                  self._inserted, self._ovf, self.stored).uint(starts.size)
        if not starts.size:
            return [head.bytes()]
        buf, ends = write_pages(t, r, self._v, self._w, self._lev, starts)
        return [head.bytes()] + page_bytes(buf, ends)

    def _payload(self) -> bytes:
        return b"".join(self._payload_pieces())

    @classmethod
    def _read(cls, rd: Reader) -> "DecayedAdditiveSketch":
        eps, delta, vmin, vmax, seed, max_total = rd.unpack(_HEAD)
        try:
            sk = cls(eps, delta, vmin, vmax, seed, max_total)
        except SketchError as e:
            raise CorruptSketchError(f"decayed additive sketch parameters out of range: {e}") from None
        has, stream, counter, total, inserted, ovf, n = rd.unpack(_STATE)
        if has not in (0, 1) or (not has and (stream or counter)):
            raise CorruptSketchError("decayed additive sketch stream fields are inconsistent")
        if not (math.isfinite(total) and total >= 0) or not -1 <= ovf < _TICK_LIMIT:
            raise CorruptSketchError("decayed additive sketch totals out of range")
        if n > (TOP + 1) * sk.k or n > inserted or 10 * n > rd.left():
            raise CorruptSketchError("decayed additive sketch has a bad event count")
        pages = rd.uint()
        if not (1 <= pages <= n if n else pages == 0):
            raise CorruptSketchError("decayed additive sketch has a bad page count")
        code, end, t, r, v, w, lev, starts = read_pages(rd.buf, rd.pos, n, pages, _TICK_LIMIT)
        if code:
            raise rd.fail_code(code) if code < 0 else CorruptSketchError(PAGE_ERRORS[code])
        rd.pos = end
        rd.done()
        if n and (t.min() < 0 or t.max() >= _TICK_LIMIT or not is_descending(t, r)
                  or not np.all(np.isfinite(v)) or v.min() < vmin or v.max() > vmax
                  or not np.all(np.isfinite(w)) or w.min() <= 0 or lev.max() > TOP
                  or w.sum() > total * (1 + 1e-9) + 1e-300):
            raise CorruptSketchError("decayed additive sketch events are not valid")
        if n and not np.array_equal(starts, sk._page_starts(t, r)):
            raise CorruptSketchError("decayed additive sketch has pages cut where its events do not cut them")
        sk._stream = int(stream) if has else None
        sk._counter, sk._total, sk._inserted, sk._ovf = int(counter), float(total), int(inserted), int(ovf)
        sk._absorb(t, r, v, w, lev)
        if sk.stored != n or sk._ovf != ovf:
            raise CorruptSketchError("decayed additive sketch holds events its levels would drop")
        if ovf >= 0 and np.count_nonzero((lev == TOP) & (t >= ovf)) < sk.k:
            # an uncovered event lies below k top-level samples
            raise CorruptSketchError("decayed additive sketch uncovered tick is not below a full top level")
        return sk


_HEAD = struct.Struct("<ddddQd")
_STATE = struct.Struct("<BQQdQqI")
