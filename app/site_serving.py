"""A stream's published summary as peer sites are served it (contract §11): the bytes of
each version encoded once, its content-addressed segments, and deltas between versions.

The routes are ``app/routes/federation.py``. What is served is always this deployment's own
published summary (``SummaryCache``), never the merge of a federated stream's sites: a
federation of federations would count a site twice. The ``KEPT_VERSIONS`` newest versions
of each stream read by a peer are kept, so a peer one or a few versions behind gets a delta
(Zstandard with the old bytes as its dictionary) or the segments it lacks.

Tested by: tests/app/test_federation.py (versions, segments and deltas served to peer
sites).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tidemark import segments

__all__ = ["Serving", "Published", "STATUS_HEADER", "MAX_DIGESTS", "KEPT_VERSIONS", "zstd"]

STATUS_HEADER = "Tidemark-Status"  # the served version's status, JSON, beside the summary bytes
_STATUS_FIELDS = ("sketch_version", "updated_at", "events", "late_dropped", "clock", "received",
                  "rejected", "failed_events")
MAX_DIGESTS = 200  # segments one request may ask (a summary has a head and its parts, paged parts in hundreds of pages)
KEPT_VERSIONS = 4  # versions of a stream's summary kept to serve deltas and segments from

try:  # deltas between versions; without it a peer gets the changed segments whole
    import zstandard as zstd
except ImportError:  # pragma: no cover — a dependency; an install without it still federates
    zstd = None


@dataclass
class Published:
    """This deployment's published summary of a stream, as peers are served it."""

    source: object  # the decoded summary it was encoded from (None: nothing published)
    blob: bytes
    etag: str
    manifest: list  # [[part, digest, length], ...]
    segments: dict[str, bytes]
    status: dict


class Serving:
    """``local_summary``: ``SummaryCache.summary`` of this process (the published summary)."""

    def __init__(self, local_summary):
        self.local_summary = local_summary
        self._lock = threading.Lock()
        self._served: dict[str, list[Published]] = {}  # newest first, KEPT_VERSIONS of them
        self._deltas: dict[tuple[str, str, str], bytes] = {}  # (name, from, to) -> delta

    def forget(self, name: str) -> None:
        with self._lock:
            self._served.pop(name, None)
            for key in [k for k in self._deltas if k[0] == name]:
                del self._deltas[key]

    def published(self, name: str) -> Published:
        """This deployment's own published summary of ``name`` (never a merge of peers':
        a federation of federations would count a site twice), encoded once per version."""
        summary, status = self.local_summary(name, fresh=True)
        kept = self._served.get(name)
        if kept and kept[0].source is summary and summary is not None:
            return kept[0]
        blob = summary.to_bytes() if summary is not None else b""
        parts = segments.split(blob) if blob else []
        etag = '"' + segments.digest(blob) + '"'
        if kept and kept[0].etag == etag:
            kept[0].source = summary
            return kept[0]
        published = Published(summary, blob, etag, [[p, segments.digest(b), len(b)] for p, b in parts],
                              {segments.digest(b): b for _, b in parts},
                              {k: status.get(k) for k in _STATUS_FIELDS})
        with self._lock:
            self._served[name] = [published, *(kept or [])[: KEPT_VERSIONS - 1]]
        return published

    def delta(self, name: str, since: str) -> tuple[Published, bytes | None]:
        """The newest version of ``name`` and its bytes as a delta from the version
        ``since`` (an ETag a peer holds): Zstandard with the old bytes as its dictionary, so
        what travels is what changed, byte by byte. None when ``since`` is not one of the
        ``KEPT_VERSIONS`` newest (or Zstandard is missing): the peer asks the manifest."""
        published = self.published(name)
        if zstd is None or since == published.etag:
            return published, None
        old = next((p for p in self._served.get(name) or [] if p.etag == since), None)
        if old is None or not old.blob or not published.blob:
            return published, None
        key = (name, since, published.etag)
        made = self._deltas.get(key)
        if made is None:
            dictionary = zstd.ZstdCompressionDict(old.blob, dict_type=zstd.DICT_TYPE_RAWCONTENT)
            made = zstd.ZstdCompressor(level=3, dict_data=dictionary).compress(published.blob)
            with self._lock:
                if len(self._deltas) >= 256:
                    self._deltas.clear()
                self._deltas[key] = made
        return published, made

    def segments_of(self, name: str, digests: list[str]) -> list[bytes] | None:
        """The segments named, from the newest versions served (None: one is gone)."""
        held: dict[str, bytes] = {}
        for p in reversed(self._served.get(name) or []):
            held.update(p.segments)
        try:
            return [held[d] for d in digests]
        except KeyError:
            return None
