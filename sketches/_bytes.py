"""The one checked reader and writer of every sketch blob (after DataSketches'
``memory_operations.hpp``: every read is checked against what is left).

A blob is a 16-byte header and a payload that the family writes with :class:`Writer` and
reads back with :class:`Reader`. Byte header shared by all families (little endian)::

    0      4        5          6         8                 16
    +------+--------+----------+---------+-----------------+
    | TMSK | format | family   | flags   | payload length  |
    |      | u8     | u8       | u16     | u64             |
    +------+--------+----------+---------+-----------------+

``payload length`` must equal the number of bytes that follow the header, so a
truncated or padded blob is refused before its payload is parsed.

:func:`read_blob` is the only way a blob becomes a sketch: the header is checked first
(family, version, the class's flags, exact length), then the family parses the payload,
then the payload must be used to its last byte. Any short read, malformed field or
parameter the constructor refuses is a :class:`~sketches.errors.CorruptSketchError`: a
blob is refused whole, never half-read.

Layers: :mod:`sketches.errors` < :mod:`sketches._codec` < this module < :mod:`sketches.base`
(whose ``Sketch.to_bytes`` / ``from_bytes`` call it) < the families.

Tested by: tests/sketches/test_contract.py (pack_header, every family's bytes round trip).
"""

from __future__ import annotations

import struct

from sketches._codec import Reader, Writer
from sketches.errors import CorruptSketchError, SketchError

__all__ = ["Reader", "Writer", "read_blob", "pack_header", "unpack_header", "HEADER_SIZE", "MAGIC"]

MAGIC = b"TMSK"
_HEADER = struct.Struct("<4sBBHQ")
HEADER_SIZE = _HEADER.size


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


def read_blob(cls, data, resume: bool = False):
    """``cls`` read from ``data`` (``cls`` a :class:`~sketches.base.Sketch` subclass;
    ``resume``: passed to a ``_read`` that takes it, ``Sketch.from_bytes``)."""
    flags, payload = unpack_header(data, cls.FAMILY, fmt=cls.FORMAT)
    if flags != cls.HEADER_FLAGS:
        raise CorruptSketchError(f"blob is not a {cls.__name__}")
    rd = Reader(payload, cls.WHAT)
    try:
        sketch = cls._read(rd, resume=True) if resume else cls._read(rd)
    except CorruptSketchError:
        raise
    except (SketchError, ArithmeticError) as e:  # parameters the constructor refuses
        raise CorruptSketchError(f"{rd.what} blob has invalid parameters: {e}") from None
    rd.done()
    return sketch
