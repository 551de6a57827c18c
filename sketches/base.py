"""What every Tidemark sketch shares: the answer type, the errors and the byte header.

Every sketch in this package speaks the same verbs (after Apache DataSketches):

* built from its error target (``epsilon``, ``delta``) and its maximum window;
* ``update(...)`` takes whole NumPy batches and runs compiled code, never a Python
  loop per event;
* ``merge(other)`` folds ``other`` into ``self`` and returns ``self``; it refuses a
  sketch of another family, with other parameters or seed, or itself, raising
  :class:`IncompatibleSketchError` with a fixed message;
* queries return :class:`Estimate` (or a list of them) whose ``lower``/``upper``
  follow from the structure's proof and its actual state, merges included;
* ``to_bytes()`` / ``from_bytes(data)`` use the header below, validated before
  anything else is read; a corrupt or truncated blob raises
  :class:`CorruptSketchError` and nothing is half-read;
* ``is_empty``, ``nbytes`` (serialized size) and a readable ``repr``.

Byte header shared by all families (little endian, 16 bytes)::

    0      4        5          6         8                 16
    +------+--------+----------+---------+-----------------+
    | TMSK | format | family   | flags   | payload length  |
    |      | u8     | u8       | u16     | u64             |
    +------+--------+----------+---------+-----------------+

``payload length`` must equal the number of bytes that follow the header, so a
truncated or padded blob is refused before its payload is parsed.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass

__all__ = [
    "Estimate",
    "SketchError",
    "IncompatibleSketchError",
    "CorruptSketchError",
    "Family",
    "pack_header",
    "unpack_header",
    "HEADER_SIZE",
]

MAGIC = b"TMSK"
_HEADER = struct.Struct("<4sBBHQ")
HEADER_SIZE = _HEADER.size


class SketchError(ValueError):
    """Base class of the errors the sketch library raises on a caller's mistake."""


class IncompatibleSketchError(SketchError):
    """Raised by ``merge`` when the two sketches cannot be combined."""


class CorruptSketchError(SketchError):
    """Raised by ``from_bytes`` when a blob is not a valid sketch of the asked family."""


class Family:
    """One byte per sketch family, written into the header."""

    SPLITTABLE_HISTOGRAM = 1
    EXPONENTIAL_HISTOGRAM = 2
    DETERMINISTIC_WAVE = 3
    RANDOMIZED_WAVE = 4
    ECM = 5
    DECAYED_ADDITIVE = 6
    DECAYED_RELATIVE = 7
    STREAM_SUMMARY = 8
    VALUE_HISTOGRAM = 9
    KEY_CANDIDATES = 10
    WINDOWED_QUANTILES = 11


@dataclass(frozen=True)
class Estimate:
    """An estimate with the interval that contains the truth.

    ``lower <= truth <= upper`` holds always when ``confidence == 1.0`` and with
    probability at least ``confidence`` otherwise. ``kind`` says whether
    ``epsilon`` is a relative error (of the truth) or an additive one (of the
    quantity named in the sketch's docstring, e.g. the window count).
    """

    estimate: float
    lower: float
    upper: float
    kind: str  # "relative" | "additive"
    epsilon: float
    confidence: float
    method: str

    def bound(self) -> dict:
        """The contract's ``bound`` object."""
        d = asdict(self)
        d.pop("estimate")
        return d

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


def pack_header(family: int, payload_len: int, fmt: int = 1, flags: int = 0) -> bytes:
    return _HEADER.pack(MAGIC, fmt, family, flags, payload_len)


def unpack_header(data: bytes, family: int, fmt: int = 1) -> tuple[int, memoryview]:
    """Validate the header and return ``(flags, payload)``.

    Raises :class:`CorruptSketchError` when the blob is too short, has the wrong
    magic, format or family, or a payload length that does not match.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CorruptSketchError("sketch blob must be bytes")
    data = memoryview(data)
    if len(data) < HEADER_SIZE:
        raise CorruptSketchError("sketch blob truncated: shorter than its header")
    magic, got_fmt, got_family, flags, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptSketchError("not a Tidemark sketch: bad magic")
    if got_family != family:
        raise CorruptSketchError(f"sketch family {got_family} where {family} was expected")
    if got_fmt != fmt:
        raise CorruptSketchError(f"unsupported sketch format version {got_fmt}")
    if length != len(data) - HEADER_SIZE:
        raise CorruptSketchError(
            f"sketch blob length mismatch: header says {length} payload bytes, "
            f"found {len(data) - HEADER_SIZE}"
        )
    return flags, data[HEADER_SIZE:]
