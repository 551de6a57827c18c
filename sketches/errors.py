"""The errors of the sketch library: the bottom of its import graph (every other module may
import them; they import nothing).

Tested by: tests/sketches/test_contract.py and each family's tests (corrupt and incompatible
bytes refused)."""

from __future__ import annotations

__all__ = ["SketchError", "IncompatibleSketchError", "CorruptSketchError"]


class SketchError(ValueError):
    """Base class of the errors the sketch library raises on a caller's mistake."""


class IncompatibleSketchError(SketchError):
    """Raised by ``merge`` when the two sketches cannot be combined."""


class CorruptSketchError(SketchError):
    """Raised by ``from_bytes`` when a blob is not a valid sketch of the asked family."""
