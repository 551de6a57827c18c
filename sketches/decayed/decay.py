"""Decay functions ``f(age)`` and the guarantees each one admits.

Cormode, G., Tirthapura, S. and Xu, B. (2009). *Time-decayed correlated aggregates over
data streams.* Statistical Analysis and Data Mining 2, 294-310. §1.2 (decay classes),
§4 (lower bounds), §4.4 (finite exponential decay).

A decay function (Definition 1.1) maps an age ``x >= 0`` in ticks to ``f(x)`` in
``[0, 1]`` and never increases. Ages below 0 (an event stamped after the query time)
are clamped to 0 here, so such an event counts with ``f(0) = 1``.

Classes (§1.2), which decide whether a small *relative*-error summary can exist:

* ``converging`` — ``f(x+1)/f(x)`` non-decreasing and not exponential: no decay and
  polynomial decay. A relative-error sketch exists (§3.2, Theorem 3.3).
* ``exponential`` — ``2^(-x/h)``: relative error needs Ω(m log(n/m)) bits (Theorem 4.2).
* ``super-exponential`` — ``f(x)/f(x+1) >= σ > 1`` from some age on, e.g.
  ``2^(-(x/s)^β)`` with ``β > 1``: same lower bound (Theorem 4.3).
* ``finite`` — ``f(x) = 0`` beyond an age limit ``N``: sliding windows and the finite
  exponential decay of §4.4; relative error needs Ω(N log(m/N)) bits (Theorem 4.1).

Every class admits the additive guarantee ``|Ŝ − S| <= ε·S₀`` (§3.1, Theorem 3.2).

Examples
--------
>>> import numpy as np
>>> f = parse_decay({"kind": "polynomial", "alpha": 1.5})
>>> f(np.array([0, 3])).round(3).tolist()
[1.0, 0.125]
>>> relative_guarantee_refusal(f) is None
True
>>> "Theorem 4.1" in relative_guarantee_refusal(parse_decay({"kind": "sliding", "window": 60}))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from sketches.base import SketchError

__all__ = [
    "Decay",
    "NoDecay",
    "SlidingWindow",
    "Exponential",
    "Polynomial",
    "FiniteExponential",
    "SuperExponential",
    "CallableDecay",
    "parse_decay",
    "as_decay",
    "relative_guarantee_refusal",
    "CONVERGING",
    "EXPONENTIAL",
    "SUPER_EXPONENTIAL",
    "FINITE",
]

CONVERGING = "converging"
EXPONENTIAL = "exponential"
SUPER_EXPONENTIAL = "super-exponential"
FINITE = "finite"


def _ages(age) -> np.ndarray:
    a = np.asarray(age, dtype=np.float64)
    return np.maximum(a, 0.0)


def _positive(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SketchError(f"decay parameter {name} must be a number") from None
    if not (math.isfinite(v) and v > 0):
        raise SketchError(f"decay parameter {name} must be finite and > 0")
    return v


class Decay:
    """Base class: a non-increasing ``f: [0, ∞) -> [0, 1]`` with ``f(0) = 1``."""

    decay_kind: str = ""  # the value of the spec's public key "kind"
    code: int = -1
    category: str = ""

    def __call__(self, age) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def age_limit(self) -> int | None:
        """``N`` of a finite decay (``f(x) = 0`` for ``x > N``), else None."""
        return None

    @property
    def finite(self) -> bool:
        return self.category == FINITE

    @property
    def exponential(self) -> bool:
        return self.category == EXPONENTIAL

    @property
    def super_exponential(self) -> bool:
        return self.category == SUPER_EXPONENTIAL

    @property
    def converging(self) -> bool:
        """Converging and not exponential (§1.2): the class Theorem 3.3 serves in small space."""
        return self.category == CONVERGING

    def __post_init__(self):
        """Every parameter is a positive finite float; :meth:`_check` adds a kind's limits."""
        for n in self.names():
            object.__setattr__(self, n, _positive(n, getattr(self, n)))
        self._check()

    def _check(self) -> None:
        pass

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The parameters, in order: the dataclass fields of a kind."""
        return tuple(f.name for f in fields(cls))

    def spec(self) -> dict:
        """``{"kind": ..., <params>}``, the input of :func:`parse_decay`."""
        return {"kind": self.decay_kind, **{n: getattr(self, n) for n in self.names()}}

    def params(self) -> tuple[float, float]:
        """Two numbers that, with :attr:`code`, serialise the decay."""
        values = [float(getattr(self, n)) for n in self.names()]
        return tuple(values + [0.0] * (2 - len(values)))


@dataclass(frozen=True)
class NoDecay(Decay):
    """``f(x) = 1``: every event keeps its weight (a converging decay, §1.2)."""

    decay_kind = "none"
    code = 0
    category = CONVERGING

    def __call__(self, age) -> np.ndarray:
        return np.ones_like(_ages(age))



@dataclass(frozen=True)
class SlidingWindow(Decay):
    """``f(x) = 1`` if ``x <= window`` else 0 (finite decay with age limit ``window``)."""

    window: int
    decay_kind = "sliding"
    code = 1
    category = FINITE

    def __post_init__(self):
        w = self.window
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or not 0 <= int(w) < 2**62:
            raise SketchError("sliding window must be an integer number of ticks in [0, 2^62)")
        object.__setattr__(self, "window", int(w))

    def __call__(self, age) -> np.ndarray:
        return (_ages(age) <= self.window).astype(np.float64)

    @property
    def age_limit(self) -> int:
        return self.window


@dataclass(frozen=True)
class Exponential(Decay):
    """``f(x) = 2^(-x / half_life)`` (exponential decay with α = 1/half_life, §1.2)."""

    half_life: float
    decay_kind = "exponential"
    code = 2
    category = EXPONENTIAL

    def __call__(self, age) -> np.ndarray:
        return np.exp2(-_ages(age) / self.half_life)


@dataclass(frozen=True)
class Polynomial(Decay):
    """``f(x) = (x + 1)^(-alpha)``: converging and not exponential (§1.2)."""

    alpha: float
    decay_kind = "polynomial"
    code = 3
    category = CONVERGING

    def _check(self) -> None:
        if self.alpha > 64:
            raise SketchError("polynomial decay alpha must be <= 64")

    def __call__(self, age) -> np.ndarray:
        return np.power(_ages(age) + 1.0, -self.alpha)


@dataclass(frozen=True)
class FiniteExponential(Decay):
    """§4.4, Definition 4.1: ``2^(-x/h)`` while ``x <= h·log2(1/mu)``, then 0.

    A finite decay with age limit ``N = ⌊h·log2(1/μ)⌋`` (so ``f(x) >= μ`` up to ``N``).
    """

    half_life: float
    mu: float
    decay_kind = "finite_exponential"
    code = 4
    category = FINITE

    def _check(self) -> None:
        if not self.mu < 1:
            raise SketchError("finite exponential threshold mu must be in (0, 1)")
        if self.half_life * math.log2(1 / self.mu) >= 2**62:
            raise SketchError("finite exponential age limit must be below 2^62 ticks")

    @property
    def age_limit(self) -> int:
        return int(math.floor(self.half_life * math.log2(1.0 / self.mu)))

    def __call__(self, age) -> np.ndarray:
        a = _ages(age)
        return np.where(a <= self.age_limit, np.exp2(-a / self.half_life), 0.0)


@dataclass(frozen=True)
class SuperExponential(Decay):
    """``f(x) = 2^(-(x/scale)^beta)`` with ``beta > 1`` (§1.2 example (ii)).

    ``f(x)/f(x+1) = 2^(((x+1)^β − x^β)/scale^β) >= 2^(1/scale^β) > 1`` for all ``x >= 0``.
    """

    scale: float
    beta: float
    decay_kind = "super_exponential"
    code = 5
    category = SUPER_EXPONENTIAL

    def _check(self) -> None:
        if not 1 < self.beta <= 64:
            raise SketchError("super-exponential decay needs beta in (1, 64]")

    def __call__(self, age) -> np.ndarray:
        return np.exp2(-np.power(_ages(age) / self.scale, self.beta))


@dataclass(frozen=True)
class CallableDecay(Decay):
    """A caller's function of the age, for the additive sketch only (decay at query time).

    The additive sketch checks on the ages it evaluates that values lie in ``[0, 1]`` and
    never increase with age; the caller vouches that this holds at every age.
    """

    fn: object
    decay_kind = "callable"
    code = -1
    category = ""

    def __post_init__(self):
        pass  # a function, checked on the ages it is evaluated at

    def __call__(self, age) -> np.ndarray:
        a = _ages(age)
        out = np.asarray(self.fn(a), dtype=np.float64)
        if out.shape != a.shape:
            raise SketchError("decay function must return one value per age")
        return out

    def spec(self) -> dict:
        raise SketchError("a callable decay has no spec")

    def params(self) -> tuple[float, float]:
        return (0.0, 0.0)  # never serialised: a callable lives with the query


_BY_DECAY_KIND = {cls.decay_kind: cls for cls in (NoDecay, SlidingWindow, Exponential, Polynomial, FiniteExponential,
                                     SuperExponential)}
_BY_CODE = {cls.code: cls for cls in _BY_DECAY_KIND.values()}


def parse_decay(spec) -> Decay:
    """Build a decay from ``{"kind": ..., <params>}`` (or return a :class:`Decay` as is).

    Kinds: ``none``; ``sliding`` (``window``); ``exponential`` (``half_life``);
    ``polynomial`` (``alpha``); ``finite_exponential`` (``half_life``, ``mu``);
    ``super_exponential`` (``scale``, ``beta``). Unknown kinds or keys raise SketchError.
    """
    if isinstance(spec, Decay):
        return spec
    if not isinstance(spec, dict) or "kind" not in spec:
        raise SketchError("decay spec must be a dict with a 'kind'")
    decay_kind = spec["kind"]
    if decay_kind not in _BY_DECAY_KIND:
        raise SketchError(f"unknown decay kind {decay_kind!r}; expected one of {sorted(_BY_DECAY_KIND)}")
    cls = _BY_DECAY_KIND[decay_kind]
    names = cls.names()
    extra = set(spec) - {"kind", *names}
    missing = [n for n in names if n not in spec]
    if extra or missing:
        raise SketchError(f"decay {decay_kind!r} takes exactly the parameters {list(names)}")
    return cls(*(spec[n] for n in names))


def as_decay(obj) -> Decay:
    """A :class:`Decay`, a spec dict, or (additive sketch only) a plain callable."""
    if isinstance(obj, (Decay, dict)):
        return parse_decay(obj)
    if callable(obj):
        return CallableDecay(obj)
    raise SketchError("decay must be a Decay, a spec dict or a callable of the age")


def decay_from_code(code: int, p1: float, p2: float) -> Decay:
    """Inverse of ``(decay.code, *decay.params())``; raises SketchError when invalid."""
    if code not in _BY_CODE:
        raise SketchError(f"unknown decay code {code}")
    cls = _BY_CODE[code]
    if cls is SlidingWindow:
        if not (math.isfinite(p1) and p1 == int(p1)):
            raise SketchError("sliding window must be integral")
        return cls(int(p1))
    return cls(*(p1, p2)[: len(cls.names())])


def relative_guarantee_refusal(decay) -> str | None:
    """None when a small relative-error summary exists for ``decay``, else why not.

    Relative error ``(1 − ε)S <= Ŝ <= (1 + ε)S`` for every threshold needs, in the worst
    case, space linear in the stream for finite decays incl. sliding windows (Theorem 4.1),
    exponential decay (Theorem 4.2) and super-exponential decay (Theorem 4.3); only
    converging non-exponential decays (and no decay) have the small sketch of §3.2.
    """
    d = as_decay(decay)
    offer = ("use DecayedAdditiveSketch instead: |Ŝ − S| <= ε·S₀ for any decay chosen at "
             "query time (§3.1, Theorem 3.2)")
    name = f"{d.decay_kind} decay {d.spec() if d.decay_kind != 'callable' else ''}".strip()
    if d.converging:
        return None
    if d.finite:
        extra = ""
        if isinstance(d, FiniteExponential):
            extra = (" (§4.4: an exact answer keeps every event younger than the age limit "
                     f"N = {d.age_limit})")
        return (f"no small relative-error sketch exists for {name}: it is a finite decay with "
                f"age limit N = {d.age_limit}, and Theorem 4.1 (Cormode-Tirthapura-Xu 2009) "
                f"needs Ω(N log(m/N)) bits{extra}; {offer}")
    if d.exponential:
        return (f"no small relative-error sketch exists for {name}: Theorem 4.2 "
                "(Cormode-Tirthapura-Xu 2009) needs Ω(m log(n/m)) bits for exponential decay, "
                f"even with several passes; {offer}")
    if d.super_exponential:
        return (f"no small relative-error sketch exists for {name}: Theorem 4.3 "
                "(Cormode-Tirthapura-Xu 2009) needs Ω(m log(n/m)) bits for super-exponential "
                f"decay, even with several passes; {offer}")
    return (f"no relative-error guarantee is known for {name}: the relative sketch of §3.2 "
            f"needs a converging non-exponential decay (none or polynomial); {offer}")
