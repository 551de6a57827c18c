"""What every Tidemark sketch shares: the answer type, the checks of its arguments and its verbs.

Every sketch in this package speaks the same verbs (after Apache DataSketches):

* built from its error target (``epsilon``, ``delta``) and its maximum window;
* ``update(...)`` takes whole NumPy batches and runs compiled code, never a Python
  loop per event;
* ``feed(batch)`` takes one :class:`Batch` (ticks and, by family, weights, keys,
  values or key strings): every sketch is fed the same way;
* ``merge(other)`` folds ``other`` into ``self`` and returns ``self``; it refuses a
  sketch of another family, with other parameters or seed, or itself, raising
  :class:`IncompatibleSketchError` — one check (:meth:`Sketch.check_mergeable`) with one
  set of messages for every family;
* queries return :class:`Estimate` (or a list of them) whose ``lower``/``upper``
  follow from the structure's proof and its actual state, merges included;
* ``to_bytes()`` / ``from_bytes(data)`` use the header of :mod:`sketches._bytes`, validated before
  anything else is read, and one bounds-checked reader (:mod:`sketches._bytes`); a
  corrupt or truncated blob raises :class:`CorruptSketchError` and nothing is half-read;
* ``is_empty``, ``nbytes`` (serialized size) and a readable ``repr`` (the fields a
  family names in ``SHOWN``).

The byte header and the blob reader are :mod:`sketches._bytes`'s; the errors are
:mod:`sketches.errors`' (re-exported here). This module imports both and neither imports
it: the library's import graph has no circle (``tests/test_layers.py``).

Tested by: tests/sketches/test_contract.py (every family against the contract),
tests/sketches_extra/test_contract.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from sketches._bytes import HEADER_SIZE, Reader, Writer, pack_header, read_blob, unpack_header
from sketches.errors import CorruptSketchError, IncompatibleSketchError, SketchError

__all__ = [
    "Batch",
    "Sketch",
    "Estimate",
    "SketchError",
    "IncompatibleSketchError",
    "CorruptSketchError",
    "Family",
    "pack_header",
    "unpack_header",
    "HEADER_SIZE",
    "Reader",  # the checked payload reader and writer, for families outside this package
    "Writer",
]


class Family:
    """One byte per sketch family, written into the header. Bytes 2 and 3 are taken by
    families outside the product (the ``sketches_extra`` library): never reuse them."""

    SPLITTABLE_HISTOGRAM = 1
    RANDOMIZED_WAVE = 4
    ECM = 5
    DECAYED_ADDITIVE = 6
    DECAYED_RELATIVE = 7
    STREAM_SUMMARY = 8
    VALUE_HISTOGRAM = 9
    KEY_CANDIDATES = 10
    WINDOWED_QUANTILES = 11


_BOUND_FIELDS: dict[type, tuple[str, ...]] = {}  # an Estimate class -> its bound's field names


@dataclass(frozen=True)
class Estimate:
    """An estimate with the interval that contains the truth.

    ``lower <= truth <= upper`` holds always when ``confidence == 1.0`` and with
    probability at least ``confidence`` otherwise. ``kind`` (the contract's name; also
    :attr:`guarantee`) says whether ``epsilon`` is a relative error (of the truth) or an
    additive one (of the quantity named in the sketch's docstring, e.g. the window count).
    """

    estimate: float
    lower: float
    upper: float
    kind: str  # "relative" | "additive"
    epsilon: float
    confidence: float
    method: str

    @property
    def guarantee(self) -> str:
        """What ``kind`` holds, under the name this code gives it: the error guarantee,
        ``"relative"`` or ``"additive"`` (``kind`` stays: it is the bound's field in the
        contract, and ``bound`` writes the fields by name)."""
        return self.kind

    def bound(self) -> dict:
        """The contract's ``bound`` object. Every field is a number or a string, so a
        shallow copy is ``asdict``'s answer (which deep-copies, a third of a heavy-hitter
        answer's time)."""
        names = _BOUND_FIELDS.get(type(self))
        if names is None:  # ``fields()`` per call was a fifth of a range of heavy hitters
            names = _BOUND_FIELDS[type(self)] = tuple(f.name for f in fields(self) if f.name != "estimate")
        return {name: getattr(self, name) for name in names}

    def __add__(self, other: "Estimate") -> "Estimate":
        """Sum of two estimates of disjoint parts: intervals add exactly.

        The confidence of a sum of randomized parts is bounded by the union
        bound, ``1 - (1 - c1) - (1 - c2)``.
        """
        return Estimate(
            self.estimate + other.estimate,
            self.lower + other.lower,
            self.upper + other.upper,
            self.kind if self.kind == other.kind else "additive",
            max(self.epsilon, other.epsilon),
            max(0.0, self.confidence + other.confidence - 1.0),
            self.method,
        )


class EstimateColumns(NamedTuple):
    """Many :class:`Estimate` s of one method as columns: float arrays ``estimate``,
    ``lower``, ``upper``, ``epsilon`` and ``confidence``, a bool array ``relative`` (the
    guarantee: relative, else additive), and ``refused``: ``{index: SketchError}`` of the
    readings refused (their rows are 0)."""

    estimate: Any
    lower: Any
    upper: Any
    relative: Any
    epsilon: Any
    confidence: Any
    method: str
    refused: dict

    @classmethod
    def zeros(cls, n: int, method: str, relative: bool, epsilon: float = 0.0) -> "EstimateColumns":
        """``n`` rows of an exact zero (0 on every side, certain), to be filled in."""
        import numpy as np

        return cls(np.zeros(n), np.zeros(n), np.zeros(n), np.full(n, relative), np.full(n, epsilon), np.ones(n),
                   method, {})

    def row(self, i: int) -> Estimate:
        """Row ``i`` as the :class:`Estimate` it stands for."""
        return Estimate(float(self.estimate[i]), float(self.lower[i]), float(self.upper[i]),
                        "relative" if self.relative[i] else "additive", float(self.epsilon[i]),
                        float(self.confidence[i]), self.method)


def integer_ticks(ticks):
    """``ticks`` as a NumPy array, refused unless it is one-dimensional and integral (time
    is counted in integer ticks); each family checks the range it keeps."""
    import numpy as np

    t = np.asarray(ticks)
    if t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
        raise SketchError("ticks must be a one-dimensional array of integers (time is in integer ticks)")
    return t


# -- the checks of a sketch's arguments: one set, one set of messages ------------------------
def _power_of_two(n: int) -> str:
    """``n`` in the messages: ``2^k`` or ``2^k − 1`` when it is one of those, else ``n``."""
    if n > 1 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    if n > 1 and (n + 1) & n == 0:
        return f"2^{n.bit_length()} - 1"
    return str(n)


def unit_interval(name: str, value) -> float:
    """``value`` as a float, refused unless it lies in the open interval (0, 1) (an error
    target ``epsilon``, a failure probability ``delta``)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise SketchError(f"{name} must be a number in (0, 1)") from None
    if not 0.0 < value < 1.0:
        raise SketchError(f"{name} must be in (0, 1), got {value}")
    return value


def _whole(value) -> int | None:
    """``value`` as an int when it is a whole number (Python or NumPy, never a bool)."""
    import operator

    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def window_ticks(window, max_window: int) -> int:
    """``window`` as an int, refused unless it is a whole number of ticks from 1 to
    ``max_window``."""
    w = _whole(window)
    if w is None:
        raise SketchError(f"window must be an integer number of ticks, got {window!r}")
    if not 1 <= w <= max_window:
        raise SketchError(f"window must be between 1 and {_power_of_two(max_window)} ticks, got {w}")
    return w


def seed_value(seed) -> int:
    """``seed`` as an int, refused unless it is a whole number in [0, 2^64)."""
    s = _whole(seed)
    if s is None or not 0 <= s < 2**64:
        raise SketchError("seed must be an integer in [0, 2^64)")
    return s


def epsilon_and_window(epsilon, window, max_window: int) -> tuple[float, int]:
    """The guarantee of a sliding-window sketch, checked: ``epsilon`` in (0, 1) and
    ``window`` a whole number of ticks from 1 to ``max_window``."""
    window = window_ticks(window, max_window)
    return unit_interval("epsilon", epsilon), window


def tick_bounds(lo, hi) -> tuple[int, int]:
    """``(lo, hi)`` as ints, refused unless both are whole numbers of ticks."""
    lo_, hi_ = _whole(lo), _whole(hi)
    if lo_ is None or hi_ is None:
        raise SketchError("query bounds must be integer ticks")
    return lo_, hi_


def not_expired(lo: int, clock: int | None, window: int) -> None:
    """Refuse a range starting before ``clock − window + 1``: older ticks have expired
    (no clock: nothing has)."""
    if clock is not None and lo < clock - window + 1:
        raise SketchError(f"range starts at tick {lo}, before clock - window + 1 = "
                          f"{clock - window + 1}: those ticks have expired")


def window_size(lo: int, hi: int, window: int) -> None:
    """Refuse an empty range or one longer than ``window`` ticks."""
    if hi < lo:
        raise SketchError(f"empty range: hi = {hi} < lo = {lo}")
    if hi - lo + 1 > window:
        raise SketchError(f"range of {hi - lo + 1} ticks exceeds the window of {window}")


def int_ranges(ranges: list):
    """``(los, his)`` int64 arrays of ``(lo, hi)`` pairs that are all Python ints (what the
    range path makes), to be checked at once; None for anything else (a NumPy or a float
    end, a bool: each then goes through its sketch's one-range check and its message)."""
    import numpy as np

    if not ranges or not set(map(type, itertools.chain.from_iterable(ranges))) <= {int}:
        return None
    try:
        arr = np.array(ranges, np.int64).reshape(len(ranges), 2)
    except (ValueError, OverflowError):
        return None
    return arr[:, 0], arr[:, 1]


def window_range(lo, hi, window: int, clock: int | None) -> tuple[int, int]:
    """``(lo, hi)`` as ints, refused unless ``[lo, hi]`` is a range of at most ``window``
    ticks that starts at or after ``clock − window + 1`` (older ticks have expired; no
    clock: nothing has)."""
    lo, hi = tick_bounds(lo, hi)
    window_size(lo, hi, window)
    not_expired(lo, clock, window)
    return lo, hi


class Batch(NamedTuple):
    """One batch of events, the single input type of :meth:`Sketch.feed`.

    ``ticks`` (int64) always; a family reads the columns it names in ``Sketch.BATCH``:
    ``weights`` (float64, default 1), ``keys`` (uint64 key or item ids), ``values``
    (float64 event values) or ``names`` (the key strings, for the key dictionary).
    """

    ticks: Any
    weights: Any = None
    keys: Any = None
    values: Any = None
    names: Any = None


class Sketch:
    """The shape every sketch obeys (after river's ``stats.base`` and DataSketches).

    A family sets its class attributes and implements ``update``, ``_merge``, its
    queries, ``copy``, ``_payload`` (its bytes after the header) and ``_read`` (the
    inverse, from a bounds-checked :class:`~sketches._bytes.Reader`). The verbs below
    are the only ones it may not write itself: the merge check, the byte header and the
    refusal of a blob that is not read to its last byte.
    """

    FAMILY: ClassVar[int]  #: header family byte (:class:`Family`)
    FORMAT: ClassVar[int] = 1  #: byte format version; bump it with any change of layout
    HEADER_FLAGS: ClassVar[int] = 0  #: header flags: which class of a family that several share
    WHAT: ClassVar[str]  #: the family in messages ("splittable histogram")
    NOUN: ClassVar[str]  #: ... and in the plural ("splittable histograms")
    PARAMS: ClassVar[str]  #: what must match to merge, in words ("epsilon or window")
    BATCH: ClassVar[tuple[str, ...]] = ("ticks", "weights")  #: ``update``'s columns
    SHOWN: ClassVar[tuple[str, ...]] = ("epsilon", "window", "clock_tick")  #: what ``repr`` shows

    # -- what a family provides ---------------------------------------------------------
    def _params(self) -> tuple:
        """The parameters two sketches must share to merge (and the seed, if any)."""
        raise NotImplementedError

    def _merge(self, other) -> None:
        """Fold a checked, compatible ``other`` into ``self``."""
        raise NotImplementedError

    def _payload(self) -> bytes:
        raise NotImplementedError

    @classmethod
    def _read(cls, rd):
        raise NotImplementedError

    # -- shared verbs ----------------------------------------------------------------
    def feed(self, batch: Batch) -> None:
        """``update`` with the batch's columns this family reads."""
        self.update(*(getattr(batch, name) for name in self.BATCH))

    def check_mergeable(self, other) -> None:
        """Refuse itself, another class or other parameters, with the shared messages."""
        if other is self:
            raise IncompatibleSketchError("cannot merge a sketch with itself")
        if type(other) is not type(self):
            name = type(self).__name__
            article = "an" if name[0] in "AEIOU" else "a"
            raise IncompatibleSketchError(f"can only merge {article} {name} with another {name}")
        if other._params() != self._params():
            raise IncompatibleSketchError(f"cannot merge {self.NOUN} with different {self.PARAMS}")

    def merge(self, other):
        """Fold ``other`` into ``self`` and return ``self`` (see the family's ``_merge``)."""
        self.check_mergeable(other)
        self._merge(other)
        return self

    def _payload_pieces(self) -> list[bytes]:
        """The payload as pieces whose concatenation it is: one, unless a family keeps its
        bytes in pages that each depend only on what they hold (``sketches._pages``), so a
        batch that changes few pages leaves the others' bytes as they were
        (``tidemark.segments`` stores and sends only changed pieces)."""
        return [self._payload()]

    def pieces(self) -> list[bytes]:
        """``to_bytes()`` in pieces (``_payload_pieces``, the header on the first)."""
        pieces = self._payload_pieces()
        head = pack_header(self.FAMILY, sum(map(len, pieces)), fmt=self.FORMAT, flags=self.HEADER_FLAGS)
        return [head + pieces[0]] + pieces[1:]

    def to_bytes(self) -> bytes:
        return b"".join(self.pieces())

    RESUMES = False  # True: ``_read`` takes ``resume`` (keeps what an encode builds on)

    @classmethod
    def from_bytes(cls, data, *, resume: bool = False):
        """Read a blob of :meth:`to_bytes`; anything else raises :class:`CorruptSketchError`.
        ``resume``: it is read to be updated and written again (the worker), so a family
        that can (``RESUMES``) keeps what lets its next encode build on these bytes."""
        return read_blob(cls, data, resume and cls.RESUMES)

    @property
    def nbytes(self) -> int:
        """Serialized size: ``len(to_bytes())``."""
        return len(self.to_bytes())

    def max_nbytes(self) -> int | None:
        """The most bytes this sketch can serialize to, whatever it is fed (after
        DataSketches' ``get_max_serialized_size_bytes``), worked out from the sizing its
        constructor chose and, for a merged sketch, the parts it holds; ``nbytes`` never
        exceeds it. None for a family whose space follows the data with no bound set by
        its parameters (its docstring says what its space follows)."""
        return None

    @property
    def clock(self) -> int:
        """``clock_tick`` under its former name, kept beside it for the callers that still
        say ``clock`` (tests, benchmarks). A sketch's clock is a tick, its newest; a
        stream's ``clock`` (the status field) is in seconds."""
        return self.clock_tick

    def __repr__(self) -> str:
        """``Family(name=value, ...)`` over ``SHOWN``; an empty sketch's clock is None."""

        def shown(name: str) -> str:
            value = None if name == "clock_tick" and self.is_empty else getattr(self, name)
            value = value.item() if hasattr(value, "item") else value  # NumPy scalars
            return f"{name}={value:g}" if isinstance(value, float) else f"{name}={value!r}"

        return f"{type(self).__name__}({', '.join(map(shown, self.SHOWN))})"

    _OWNED: ClassVar[tuple[str, ...] | None] = None  #: what a field-wise copy duplicates

    def copy(self):
        """An independent copy: through the bytes (exact by the round-trip contract), or,
        when the family names its mutable attributes in ``_OWNED``, field by field."""
        if self._OWNED is None:
            return type(self).from_bytes(self.to_bytes())
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for name in self._OWNED:
            value = getattr(self, name)
            setattr(new, name, [x.copy() for x in value] if isinstance(value, list) else value.copy())
        return new
