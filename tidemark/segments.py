"""A shard summary's published form: content-addressed segments and a manifest.

A summary blob (``tidemark/summary.py``: header and meta, then one blob per part) is cut
at its part boundaries, and a paged part at its pages (``Sketch.pieces``: pages whose
bytes depend only on what they hold, named ``part@1``, ``part@2``, ...), into segments,
each stored once under the digest of its bytes in the stream's segment hash
(``keys.shard_segments``). The shard's status names them in
order (``status["segments"] = [[part, digest], ...]``, the head first as ``"_head"``):
their concatenation is the blob, byte for byte. A part a batch did not touch keeps its
bytes and so its digest, so a publish writes, and a reader fetches, only the segments
that changed (the publisher sends only digests the current manifest lacks; the reader
asks only for digests it does not hold).

Coherence: segments are immutable (a digest names one content), the manifest is written
last in the same script that stores the segments, after the version guard, and a segment
is removed only when no current manifest of the stream names it any more — in that same
script. The reader reads statuses and the segments it lacks in one script
(``tidemark.wire.scripts.READ``; the publish is ``PUBLISH`` there), so every set it gets
is one publish's complete set: never a torn mix.

A blob that is not a readable summary (a failed shard's empty blob, a corrupt one) is one
segment, ``"_whole"``: the reader's decode refuses it whole, as it would the unsplit blob.
"""

from __future__ import annotations

import hashlib

from sketches.base import CorruptSketchError
from tidemark.summary import HEAD_SEGMENT, read_head, segment_name

__all__ = ["split", "join", "digest"]

HEAD, WHOLE = HEAD_SEGMENT, "_whole"


def digest(data: bytes) -> str:
    """The name of a segment: a 128-bit BLAKE2b of its bytes (hex)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def split(blob: bytes) -> list[tuple[str, bytes]]:
    """``blob`` as ``[(part, bytes), ...]`` in order (module notes); joining them gives it
    back exactly. The head is read by the summary's own reader (``read_head``)."""
    try:
        head = read_head(blob)
    except CorruptSketchError:
        return [(WHOLE, bytes(blob))]
    offset = head.parts_at
    out = [(HEAD, bytes(blob[:offset]))]
    for name, length in head.layout:
        for j, size in enumerate(head.cuts.get(name, [length])):
            out.append((segment_name(name, j), bytes(blob[offset : offset + size])))
            offset += size
    return out


def join(manifest: list, segments: dict[str, bytes]) -> bytes:
    """The blob a manifest names, from ``segments`` (digest -> bytes); KeyError when one
    is missing (the reader always fetches a manifest's missing segments with it)."""
    return b"".join(segments[d] for _, d in manifest)
