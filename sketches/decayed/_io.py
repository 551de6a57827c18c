"""Bounds-checked reading of sketch payloads: any short read is a CorruptSketchError."""

from __future__ import annotations

import struct

import numpy as np

from sketches.base import CorruptSketchError


class Reader:
    def __init__(self, data, what: str):
        self.data, self.pos, self.what = bytes(data), 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptSketchError(f"{self.what} blob truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, s: struct.Struct) -> tuple:
        return s.unpack(self.take(s.size))

    def array(self, dtype, n: int) -> np.ndarray:
        dt = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.take(dt.itemsize * n), dt).astype(np.dtype(dtype).newbyteorder("="))

    def left(self) -> int:
        return len(self.data) - self.pos

    def done(self) -> None:
        if self.left():
            raise CorruptSketchError(f"trailing bytes after {self.what}")
