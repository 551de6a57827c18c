"""The shard state machine: what one (stream, shard) group's state becomes after a batch
of chunk rows — which generation it counts for, which rows it takes, the update itself, what
a failed update could not take — and the status it publishes.

Pure but for reading a stream's declaration when a shard starts and the decoded summaries
kept between batches (``workers.decoded``); no Spark here, so every rule is testable
without it. ``workers.job`` runs it per group inside Spark and keeps its result in the
state store (``STATE_SCHEMA``, whose layout ``workers.checkpoint`` marks).

One stream's failure (settings too large for memory, a corrupt blob, a sketch error) is
caught per group: the shard keeps its previous state, its status says why it failed, and
every other stream goes on.
"""

from __future__ import annotations

import datetime as dt
import logging

from tidemark.hash_secret import HashSecret
from tidemark.wire.records import ShardStatus, id_tuple, read_config
from workers.chunk_rows import ChunkRows
from workers.decoded import DecodedShards

__all__ = ["STATE_SCHEMA", "published_generation", "shard_status", "sort_out_generations",
           "apply_chunks"]

log = logging.getLogger("tidemark.worker")

STATE_SCHEMA = ("blob binary, config string, events long, late_dropped long, clock double, "
                "version long, failed string, failed_events long, generation long")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def published_generation(state: dict) -> int | None:
    """The generation a shard's state counts for (``sort_out_generations``: stored negated
    while it holds entries from before generations alone)."""
    generation = state["generation"]
    return None if generation is None else abs(int(generation))


def shard_status(state: dict, sizes: dict | None = None) -> ShardStatus:
    """The status a shard's state publishes; ``touched`` is known only right after the
    update that made the version (a republish from the state store says None: unknown)."""
    return ShardStatus(generation=published_generation(state), version=state["version"], events=state["events"],
                       late_dropped=state["late_dropped"], clock=state["clock"],
                       updated_at=_now(), sizes=sizes or {}, failed=state["failed"] or None,
                       failed_events=state["failed_events"], touched=state.get("touched"))


def sort_out_generations(previous: dict | None, rows: ChunkRows):
    """Which state and which chunk rows a batch goes on with (``tidemark.generations``):
    ``(previous, rows, generation)``; ``previous`` None when the shard starts afresh (or has
    no state), ``generation`` None when the rows say nothing about it (then the current
    one is looked up).

    A tombstone of generation T ends every state and chunk of a generation <= T; a chunk
    of a generation newer than the state's starts the state afresh (the stream was deleted
    and declared again, whether or not its tombstone was seen); an older one is dropped.
    Entries from before generations (0) belong to the state's generation. A state that
    holds such entries alone (its generation stored negated: the one looked up when it
    started, which may already be a later declaration's) is ended by any tombstone: the
    first delete after an upgrade ends the declaration those entries were appended to,
    and a delete appends its tombstone after the entries it ends."""
    gens, tombstone = rows.generation, rows.tombstone
    dead = int(gens[tombstone].max()) if tombstone.any() else None
    held = int(previous["generation"] or 0) if previous else None
    legacy_only = held is not None and held < 0
    if legacy_only:
        held = -held
    if previous is not None and dead is not None and (held <= dead or legacy_only):
        previous, held = None, None
    chunk = ~tombstone
    if dead is not None:
        chunk &= gens > dead
    newest = int(gens[chunk].max()) if chunk.any() else 0
    if held is not None and newest > held:
        previous, held = None, None  # a new declaration of the name: nothing of the old counts
    target = held if held is not None else (newest or None)
    if target is not None:  # (entries from before generations precede any delete)
        chunk &= (gens == target) | (gens == 0)
    return previous, (rows if chunk.all() else rows.where(chunk)), target


def apply_chunks(stream: str, previous: dict | None, rows: ChunkRows, secret: HashSecret,
                 declaration_of, shard: int = 0, decoded: DecodedShards | None = None) -> dict | None:
    """One shard's new state from its previous state and this batch's rows (pure but for
    reading the stream's declaration when the shard starts, and for ``decoded``, the
    process's summaries kept between batches): the ``previous`` object itself when nothing
    of the batch counts for it, None when the shard holds no state any more (its stream was
    deleted)."""
    from workers.update import Chunk, update_shard

    kept, rows, generation = sort_out_generations(previous, rows)
    if not len(rows):
        if kept is None and decoded is not None:
            decoded.forget(stream, shard)
        return kept  # ``previous`` unchanged, or None when a tombstone ended it
    state = dict(kept) if kept else {
        "blob": None, "config": None, "events": 0, "late_dropped": 0, "clock": None,
        "version": 0, "failed": "", "failed_events": 0, "generation": generation}
    if state["config"] is None:
        declared = declaration_of(stream)
        # State is created only for the generation current now: chunks of a deleted
        # stream (or of a declaration since replaced) are never counted.
        if declared is None or (generation is not None and declared[1] != generation):
            return None
        state["config"] = declared[0].model_dump_json()
        # entries from before generations alone: negated until a chunk of it comes
        # (``sort_out_generations``)
        state["generation"] = declared[1] if bool((rows.generation > 0).any()) else -declared[1]
    elif (state["generation"] or 0) < 0 and bool((rows.generation > 0).any()):
        state["generation"] = -state["generation"]  # a chunk of its generation: no longer legacy alone
    # Chunks go in in log order (the late rule and replays depend on it).
    entries, payloads, clocks = rows.entry, rows.payload, rows.clock_before
    order = sorted(range(len(entries)), key=lambda i: id_tuple(entries[i]))
    chunks = [Chunk(bytes(payloads[i]), float(clocks[i])) for i in order]
    before = state["blob"]
    if decoded is not None:
        before = decoded.take(stream, shard, state["generation"] or 0, state["version"], state["blob"])
    state["version"] += 1
    try:
        config = read_config(state["config"])
        result = update_shard(before, config, secret, chunks)
    except (ConnectionError, OSError):
        raise  # Redis or the file system away: the batch fails and is replayed, nothing lost
    except Exception as e:  # noqa: BLE001 — isolate this stream, keep every other going
        import redis

        if isinstance(e, redis.RedisError):
            raise
        why = f"{type(e).__name__}: {e}"[:300]
        lost, blob = _record_lost(state, chunks, secret, why)
        state["failed"] = (f"{why}; {lost['events']} event(s) with ts in [{lost['ts_min']!r}, "
                           f"{lost['ts_max']!r}] not counted" if lost["events"] else why)[:500]
        state["failed_events"] += lost["events"]
        state["blob"], state["segments"] = blob, None  # (the publish cuts the blob itself)
        # Lost events make answers over their times incomplete: from their first time on.
        state["touched"] = repr(lost["ts_min"]) if lost["events"] else None
        log.error("stream %s: update failed, its other shards and streams go on: %s", stream, e)
        return state
    state.update(blob=result.blob, events=state["events"] + result.events,
                 late_dropped=state["late_dropped"] + result.late_dropped, clock=result.clock,
                 failed="", sizes=result.sizes, touched=result.touched, segments=result.segments)
    if decoded is not None:
        decoded.keep(stream, shard, state["generation"] or 0, state["version"], result.blob,
                     result.summary)
    return state


def _record_lost(state: dict, chunks: list, secret: HashSecret, why: str) -> tuple[dict, bytes | None]:
    """What a failed update could not take (count, weight, time range of the chunks it
    can read), and the shard's blob with that record added to its summary: the sketches
    stay as they were, and answers over the lost times say they are incomplete
    (``tidemark/summary.py``, lost events). The blob is unchanged when there is none or it
    cannot be read."""
    import math

    from tidemark.chunks import decode_chunk
    from tidemark.summary import StreamSummary

    lost = {"events": 0, "weight": 0.0, "ts_min": math.inf, "ts_max": -math.inf}
    for c in chunks:
        try:
            table = decode_chunk(c.payload)
        except Exception:  # noqa: BLE001 — an unreadable chunk: nothing to name
            continue
        if table.num_rows:
            ts, w = table.column("ts").to_numpy(), table.column("weight").to_numpy()
            lost["events"] += table.num_rows
            lost["weight"] += math.fsum(w.tolist())
            lost["ts_min"] = min(lost["ts_min"], float(ts.min()))
            lost["ts_max"] = max(lost["ts_max"], float(ts.max()))
    blob = state["blob"]
    if not lost["events"] or state["config"] is None:
        return lost, blob
    try:
        config = read_config(state["config"])
        summary = (StreamSummary.from_bytes(blob, secret) if blob is not None
                   else StreamSummary.create(config, secret))
        summary.record_lost(lost["events"], lost["weight"], lost["ts_min"], lost["ts_max"], why)
        return lost, summary.to_bytes()
    except Exception:  # noqa: BLE001 — the state itself is unreadable: the status says why
        return lost, blob
