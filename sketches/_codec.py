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
  :class:`~sketches.errors.CorruptSketchError` (nothing is half-read);
* the compiled pieces of both (``put_*`` / ``get_*``, ``decode_varints``), from which the
  families' kernels write and read whole intervals, instances or bucket lists in one
  compiled call each: a summary's blob has hundreds of small columns, and a Python call
  per column cost more than the column. Compiled readers return an ``E_*``
  code instead of raising; :meth:`Reader.fail_code` turns it into the error.

It imports only :mod:`sketches.errors`: the sketches sit above their codec, never below.

Tested by: tests/sketches/test_compiled_codec.py (varints, zigzag, the kernel cache),
tests/sketches/test_compact_bytes.py.
"""

from __future__ import annotations

import hashlib
import math
import os
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
def decode_varints(buf, start, n):
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
_POW10_ARR = np.array(_POW10)
_EXACT = 2.0**53

# Error codes of the compiled readers (a negative position), turned into messages by
# :meth:`Reader.fail_code`: the readers run in compiled loops, so they report, not raise.
E_TRUNCATED, E_VARINT, E_FLOAT_FORM, E_FLOAT_RANGE, E_FLOAT_UNKNOWN = -1, -2, -3, -4, -5


def drop_stale_kernel_cache(module_file: str) -> None:
    """Forget the Numba cache of ``module_file``'s kernels when this file has changed since
    it was written (each kernel module that compiles the pieces below calls this on import).

    Numba keys a cached kernel by its own module's file only, yet the family kernels compile
    these pieces into themselves: after an edit here they would keep running the old ones.
    So the cache (``__pycache__`` beside the module, Numba's default) carries a stamp, the
    hash of this file; when it differs the module's index files are removed and Numba
    compiles afresh on first use. Any failure (a read-only tree) leaves the cache alone."""
    cache = os.path.join(os.path.dirname(os.path.abspath(module_file)), "__pycache__")
    name = os.path.splitext(os.path.basename(module_file))[0]
    mark = os.path.join(cache, f"{name}.codec-stamp")
    try:
        with open(__file__, "rb") as f:
            stamp = hashlib.sha256(f.read()).hexdigest()
        try:
            with open(mark) as f:
                if f.read() == stamp:
                    return
        except FileNotFoundError:
            pass
        os.makedirs(cache, exist_ok=True)
        for entry in os.listdir(cache):
            if entry.startswith(name + ".") and entry.endswith(".nbi"):
                os.remove(os.path.join(cache, entry))
        tmp = f"{mark}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(stamp)
        os.replace(tmp, mark)
    except OSError:
        pass


# Compiled pieces of a payload. Each writes into a preallocated ``out`` at ``p`` and returns
# the new position, or reads ``buf`` at ``p`` and returns what it read and the new position
# (negative: one of the E_* codes). The family kernels build whole payloads from them in
# one compiled call: a Python call per column cost more than the column itself.
@njit(cache=True, inline="always")
def put_varint(out, p, x):
    """LEB128 of the uint64 ``x`` at ``out[p]``; returns the position after it."""
    x = np.uint64(x)
    while x >= np.uint64(0x80):
        out[p] = np.uint8((x & np.uint64(0x7F)) | np.uint64(0x80))
        x >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(x)
    return p + 1


@njit(cache=True, inline="always")
def zigzag1(x):
    """int64 -> uint64 with small magnitudes small (the scalar :func:`zigzag`)."""
    x = np.int64(x)
    return np.uint64((x << np.int64(1)) ^ (x >> np.int64(63)))


@njit(cache=True, inline="always")
def unzigzag1(u):
    return np.int64(u >> np.uint64(1)) ^ -np.int64(u & np.uint64(1))


@njit(cache=True, inline="always")
def get_varint(buf, p):
    """``(value, end)`` of the LEB128 varint at ``buf[p]``; ``end`` < 0 when the buffer is
    short or the varint malformed (longer than 10 bytes, above 2^64, or not shortest)."""
    x = np.uint64(0)
    shift = 0
    size = buf.shape[0]
    if 0 <= p < size and buf[p] < 0x80:  # one byte: the common case, always shortest
        return np.uint64(buf[p]), p + 1
    while True:
        if p < 0 or p >= size:
            return x, E_TRUNCATED
        if shift > 63:
            return x, E_VARINT
        b = np.uint64(buf[p])
        p += 1
        part = b & np.uint64(0x7F)
        if shift == 63 and part > np.uint64(1):
            return x, E_VARINT
        x |= part << np.uint64(shift)
        if b < np.uint64(0x80):
            if shift > 0 and part == np.uint64(0):
                return x, E_VARINT  # a zero final byte: not the shortest form
            return x, p
        shift += 7


@njit(cache=True)
def get_gaps(buf, p, n, size):
    """``(ok, end, positions)``: ``n`` strictly increasing positions below ``size``, written
    as varint gaps (each position less the one before, less one; the first from -1).
    ``end`` < 0: the buffer is short or a varint malformed (``E_VARINT``); ``ok`` False: a
    position at or past ``size``."""
    out = np.empty(n, np.int64)
    if n > buf.shape[0] - p:
        return True, -1, out
    gaps, p = decode_varints(buf, p, n)
    if p < 0:
        return True, E_VARINT, out
    last = np.int64(-1)
    for j in range(n):
        if gaps[j] >= np.uint64(size):
            return False, p, out
        last += np.int64(gaps[j]) + 1
        out[j] = last
    return not (n and last >= size), p, out


@njit(cache=True)
def put_f64(out, p, x):
    """The 8 little-endian bytes of the float64 ``x``."""
    tmp = np.empty(1, np.float64)
    tmp[0] = x
    b = tmp.view(np.uint8)
    for j in range(8):
        out[p + j] = b[j]
    return p + 8


@njit(cache=True)
def get_f64(buf, p):
    if p < 0 or p + 8 > buf.shape[0]:
        return 0.0, E_TRUNCATED
    tmp = np.empty(8, np.uint8)
    for j in range(8):
        tmp[j] = buf[p + j]
    return tmp.view(np.float64)[0], p + 8


@njit(cache=True)
def _scaled_digits(v, pow10):
    """The fewest digits ``d`` after the point with ``rint(v·10^d) / 10^d`` giving back every
    value bit for bit (as int64, the decoder's own steps), or -1: none up to 6, or some
    ``|v·10^d|`` reaches 2^53 first (values must be finite)."""
    n = v.shape[0]
    for d in range(pow10.shape[0]):
        scale = pow10[d]
        exact = True
        for i in range(n):
            s = np.rint(v[i] * scale)
            if abs(s) >= _EXACT:
                return -1  # larger digits only scale further up
            if exact:
                back = np.float64(np.int64(s))
                if d:  # x / 1.0 is x
                    back /= scale
                # equal bits: equal values, and -0.0 (which comes back +0.0) is not exact
                if back != v[i] or (v[i] == 0.0 and math.copysign(1.0, v[i]) < 0.0):
                    exact = False
        if exact:
            return d
    return -1


@njit(cache=True)
def put_floats(out, p, v):
    """A float column of ``v`` (module notes): constant, scaled integers or raw float64,
    whichever is the first exact one; at most ``12 + 8·len(v)`` bytes."""
    n = v.shape[0]
    if n == 0:
        out[p] = _RAW
        return p + 1
    bits = v.view(np.uint64)
    same = True
    finite = True
    for i in range(n):
        if bits[i] != bits[0]:
            same = False
        if not np.isfinite(v[i]):
            finite = False
    if same:
        out[p] = _CONST
        return put_f64(out, p + 1, v[0])
    d = _scaled_digits(v, _POW10_ARR) if finite else -1
    if d >= 0:
        scale = _POW10_ARR[d]
        ints = np.empty(n, np.int64)
        for i in range(n):
            ints[i] = np.int64(np.rint(v[i] * scale))
        base = ints.min()
        out[p] = _SCALED
        out[p + 1] = d
        p = put_varint(out, p + 2, zigzag1(base))
        for i in range(n):
            p = put_varint(out, p, np.uint64(ints[i] - base))
        return p
    out[p] = _RAW
    raw = v.view(np.uint8)
    for j in range(raw.shape[0]):
        out[p + 1 + j] = raw[j]
    return p + 1 + raw.shape[0]


@njit(cache=True)
def get_floats(buf, p, n):
    """``(values, end)`` of a float column of ``n`` values at ``buf[p]``; ``end`` < 0 (an
    E_* code) when it is short, malformed or out of range."""
    out = np.empty(0, np.float64)
    if p < 0 or p >= buf.shape[0]:
        return out, E_TRUNCATED
    mode = buf[p]
    p += 1
    if mode > _SCALED:
        return out, E_FLOAT_UNKNOWN
    if mode == _SCALED or mode == _RAW:  # checked before allocating: n may be hostile
        if n > (buf.shape[0] - p) // (8 if mode == _RAW else 1):
            return out, E_TRUNCATED
    out = np.empty(n, np.float64)
    if mode == _RAW:
        raw = out.view(np.uint8)
        for j in range(8 * n):
            raw[j] = buf[p + j]
        return out, p + 8 * n
    if mode == _CONST:
        x, p = get_f64(buf, p)
        out[:] = x
        return out, p
    if mode == _SCALED:
        if p >= buf.shape[0]:
            return out, E_TRUNCATED
        d = buf[p]
        p += 1
        if d > _MAX_DIGITS:
            return out, E_FLOAT_FORM
        u, p = get_varint(buf, p)
        if p < 0:
            return out, p
        base = unzigzag1(u)
        if n > buf.shape[0] - p:  # every varint takes at least one byte
            return out, E_TRUNCATED
        if base <= -np.int64(2**53):
            return out, E_FLOAT_RANGE
        room = np.uint64(np.int64(2**53) - base) if base < np.int64(2**53) else np.uint64(0)
        offs, p = decode_varints(buf, p, n)
        if p < 0:
            return out, E_VARINT
        for i in range(n):
            if offs[i] >= room:  # off + base >= 2^53
                return out, E_FLOAT_RANGE
            out[i] = np.float64(np.int64(offs[i]) + base)
        if d:  # x / 1.0 is x: integers need no division
            out /= _POW10_ARR[d]
        return out, p
    return out, E_FLOAT_UNKNOWN


def _encode_floats(v: np.ndarray) -> bytes:
    v = np.ascontiguousarray(v, np.float64)
    out = np.empty(max_float_column_size(v.size), np.uint8)
    return out[: put_floats(out, 0, v)].tobytes()


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

    _WHY = {E_TRUNCATED: "truncated", E_VARINT: "has a truncated or malformed varint",
            E_FLOAT_FORM: "has a bad float column", E_FLOAT_RANGE: "has a float column out of range",
            E_FLOAT_UNKNOWN: "has an unknown float column form"}

    def fail_code(self, code: int, why: dict | None = None) -> CorruptSketchError:
        """The error of a compiled reader's negative ``code`` (``why``: the family's own)."""
        return self.fail((why or {}).get(code) or self._WHY.get(code, "truncated or malformed"))

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
        vals, end = decode_varints(self.buf, self.pos, n)
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
        vals, end = get_floats(self.buf, self.pos, n)
        if end < 0:
            raise self.fail_code(end)
        self.pos = end
        return vals

    def array(self, dtype: str, n: int) -> np.ndarray:
        dt = np.dtype(dtype)
        return np.frombuffer(self.take(dt.itemsize * n), dt).astype(dt.newbyteorder("="))

    def left(self) -> int:
        return self.buf.size - self.pos

    def done(self) -> None:
        if self.left():
            raise self.fail("has trailing bytes")
