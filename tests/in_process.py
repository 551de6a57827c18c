"""Tidemark's whole path in one process, below Spark and Redis: ingest validation, the
chunks the API appends (each with the stream's clock before it), the worker's pure update
of each shard in any batching, the publisher's merge and the answers — with the exact
oracle the answers must bracket.

The oracle applies the contract's rules in exact rationals, one event at a time in ingest
order: an event is late when ``clock − ts > max_window`` (clock = the largest ``ts``
accepted before it), and a kept event counts in a window when ``at − window <= ts <= at``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from tests.conftest import TEST_SECRET
from tidemark.chunks import encode_chunk
from tidemark.events import validate_events
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.update import Chunk, update_shard


@dataclass
class Run:
    config: StreamConfig
    summary: StreamSummary | None = None
    events: int = 0
    late_dropped: int = 0
    accepted: list = field(default_factory=list)  # (ts, weight, value) in ingest order
    rejects: list = field(default_factory=list)  # (request, index, reason)

    @property
    def clock(self) -> float | None:
        return self.summary.clock_seconds if self.summary is not None else None

    def status(self) -> dict:
        return {"clock": self.clock, "sketch_version": 1, "updated_at": "t", "events": self.events,
                "late_dropped": self.late_dropped}

    # -- the exact oracle ------------------------------------------------------------------
    def kept(self) -> list[tuple[float, float, float]]:
        """The accepted events the contract's late rule keeps, decided exactly."""
        clock, out = None, []
        for ts, w, v in self.accepted:
            if clock is None or Fraction(clock) - Fraction(ts) <= Fraction(self.config.max_window):
                out.append((ts, w, v))
            clock = ts if clock is None else max(clock, ts)
        return out

    def truth(self, window: float, at: float) -> tuple[int, Fraction]:
        """(count, exact sum of weights) of the kept events in ``[at − window, at]``."""
        lo, hi = Fraction(at) - Fraction(window), Fraction(at)
        inside = [(t, w) for t, w, _ in self.kept() if lo <= Fraction(t) <= hi]
        return len(inside), sum((Fraction(w) for _, w in inside), Fraction(0))


def run(config: StreamConfig, requests: list[list[dict]], owner: list[int], cuts: list[int],
        shards: int, merge_order: list[int] | None = None) -> Run:
    """Ingest ``requests`` (lists of event objects), give request ``i`` to shard
    ``owner[i]``, update each shard in batches of ``cuts`` chunks (cycled), merge the shards
    in ``merge_order``. An update that raises fails the test (an accepted event lost)."""
    out = Run(config)
    chunks: list[tuple[int, Chunk]] = []
    clock = -math.inf
    for r, items in enumerate(requests):
        batch = validate_events(items, config)
        out.rejects += [(r, j.index, j.error) for j in batch.rejects]
        if not len(batch):
            continue
        out.accepted += list(zip(batch.ts.tolist(), batch.weight.tolist(), batch.value.tolist()))
        payload = encode_chunk(batch.ts, batch.key, batch.value, batch.weight)
        chunks.append((owner[r % len(owner)] % shards, Chunk(payload, clock)))
        clock = max(clock, float(batch.ts.max()))
    parts = []
    for shard in range(shards):
        mine = [c for s, c in chunks if s == shard]
        blob, i = None, 0
        while mine:
            cut = max(1, cuts[i % len(cuts)])
            i += 1
            result = update_shard(blob, config, TEST_SECRET, mine[:cut])
            blob, mine = result.blob, mine[cut:]
            out.events += result.events
            out.late_dropped += result.late_dropped
        if blob is not None:
            parts.append(StreamSummary.from_bytes(blob, TEST_SECRET))
    order = merge_order or list(range(len(parts)))
    for j in sorted(range(len(parts)), key=lambda j: order[j % len(order)]):
        out.summary = parts[j] if out.summary is None else out.summary.merge(parts[j])
    return out


def uniform_events(ts, weights=None, values=None, keys=None) -> list[dict]:
    out = []
    for i, t in enumerate(ts):
        e = {"ts": t}
        if weights is not None:
            e["weight"] = weights[i]
        if values is not None:
            e["value"] = values[i]
        if keys is not None:
            e["key"] = keys[i]
        out.append(e)
    return out


def as_floats(xs) -> np.ndarray:
    return np.asarray(xs, dtype=np.float64)
