"""Ingest's CPU work — validating a body and encoding its chunk — in processes of its own.

Run in a thread of the API process, validation and encoding hold the API's GIL while
queries queue behind it (a waiting thread gets the GIL only every 5 ms switch interval).
So each API process hands bodies to a small pool of ingest processes (``spawn``: the API
has threads, a fork could copy a held lock), started with the app
(``TIDEMARK_INGEST_PROCESSES``; 0 validates in a thread of the API process instead). A process gets the
body and the stream's declaration and returns the encoded Arrow chunk, the count, the
per-event rejects and the latest ``ts`` (``Prepared``): bytes pickled both ways, no
parsing in the API. Storing stays in the API (``Ingest.append``, its Lua script and the
idempotency record): a process that dies can then only have lost work, never stored a
chunk nobody was told of.

A small uncompressed Arrow body (up to ``inline_arrow_bytes``, 64 KiB: about 4,000
events) is validated in the calling thread instead: its columns are checked and encoded in
0.2-0.3 ms of the GIL (``tidemark.events.validate_arrow``), less than the hand-over to a
process costs the API itself (pickling, the pool's feeder and result threads, their
wake-ups: 0.6 ms a request on this 2-core machine, plus the process's own ~0.4 ms), and a
query waits at most that long behind it. NDJSON and JSON bodies, whose per-event path is
a Python loop, always go to a process.

A process that dies (killed, out of memory) or that takes longer than ``timeout``
breaks the pool: every request it held is answered 503 *not stored* (the client retries,
with its Idempotency-Key if it sent one), and the next request starts a new pool. Until
a pool is ready (at start, after a restart) bodies are validated in the calling thread:
a post never waits for a process to start. A compressed Arrow body never is (it may
decode to gigabytes): it is answered 503 *not stored* until a process can take it.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from app.child_process import exit_with_parent
from tidemark.chunks import encode_chunk
from tidemark.events import (ARROW_STREAM, BodyError, parse_body, validate_arrow, validate_events,
                             validate_ndjson_fast)
from tidemark.streams import StreamConfig

__all__ = ["IngestPool", "IngestUnavailable", "Prepared", "prepare"]


INLINE_ARROW_BYTES = 64 * 1024
# The frame magic numbers of the codecs Arrow IPC may compress buffers with (ZSTD, LZ4
# frame): every compressed buffer starts with one, after its 8-byte length.
_CODEC_MAGIC = (b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18")


def _compressed(body: bytes) -> bool:
    """Whether an Arrow body may hold compressed buffers, which can expand to gigabytes (a
    5 KB ZSTD body held 20 M rows): an ingest process may take and lose such a body, never
    the API. A plain body that merely contains a magic number is only slower."""
    return any(m in body for m in _CODEC_MAGIC)


class IngestUnavailable(RuntimeError):
    """The ingest process holding the body stopped: nothing of it was stored."""


@dataclass(frozen=True)
class Prepared:
    """A validated body: its chunk (None when no event is good), how many events it holds,
    the rejects (index and reason each, contract §5), the latest ``ts`` among the good."""

    chunk: bytes | None
    accepted: int
    rejects: list[dict]
    max_ts: float | None


def prepare(body: bytes, config: StreamConfig, max_future: float, media: str) -> Prepared:
    """Validate ``body`` (of content type ``media``) and encode its good events;
    ``BodyError`` when the body as a whole cannot be read."""
    if media == ARROW_STREAM:  # the fast path: columns in, columns checked
        batch = validate_arrow(body, config, max_future)
    else:
        batch = validate_ndjson_fast(body, config, max_future)
        if batch is None:  # irregular NDJSON or a JSON array: event by event, naming each bad one
            try:
                items = parse_body(body, None)
            except UnicodeDecodeError as e:
                raise BodyError(str(e)) from None
            batch = validate_events(items, config, max_future)
    n = len(batch)
    return Prepared(encode_chunk(batch.ts, batch.key, batch.value, batch.weight) if n else None, n,
                    [{"index": r.index, "error": r.error} for r in batch.rejects],
                    float(batch.ts.max()) if n else None)


def _warm(parent: int) -> None:
    exit_with_parent(parent)
    # Loads Arrow's JSON reader and IPC writer before the first body (the pool is ready
    # only then, so no post pays for it).
    config = StreamConfig(max_window=60.0)
    prepare(b'{"ts": 1, "key": "k"}\n', config, 600.0, "application/x-ndjson")


def _ready() -> bool:
    return True


class IngestPool:
    """The ingest processes of one API process (started with ``start``)."""

    def __init__(self, processes: int = 1, timeout: float = 120.0,
                 inline_arrow_bytes: int = INLINE_ARROW_BYTES):
        self.processes, self.timeout = processes, timeout
        self.inline_arrow_bytes = inline_arrow_bytes
        self._pool: ProcessPoolExecutor | None = None
        self._ready = threading.Event()  # the current pool's processes are up and warm
        self._starting = False
        self._closed = False
        self._lock = threading.Lock()

    def _start(self) -> None:
        """Start the processes and wait until each is warm (in the background: see
        ``start``)."""
        with self._lock:
            pool = self._pool = ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn"), initializer=_warm,
                initargs=(os.getpid(),))
        try:
            for future in [pool.submit(_ready) for _ in range(self.processes)]:
                future.result()
        except BrokenProcessPool:  # a process died starting: the next request tries again
            with self._lock:
                if self._pool is pool:
                    self._pool = None
                self._starting = False
            pool.shutdown(wait=False, cancel_futures=True)
            return
        with self._lock:
            if self._pool is pool:
                self._ready.set()
            self._starting = False

    def start(self) -> None:
        """Start the processes in the background (the API at start-up; a request after a
        pool broke); nothing when they are up or starting. Requests meanwhile validate in
        their own thread."""
        with self._lock:
            if self.processes < 1 or self._starting or self._closed or self._ready.is_set():
                return
            self._starting = True
        threading.Thread(target=self._start, name="tidemark-ingest-start", daemon=True).start()

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        """Stop a broken or stuck pool (its processes killed) and start another."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
                self._ready.clear()
        for process in list(getattr(pool, "_processes", {}).values()):  # a stuck one too
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        self.start()

    def prepare(self, body: bytes, config: StreamConfig, max_future: float, media: str) -> Prepared:
        """``prepare`` in an ingest process; the calling thread waits without the GIL.
        ``IngestUnavailable`` when the process stopped or was stuck past ``timeout``.
        A small Arrow body is validated here (see the module notes)."""
        if media == ARROW_STREAM and len(body) <= self.inline_arrow_bytes and not _compressed(body):
            return prepare(body, config, max_future, media)
        with self._lock:
            pool = self._pool if self._ready.is_set() else None
        if pool is None:
            self.start()  # nothing while one is starting
            if media == ARROW_STREAM and _compressed(body):
                # Compressed: never in the API's thread (a body that killed the process
                # would otherwise be validated here while it restarts).
                raise IngestUnavailable("the ingest processes are starting; nothing of this "
                                        "request was stored: retry it")
            return prepare(body, config, max_future, media)
        try:
            return pool.submit(prepare, body, config, max_future, media).result(self.timeout)
        except (BrokenProcessPool, FutureTimeout):
            pass
        except RuntimeError as e:  # submitted to a pool another request's failure shut down
            if "shutdown" not in str(e):
                raise
        self._discard(pool)
        raise IngestUnavailable("the ingest process stopped; nothing of this request was stored: "
                                "retry it")

    def pids(self) -> list[int]:
        """The process ids of the current pool (what tests kill)."""
        with self._lock:
            pool = self._pool
        return [p.pid for p in getattr(pool, "_processes", {}).values()] if pool else []

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
            self._ready.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
