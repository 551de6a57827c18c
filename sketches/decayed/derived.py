"""Aggregates reduced to decayed correlated sums (Cormode, Tirthapura & Xu 2009, §1.1).

Each function takes a :class:`~sketches.decayed.additive.DecayedAdditiveSketch` (pass
the ``decay`` at query time) or a :class:`~sketches.decayed.relative.DecayedRelativeSketch`
(``decay`` omitted or equal to the declared one; values are its quantized values).

How the bounds compose
----------------------
A sketch gives, for any fixed selection ``A`` of values, an interval for the decayed
weight ``W(A)``: deterministic for the relative sketch (all selections at once), and for
the additive sketch ``Ŵ(A) ∓ a`` with ``a`` the Freedman half-width, valid except on a
failure event made of one-sided deviations of *fixed* selections. Each function counts
the deviations its proof uses (``tails``) and asks the sketch for ``a`` with
``δ_t = (δ − P(¬G))/tails``, so every returned Estimate holds with probability
``>= 1 − δ`` by the union bound (or always, for the relative sketch):

* range sum ``W([l, r])``: two tails for the sum, one for ``S₀ <= x̄`` — 3.
* relative frequency ``W({v})/S₀``, with ``S₀ = N + R`` (N = W({v}), R the weight of every
  other point): ``N/(N + R)`` grows with N and falls with R, so each side is read from its
  one worst world, ``[lo_N/(lo_N + hi_R), hi_N/(hi_N + lo_R)]`` (N, R ≥ 0; clipped to
  [0, 1]) — inside the earlier ``[lo_N/hi_S, hi_N/lo_S]``, which let N be small in the
  numerator and large in S₀ at once. Two tails each for N and R — 4. Its ``epsilon`` is
  ``2e/(1 − e)`` (additive; ``|N̂/Ŝ₀ − N/S₀| <= 2a/Ŝ₀``) or ``(1 + e)² − 1`` (relative).
* φ-heavy hitters: every point whose frequency interval reaches φ (for the relative
  sketch the interval of ``relative_frequency``, each point against the rest; for the
  additive one ``[lo_N/hi_S, hi_N/lo_S]``, as its recall proof counts tails). Each interval uses 4
  tails; that *no* true φ-heavy value is missed uses one tail for each of the at most
  ``⌊1/φ⌋`` heavy values and two for ``S₀`` — so ``tails = max(4, ⌊1/φ⌋ + 2)``. A value
  the additive sample never saw has frequency at most ``(a + unc)/lo_S``; if that is not
  below φ the call is refused (the sketch could miss a heavy value).
* correlated φ-quantile ``v* = max{v : W(< v) <= φ·S₀}`` (= the smallest value ``p``
  with ``W(<= p) > φ·S₀``, or ``value_max``). ``W(<= u) > φ·S₀`` is
  ``(1 − φ)·W(<= u) > φ·W(> u)``, so each side is read from one consistent world:
  ``upper`` is the smallest point ``u`` with ``(1 − φ)·lo(W(<= u)) > φ·hi(W(> u))`` and
  ``lower`` the largest point ``l`` with ``(1 − φ)·hi(W(< l)) <= φ·lo(W(>= l))``. (The
  earlier ``lo(W(<= u)) > φ·hi(S₀)`` let ``W(<= u)`` be small on the left and large inside
  ``S₀`` at once.) Upper: were ``u < v*``, monotonicity gives ``lo(W(<= u)) <= lo(W(< v*))``
  and ``hi(W(> u)) >= hi(W(>= v*))``, so ``(1 − φ)·W(< v*) > φ·W(>= v*)``, i.e.
  ``W(< v*) > φ·S₀``: impossible. Lower: were ``l > v*``, likewise
  ``(1 − φ)·W(<= v*) <= φ·W(> v*)``, so ``W(<= v*) <= φ·S₀`` and v* would not be the
  largest. The additive sketch pays the lower tail of ``W(< v*)``, the upper of
  ``W(>= v*)``, the upper of ``W(<= v*)`` and the lower of ``W(> v*)`` — fixed selections,
  the estimator being monotone in the selection: 4 tails. Each test is made harder by
  1e-12 of its right side, against float rounding.

Examples
--------
>>> import numpy as np
>>> from sketches.decayed.relative import DecayedRelativeSketch
>>> sk = DecayedRelativeSketch(0.05, {"kind": "none"}, 0, 9, resolution=1)
>>> sk.update(np.arange(100), np.arange(100) % 10)
>>> q = quantile(sk, 0.5, at=99)
>>> q.lower <= 5 <= q.upper
True
>>> [v for v, _ in heavy_hitters(sk, 0.09, at=99)][:3]
[0.0, 1.0, 2.0]
"""

from __future__ import annotations

import math

import numpy as np

from sketches.base import Estimate, SketchError

__all__ = ["range_sum", "relative_frequency", "heavy_hitters", "quantile"]


def _is_additive(sketch) -> bool:
    from sketches.decayed.additive import DecayedAdditiveSketch

    return isinstance(sketch, DecayedAdditiveSketch)


def _view(sketch, decay, at, until=None):
    """``until``: count only ticks ``<= until`` (events after the query time)."""
    if _is_additive(sketch):
        if decay is None:
            raise SketchError("the additive sketch needs the decay at query time")
        return sketch._view(decay, at, until)
    return sketch._view(decay, at, until)


def _point(sketch, value: float) -> float:
    return float(value) if _is_additive(sketch) else float(sketch.quantize(np.array([value]))[0])


def _ratio_eps(view, tails: int) -> float:
    e = view.epsilon(tails)
    if view.guarantee == "additive":
        return 2 * e / (1 - e) if e < 1 else math.inf
    return (1 + e) ** 2 - 1


def _ratio(num, den) -> tuple[float, float, float]:
    (ne, nl, nu), (de, dl, du) = num, den
    est = ne / de if de > 0 else 0.0
    lower = min(1.0, nl / du) if du > 0 else 0.0
    upper = min(1.0, nu / dl) if dl > 0 else 1.0
    return min(max(est, lower), upper), lower, upper


def range_sum(sketch, lo, hi, at, decay=None) -> Estimate:
    """Decayed weight of the values in ``[lo, hi]`` (``S_l − S_{r+1}`` of §1.1, item 2)."""
    if _is_additive(sketch):
        if decay is None:
            raise SketchError("the additive sketch needs the decay at query time")
        return sketch.range_sum(decay, lo, hi, at)
    _view(sketch, decay, at)  # checks the decay
    return sketch.range_sum(lo, hi, at)


def relative_frequency(sketch, value, at, decay=None, until=None) -> Estimate:
    """Decayed relative frequency ``W({v})/S₀`` of one value (§1.1, item 1)."""
    view = _view(sketch, decay, at, until)
    tails = 4
    v = _point(sketch, value)
    mask = view.points == v
    ne, nl, nu = view.select(mask, tails)
    re_, rl, ru = view.select(~mask, tails)
    nl, nu, rl, ru = max(nl, 0.0), max(nu, 0.0), max(rl, 0.0), max(ru, 0.0)
    lower = min(1.0, nl / (nl + ru)) if nl > 0 else 0.0
    upper = min(1.0, nu / (nu + rl)) if nu + rl > 0 else 1.0
    est = ne / (ne + re_) if ne + re_ > 0 else 0.0
    est = min(max(est, lower), upper)
    return Estimate(est, lower, upper, view.guarantee, _ratio_eps(view, tails), view.confidence,
                    view.method + "/frequency")


def heavy_hitters(sketch, phi, at, decay=None, until=None) -> list[tuple[float, Estimate]]:
    """Values whose decayed relative frequency may reach ``phi`` (§1.1, item 4).

    Returns ``(value, Estimate of its frequency)`` by decreasing estimate; with
    probability ``>= confidence`` every value of frequency ``>= phi`` is listed.
    """
    phi = float(phi)
    if not 0 < phi <= 1:
        raise SketchError("phi must be in (0, 1]")
    view = _view(sketch, decay, at, until)
    tails = max(4, int(math.floor(1 / phi)) + 2)
    de, dl, du = view.total(tails)
    _, unseen_hi = view.interval(0.0, 0.0, 0.0, tails)
    if view.guarantee == "additive" and view.points.size and (dl <= 0 or unseen_hi / dl >= phi):
        raise SketchError(
            f"phi = {phi} is below what this sketch can certify at this time: a value outside "
            f"its sample may have decayed frequency up to {unseen_hi / dl if dl > 0 else 1.0:.4g}")
    nl, nu = view.interval(view.mass, view.lo, view.hi, tails)
    est = view.mass / de if de > 0 else np.zeros_like(view.mass)
    if view.guarantee == "relative":
        # Deterministic for every selection at once: each point against the rest, from one
        # consistent world per side (as relative_frequency). Differences of sums of
        # non-negative floats are widened by 1e-12 against the side they could favour.
        rl, ru = view.interval(de - view.mass, view.lo.sum() - view.lo, view.hi.sum() - view.hi, tails)
        nl, rl = np.maximum(nl, 0.0), np.maximum(rl * (1 - 1e-12), 0.0)
        ru = np.maximum(ru, 0.0) * (1 + 1e-12) + 1e-12 * max(du, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            lower = np.where(nl > 0, np.minimum(1.0, nl / (nl + ru)), 0.0)
            upper = np.where(nu + rl > 0, np.minimum(1.0, nu / np.where(nu + rl > 0, nu + rl, 1.0)), 1.0)
    else:  # the additive sketch's recall proof pays one tail per heavy value plus two for S₀
        lower = np.minimum(1.0, nl / du) if du > 0 else np.zeros_like(view.mass)
        upper = np.minimum(1.0, nu / dl) if dl > 0 else np.ones_like(view.mass)
    eps = _ratio_eps(view, tails)
    out = []
    for i in np.flatnonzero(upper >= phi):
        e = min(max(float(est[i]), float(lower[i])), float(upper[i]))
        out.append((float(view.points[i]),
                    Estimate(e, float(lower[i]), float(upper[i]), view.guarantee, eps, view.confidence,
                             view.method + "/heavy-hitter")))
    out.sort(key=lambda p: -p[1].estimate)
    return out


def quantile(sketch, phi, at, decay=None) -> Estimate:
    """Correlated φ-quantile ``max{v : W(< v) <= φ·S₀}`` (§1.1, item 5), bracketed.

    ``lower <= v* <= upper`` with probability ``>= confidence``; ``estimate`` is the
    smallest point whose estimated weight at or below it exceeds ``φ·Ŝ₀``.
    """
    phi = float(phi)
    if not 0 <= phi <= 1:
        raise SketchError("phi must be in [0, 1]")
    view = _view(sketch, decay, at)
    vmin, vmax = sketch.value_min, sketch.value_max
    tails = 4
    de, dl, du = view.total(tails)
    pts = view.points
    keep = 1.0 - phi
    _, le_lo, _ = view.cumulative(tails, inclusive=True)
    _, _, gt_hi = view.above(tails, inclusive=False)
    up = np.flatnonzero(keep * le_lo > phi * np.maximum(gt_hi, 0.0) * (1 + 1e-12))
    upper = float(pts[up[0]]) if up.size else vmax
    _, _, lt_hi = view.cumulative(tails, inclusive=False)
    _, ge_lo, _ = view.above(tails, inclusive=True)
    down = np.flatnonzero(keep * np.maximum(lt_hi, 0.0) * (1 + 1e-12) <= phi * np.maximum(ge_lo, 0.0))
    lower = max(vmin, float(pts[down[-1]])) if down.size else vmin
    cum = np.cumsum(view.mass)
    hit = np.flatnonzero(cum > phi * de) if de > 0 else np.zeros(0, np.int64)
    est = float(pts[hit[0]]) if hit.size else vmax
    est = min(max(est, lower), upper)
    return Estimate(est, lower, upper, view.guarantee, view.epsilon(tails), view.confidence,
                    view.method + "/quantile")
