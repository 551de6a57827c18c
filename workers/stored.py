"""A shard summary as Spark's state store keeps it: the pieces its publish is made of.

The worker keeps each (stream, shard) group's summary in a ``MapState`` of pieces (the
published segments of ``tidemark.segments``: the head, then each part, a paged part page
by page), keyed by their digest and named in order by a manifest of ``[piece, digest]``
in the group's ``ValueState`` (``workers.job``). So a batch writes to the state store only
the pieces whose bytes are new, the same ones the publish sends, and reads them back only
when this Python worker does not already hold the decoded summary of exactly that
manifest (``workers.decoded``): a busy shard's summary does not cross from the JVM to
Python every batch.

Tested by: tests/workers/test_stored.py
"""

from __future__ import annotations

import json
from typing import Callable, Iterable

from sketches.base import CorruptSketchError
from tidemark import segments

__all__ = ["StoredSummary", "fingerprint", "changed_pieces", "pieces_of"]


class StoredSummary:
    """A summary's pieces by manifest; ``read`` fetches ``{digest: bytes}`` on demand (the
    state store), or the pieces are at hand (a summary just encoded)."""

    def __init__(self, manifest: list, read: Callable[[], dict] | None = None,
                 pieces: dict[str, bytes] | None = None):
        self.manifest = [(str(name), str(d)) for name, d in manifest]
        self._read, self._pieces = read, pieces

    @classmethod
    def of(cls, blob: bytes) -> "StoredSummary":
        """``blob`` cut into its pieces (``tidemark.segments.split``), each named by digest."""
        parts = [(name, segments.digest(b), b) for name, b in segments.split(blob)]
        return cls([(name, d) for name, d, _ in parts], pieces={d: b for _, d, b in parts})

    @classmethod
    def from_json(cls, text: str | None, read: Callable[[], dict]) -> "StoredSummary | None":
        return None if not text else cls(json.loads(text), read)

    def to_json(self) -> str:
        return json.dumps(self.manifest, separators=(",", ":"))

    @property
    def fingerprint(self) -> tuple:
        """What names these exact bytes: the pieces' digests in order."""
        return tuple(d for _, d in self.manifest)

    def pieces(self) -> dict[str, bytes]:
        """``{digest: bytes}``."""
        if self._pieces is None:
            self._pieces = self._read()
        return self._pieces

    def parts(self) -> list[tuple[str, bytes]]:
        """``[(piece, bytes), ...]`` in order (what ``tidemark.segments.split`` gives)."""
        pieces = self.pieces()
        return [(name, pieces[d]) for name, d in self.manifest]

    def blob(self) -> bytes:
        """The summary's bytes; ``CorruptSketchError`` when a piece is missing or is not
        the one the manifest names (refused whole, never half-read)."""
        pieces = self.pieces()
        out = []
        for name, d in self.manifest:
            data = pieces.get(d)
            if data is None or segments.digest(data) != d:
                raise CorruptSketchError(f"state piece {name!r} is missing or not the one its manifest names")
            out.append(data)
        return b"".join(out)

    def __len__(self) -> int:
        return len(self.manifest)


def fingerprint(blob: "bytes | StoredSummary") -> tuple:
    return blob.fingerprint if isinstance(blob, StoredSummary) else StoredSummary.of(blob).fingerprint


def changed_pieces(before: StoredSummary | None, after: StoredSummary) -> tuple[list[tuple[str, bytes]], list[str]]:
    """What the state store must do to go from ``before`` to ``after``: ``(pieces to write
    as (digest, bytes), digests to remove)``; a piece whose bytes it holds is not written
    again (two equal pieces are one entry)."""
    had = set(before.fingerprint) if before is not None else set()
    now = set(after.fingerprint)
    new = [d for d in dict.fromkeys(after.fingerprint) if d not in had]
    pieces = after.pieces() if new else {}
    return [(d, pieces[d]) for d in new], sorted(had - now)


def pieces_of(rows: Iterable[tuple]) -> dict[str, bytes]:
    """``{digest: bytes}`` from a MapState's ``iterator()`` rows ``((digest,), (bytes,))``."""
    return {key[0]: bytes(value[0]) for key, value in rows}
