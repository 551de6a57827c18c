"""The decoded summaries a Python worker process keeps between batches, so a busy shard is
not decoded from its state-store blob every batch (``DecodedShards``), and the one instance
per process that the shard updater finds through ``decoded_shards()``.
"""

from __future__ import annotations

__all__ = ["DecodedShards", "decoded_shards"]


class DecodedShards:
    """The last summary each (stream, shard) was updated to in this Python worker process,
    so a busy shard is not decoded from its blob every batch.

    Valid because the state store holds exactly the bytes the worker wrote: a summary kept
    for version v of generation g is used only when the state handed in is version v of
    generation g with the same blob (length and CRC-32 checked, cheap beside a decode), so
    a stream deleted and declared again never reuses a decode of its old generation
    (``tidemark.generations``). It is taken out before it is
    updated in place, so a failed update or a replayed batch (which hands in an older
    version) finds nothing and decodes. Bounded (least recently used first out): a decoded
    summary of a typical small stream (a 1 h window, a few keys) takes about 1.5 MB (150 KB encoded), so
    256 of them stay within 400 MB per Python worker (``bench_worker.py``: at 1,000 streams
    the kept summaries change the CPU per update by 3 %, not worth gigabytes)."""

    def __init__(self, entries: int = 256):
        self.entries = entries
        self._kept: dict[tuple[str, int], tuple[int, int, int, int, object]] = {}
        self.hits = self.misses = 0

    @staticmethod
    def _check(blob: bytes) -> tuple[int, int]:
        import zlib

        return len(blob), zlib.crc32(blob)

    def take(self, stream: str, shard: int, generation: int, version: int, blob: bytes | None):
        """The decoded summary of exactly ``blob`` at ``version`` of ``generation``, else
        ``blob``."""
        kept = self._kept.pop((stream, shard), None)
        if (blob is not None and kept is not None and kept[0:2] == (generation, version)
                and kept[2:4] == self._check(blob)):
            self.hits += 1
            return kept[4]
        self.misses += 1
        return blob

    def keep(self, stream: str, shard: int, generation: int, version: int, blob: bytes,
             summary) -> None:
        if summary is None:
            return
        while len(self._kept) >= self.entries:
            self._kept.pop(next(iter(self._kept)))
        self._kept[(stream, shard)] = (generation, version, *self._check(blob), summary)

    def forget(self, stream: str, shard: int) -> None:
        """The shard's state is gone (its stream was deleted)."""
        self._kept.pop((stream, shard), None)


_DECODED = DecodedShards()


def decoded_shards() -> DecodedShards:
    """This Python worker process's kept summaries. Spark ships the group function by value
    (cloudpickle), and with it a copy of every module-level object the function names: a
    function that named ``_DECODED`` got an empty copy with every task, so nothing kept
    ever survived a batch. A module function is shipped by reference and returns the
    object of the process's own import."""
    return _DECODED
