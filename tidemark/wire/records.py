"""What the API and the worker hand each other through Redis, as typed records with one
encode and one decode each.

* ``LogEntry``: one accepted ingest request in a log partition (``keys.log_partition``),
  fields ``d`` (the Arrow chunk), ``n`` (its events), ``c`` (the stream's clock before it,
  empty for none), ``s`` (the stream), ``g`` (its generation, ``tidemark.generations``).
* ``Tombstone``: a DELETE's entry, fields ``t``, ``g`` (the generation it ended), ``s``
  and ``k`` (the stream's shard count).
* ``ShardStatus``: the JSON status of one published shard (``keys.shard_status``), which
  names its segments (``tidemark/segments.py``).
* a stream's declaration (``keys.STREAMS``): ``StreamConfig`` JSON, read by ``read_config``.
* a federated stream's sites (``keys.FEDERATED``): a JSON list of site names, written by
  ``write_sites`` and read by ``read_sites``.

The Lua scripts that write or read these (``scripts``) spell the same fields; the round
trip of each, script included, is tested without Spark (``tests/tidemark/test_wire.py``).

Tested by: tests/tidemark/test_wire.py (encode and decode inverse), tests/test_wire_seam.py,
tests/tidemark/test_sites.py.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from tidemark.streams import StreamConfig

__all__ = ["LogEntry", "Tombstone", "decode_entry", "decode_legacy_entry", "ShardStatus",
           "id_tuple", "write_config", "read_config", "declared_shards", "write_sites", "read_sites"]


def id_tuple(entry_id: str) -> tuple[int, int]:
    """A Redis Stream entry id ``"ms-seq"`` as a tuple that sorts in log order."""
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


@dataclass(frozen=True)
class LogEntry:
    """One accepted ingest request (``scripts.APPEND`` writes it)."""

    stream: str
    generation: int  # 0: an entry from before generations
    payload: bytes  # the Arrow chunk (``tidemark/chunks.py``)
    events: int
    clock_before: float | None  # the stream's arrival clock before it (None: no event yet)

    def encode(self) -> list:
        """Field, value, … as XADD takes them."""
        return ["d", self.payload, "n", self.events,
                "c", "" if self.clock_before is None else repr(float(self.clock_before)),
                "s", self.stream, "g", self.generation]


@dataclass(frozen=True)
class Tombstone:
    """A DELETE of ``stream`` (``scripts.DELETE`` writes it): every shard's state of
    generation ``generation`` or older goes."""

    stream: str
    generation: int
    shards: int

    def encode(self) -> list:
        return ["t", "1", "g", self.generation, "s", self.stream, "k", self.shards]


def decode_entry(fields: dict[bytes, bytes]) -> LogEntry | Tombstone:
    """The record of one log partition entry (as redis-py returns its fields)."""
    generation = int(fields.get(b"g", b"0"))
    stream = fields[b"s"].decode()
    if b"t" in fields:
        return Tombstone(stream, generation, int(fields.get(b"k", b"1")))
    clock = fields.get(b"c", b"")
    return LogEntry(stream, generation, fields[b"d"], int(fields.get(b"n", b"0")),
                    float(clock) if clock else None)


def decode_legacy_entry(fields: dict[bytes, bytes], stream: str) -> LogEntry | Tombstone:
    """An entry of an earlier run's per-stream queue (``keys.ingest``; ``workers.migrate``):
    no ``s`` (the queue named the stream), and a tombstone's ``s`` was its shard count."""
    generation = int(fields.get(b"g", b"0"))
    if b"t" in fields:
        return Tombstone(stream, generation, int(fields.get(b"s", b"1")))
    clock = fields.get(b"c", b"")
    return LogEntry(stream, generation, fields[b"d"], int(fields.get(b"n", b"0")),
                    float(clock) if clock else None)


@dataclass
class ShardStatus:
    """What the API needs to know of one published shard: its generation and version,
    events counted and dropped as late, its clock, when it was published, its parts'
    sizes, ``failed`` (the reason, when its last update failed) and the accepted events
    failed updates could not take, the segments its summary is made of, in order, and
    ``touched``: the smallest event time this version added to the summary (or recorded
    as lost), as ``repr`` of the float — a string, because the publish script's JSON
    prints numbers to 14 digits — ``""`` when it added none, None when unknown (a
    republish, a publish from outside the worker). Answers at instants before it are
    the same truth in this version as in the one before (``app.ranges``)."""

    version: int
    events: int
    late_dropped: int = 0
    clock: float | None = None
    updated_at: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    failed: str | None = None
    failed_events: int = 0
    generation: int | None = None  # None: the publisher stamps the current one
    segments: list = field(default_factory=list)  # [[part, digest], …] (tidemark/segments.py)
    touched: str | None = None

    def encode(self) -> str:
        # Shallow: the fields are JSON already (``asdict``'s deep copy cost 6x more, once
        # per publish).
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def decode(cls, raw: bytes | str) -> ShardStatus:
        """A published status (one of an earlier version may lack the later fields)."""
        d = json.loads(raw)
        return cls(version=d["version"], events=d["events"], late_dropped=d["late_dropped"],
                   clock=d.get("clock"), updated_at=d.get("updated_at"),
                   sizes=d.get("sizes") or {}, failed=d.get("failed"),
                   failed_events=d.get("failed_events", 0), generation=d.get("generation"),
                   segments=d.get("segments") or [], touched=d.get("touched"))


def write_config(config: StreamConfig) -> str:
    """A declaration as ``keys.STREAMS`` stores it."""
    return json.dumps(config.model_dump())


def read_config(raw: bytes | str | dict) -> StreamConfig:
    """A stream's declaration as stored in ``keys.STREAMS``, in the worker's shard state,
    or (parsed, a dict) in a summary's meta: the one reader of it."""
    if isinstance(raw, dict):
        return StreamConfig.model_validate(raw)
    return StreamConfig.model_validate_json(raw)


def write_sites(sites: list[str]) -> str:
    """A federated stream's sites as ``keys.FEDERATED`` stores them."""
    return json.dumps(list(sites))


def read_sites(raw: bytes | str | None) -> tuple[str, ...] | None:
    """The sites of a federated stream (None: not federated)."""
    if raw is None:
        return None
    sites = json.loads(raw)
    if not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
        raise ValueError("federated stream sites must be a JSON list of names")
    return tuple(sites)


def declared_shards(raw: bytes | None) -> int:
    """The ``shards`` setting of a stored declaration; 1 for none or an unreadable one
    (the update then says why it fails). Only that field is parsed: the worker's source
    asks it of every stream a log page names, and a full validation costs 3x more."""
    if not raw:
        return 1  # not declared (any more)
    try:
        return int(json.loads(raw).get("shards", 1))
    except (ValueError, TypeError, AttributeError):
        return 1
