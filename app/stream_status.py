"""A stream's status (contract §4) from its shards' published statuses and the API's
ingest counters: what ``status()`` answers and what back-pressure counts as consumed.

Tested by: tests/app/test_store.py (a stream's status from its shards' statuses),
tests/app/test_backpressure.py (the per-stream backlog, received less consumed)."""

from __future__ import annotations

from tidemark.wire.records import ShardStatus

__all__ = ["Status", "status_of", "current_shards", "versions_served", "consumed_events", "read_number"]


class Status(dict):
    """The contract's stream status (§4) as a plain dict."""



def read_number(raw: bytes | None, kind=int, default=0):
    if raw is None or raw == b"":
        return default
    return kind(raw.decode())


def current_shards(raw: dict, generation: bytes | None = None) -> dict[int, ShardStatus]:
    """The published shard statuses of the stream's current ``generation`` only (a status
    of another generation is a stale publish: never served, never counted)."""
    current = None if generation is None else int(generation)
    shards = {int(k): ShardStatus.decode(v) for k, v in raw.items()}
    return {k: s for k, s in shards.items() if s.generation == current}


def versions_served(shards: dict[int, ShardStatus]) -> tuple:
    """What identifies the shard summaries served: (shard, (generation, version)) each, so
    a re-declared stream's version 1 is never taken for the old one's."""
    return tuple(sorted((k, (s.generation, s.version)) for k, s in shards.items()))


def consumed_events(shards: dict[int, ShardStatus]) -> int:
    """Events the worker has taken from the ingest queue: counted or dropped as late."""
    return sum(s.events + s.late_dropped for s in shards.values())


def status_of(shards: dict[int, ShardStatus], ingested: dict) -> Status:
    """A stream's status from its shards' published statuses and the API's counters."""
    consumed = consumed_events(shards)
    clocks = [s.clock for s in shards.values() if s.clock is not None]
    sizes: dict[str, int] = {}
    for s in shards.values():
        for part, n in s.sizes.items():
            sizes[part] = sizes.get(part, 0) + n
    failed = {k: s.failed for k, s in sorted(shards.items()) if s.failed}
    status = Status(
        # After a Redis flush the API's counter restarts; what the worker consumed is a floor.
        received=max(read_number(ingested.get(b"received")), consumed),
        events=sum(s.events for s in shards.values()),
        clock=max(clocks) if clocks else None,
        late_dropped=sum(s.late_dropped for s in shards.values()),
        rejected=read_number(ingested.get(b"rejected")),
        # Each shard's version only grows, so their sum does too.
        sketch_version=sum(s.version for s in shards.values()),
        updated_at=max((s.updated_at for s in shards.values()), default=None),
        sketch_bytes=sizes,
        shards=len(shards),
        state="failed" if failed else "ok",
    )
    if failed:
        status["failed"] = "; ".join(f"shard {k}: {why}" for k, why in failed.items())
    # Accepted events an update failed to take stay named once the shard works again:
    # answers over their times say they are incomplete (app/answers.py).
    lost = sum(s.failed_events for s in shards.values())
    if failed or lost:
        status["failed_events"] = lost
    return status
