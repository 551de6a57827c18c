"""A stream summary: the set of sketches that answers every query kind of one stream.

Each part is a sketch from ``sketches/`` fed from some of the event columns. Parts are
registered in ``PARTS``: a new query kind plugs in by adding its part here and its answer
in ``app/answers.py``. The worker keeps one summary per (stream, shard); the publisher
merges a stream's shard summaries part by part.

Byte layout (after the common 16-byte sketch header, family STREAM_SUMMARY)::

    u32 meta length | meta JSON | part blob 0 | part blob 1 | ...

``meta`` = {"config": StreamConfig, "seed", "clock" (largest event time, seconds, or
null), "parts": [[name, length], ...]}; the part lengths must add up to the rest.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from sketches.base import CorruptSketchError, Family, IncompatibleSketchError, pack_header, unpack_header
from sketches.hashing import hash_keys
from tidemark.streams import StreamConfig
from tidemark.ticks import ticks_of

__all__ = ["StreamSummary", "Columns", "PARTS"]


@dataclass
class Columns:
    """Event columns in the forms sketches take."""

    ticks: np.ndarray  # int64 ticks at the stream's resolution
    weight: np.ndarray  # float64 >= 0
    keyed: np.ndarray  # bool: the event has a key
    key_ids: np.ndarray  # uint64 ids of the keyed events
    keys: list  # the key strings of the keyed events
    valued: np.ndarray  # bool: the event has a value
    values: np.ndarray  # float64 values of the valued events


@dataclass(frozen=True)
class PartSpec:
    name: str
    cls: Callable[[], type]  # the sketch class (imported lazily)
    build: Callable[[StreamConfig, int], object]
    feed: Callable[[object, Columns], None]
    wanted: Callable[[StreamConfig], bool] = lambda config: True


def _splittable():
    from sketches.splittable_histogram import SplittableHistogram

    return SplittableHistogram


# Sketch windows are one tick longer than max_window: a window [at - max_window, at] whose
# ends fall inside ticks touches window_ticks + 1 of them.
PARTS: list[PartSpec] = [
    PartSpec(
        "count",
        _splittable,
        lambda c, seed: _splittable()(c.epsilon, c.window_ticks + 1),
        lambda sk, cols: sk.update(cols.ticks),
    ),
    PartSpec(
        "sum",
        _splittable,
        lambda c, seed: _splittable()(c.epsilon, c.window_ticks + 1),
        lambda sk, cols: sk.update(cols.ticks, cols.weight),
    ),
]


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
    from sketches.value_histogram import ValueHistogram

    return ValueHistogram


VALUE_BINS = 1024  # value resolution of quantiles: (value_max - value_min) / 1024


def candidate_k(epsilon: float) -> int:
    """Keys kept per time bucket: a key left out has ≤ (1+R)·N/(k+1) events, below φ·N
    for every φ ≥ ε/2 or so."""
    return min(65535, max(16, math.ceil(4 / epsilon)))


PARTS += [
    PartSpec(
        "distinct",
        _wave,
        lambda c, seed: _wave()(c.epsilon, c.delta, c.window_ticks + 1, seed),
        lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids),
    ),
    PartSpec(
        "keys",
        _ecm,
        lambda c, seed: _ecm()(c.epsilon, c.delta, c.window_ticks + 1, seed),
        lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids),
    ),
    PartSpec(
        "key_candidates",
        _candidates,
        lambda c, seed: _candidates()(candidate_k(c.epsilon), c.window_ticks + 1, c.epsilon),
        lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.keys, cols.key_ids),
    ),
    PartSpec(
        "values",
        _values,
        lambda c, seed: _values()(c.value_min, c.value_max, c.window_ticks + 1, math.ceil(2 / c.epsilon),
                                  VALUE_BINS),
        lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values),
        wanted=lambda c: c.has_values,
    ),
]


def _additive():
    from sketches.decayed import DecayedAdditiveSketch

    return DecayedAdditiveSketch


def _relative():
    from sketches.decayed import DecayedRelativeSketch

    return DecayedRelativeSketch


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


PARTS.append(PartSpec(
    "decayed",
    _additive,
    lambda c, seed: _additive()(c.epsilon, c.delta, c.value_min, c.value_max, seed),
    lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
    wanted=lambda c: c.has_values,
))
_RELATIVE = PartSpec(
    "decayed-relative/",
    _relative,
    lambda c, seed: None,  # built per declared decay in StreamSummary.create
    lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values, cols.weight[cols.valued]),
)
_BY_NAME = {p.name: p for p in PARTS}


def _spec(name: str) -> PartSpec | None:
    return _RELATIVE if name.startswith(_RELATIVE.name) else _BY_NAME.get(name)
_META = struct.Struct("<I")


class StreamSummary:
    """All sketches of one stream, updated together, merged and serialized together."""

    def __init__(self, config: StreamConfig, seed: int, parts: dict, clock: float | None = None):
        self.config = config
        self.seed = seed
        self.parts = parts
        self.clock_seconds = clock

    @classmethod
    def create(cls, config: StreamConfig, seed: int) -> "StreamSummary":
        parts = {p.name: p.build(config, seed) for p in PARTS if p.wanted(config)}
        if config.has_values:
            for name, decay in relative_decays(config).items():
                parts[name] = _relative()(config.epsilon, decay, config.value_min, config.value_max)
        return cls(config, seed, parts)

    def __getitem__(self, name: str):
        return self.parts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.parts

    # -- updates --------------------------------------------------------------------------
    def columns(self, table: pa.Table) -> Columns:
        ts = table.column("ts").to_numpy()
        key_col = table.column("key")
        keyed = ~np.asarray(key_col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        keys = key_col.filter(pa.array(keyed)).to_pylist() if keyed.any() else []
        values = table.column("value").to_numpy(zero_copy_only=False)
        valued = ~np.isnan(values)
        return Columns(
            ticks=ticks_of(ts, self.config.resolution),  # exact floor(ts / res): tidemark/ticks.py
            weight=table.column("weight").to_numpy(),
            keyed=keyed,
            key_ids=hash_keys(keys),
            keys=keys,
            valued=valued,
            values=values[valued],
        )

    def update_table(self, table: pa.Table) -> None:
        """Insert every event of ``table`` (columns ts, key, value, weight)."""
        if table.num_rows == 0:
            return
        cols = self.columns(table)
        for name, part in self.parts.items():
            _spec(name).feed(part, cols)
        top = float(np.max(table.column("ts").to_numpy()))
        self.clock_seconds = top if self.clock_seconds is None else max(self.clock_seconds, top)

    # -- merging ----------------------------------------------------------------------------
    def merge(self, other: "StreamSummary") -> "StreamSummary":
        if other is self:
            raise IncompatibleSketchError("cannot merge a stream summary with itself")
        if other.config != self.config or other.seed != self.seed or set(other.parts) != set(self.parts):
            raise IncompatibleSketchError("cannot merge summaries of differently configured streams")
        for name, part in self.parts.items():
            part.merge(other.parts[name])
        if other.clock_seconds is not None:
            self.clock_seconds = (other.clock_seconds if self.clock_seconds is None
                                  else max(self.clock_seconds, other.clock_seconds))
        return self

    # -- bytes ---------------------------------------------------------------------------------
    def sizes(self) -> dict[str, int]:
        return {name: int(part.nbytes) for name, part in self.parts.items()}

    def to_bytes(self) -> bytes:
        blobs = [(name, part.to_bytes()) for name, part in self.parts.items()]
        meta = json.dumps({
            "config": self.config.model_dump(),
            "seed": self.seed,
            "clock": self.clock_seconds,
            "parts": [[name, len(blob)] for name, blob in blobs],
        }).encode()
        payload = _META.pack(len(meta)) + meta + b"".join(blob for _, blob in blobs)
        return pack_header(Family.STREAM_SUMMARY, len(payload)) + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> "StreamSummary":
        _, payload = unpack_header(data, Family.STREAM_SUMMARY)
        if len(payload) < _META.size:
            raise CorruptSketchError("stream summary truncated")
        (n,) = _META.unpack_from(payload)
        try:
            meta = json.loads(bytes(payload[_META.size : _META.size + n]))
            config = StreamConfig.model_validate(meta["config"])
            seed = int(meta["seed"])
            clock = meta["clock"]
            layout = [(str(name), int(length)) for name, length in meta["parts"]]
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptSketchError(f"stream summary metadata unreadable: {e}") from None
        if clock is not None and not (isinstance(clock, (int, float)) and math.isfinite(clock)):
            raise CorruptSketchError("stream summary clock is not a finite number")
        offset = _META.size + n
        if any(length < 0 for _, length in layout) or offset + sum(l for _, l in layout) != len(payload):
            raise CorruptSketchError("stream summary part lengths do not match its size")
        parts = {}
        for name, length in layout:
            spec = _spec(name)
            if spec is None:
                raise CorruptSketchError(f"stream summary has an unknown part {name!r}")
            parts[name] = spec.cls().from_bytes(bytes(payload[offset : offset + length]))
            offset += length
        return cls(config, seed, parts, clock)

    def __repr__(self) -> str:
        return f"StreamSummary(parts={list(self.parts)}, clock={self.clock_seconds}, bytes={self.sizes()})"
