"""Where a sketch's bytes are cut into pages that each depend only on what they hold.

A family that keeps an ordered list of records (quantile nodes, samples, bucket rows)
writes them in pages: a page begins before record ``i`` when a hash of the record's
identity (what the record *is*: its place in time, its level, never its counts) is 0
modulo ``every``. This is content-defined chunking (LBFS's rolling-hash cut points,
Muthitacharoen, Chen & Mazières, SOSP 2001, §3.1) on records instead of bytes: a
record added, changed or dropped changes the bytes of its own page only (and, when it
is itself a cut point, the page before), wherever it is, so a batch that touches few
records rewrites few pages and the others keep their bytes and their digests
(``tidemark.segments``).

Smaller pages send fewer bytes a batch, but every page is a segment to frame, digest and
name in the manifest. Measured on a stream holding its hour at 100 events/s with every
part (``bench/bench_batch_bytes.py``; the worker's Python CPU per group update with its
publish, previous layout 24.6–24.9 ms): a candidate every 32 records (at least 16) sends
19 % of the summary a batch at 30.4 ms, every 64 (32) 22 % at 27.8 ms, every 128 (64)
28 % at 26.2 ms. The middle is ``PAGE_RECORDS``.

A cut point less than ``PAGE_MIN`` records after the cut point before it is skipped
(FastCDC's minimum chunk, Xia et al., USENIX ATC 2016, §3, made stateless: it looks at the
previous *candidate*, not the previous page), so every page but the last holds at least
``PAGE_MIN`` records whatever the hashes: a family's worst-case bytes count at most
``n // PAGE_MIN + 1`` pages' overhead, and a cut still depends only on its record and the
candidate before it.

Tested by: tests/sketches/test_pages.py
"""

from __future__ import annotations

import numpy as np

__all__ = ["page_starts", "starts_at", "page_stops", "page_bytes", "cut_candidates", "mix64",
           "PAGE_RECORDS", "PAGE_MIN"]

PAGE_RECORDS = 64  # records per page on average (a cut candidate every 64)
PAGE_MIN = 32  # records per page at least (but the last)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea & Flood, OOPSLA 2014): every input bit moves
    every output bit, so cut points fall evenly whatever the records' spacing."""
    x = np.asarray(x).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def cut_candidates(ident: np.ndarray, every: int = PAGE_RECORDS) -> np.ndarray:
    """Which records are cut candidates: their identity hashes to 0 modulo ``every``."""
    return (mix64(ident) % np.uint64(every)) == 0


def page_starts(ident: np.ndarray, may_cut: np.ndarray | None = None, every: int = PAGE_RECORDS,
                least: int = PAGE_MIN) -> np.ndarray:
    """Index of each page's first record among ``len(ident)`` records: 0, then every
    candidate ``i`` — its identity hashes to 0 modulo ``every`` (and, with ``may_cut``,
    it allows a cut) — that lies at least ``least`` records after the candidate before it
    (or after 0). Empty for no records."""
    if len(ident) == 0:
        return np.zeros(0, np.int64)
    cut = cut_candidates(ident, every)
    if may_cut is not None:
        cut &= may_cut
    return starts_at(cut, least)


def starts_at(cut: np.ndarray, least: int = PAGE_MIN) -> np.ndarray:
    """``page_starts`` from each record's candidacy (``cut``), for a family that keeps
    its records' hashes between encodes."""
    if len(cut) == 0:
        return np.zeros(0, np.int64)
    candidates = np.flatnonzero(cut).astype(np.int64)
    gaps = np.diff(candidates, prepend=0)
    return np.concatenate(([0], candidates[(gaps >= least) & (candidates > 0)]))


def page_stops(starts: np.ndarray, n: int) -> np.ndarray:
    """Where each page of ``n`` records ends: the next page's start, ``n`` for the last."""
    return np.append(starts[1:], n).astype(np.int64) if starts.size else starts


def page_bytes(buf: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """The pages a family's compiled writer put one after another in ``buf`` (a uint8
    array), cut at ``ends`` (each page's end)."""
    raw, edges = buf.tobytes(), [0] + ends.tolist()
    return [raw[a:b] for a, b in zip(edges, edges[1:])]
