"""A stream summary: the set of sketches that answers every query kind of one stream.

Each part is a sketch from ``sketches/`` fed from some of the event columns. The parts
are declared by the query families (``tidemark/families/``, one module a family, listed
in its registry) and gathered here in ``PARTS``, in the registry's order. The worker
keeps one summary per (stream, shard); the publisher merges a stream's shard summaries
part by part.

Byte layout (after the common 16-byte sketch header, family STREAM_SUMMARY)::

    u32 meta length | meta JSON | part blob 0 | part blob 1 | ...

``meta`` = {"config": StreamConfig, "secret" (fingerprint of the hash secret), "clock"
(largest event time, seconds, or null), "parts": [[name, length], ...], "cuts" when a part
writes its bytes in pages ({name: [length of each piece, ...]}: ``Sketch.pieces``, where
``tidemark.segments`` cuts the blob), and "lost" when an update failed (below)}; the part
lengths must add up to the rest, a paged part's pieces to its length. Only parts that were
built are stored.

**Lost events.** Ingest's limits and the sketches' capacities agree (``tidemark/limits.py``),
so no accepted event should ever fail an update. Should one still fail (a bug, a corrupt
chunk), the worker keeps the shard's sketches as they were and records what they miss in
``lost`` = {"events", "weight", "ts_min", "ts_max", "why"}; merges add the records up, and an
answer whose window may hold one of those events says it is incomplete
(``app/answers.py``) instead of claiming a bracket that leaves them out.

Tested by: tests/tidemark/test_summary.py (the stored form), tests/tidemark/test_summary_columns.py, tests/sketches/test_compact_bytes.py,
tests/sketches/test_compiled_codec.py, tests/tidemark/test_segments.py.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from typing import Collection

import numpy as np
import pyarrow as pa

from sketches.base import HEADER_SIZE, CorruptSketchError, Family, IncompatibleSketchError, pack_header, unpack_header
from sketches.hashing import hash_keys
from tidemark.families import PARTS, part_names, spec_of  # the registry's, kept importable here
from tidemark.families.decayed import relative_decays
from tidemark.families.keyed import candidate_k
from tidemark.families.parts import Columns, PartSpec
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.ticks import ticks_of
from tidemark.wire.records import read_config

__all__ = ["StreamSummary", "Columns", "PARTS", "PartSpec", "spec_of", "part_names", "relative_decays",
           "candidate_k", "SummaryHead", "read_head", "HEAD_SEGMENT", "segment_name"]


_META = struct.Struct("<I")
HEAD_SEGMENT = "_head"  # the head's name among a blob's segments (``tidemark.segments``)


def segment_name(part: str, page: int) -> str:
    """A part's ``page``-th piece among a blob's segments: the part's name, then ``part@1``,
    ``part@2``, ... (``tidemark.segments.split`` and ``encode_segments`` name them so)."""
    return f"{part}@{page}" if page else part


def _add_lost(a: dict | None, b: dict | None) -> dict | None:
    """Two lost-event records as one (module notes)."""
    if not a or not b:
        return dict(a or b) if (a or b) else None
    return {"events": a["events"] + b["events"], "weight": a["weight"] + b["weight"],
            "ts_min": min(a["ts_min"], b["ts_min"]), "ts_max": max(a["ts_max"], b["ts_max"]),
            "why": b["why"] if b["why"] == a["why"] else f"{a['why']}; {b['why']}"[:300]}


def _read_lost(raw) -> dict | None:
    if raw is None:
        return None
    out = {"events": int(raw["events"]), "weight": float(raw["weight"]),
           "ts_min": float(raw["ts_min"]), "ts_max": float(raw["ts_max"]), "why": str(raw["why"])}
    if out["events"] < 0 or not all(math.isfinite(out[k]) for k in ("weight", "ts_min", "ts_max")):
        raise ValueError("lost-event record out of range")
    return out


class StreamSummary:
    """All sketches of one stream, updated together, merged and serialized together.

    Parts are built when first fed (or first asked for), so a declared stream that has
    seen no events, or no keys, or no values, stores nothing for them.
    """

    def __init__(self, config: StreamConfig, secret: HashSecret, parts: dict | None = None,
                 clock: float | None = None, lost: dict | None = None):
        self.config = config
        self.secret = secret
        self.names = part_names(config)
        self.parts = dict(parts or {})
        self.clock_seconds = clock
        self.lost = lost  # events an update failed to take (module notes), or None

    def record_lost(self, events: int, weight: float, ts_min: float, ts_max: float, why: str) -> None:
        """Note events that were accepted but are not in the sketches."""
        self.lost = _add_lost(self.lost, {"events": int(events), "weight": float(weight),
                                          "ts_min": float(ts_min), "ts_max": float(ts_max),
                                          "why": str(why)[:300]})

    @property
    def seed(self) -> int:
        return self.secret.seed

    @classmethod
    def create(cls, config: StreamConfig, secret: HashSecret) -> "StreamSummary":
        return cls(config, secret)

    def _build(self, name: str):
        return spec_of(name).build(self.config, self.seed, name)

    def build_all(self) -> "StreamSummary":
        """Build every part now (a declaration check: sketches refuse sizes they cannot take)."""
        for name in self.names:
            self[name]
        return self

    def __getitem__(self, name: str):
        part = self.parts.get(name)
        if part is None:
            if name not in self.names:
                raise KeyError(name)
            part = self.parts[name] = self._build(name)
        return part

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def key_ids(self, keys) -> np.ndarray:
        """The ids under which this summary's sketches know ``keys``."""
        return hash_keys(keys, self.secret.key_hash_key)

    def key_id(self, key: str) -> int:
        """The id of one key, kept (an answer over time asks the same key at every instant)."""
        kept = self.__dict__.setdefault("_key_id", {})
        got = kept.get(key)
        if got is None:
            if len(kept) >= 1024:
                kept.clear()
            got = kept[key] = int(self.key_ids([key])[0])
        return got

    # -- updates --------------------------------------------------------------------------
    def columns(self, table: pa.Table) -> Columns:
        ts = table.column("ts").to_numpy()
        key_col = table.column("key")
        if key_col.null_count == 0:  # the usual chunk: every event keyed, no filtering
            keyed = np.ones(table.num_rows, bool)
            keys = key_col.to_numpy(zero_copy_only=False)  # object array: hashed as it is
        else:
            keyed = ~np.asarray(key_col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            keys = key_col.filter(pa.array(keyed)).to_pylist() if keyed.any() else []
        values = table.column("value").to_numpy(zero_copy_only=False)
        valued = ~np.isnan(values)
        return Columns(
            ticks=ticks_of(ts, self.config.resolution),  # exact floor(ts / res): tidemark/ticks.py
            weight=table.column("weight").to_numpy(),
            keyed=keyed,
            key_ids=self.key_ids(keys),
            keys=keys,
            valued=valued,
            values=values[valued],
        )

    def update_table(self, table: pa.Table) -> None:
        """Insert every event of ``table`` (columns ts, key, value, weight)."""
        if table.num_rows == 0:
            return
        cols = self.columns(table)
        for name in self.names:
            spec = spec_of(name)
            if name in self.parts or spec.fed_by(cols):
                spec.feed(self[name], cols)
        top = float(np.max(table.column("ts").to_numpy()))
        self.clock_seconds = top if self.clock_seconds is None else max(self.clock_seconds, top)

    # -- merging ----------------------------------------------------------------------------
    def merge(self, other: "StreamSummary") -> "StreamSummary":
        if other is self:
            raise IncompatibleSketchError("cannot merge a stream summary with itself")
        if other.config != self.config or other.secret != self.secret:
            raise IncompatibleSketchError("cannot merge summaries of differently configured streams")
        for name, part in other.parts.items():
            self[name].merge(part)
        if other.clock_seconds is not None:
            self.clock_seconds = (other.clock_seconds if self.clock_seconds is None
                                  else max(self.clock_seconds, other.clock_seconds))
        self.lost = _add_lost(self.lost, other.lost)
        return self

    # -- bytes ---------------------------------------------------------------------------------
    def sizes(self) -> dict[str, int]:
        return {name: int(part.nbytes) for name, part in self.parts.items()}

    def to_bytes(self) -> bytes:
        return self.encode()[0]

    def encode(self) -> tuple[bytes, dict[str, int]]:
        """The blob and ``sizes()`` from one serialization of each part (the worker needs
        both every batch; serializing twice was a third of a small shard's update)."""
        pieces, sizes = self.encode_segments()
        return b"".join(b for _, b in pieces), sizes

    def encode_segments(self) -> tuple[list[tuple[str, bytes]], dict[str, int]]:
        """The blob already cut as ``tidemark.segments.split`` cuts it (``[("_head", ...),
        (part, ...), (part@1, ...), ...]``; joined, they are ``to_bytes()``) and ``sizes()``:
        what the worker stores and publishes, without joining the blob to cut it again."""
        pieces = {name: part.pieces() for name, part in self.parts.items()}
        lengths = {name: sum(map(len, p)) for name, p in pieces.items()}
        cuts = {name: [len(b) for b in p] for name, p in pieces.items() if len(p) > 1}
        meta = json.dumps({
            "config": self.config.model_dump(),
            "secret": self.secret.fingerprint,
            "clock": self.clock_seconds,
            "parts": [[name, n] for name, n in lengths.items()],
            **({"cuts": cuts} if cuts else {}),
            **({"lost": self.lost} if self.lost else {}),
        }).encode()
        size = _META.size + len(meta) + sum(lengths.values())
        out = [(HEAD_SEGMENT, pack_header(Family.STREAM_SUMMARY, size, fmt=2) + _META.pack(len(meta)) + meta)]
        for name, p in pieces.items():
            out += [(segment_name(name, j), b) for j, b in enumerate(p)]
        return out, lengths

    @classmethod
    def from_bytes(cls, data: bytes, secret: HashSecret, *, resume: bool = False) -> "StreamSummary":
        """Read a summary built under ``secret``; anything else is refused whole. ``resume``:
        the worker reads it to update it and write it again (``Sketch.from_bytes``)."""
        head = read_head(data)
        payload, offset, layout = memoryview(data), head.parts_at, head.layout
        try:
            meta = head.meta
            if not isinstance(meta["config"], dict):  # written as an object, never as text
                raise TypeError("config is not an object")
            config = read_config(meta["config"])
            fingerprint = str(meta["secret"])
            clock = meta["clock"]
            lost = _read_lost(meta.get("lost"))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptSketchError(f"stream summary metadata unreadable: {e}") from None
        if fingerprint != secret.fingerprint:
            raise IncompatibleSketchError(
                "stream summary was built under another hash secret (fingerprint "
                f"{fingerprint}, this deployment's is {secret.fingerprint})")
        if clock is not None and not (isinstance(clock, (int, float)) and math.isfinite(clock)):
            raise CorruptSketchError("stream summary clock is not a finite number")
        names = set(part_names(config))
        parts = {}
        for name, length in layout:
            spec = spec_of(name)
            if spec is None or name not in names or name in parts:
                raise CorruptSketchError(f"stream summary has an unexpected part {name!r}")
            parts[name] = spec.cls.from_bytes(bytes(payload[offset : offset + length]), resume=resume)
            if spec.after_read is not None:  # e.g. a blob written under an older, smaller cap
                spec.after_read(parts[name])
            offset += length
        return cls(config, secret, parts, clock, lost)

    def __repr__(self) -> str:
        return f"StreamSummary(parts={list(self.parts)}, clock={self.clock_seconds}, bytes={self.sizes()})"


@dataclass(frozen=True)
class SummaryHead:
    """What a summary blob's head says: its meta (settings, secret fingerprint, clock,
    parts, what was lost), where the first part begins, each part's name and length in
    order, and a paged part's piece lengths (``cuts``: part -> [length, ...],
    ``Sketch.pieces``)."""

    meta: dict
    parts_at: int
    layout: list
    cuts: dict


def read_head(data) -> SummaryHead:
    """The one reader of a summary blob's head (header, meta length, meta, part layout),
    checked: the parts' lengths add up to the blob's. ``StreamSummary.from_bytes`` and
    ``tidemark.segments.split`` read through it. Raises :class:`CorruptSketchError`."""
    _, payload = unpack_header(data, Family.STREAM_SUMMARY, fmt=2)
    if len(payload) < _META.size:
        raise CorruptSketchError("stream summary truncated")
    (n,) = _META.unpack_from(payload)
    try:
        meta = json.loads(bytes(payload[_META.size : _META.size + n]))
        layout = [(str(name), int(length)) for name, length in meta["parts"]]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptSketchError(f"stream summary metadata unreadable: {e}") from None
    if not isinstance(meta, dict):
        raise CorruptSketchError("stream summary metadata is not an object")
    start = HEADER_SIZE + _META.size + n
    if any(length < 0 for _, length in layout) or start + sum(l for _, l in layout) != len(data):
        raise CorruptSketchError("stream summary part lengths do not match its size")
    return SummaryHead(meta, start, layout, _read_cuts(meta.get("cuts", {}), dict(layout)))


def _read_cuts(raw, lengths: dict) -> dict:
    """A paged part's piece lengths (``Sketch.pieces``), checked: they add up to the part's."""
    try:
        cuts = {str(name): [int(length) for length in pieces] for name, pieces in raw.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise CorruptSketchError(f"stream summary piece layout unreadable: {e}") from None
    for name, pieces in cuts.items():
        if name not in lengths or not pieces or min(pieces) < 0 or sum(pieces) != lengths[name]:
            raise CorruptSketchError(f"stream summary pieces of {name!r} do not match the part")
    return cuts


def warm_up(classes: Collection[str] | None = None) -> tuple[StreamConfig, "StreamSummary"]:
    """Compile (or load from Numba's cache) every kernel a worker's update runs; returns the
    tiny stream it built (its settings and its summary, written, read back and pickled as
    the API's decoder hands it over), which the API answers once to load the query kernels
    too (``app.warm``). ``classes``: only the parts of these sketch classes (by name), as
    :func:`warm_up_in_parallel` hands them out.

    Kernels are compiled with ``cache=True``: the first process writes the cache and every
    later one (each Spark Python worker) loads it instead of compiling during a batch."""
    import pickle

    from tidemark.chunks import decode_chunk, encode_chunk

    config, secret = _warm_up_stream()
    summary = StreamSummary.create(config, secret)
    ts = np.array([1.0, 2.5, 2.0])
    blob = b""
    for shift in (0.0, 1.0):  # twice: the second encode builds on the first (the worker's)
        batch = decode_chunk(encode_chunk(ts + shift, ["a", "b", None], np.array([1.0, 2.0, np.nan]), np.ones(3)))
        if classes is None:
            summary.update_table(batch)
        else:
            cols = summary.columns(batch)
            for name in summary.names:
                if spec_of(name).cls.__name__ in classes:
                    spec_of(name).feed(summary[name], cols)
        blob = summary.to_bytes()
    back = StreamSummary.from_bytes(blob, secret)
    return config, pickle.loads(pickle.dumps(back))


def warm_up_in_parallel(jobs: int | None = None, also=()) -> None:
    """:func:`warm_up` with each sketch class's kernels compiled in one of ``jobs``
    processes (default: one per core). Compiling is single-threaded LLVM work, about a
    minute for every kernel on one core; the classes share almost nothing, so two cores
    halve it. A class's kernels stay in one process, which compiles them once. ``also``:
    more warm-ups (functions of no argument, importable by name) run as jobs of the same
    pool, after the classes (``app.warm.warm_install``)."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    config, _ = _warm_up_stream()
    classes = list(dict.fromkeys(spec_of(name).cls.__name__ for name in part_names(config)))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(classes)))
    if jobs == 1:
        warm_up()
        for warm in also:
            warm()
        return
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        for done in [pool.submit(_warm_up_classes, [c]) for c in classes] + [pool.submit(w) for w in also]:
            done.result()  # a failure is raised here, with its traceback


def _warm_up_classes(classes: list[str]) -> None:
    warm_up(classes)  # and return nothing: the summary it builds need not travel back


def _warm_up_stream() -> tuple[StreamConfig, HashSecret]:
    config = StreamConfig(max_window=60.0, value_min=0.0, value_max=10.0,
                          decays=[{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}])
    return config, HashSecret(b"tidemark-warm-up-secret")
