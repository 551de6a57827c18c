"""Decoding and merging shard summaries: in the API process (the default) or in a
separate process, off the API's GIL.

Decoding a published summary of an hour of events took 12-20 ms of Python and NumPy when
the decoder process was written; since the compiled codec it takes about 3 ms for a
0.9 MB blob (``bench/bench_summary_codec.py``), about what handing it to another process
and unpickling the 4.6 MB decoded summary back costs, while a decoder process holds
150-300 MB of its own (its interpreter, Numba, the decoded copies). So by default
(``TIDEMARK_DECODER_PROCESSES=0``) an API process decodes on its one decode thread, and
the summary it serves is the very object decoded; with ``N > 0`` a pool of N processes
(``spawn``: the API has threads, a fork could copy a held lock) decodes and hands the
merged summary back by pickle.

Wherever it runs, the decoder keeps the shard summaries it decoded last so that a publish
of one shard of a many-shard stream decodes that shard only — bounded two ways: per
stream, only the shards of the version it decoded last (a version no longer served is
needed by nobody: answers come from the newest decoded version, ``app.summary_cache``),
and in all, ``KEEP_BYTES`` of the blobs they were decoded from (least recently used
streams' first out). One decoder per process and hash secret (``Decoder.shared``),
whatever the number of stores.

A blob the decoder refuses (corrupt, another secret) raises the same error in the caller;
a decoder process that dies is replaced and the decode tried once more.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from app.child_process import exit_with_parent
from tidemark.hash_secret import HashSecret
from tidemark.summary import StreamSummary

__all__ = ["Decoder", "KEEP_BYTES", "Kept"]

_secret: HashSecret | None = None
KEEP_BYTES = 64 << 20  # blob bytes of the shard summaries kept, all streams together


class Kept:
    """The decoded shard summaries of each stream's last decoded version, by (stream,
    segment digests), bounded by the bytes of their blobs."""

    def __init__(self, limit: int = KEEP_BYTES):
        self.limit = limit
        self.bytes = 0
        self._streams: OrderedDict[str, dict[tuple, tuple[StreamSummary, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, stream: str, key: tuple) -> StreamSummary | None:
        with self._lock:
            found = self._streams.get(stream, {}).get(key)
            return found[0] if found else None

    def keep(self, stream: str, decoded: dict[tuple, tuple[StreamSummary, int]]) -> None:
        """``decoded`` ({key: (summary, blob bytes)}) is ``stream``'s version now: what it
        held before and does not name goes."""
        with self._lock:
            old = self._streams.pop(stream, {})
            self.bytes -= sum(n for _, n in old.values())
            self._streams[stream] = decoded
            self.bytes += sum(n for _, n in decoded.values())
            while self.bytes > self.limit and len(self._streams) > 1:
                _, gone = self._streams.popitem(last=False)
                self.bytes -= sum(n for _, n in gone.values())

    def forget(self, stream: str) -> None:
        with self._lock:
            self.bytes -= sum(n for _, n in self._streams.pop(stream, {}).values())

    def __len__(self) -> int:
        return sum(len(d) for d in self._streams.values())


_kept = Kept()


def _start(secret: HashSecret, parent: int) -> None:
    # No warm-up run here: it would load the update kernels too, a CPU burst beside the
    # API's at start; a decode loads the few kernels it needs from Numba's cache.
    global _secret
    _secret = secret
    exit_with_parent(parent)


def _ready() -> bool:
    return True


def _decode(shards: list[tuple[tuple, bytes]], secret: HashSecret | None = None,
            stream: str | None = None, kept: Kept | None = None) -> tuple[StreamSummary, float]:
    """The merged summary of ``shards`` ((segment digests, blob) each: the digests name
    the blob's content) and the CPU seconds spent decoding and merging. With a ``stream``
    the shard summaries are kept in ``kept`` (the process's own by default) as that
    stream's version."""
    started = time.process_time()
    secret = secret or _secret
    kept = _kept if kept is None else kept
    decoded, now = [], {}
    for key, blob in shards:
        summary = kept.get(stream, key) if stream is not None else None
        if summary is None:
            summary = StreamSummary.from_bytes(blob, secret)
        now[key] = (summary, len(blob))
        decoded.append((summary, blob))
    if stream is not None:
        kept.keep(stream, now)
    if len(decoded) == 1:
        merged = decoded[0][0]
    else:  # into a fresh copy of the first: the kept shard summaries stay intact
        merged = StreamSummary.from_bytes(decoded[0][1], secret)
        for shard_summary, _ in decoded[1:]:
            merged.merge(shard_summary)
    return merged, time.process_time() - started


class Decoder:
    """A pool of decoder processes (started on first use)."""

    _shared: dict = {}
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, secret: HashSecret, processes: int = 1) -> "Decoder":
        """The process's decoder for ``secret``."""
        with cls._shared_lock:
            found = cls._shared.get((secret, processes))
            if found is None:
                found = cls._shared[(secret, processes)] = cls(secret, processes)
            return found

    def __init__(self, secret: HashSecret, processes: int = 1):
        self.secret, self.processes = secret, processes  # 0: decode in this process
        self.kept = Kept()  # this process's own, when it decodes itself
        self._pool: ProcessPoolExecutor | None = None
        self._ready = threading.Event()  # the processes have started and loaded the kernels
        self._starting = False
        self._lock = threading.Lock()

    def _get(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start, initargs=(self.secret, os.getpid()))
            return self._pool

    def start(self) -> None:
        """Start the decoder processes now and wait until they are ready (the API starts
        them at start-up, off its start-up path)."""
        if self.processes == 0:
            return
        with self._lock:
            self._starting = True
        pool = self._get()
        for future in [pool.submit(_ready) for _ in range(self.processes)]:
            future.result()
        self._ready.set()

    def _start_later(self) -> None:
        with self._lock:
            if self._starting:
                return
            self._starting = True
        threading.Thread(target=self.start, name="tidemark-decoder-start", daemon=True).start()

    def decode(self, shards: list[tuple[tuple, bytes]], stream: str | None = None) -> tuple[StreamSummary, float]:
        """Decode and merge ``stream``'s shards: here (no decoder processes), or in a
        decoder process while the calling thread waits without the GIL. Until the
        processes are ready (they start with the API, in the background), here: a first
        read must not wait for a process to start."""
        if self.processes == 0:
            return _decode(shards, self.secret, stream, self.kept)
        if not self._ready.is_set():
            self._start_later()
            return _decode(shards, self.secret)
        for attempt in (0, 1):
            pool = self._get()
            try:
                return pool.submit(_decode, shards, None, stream).result()
            except BrokenProcessPool:
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False)
                if attempt:
                    raise

    def forget(self, stream: str) -> None:
        """Drop what is kept of a stream (deleted, or declared anew; in this process)."""
        self.kept.forget(stream)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._ready.clear()
            self._starting = False
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
