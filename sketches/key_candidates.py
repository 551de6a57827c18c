"""Candidate heavy keys per time pane, with their original strings, in bounded memory.

Each pane keeps a Misra–Gries summary of ``k`` keys (Misra & Gries 1982; mergeable as in
Agarwal et al. 2012): a key with more than ``n_p/(k+1)`` of the ``n_p`` events of pane p
is always among that pane's keys. A key with frequency ≥ φ·N in a window made of whole
panes has at least a φ share of some pane of it (if it had less in every pane, it would
have less than φ·N in all), so with ``k + 1 > 1/φ`` every φ-heavy key of the window is
a candidate of some pane the window touches. Heavy hitters are then the candidates whose
ECM-sketch frequency bounds reach φ·N: the strings come from here, the bounds from the
ECM-sketch.

Batches are aggregated per (pane, key) with pandas before entering the summaries, so the
Python-level work is per distinct key of a pane, bounded by ``2k`` after each merge.

Byte layout (after the common header)::

    i64 window | u32 panes | u32 k | u32 slots | slots × (i64 pane id | u32 entries |
    entries × (u16 key length | key UTF-8 | f64 count))
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pandas as pd

from sketches.base import CorruptSketchError, Family, IncompatibleSketchError, SketchError, pack_header, unpack_header

__all__ = ["KeyCandidates"]

_HEAD = struct.Struct("<qIII")


def _mg_merge(a: dict, b: dict, k: int) -> dict:
    """Merge two Misra–Gries summaries of size k (Agarwal et al. 2012, §3)."""
    merged = dict(a)
    for key, c in b.items():
        merged[key] = merged.get(key, 0.0) + c
    if len(merged) <= k:
        return merged
    cut = sorted(merged.values(), reverse=True)[k]
    return {key: c - cut for key, c in merged.items() if c - cut > 0}


class KeyCandidates:
    def __init__(self, window: int, panes: int, k: int):
        if window < 1 or panes < 1 or k < 1:
            raise SketchError("key candidates need a positive window, pane count and k")
        self.window, self.panes, self.k = int(window), int(panes), int(k)
        self.width = int(math.ceil(self.window / self.panes))
        self.slots = self.panes + 1
        self.summaries: dict[int, dict[str, float]] = {}  # pane id -> {key: count}

    def update(self, ticks: np.ndarray, keys: list) -> None:
        if len(keys) == 0:
            return
        panes = np.asarray(ticks, np.int64) // self.width
        counts = pd.DataFrame({"p": panes, "k": keys}).groupby(["p", "k"], sort=False).size()
        for pane, group in counts.groupby(level=0, sort=False):
            batch = dict(zip(group.index.get_level_values(1), group.to_numpy(np.float64)))
            if len(batch) > self.k:  # the exact batch summary, cut to k like any other
                batch = _mg_merge({}, batch, self.k)
            self.summaries[int(pane)] = _mg_merge(self.summaries.get(int(pane), {}), batch, self.k)
        self._expire()

    def _expire(self) -> None:
        if self.summaries:
            newest = max(self.summaries)
            for pane in [p for p in self.summaries if p <= newest - self.slots]:
                del self.summaries[pane]

    def candidates(self, lo: int, hi: int, events_touching: float) -> tuple[set[str], float]:
        """Keys of every pane touching ticks ``[lo, hi]``, and the most events in the range
        that any *other* key can have: ``events_touching / (k + 1)`` (a key missing from a
        pane's summary has at most ``n_p/(k+1)`` events there, summed over the panes)."""
        out: set[str] = set()
        for pane, summary in self.summaries.items():
            if pane * self.width <= hi and (pane + 1) * self.width - 1 >= lo:
                out.update(summary)
        return out, events_touching / (self.k + 1)

    def merge(self, other: "KeyCandidates") -> "KeyCandidates":
        if other is self:
            raise IncompatibleSketchError("cannot merge a sketch with itself")
        if not isinstance(other, KeyCandidates) or (other.window, other.panes, other.k) != (self.window, self.panes, self.k):
            raise IncompatibleSketchError("cannot merge key candidates with different parameters")
        for pane, summary in other.summaries.items():
            self.summaries[pane] = _mg_merge(self.summaries.get(pane, {}), summary, self.k)
        self._expire()
        return self

    @property
    def is_empty(self) -> bool:
        return not self.summaries

    def copy(self) -> "KeyCandidates":
        return KeyCandidates.from_bytes(self.to_bytes())

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())

    def __repr__(self) -> str:
        return f"KeyCandidates(k={self.k}, panes={self.panes}, kept={sum(map(len, self.summaries.values()))})"

    def to_bytes(self) -> bytes:
        out = [_HEAD.pack(self.window, self.panes, self.k, len(self.summaries))]
        for pane, summary in sorted(self.summaries.items()):
            out.append(struct.pack("<qI", pane, len(summary)))
            for key, count in summary.items():
                raw = key.encode()
                out.append(struct.pack("<H", len(raw)) + raw + struct.pack("<d", count))
        payload = b"".join(out)
        return pack_header(Family.KEY_CANDIDATES, len(payload)) + payload

    @classmethod
    def from_bytes(cls, data) -> "KeyCandidates":
        _, payload = unpack_header(data, Family.KEY_CANDIDATES)
        payload = bytes(payload)
        try:
            window, panes, k, slots = _HEAD.unpack_from(payload)
            if not (1 <= window <= 2**40 and 1 <= panes <= 100_000 and 1 <= k <= 1 << 20 and slots <= panes + 1):
                raise CorruptSketchError("key candidates parameters out of range")
            kc = cls(window, panes, k)
            pos = _HEAD.size
            for _ in range(slots):
                pane, entries = struct.unpack_from("<qI", payload, pos)
                pos += 12
                if entries > k:
                    raise CorruptSketchError("key candidates pane holds more than k keys")
                summary = {}
                for _ in range(entries):
                    (n,) = struct.unpack_from("<H", payload, pos)
                    if pos + 2 + n + 8 > len(payload):
                        raise CorruptSketchError("key candidates truncated")
                    key = payload[pos + 2 : pos + 2 + n].decode()
                    (count,) = struct.unpack_from("<d", payload, pos + 2 + n)
                    if not (math.isfinite(count) and count > 0):
                        raise CorruptSketchError("key candidates count is not valid")
                    summary[key] = count
                    pos += 2 + n + 8
                kc.summaries[pane] = summary
        except (struct.error, UnicodeDecodeError):
            raise CorruptSketchError("key candidates truncated or not UTF-8") from None
        if pos != len(payload):
            raise CorruptSketchError("trailing bytes after key candidates")
        return kc
