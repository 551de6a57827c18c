"""A shard summary as Spark's state store keeps it: the pieces its publish is made of, in
bundles.

The worker keeps each (stream, shard) group's summary as its published segments
(``tidemark.segments``: the head, then each part, a paged part page by page), each named
by its digest in a manifest. The bytes live in a ``MapState`` of **bundles**: a batch
writes the pieces that are new in it as one bundle (one map entry: every state call is a
round trip to the JVM, 0.2–0.6 ms each on this machine, so a piece a call would cost a
busy shard tens of milliseconds), and a bundle goes when no piece of the manifest is in
it any more. The manifest, each piece's bundle and the bundles' sizes are the ``pieces``
column of the group's ``ValueState`` row (``workers.job``). So a batch writes to the
state store only the bytes that are new, the same ones the publish sends, and reads them
back only when this Python worker does not already hold the decoded summary of exactly
that manifest (``workers.decoded``): a busy shard's summary no longer crosses from the
JVM to Python and back whole every batch.

**Small summaries ride in the row.** A summary of at most ``INLINE_BYTES`` (a stream with a
few minutes of history, most streams of a many-streams load) is kept whole, as one bundle,
in the state row's ``inline`` column and the map holds nothing: a batch then costs one
state read and one state write, as the single-row layout did; the map's bundles begin
when the summary grows past it.

**Compaction.** A bundle stays while any of its pieces is current, so old bundles can hold
bytes no manifest names. When the bundles held exceed twice the summary's bytes (and
``SLACK``), the batch writes every current piece as one new bundle and drops all the
others: each compaction writes at most the summary once after at least as many new bytes
were written, so it at most doubles the bytes written, and what is held stays within
twice the summary.

Tested by: tests/workers/test_stored.py
"""

from __future__ import annotations

import json
import struct
from typing import Callable, Iterable

from sketches.base import CorruptSketchError
from tidemark import segments

__all__ = ["StoredSummary", "fingerprint", "plan_write", "plan_bundles", "pieces_of", "pack_bundle",
           "unpack_bundle", "held_pieces", "SLACK", "INLINE", "INLINE_BYTES"]

SLACK = 256 << 10  # bytes of dead pieces a shard may hold beyond its summary before compacting
INLINE_BYTES = 128 << 10  # a summary this small rides in the state row: one state call, not two
_ENTRY = struct.Struct("<16sI")  # a bundle entry: the digest's 16 bytes, the piece's length


class StoredSummary:
    """A summary's pieces by manifest; ``read`` fetches ``{digest: bytes}`` on demand (the
    state store), or the pieces are at hand (a summary just encoded). ``where`` names each
    digest's bundle and ``bundles`` their sizes (empty for pieces not stored yet)."""

    def __init__(self, manifest: list, read: Callable[[], dict] | None = None,
                 pieces: dict[str, bytes] | None = None, where: dict | None = None,
                 bundles: dict | None = None):
        self.manifest = [(str(name), str(d)) for name, d in manifest]
        self._read, self._pieces = read, pieces
        self.where, self.bundles = where or {}, bundles or {}

    @classmethod
    def of(cls, blob: bytes) -> "StoredSummary":
        """``blob`` cut into its pieces (``tidemark.segments.split``), each named by digest."""
        return cls.from_segments(segments.split(blob))

    @classmethod
    def from_segments(cls, parts: list[tuple[str, bytes]]) -> "StoredSummary":
        """A blob already cut (``StreamSummary.encode_segments``), each piece named by digest."""
        named = [(name, segments.digest(b), b) for name, b in parts]
        return cls([(name, d) for name, d, _ in named], pieces={d: b for _, d, b in named})

    @classmethod
    def from_json(cls, text: str | None, read: Callable[[], dict]) -> "StoredSummary | None":
        """What ``to_json`` wrote (the state row's ``pieces``)."""
        if not text:
            return None
        raw = json.loads(text)
        return cls([(n, d) for n, d, _ in raw["m"]], read, where={d: b for _, d, b in raw["m"]},
                   bundles=raw["b"])

    def to_json(self) -> str:
        return json.dumps({"m": [[n, d, self.where[d]] for n, d in self.manifest], "b": self.bundles},
                          separators=(",", ":"))

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

    def pieces_of_size(self, digests) -> int:
        """Bytes of the pieces ``digests`` (at hand, or read)."""
        pieces = self.pieces()
        return sum(len(pieces[d]) for d in digests)

    def __len__(self) -> int:
        return len(self.manifest)


def fingerprint(blob: "bytes | StoredSummary") -> tuple:
    return blob.fingerprint if isinstance(blob, StoredSummary) else StoredSummary.of(blob).fingerprint


INLINE = "inline"  # the bundle that is the state row's own ``inline`` column


def plan_write(before: StoredSummary | None, after: StoredSummary, bundle: str,
               slack: int = SLACK, inline_limit: int | None = None
               ) -> tuple[bytes | None, list[tuple[str, bytes]], list[str]]:
    """``(inline, bundles to write, bundle keys to remove)`` for ``after``: a summary of at
    most ``inline_limit`` (``INLINE_BYTES``) bytes rides whole in the state row (``inline``:
    no map call at all, as small as the row it replaces), a larger one in bundles
    (``plan_bundles``)."""
    inline_limit = INLINE_BYTES if inline_limit is None else inline_limit
    current = list(dict.fromkeys(after.fingerprint))
    held = dict(before.bundles) if before is not None else {}
    if after.pieces_of_size(current) <= inline_limit:
        pieces = after.pieces()
        after.where, after.bundles = dict.fromkeys(current, INLINE), {}
        return pack_bundle([(d, pieces[d]) for d in current]), [], sorted(held)
    if before is not None and INLINE in before.where.values():  # grown past the limit: to the map
        before = StoredSummary(before.manifest, where={d: b for d, b in before.where.items() if b != INLINE},
                               bundles=held)
    write, gone = plan_bundles(before, after, bundle, slack)
    return None, write, gone


def plan_bundles(before: StoredSummary | None, after: StoredSummary, bundle: str,
                 slack: int = SLACK) -> tuple[list[tuple[str, bytes]], list[str]]:
    """What the state store must do to go from ``before`` to ``after``: ``(bundles to write
    as (key, bytes), bundle keys to remove)``, at most one written (module notes: a bundle
    of the new pieces, or, past the slack, one of every piece), under the key of a bundle
    nothing names any more if there is one (an overwrite is one state call, a removal and
    an addition two), else ``bundle``; sets ``after.where`` and ``after.bundles``."""
    where = dict(before.where) if before is not None else {}
    sizes = dict(before.bundles) if before is not None else {}
    current = list(dict.fromkeys(after.fingerprint))
    new = [d for d in current if d not in where]
    live = {where[d] for d in current if d in where}
    write = []
    if new:
        pieces = after.pieces()
        held = sum(sizes[b] for b in live) + sum(len(pieces[d]) for d in new)
        if held > 2 * sum(len(pieces[d]) for d in current) + slack:  # compaction (module notes)
            new, live = current, set()
        dead = sorted(b for b in sizes if b not in live)
        if dead:  # overwrite a dead bundle rather than remove it and add another: one call
            bundle = dead[0]
        write.append((bundle, pack_bundle([(d, pieces[d]) for d in new])))
        sizes[bundle] = len(write[0][1])
        where.update((d, bundle) for d in new)
        live.add(bundle)
    after.where = {d: where[d] for d in current}
    after.bundles = {b: sizes[b] for b in sorted(live)}
    return write, sorted(b for b in sizes if b not in live)


def pack_bundle(pieces: list[tuple[str, bytes]]) -> bytes:
    """``u32 n | n × (16-byte digest, u32 length) | the pieces' bytes``."""
    head = struct.pack("<I", len(pieces)) + b"".join(_ENTRY.pack(bytes.fromhex(d), len(b)) for d, b in pieces)
    return head + b"".join(b for _, b in pieces)


def unpack_bundle(data: bytes) -> dict[str, bytes]:
    """``{digest: bytes}`` of a bundle; ``CorruptSketchError`` when it is malformed."""
    data = bytes(data)
    try:
        (n,) = struct.unpack_from("<I", data)
        entries = [_ENTRY.unpack_from(data, 4 + i * _ENTRY.size) for i in range(n)]
    except struct.error:
        raise CorruptSketchError("state bundle is truncated") from None
    offset, out = 4 + n * _ENTRY.size, {}
    for digest, length in entries:
        out[digest.hex()] = data[offset : offset + length]
        offset += length
    if offset != len(data):
        raise CorruptSketchError("state bundle lengths do not match its size")
    return out


def held_pieces(stored: StoredSummary, inline: bytes | None, map_rows: Callable[[], Iterable]) -> dict[str, bytes]:
    """``{digest: bytes}`` of a state row: its inline bundle, and the map's bundles (read
    through ``map_rows``, the MapState's ``iterator``) only when the manifest names any."""
    held = unpack_bundle(inline) if inline is not None else {}
    if any(b != INLINE for b in stored.where.values()):
        held.update(pieces_of(map_rows()))
    return held


def pieces_of(rows: Iterable[tuple]) -> dict[str, bytes]:
    """``{digest: bytes}`` from a MapState's ``iterator()`` rows ``((bundle,), (bytes,))``."""
    out = {}
    for _, value in rows:
        out.update(unpack_bundle(value[0]))
    return out
