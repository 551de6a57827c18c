"""Decoding and merging shard summaries in a separate process, off the API's GIL.

Decoding a published summary of an hour of events took 12-20 ms of Python and NumPy when
this was written (about 1.2 ms for a 150 KB summary since the compiled codec,
``bench/bench_summary_codec.py``); done in the API process it holds the GIL while requests
queue behind it. So the API hands the shard blobs to a small process pool (``spawn``: the
API has threads, a fork could copy a held lock) and gets the merged summary back by
pickle, which reads a summary of that size in about 0.3 ms (arrays are copied, not
parsed). Whether decoding in the API process is now the cheaper trade is not measured yet. The decoder keeps the shard summaries it
decoded last, by (stream, shard, generation, version), so a publish of one shard of a
many-shard stream decodes that shard only. One pool per process and hash secret
(``Decoder.shared``), whatever the number of stores.

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

__all__ = ["Decoder"]

_secret: HashSecret | None = None
_kept: OrderedDict = OrderedDict()  # the shard's segment digests -> its decoded summary
_KEEP = 512


def _start(secret: HashSecret, parent: int) -> None:
    # No warm-up run here: it would load the update kernels too, a CPU burst beside the
    # API's at start; a decode loads the few kernels it needs from Numba's cache.
    global _secret
    _secret = secret
    exit_with_parent(parent)


def _ready() -> bool:
    return True


def _decode(shards: list[tuple[tuple, bytes]], secret: HashSecret | None = None,
            keep: bool = True) -> tuple[StreamSummary, float]:
    """The merged summary of ``shards`` ((segment digests, blob) each: the digests name
    the blob's content) and the CPU seconds spent decoding and merging (runs in the
    decoder process)."""
    started = time.process_time()
    secret = secret or _secret
    decoded = []
    for key, blob in shards:
        kept = _kept.get(key) if keep else None
        if kept is None:
            kept = StreamSummary.from_bytes(blob, secret)
            if keep:
                _kept[key] = kept
                while len(_kept) > _KEEP:
                    _kept.popitem(last=False)
        elif keep:
            _kept.move_to_end(key)
        decoded.append((kept, blob))
    if len(decoded) == 1:
        merged = decoded[0][0]
    else:  # into a fresh copy of the first: the kept shard summaries stay intact
        merged = StreamSummary.from_bytes(decoded[0][1], secret)
        for part, _ in decoded[1:]:
            merged.merge(part)
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
        self.secret, self.processes = secret, processes
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

    def decode(self, shards: list[tuple[tuple, bytes]]) -> tuple[StreamSummary, float]:
        """Decode and merge in a decoder process; the calling thread waits without the GIL.
        Until the processes are ready (they start with the API, in the background), here:
        a first read must not wait for a process to start."""
        if not self._ready.is_set():
            self._start_later()
            return _decode(shards, self.secret, keep=False)
        for attempt in (0, 1):
            pool = self._get()
            try:
                return pool.submit(_decode, shards).result()
            except BrokenProcessPool:
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False)
                if attempt:
                    raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._ready.clear()
            self._starting = False
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
