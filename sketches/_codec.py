"""Compact, bounds-checked byte encodings shared by the sketch families.

Sketch blobs are rewritten once per micro-batch per active shard, so their size follows
what a sketch holds, not its capacity, and encoding runs in compiled loops:

* **varints** (LEB128, 7 bits a byte) of ``uint64`` arrays, with zig-zag for signed
  values and deltas for sorted columns;
* **float columns** stored in the narrowest exact form: one constant, integers, decimals
  with up to 6 digits after the point (the value times ``10^d`` is an integer and
  dividing it back gives the very same float64 — the idea of ALP, Afroozeh, Kuffó &
  Boncz, *ALP: Adaptive Lossless floating-Point Compression*, SIGMOD 2024, §3), or raw
  float64; every form is checked bit for bit before it is chosen, so decoding is exact;
* :class:`Reader`, whose every short or malformed read raises
  :class:`~sketches.errors.CorruptSketchError` (nothing is half-read).

It imports only :mod:`sketches.errors`: the sketches sit above their codec, never below.
"""

from __future__ import annotations

import struct

import numpy as np
from numba import njit

from sketches.errors import CorruptSketchError

__all__ = ["Writer", "Reader", "varints", "zigzag", "unzigzag", "varint_size", "max_float_column_size"]


@njit(cache=True)
def _encode_varints(vals):
    n = vals.shape[0]
    size = 0
    for i in range(n):
        x = vals[i]
        size += 1
        while x >= np.uint64(0x80):
            x >>= np.uint64(7)
            size += 1
    out = np.empty(size, np.uint8)
    p = 0
    for i in range(n):
        x = vals[i]
        while x >= np.uint64(0x80):
            out[p] = np.uint8((x & np.uint64(0x7F)) | np.uint64(0x80))
            x >>= np.uint64(7)
            p += 1
        out[p] = np.uint8(x)
        p += 1
    return out


@njit(cache=True)
def _decode_varints(buf, start, n):
    """``(values, end)``; ``end = -1`` when the buffer is short or a varint is malformed
    (longer than 10 bytes, above 2^64, or not in its shortest form)."""
    out = np.empty(n, np.uint64)
    p = start
    size = buf.shape[0]
    for i in range(n):
        x = np.uint64(0)
        shift = 0
        while True:
            if p >= size or shift > 63:
                return out, -1
            b = np.uint64(buf[p])
            p += 1
            part = b & np.uint64(0x7F)
            if shift == 63 and part > np.uint64(1):
                return out, -1
            x |= part << np.uint64(shift)
            if b < np.uint64(0x80):
                if shift > 0 and part == np.uint64(0):
                    return out, -1  # a zero final byte: not the shortest form
                break
            shift += 7
        out[i] = x
    return out, p


def varints(values: np.ndarray) -> bytes:
    """LEB128 bytes of a ``uint64`` array."""
    return _encode_varints(np.ascontiguousarray(values, dtype=np.uint64)).tobytes()


def varint_size(largest: int) -> int:
    """Bytes of the LEB128 varint of any value from 0 to ``largest`` (7 bits a byte)."""
    return max(1, -(-int(largest).bit_length() // 7))


def max_float_column_size(n: int) -> int:
    """Bytes a float column of ``n`` values can take at most: raw, ``1 + 8n``, or scaled,
    ``2 + 8`` (the base) ``+ 8n`` (each offset, below 2^54, takes at most 8 varint
    bytes); a constant takes 9."""
    return 12 + 8 * int(n)


def zigzag(x: np.ndarray) -> np.ndarray:
    """int64 -> uint64 with small magnitudes small (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    x = np.asarray(x, np.int64)
    return ((x << np.int64(1)) ^ (x >> np.int64(63))).view(np.uint64)


def unzigzag(u: np.ndarray) -> np.ndarray:
    u = np.asarray(u, np.uint64)
    return ((u >> np.uint64(1)).view(np.int64)) ^ -((u & np.uint64(1)).view(np.int64))


# -- float columns -----------------------------------------------------------------------------
_RAW, _CONST, _SCALED = 0, 1, 2
_MAX_DIGITS = 6
_POW10 = [10.0**d for d in range(_MAX_DIGITS + 1)]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))


def _encode_floats(v: np.ndarray) -> bytes:
    v = np.ascontiguousarray(v, np.float64)
    if v.size == 0:
        return bytes([_RAW])
    if _same_bits(v, np.full(v.size, v[0])):
        return bytes([_CONST]) + struct.pack("<d", v[0])
    if np.all(np.isfinite(v)):
        for d in range(_MAX_DIGITS + 1):
            scaled = np.round(v * _POW10[d])
            if np.abs(scaled).max() >= 2.0**53:
                break
            ints = scaled.astype(np.int64)
            if _same_bits(ints.astype(np.float64) / _POW10[d], v):  # the decoder's own steps
                base = int(ints.min())
                return bytes([_SCALED, d]) + varints(np.array([zigzag(np.array([base]))[0]])) \
                    + varints((ints - base).view(np.uint64))
    return bytes([_RAW]) + v.astype("<f8").tobytes()


class Writer:
    """Collects the pieces of a payload."""

    def __init__(self):
        self.parts: list[bytes] = []

    def raw(self, b: bytes) -> "Writer":
        self.parts.append(b)
        return self

    def pack(self, s: struct.Struct, *values) -> "Writer":
        return self.raw(s.pack(*values))

    def uint(self, x: int) -> "Writer":
        return self.raw(varints(np.array([x], np.uint64)))

    def uints(self, a: np.ndarray) -> "Writer":
        return self.raw(varints(a))

    def ints(self, a: np.ndarray) -> "Writer":
        return self.raw(varints(zigzag(a)))

    def sorted_ints(self, a: np.ndarray) -> "Writer":
        """A non-decreasing int64 column: the first value, then the gaps."""
        a = np.asarray(a, np.int64)
        if a.size == 0:
            return self
        self.ints(a[:1])
        return self.raw(varints(np.diff(a).view(np.uint64)))

    def floats(self, v: np.ndarray) -> "Writer":
        return self.raw(_encode_floats(v))

    def array(self, a: np.ndarray, dtype: str) -> "Writer":
        return self.raw(np.ascontiguousarray(a).astype(dtype).tobytes())

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    """Bounds-checked reading of a payload written by :class:`Writer`."""

    def __init__(self, data, what: str):
        self.buf = np.frombuffer(bytes(data), np.uint8)
        self.pos, self.what = 0, what

    def fail(self, why: str = "truncated or malformed") -> CorruptSketchError:
        return CorruptSketchError(f"{self.what} blob {why}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.buf.size:
            raise self.fail("truncated")
        out = self.buf[self.pos : self.pos + n].tobytes()
        self.pos += n
        return out

    def unpack(self, s: struct.Struct) -> tuple:
        return s.unpack(self.take(s.size))

    def uints(self, n: int) -> np.ndarray:
        if n < 0 or n > self.buf.size - self.pos:  # every varint takes at least one byte
            raise self.fail("truncated")
        vals, end = _decode_varints(self.buf, self.pos, n)
        if end < 0:
            raise self.fail("has a truncated or malformed varint")
        self.pos = end
        return vals

    def uint(self, limit: int = 2**64 - 1) -> int:
        x = int(self.uints(1)[0])
        if x > limit:
            raise self.fail("has a count out of range")
        return x

    def ints(self, n: int) -> np.ndarray:
        return unzigzag(self.uints(n))

    def sorted_ints(self, n: int) -> np.ndarray:
        if n == 0:
            return np.zeros(0, np.int64)
        first = self.ints(1)
        gaps = self.uints(n - 1)
        if gaps.size and gaps.max() >= np.uint64(2**62):
            raise self.fail("has a gap out of range")
        out = np.empty(n, np.int64)
        out[0] = first[0]
        np.cumsum(gaps.view(np.int64), out=out[1:])
        out[1:] += first[0]
        if n > 1 and (out[1:] < out[:-1]).any():  # wrapped around int64
            raise self.fail("has a column out of range")
        return out

    def floats(self, n: int) -> np.ndarray:
        mode = self.take(1)[0]
        if mode == _RAW:
            return np.frombuffer(self.take(8 * n), "<f8").astype(np.float64)
        if mode == _CONST:
            return np.full(n, struct.unpack("<d", self.take(8))[0])
        if mode == _SCALED:
            d = self.take(1)[0]
            if d > _MAX_DIGITS:
                raise self.fail("has a bad float column")
            base = int(self.ints(1)[0])
            offs = self.uints(n)
            if offs.size and int(offs.max()) + base >= 2**53 or base <= -(2**53):
                raise self.fail("has a float column out of range")
            return (offs.astype(np.int64) + base).astype(np.float64) / _POW10[d]
        raise self.fail("has an unknown float column form")

    def array(self, dtype: str, n: int) -> np.ndarray:
        dt = np.dtype(dtype)
        return np.frombuffer(self.take(dt.itemsize * n), dt).astype(dt.newbyteorder("="))

    def left(self) -> int:
        return self.buf.size - self.pos

    def done(self) -> None:
        if self.left():
            raise self.fail("has trailing bytes")
