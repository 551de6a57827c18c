"""The one checked reader and writer of every sketch blob (after DataSketches'
``memory_operations.hpp``: every read is checked against what is left).

A blob is the 16-byte header of :mod:`sketches.base` (magic, format version, family,
flags, payload length) and a payload that the family writes with :class:`Writer` and
reads back with :class:`Reader`. :func:`read_blob` is the only way a blob becomes a
sketch: the header is checked first (family, version, the class's flags, exact length),
then the family parses the payload, then the payload must be used to its last byte. Any
short read, malformed field or parameter the constructor refuses is a
:class:`~sketches.base.CorruptSketchError`: a blob is refused whole, never half-read.
"""

from __future__ import annotations

from sketches._codec import Reader, Writer
from sketches.base import HEADER_SIZE, CorruptSketchError, SketchError, pack_header, unpack_header

__all__ = ["Reader", "Writer", "read_blob", "pack_header", "unpack_header", "HEADER_SIZE"]


def read_blob(cls, data):
    """``cls`` read from ``data`` (``cls`` a :class:`~sketches.base.Sketch` subclass)."""
    flags, payload = unpack_header(data, cls.FAMILY, fmt=cls.FORMAT)
    if flags != cls.KIND:
        raise CorruptSketchError(f"blob is not a {cls.__name__}")
    rd = Reader(payload, cls.WHAT)
    try:
        sketch = cls._read(rd)
    except CorruptSketchError:
        raise
    except (SketchError, ArithmeticError) as e:  # parameters the constructor refuses
        raise CorruptSketchError(f"{rd.what} blob has invalid parameters: {e}") from None
    rd.done()
    return sketch
