"""A stream summary: the set of sketches that answers every query kind of one stream.

Each part is a sketch from ``sketches/`` fed from some of the event columns. Parts are
registered in ``PARTS``: a new query kind plugs in by adding its part here and its answer
in ``app/answers.py``. The worker keeps one summary per (stream, shard); the publisher
merges a stream's shard summaries part by part.

Byte layout (after the common 16-byte sketch header, family STREAM_SUMMARY)::

    u32 meta length | meta JSON | part blob 0 | part blob 1 | ...

``meta`` = {"config": StreamConfig, "secret" (fingerprint of the hash secret), "clock"
(largest event time, seconds, or null), "parts": [[name, length], ...], and "lost" when an
update failed (below)}; the part lengths must add up to the rest. Only parts that were built
are stored.

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
import struct
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from sketches.base import HEADER_SIZE, CorruptSketchError, Family, IncompatibleSketchError, pack_header, unpack_header
from sketches.hashing import hash_keys
from tidemark import limits
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.ticks import ticks_of
from tidemark.wire.records import read_config

__all__ = ["StreamSummary", "Columns", "PARTS", "PartSpec", "spec_of", "SummaryHead", "read_head"]


@dataclass
class Columns:
    """Event columns in the forms sketches take."""

    ticks: np.ndarray  # int64 ticks at the stream's resolution
    weight: np.ndarray  # float64 >= 0
    keyed: np.ndarray  # bool: the event has a key
    key_ids: np.ndarray  # uint64 ids of the keyed events
    keys: Sequence[str]  # the key strings of the keyed events (a list or an object array)
    valued: np.ndarray  # bool: the event has a value
    values: np.ndarray  # float64 values of the valued events


@dataclass(frozen=True)
class PartSpec:
    name: str  # the part's name; with per_decay, the prefix of one part per declared decay
    cls: Callable[[], type]  # the sketch class (imported lazily)
    build: Callable[[StreamConfig, int, str], object]  # (config, seed, part name) -> sketch
    feed: Callable[[object, Columns], None]
    wanted: Callable[[StreamConfig], bool] = lambda config: True
    # Does this batch hold anything for the part? (An absent part is built on first use.)
    fed_by: Callable[[Columns], bool] = lambda cols: len(cols.ticks) > 0
    per_decay: bool = False  # one part per relative decay (relative_decays), named below ``name``
    # The worst-case bytes of a part whose space follows the data (``max_nbytes()`` None:
    # no bound set by its parameters), from what its paper lets it keep on an orderly
    # stream; read by ``tidemark.capacity`` when a stream is declared.
    data_bound: Callable[[object, StreamConfig], float] | None = None

    def worst_bytes(self, part, config: StreamConfig) -> float:
        """The part's worst-case bytes under ``config``: its own bound where its parameters
        set one, else ``data_bound``, else its present size."""
        bound = part.max_nbytes()
        if bound is not None:
            return float(bound)
        if self.data_bound is not None:
            return float(self.data_bound(part, config))
        return float(part.nbytes) if hasattr(part, "nbytes") else 0.0

    def names(self, config: StreamConfig) -> list[str]:
        if not self.wanted(config):
            return []
        return list(relative_decays(config)) if self.per_decay else [self.name]

    def serves(self, name: str) -> bool:
        return name.startswith(self.name) if self.per_decay else name == self.name


def _splittable():
    from sketches.splittable_histogram import SplittableHistogram

    return SplittableHistogram


def _wave():
    from sketches.randomized_wave import RandomizedWave

    return RandomizedWave


def _ecm():
    from sketches.ecm import ECMSketch

    return ECMSketch


def _candidates():
    from sketches.key_dictionary import KeyDictionary

    return KeyDictionary


def _values():
    from sketches.windowed_quantiles import WindowedQuantiles

    return WindowedQuantiles


def _additive():
    from sketches.decayed import DecayedAdditiveSketch

    return DecayedAdditiveSketch


def _relative():
    from sketches.decayed import DecayedRelativeSketch

    return DecayedRelativeSketch


def candidate_k(epsilon: float) -> int:
    """Keys kept per time bucket: a key left out has ≤ (1+R)·N/(k+1) events, below φ·N
    for every φ ≥ ε/2 or so."""
    return min(65535, max(16, math.ceil(4 / epsilon)))


def relative_decays(config: StreamConfig) -> dict[str, dict]:
    """Part name -> decay spec (in ticks) of each declared decay that has a small
    relative-error sketch (§3.2): no decay, and polynomial decay at any resolution. The
    sketch's buckets follow ``(a + 1)^-α`` of ages ``a`` in ticks; answers evaluate the
    declared ``(age·res + 1)^-α`` of seconds on those buckets (app/kinds/decayed.py)."""
    out = {}
    for d in config.decays:
        if d.kind == "none":
            out["decayed-relative/none"] = {"kind": "none"}
        elif d.kind == "polynomial":
            out[f"decayed-relative/polynomial/{d.alpha:g}"] = {"kind": "polynomial", "alpha": d.alpha}
    return out


def _log_window(config: StreamConfig) -> int:
    return max(1, math.ceil(math.log2(config.window_ticks + 2)))


def _ecm_bound(part, config: StreamConfig) -> float:
    """ECM: one window counter of O(log W / ε_sw) buckets per cell."""
    return 16.0 * part.n_cells * (math.ceil(1 / part.eps_sw) + 1) * _log_window(config)


def _candidates_bound(part, config: StreamConfig) -> float:
    """Key dictionary: per time bucket, ``capacity`` keys of up to 256 bytes."""
    return (256.0 + 16) * part.capacity * _log_window(config) * 2


def _relative_bound(part, config: StreamConfig) -> float:
    """Weight-based merging histogram: O(log W / ε) buckets per cell."""
    return 32.0 * part.cells * (1 / config.epsilon) * _log_window(config) * 4


def _keyed(cols: Columns) -> bool:
    return bool(cols.keyed.any())


def _valued(cols: Columns) -> bool:
    return bool(cols.valued.any())


# Sketch windows are one tick longer than max_window: a window [at - max_window, at] whose
# ends fall inside ticks touches window_ticks + 1 of them. The count and sum histograms
# take every total ingest can send them (tidemark/limits.py): no accepted weight can make
# an update refuse.
_MAX_TOTAL = {"count": limits.COUNT_MAX_TOTAL, "sum": limits.SUM_MAX_TOTAL}
PARTS: tuple[PartSpec, ...] = (
    PartSpec("count", _splittable,
             lambda c, seed, name: _splittable()(c.epsilon, c.window_ticks + 1, _MAX_TOTAL["count"]),
             lambda sk, cols: sk.update(cols.ticks)),
    PartSpec("sum", _splittable,
             lambda c, seed, name: _splittable()(c.epsilon, c.window_ticks + 1, _MAX_TOTAL["sum"]),
             lambda sk, cols: sk.update(cols.ticks, cols.weight)),
    PartSpec("distinct", _wave,
             lambda c, seed, name: _wave()(c.epsilon, c.delta, c.window_ticks + 1, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids), fed_by=_keyed),
    PartSpec("keys", _ecm,
             lambda c, seed, name: _ecm()(c.epsilon, c.delta, c.window_ticks + 1, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids), fed_by=_keyed,
             data_bound=_ecm_bound),
    PartSpec("key_candidates", _candidates,
             lambda c, seed, name: _candidates()(candidate_k(c.epsilon), c.window_ticks + 1, c.epsilon),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.keys, cols.key_ids), fed_by=_keyed,
             data_bound=_candidates_bound),
    PartSpec("values", _values,
             lambda c, seed, name: _values()(c.epsilon, c.window_ticks + 1, c.value_accuracy),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values), fed_by=_valued),
    PartSpec("decayed", _additive,
             lambda c, seed, name: _additive()(c.epsilon, c.delta, c.value_min, c.value_max, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
             wanted=lambda c: c.has_values, fed_by=_valued),
    PartSpec("decayed-relative/", _relative,
             lambda c, seed, name: _relative()(c.epsilon, relative_decays(c)[name], c.value_min, c.value_max),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
             wanted=lambda c: c.has_values, fed_by=_valued, per_decay=True, data_bound=_relative_bound),
)


def spec_of(name: str) -> PartSpec | None:
    """The spec of a part name (one of ``PARTS``), None for a name no spec serves."""
    return next((p for p in PARTS if p.serves(name)), None)


def part_names(config: StreamConfig) -> list[str]:
    """The parts a stream of these settings has (each built when first needed)."""
    return [name for p in PARTS for name in p.names(config)]


_META = struct.Struct("<I")


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
        blobs = [(name, part.to_bytes()) for name, part in self.parts.items()]
        meta = json.dumps({
            "config": self.config.model_dump(),
            "secret": self.secret.fingerprint,
            "clock": self.clock_seconds,
            "parts": [[name, len(blob)] for name, blob in blobs],
            **({"lost": self.lost} if self.lost else {}),
        }).encode()
        payload = _META.pack(len(meta)) + meta + b"".join(blob for _, blob in blobs)
        return (pack_header(Family.STREAM_SUMMARY, len(payload), fmt=2) + payload,
                {name: len(blob) for name, blob in blobs})

    @classmethod
    def from_bytes(cls, data: bytes, secret: HashSecret) -> "StreamSummary":
        """Read a summary built under ``secret``; anything else is refused whole."""
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
            parts[name] = spec.cls().from_bytes(bytes(payload[offset : offset + length]))
            if name in _MAX_TOTAL:  # a blob written under the older, smaller cap takes the new one
                parts[name].raise_max_total(_MAX_TOTAL[name])
            offset += length
        return cls(config, secret, parts, clock, lost)

    def __repr__(self) -> str:
        return f"StreamSummary(parts={list(self.parts)}, clock={self.clock_seconds}, bytes={self.sizes()})"


@dataclass(frozen=True)
class SummaryHead:
    """What a summary blob's head says: its meta (settings, secret fingerprint, clock,
    parts, what was lost), where the first part begins, and each part's name and length
    in order."""

    meta: dict
    parts_at: int
    layout: list


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
    return SummaryHead(meta, start, layout)


def warm_up() -> tuple[StreamConfig, "StreamSummary"]:
    """Compile (or load from Numba's cache) every kernel a worker's update runs; returns the
    tiny stream it built (its settings and its summary, written, read back and pickled as
    the API's decoder hands it over), which the API answers once to load the query kernels
    too (``app.warm``).

    Kernels are compiled with ``cache=True``: the first process writes the cache and every
    later one (each Spark Python worker) loads it instead of compiling during a batch."""
    import pickle

    from tidemark.chunks import decode_chunk, encode_chunk
    from tidemark.hash_secret import HashSecret

    config = StreamConfig(max_window=60.0, value_min=0.0, value_max=10.0,
                          decays=[{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}])
    secret = HashSecret(b"tidemark-warm-up-secret")
    summary = StreamSummary.create(config, secret)
    ts = np.array([1.0, 2.5, 2.0])
    summary.update_table(decode_chunk(encode_chunk(ts, ["a", "b", None], np.array([1.0, 2.0, np.nan]),
                                                   np.ones(3))))
    back = StreamSummary.from_bytes(summary.to_bytes(), secret)
    return config, pickle.loads(pickle.dumps(back))
