"""The Spark job: read ingest chunks, keep each shard's summary in Spark's state store,
publish each changed shard from the executor that updated it.

``main()`` only wires. State is the engine's business: the stream is grouped by
(stream, shard) and ``applyInPandasWithState`` keeps every shard's summary in the RocksDB
state store provider with changelog checkpointing, so

* the driver holds offsets only, never sketch bytes;
* a micro-batch touches (loads, updates, writes, publishes) only the shards that received
  chunks, and an idle stream costs nothing per batch;
* exactly-once comes from Spark: a batch's offsets are logged before it runs, its state
  is committed with it, and a replay after a crash recomputes the same state from the same
  offsets (chunks are applied in entry order), which the version-guarded publish makes
  idempotent.

One stream's failure (settings too large for memory, a corrupt blob, a sketch error) is
caught per group: the shard keeps its previous state, its status says why it failed, and
every other stream goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time

from tidemark.hash_secret import HashSecret, load_or_create
from tidemark.wire.records import ShardStatus, id_tuple, read_config
from workers.chunk_rows import ChunkRows

__all__ = ["main", "start", "Prepared", "stand_by", "build_spark", "shard_updater", "republish_all",
           "has_commits", "read_everything_before", "STATE_SCHEMA"]

log = logging.getLogger("tidemark.worker")
_STARTED = [time.monotonic(), "the worker's imports"]  # when, and since what, phases count


def _phase(what: str) -> None:
    """One start-up phase done: the log says where a start's seconds go."""
    log.info("start-up: %s (%.1f s since %s)", what, time.monotonic() - _STARTED[0], _STARTED[1])

STATE_SCHEMA = ("blob binary, config string, events long, late_dropped long, clock double, "
                "version long, failed string, failed_events long, generation long")
OUTPUT_SCHEMA = "stream string, shard int, version long, events long, failed string"
_STATE_FIELDS = [f.split()[0] for f in STATE_SCHEMA.split(", ")]
_PUBLISHERS: dict[str, object] = {}  # one Redis client per Python worker process


def _publisher(redis_url: str):
    from workers.publish import Publisher

    if redis_url not in _PUBLISHERS:
        _PUBLISHERS[redis_url] = Publisher(redis_url)
    return _PUBLISHERS[redis_url]


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


class DecodedShards:
    """The last summary each (stream, shard) was updated to in this Python worker process,
    so a busy shard is not decoded from its blob every batch.

    Valid because the state store holds exactly the bytes the worker wrote: a summary kept
    for version v of generation g is used only when the state handed in is version v of
    generation g with the same blob (length and CRC-32 checked, cheap beside a decode), so
    a stream deleted and declared again never reuses a decode of its old generation
    (``tidemark.generations``). It is taken out before it is
    updated in place, so a failed update or a replayed batch (which hands in an older
    version) finds nothing and decodes. Bounded (least recently used first out): a decoded
    summary of the typical small stream of issue #22 takes about 1.5 MB (150 KB encoded), so
    256 of them stay within 400 MB per Python worker (``bench_worker.py``: at 1,000 streams
    the kept summaries change the CPU per update by 3 %, not worth gigabytes)."""

    def __init__(self, entries: int = 256):
        self.entries = entries
        self._kept: dict[tuple[str, int], tuple[int, int, int, int, object]] = {}
        self.hits = self.misses = 0

    @staticmethod
    def _check(blob: bytes) -> tuple[int, int]:
        import zlib

        return len(blob), zlib.crc32(blob)

    def take(self, stream: str, shard: int, generation: int, version: int, blob: bytes | None):
        """The decoded summary of exactly ``blob`` at ``version`` of ``generation``, else
        ``blob``."""
        kept = self._kept.pop((stream, shard), None)
        if (blob is not None and kept is not None and kept[0:2] == (generation, version)
                and kept[2:4] == self._check(blob)):
            self.hits += 1
            return kept[4]
        self.misses += 1
        return blob

    def keep(self, stream: str, shard: int, generation: int, version: int, blob: bytes,
             summary) -> None:
        if summary is None:
            return
        while len(self._kept) >= self.entries:
            self._kept.pop(next(iter(self._kept)))
        self._kept[(stream, shard)] = (generation, version, *self._check(blob), summary)

    def forget(self, stream: str, shard: int) -> None:
        """The shard's state is gone (its stream was deleted)."""
        self._kept.pop((stream, shard), None)


_DECODED = DecodedShards()


def decoded_shards() -> DecodedShards:
    """This Python worker process's kept summaries. Spark ships the group function by value
    (cloudpickle), and with it a copy of every module-level object the function names: a
    function that named ``_DECODED`` got an empty copy with every task, so nothing kept
    ever survived a batch. A module function is shipped by reference and returns the
    object of the process's own import."""
    return _DECODED


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
        state["blob"] = blob
        # Lost events make answers over their times incomplete: from their first time on.
        state["touched"] = repr(lost["ts_min"]) if lost["events"] else None
        log.error("stream %s: update failed, its other shards and streams go on: %s", stream, e)
        return state
    state.update(blob=result.blob, events=state["events"] + result.events,
                 late_dropped=state["late_dropped"] + result.late_dropped, clock=result.clock,
                 failed="", sizes=result.sizes, touched=result.touched)
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


_FROZEN = []  # set once this Python worker process has frozen what its first update left


def freeze_what_lasts() -> None:
    """Take what this Python worker holds after its first group update out of the cyclic
    garbage collector's reach (``gc.freeze``).

    PySpark's daemon runs a full ``gc.collect()`` after every task, and a worker that has
    imported pandas, pyarrow, Numba and the sketches holds so many objects that each walk
    cost ~100 ms: 23 % of the Python workers' CPU at 1,000 streams (``bench_worker.py``,
    6.5 of 27.6 CPU seconds). What is alive after the first update is imports, compiled
    kernels and clients that live as long as the process; frozen, the walk covers only
    what later tasks made (0.17 s in the same run). Frozen objects are still freed by
    reference counting; only a cycle among them would stay, once."""
    if not _FROZEN:
        import gc

        gc.freeze()
        _FROZEN.append(True)


def shard_updater(redis_url: str, secret: HashSecret):
    """The function Spark runs per (stream, shard) group on the executors."""

    def update(key, pdfs, group_state):
        _update(key, pdfs, group_state)
        freeze_what_lasts()
        return iter(())  # nothing to emit: the state and the publish are the results

    def _update(key, pdfs, group_state) -> None:
        stream, shard = key[0], int(key[1])
        rows = ChunkRows.unpack(chunk for frame in pdfs for chunk in frame["chunk"])
        previous = dict(zip(_STATE_FIELDS, group_state.get)) if group_state.exists else None
        publisher = _publisher(redis_url)
        state = apply_chunks(stream, previous, rows, secret, publisher.declaration, shard,
                             decoded_shards())
        if state is None:  # its stream was deleted: the shard's bytes leave the state store
            if group_state.exists:
                group_state.remove()
            return
        if state is previous:  # nothing of this batch counts for it (an ended generation)
            return
        group_state.update(tuple(state[f] for f in _STATE_FIELDS))
        if state["blob"] is not None or state["failed"]:
            publisher.publish(stream, shard, shard_status(state, state.get("sizes")),
                              state["blob"] or b"", _config_dict(state))

    return update


def _config_dict(state: dict) -> dict:
    import json

    return json.loads(state["config"]) if state["config"] else {}


def republish_all(spark, redis_url: str, checkpoint: str) -> int:
    """Publish every shard again from Spark's state store (after Redis lost them).

    Runs as a batch job on the executors; the version guard keeps anything newer that the
    streaming query publishes meanwhile."""
    from pyspark.errors import PySparkException

    try:
        df = spark.read.format("statestore").load(checkpoint)
    except PySparkException as e:
        if "STDS_COMMITTED_BATCH_UNAVAILABLE" in str(e) or "does not exist" in str(e):
            return 0  # nothing committed yet: nothing to publish
        raise
    rows = df.selectExpr("key.stream AS stream", "key.shard AS shard", "value.groupState.*")

    def publish(partition):
        publisher = _publisher(redis_url)
        for row in partition:
            state = row.asDict()
            if state["blob"] is not None or state["failed"]:
                sizes = {"summary": len(state["blob"] or b"")}
                publisher.publish(state["stream"], state["shard"], shard_status(state, sizes),
                                  state["blob"] or b"", _config_dict(state))

    rows.foreachPartition(publish)
    return rows.count()


def has_commits(spark_checkpoint: str) -> bool:
    """Has the streaming query ever committed a batch under this checkpoint? (Spark writes
    ``commits/<batch id>`` after each batch; a checkpoint without one holds no state.)"""
    import pyarrow.fs as pafs

    uri = spark_checkpoint if "://" in spark_checkpoint else os.path.abspath(spark_checkpoint)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/commits", allow_not_found=True))
    except Exception:  # noqa: BLE001 — a file system only Spark reads: let Spark look
        return True
    return any(i.type == pafs.FileType.File and i.base_name.isdigit() for i in infos)


# The layout of the shard state kept in Spark's state store (``STATE_SCHEMA``): 2 since
# generations (stream deletion) joined it. Spark refuses a state of another schema with an
# error that names none of this, so a checkpoint says which layout it holds.
STATE_FORMAT = "2"
_STATE_FORMAT_FILE = "state-format"


class CheckpointFormatError(RuntimeError):
    """The checkpoint's shard state was written by a Tidemark this one cannot read."""


def check_state_format(checkpoint: str) -> None:
    """Refuse a checkpoint whose shard state an earlier layout wrote; mark a new one."""
    import pyarrow.fs as pafs

    uri = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
    fs, root = pafs.FileSystem.from_uri(uri)
    path = f"{root}/{_STATE_FORMAT_FILE}"
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as f:
            found = f.read().decode().strip()
    else:
        found = "1" if has_commits(f"{checkpoint}/spark") else None  # older ones had no mark
    if found == STATE_FORMAT:
        return
    if found is not None:
        raise CheckpointFormatError(
            f"the checkpoint {checkpoint} holds shard state in layout {found}, written by an "
            f"earlier Tidemark; this one keeps layout {STATE_FORMAT} and cannot read it: start "
            "afresh with a new checkpoint and Redis (for `tidemark up`, move the run directory "
            "away), then declare the streams and send their events again")
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(f"{STATE_FORMAT}\n".encode())


# Spark settings that cut the fixed cost of a start in local mode (``local[*]``: the
# embedded deployment of ``tidemark up``); a cluster keeps its own spark-defaults.
LOCAL_CONF = {
    # The driver JVM runs Spark's planning and moves chunk blobs (the sketches run in
    # Python): C1-compiled code and a serial collector start faster on few cores and leave
    # them to the Python workers, instead of C2 compiler threads competing at start-up.
    # The heap starts small and gives back what a collection frees (the default starts at
    # 1/64 of the machine's memory and keeps every page it ever touched): the driver's
    # resident memory follows what it holds, not how long it has run.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms64m "
                                     "-XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30",
}


def build_spark(master: str | None, partitions: int, app_name: str = "tidemark-worker",
                conf: dict[str, str] | None = None):
    """The worker's SparkSession; ``conf`` (``TIDEMARK_SPARK_CONF``) overrides every
    setting made here."""
    import sys

    from pyspark.sql import SparkSession

    # Spark's Python helpers (the streaming source runner among them) start
    # PYSPARK_PYTHON, not the driver's interpreter: point them at this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # no [Stage N: …] bars in anyone's terminal
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.sql.streaming.minBatchesToRetain": "20",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Keep the Python workers (and their loaded kernels) between batches.
        "spark.python.worker.reuse": "true",
    }
    if not master or master.startswith("local"):
        # On a cluster the executors' Python is the cluster's business (spark-defaults).
        settings["spark.pyspark.python"] = sys.executable
        settings.update(LOCAL_CONF)
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def read_everything_before(progress: dict, run_first_batch: int | None) -> str | None:
    """The start of the last finished batch, when it proves that every entry appended
    before it was read (readiness relies on that), else None.

    A batch reads every entry there is when it plans its offsets, right after it starts,
    except the first batch of a run: it may replay the offsets the previous run planned
    before it was killed, and then entries that came in since are still unread."""
    batch = progress.get("batchId", -1)
    if run_first_batch is None or batch <= run_first_batch:
        return None
    return progress.get("timestamp")


def _first_batch_of_run(query, seen: int) -> int:
    """The first batch id of this query run (the oldest progress kept, at worst the one
    seen now: then one more batch is needed before readiness trusts the progress)."""
    try:
        recent = query.recentProgress
        return min(int(seen), int(recent[0]["batchId"])) if recent else int(seen)
    except Exception:  # noqa: BLE001 — py4j hiccup: be conservative
        return int(seen)


def _offset(raw) -> dict | None:
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("log"), list) else None


def log_progress(recent: list, first_batch: int | None = None) -> dict | None:
    """What the last finished batch read of each log partition (its end offset) and what
    recent batches cost, for back-pressure and readiness (``app.backpressure``); None
    before any batch of the partitioned log finished.

    A batch costs a fixed part (planning, tasks, state commits) plus a part per group update
    (one per (stream, shard) that had chunks, however many: what many small streams cost;
    the state operator's updated and removed rows) and a part per event (what a busy
    stream costs): ``fixed_seconds``, ``seconds_per_group`` and ``seconds_per_event`` are a
    non-negative least-squares fit of the recent batches that read something
    (``fit_batch_costs``). The run's first batch (``first_batch``) counts for ``read`` only:
    it pays the start of the Python workers. ``batch_seconds`` is the slowest of the last
    five batches (the wait estimate must hold for the slow ones)."""
    import json

    batches, read, ended = [], None, 0.0
    for progress in recent:
        try:
            source = progress["sources"][0]
            start, end = _offset(source["startOffset"]), _offset(source["endOffset"])
            seconds = progress["durationMs"]["triggerExecution"] / 1000
        except (KeyError, IndexError, TypeError):
            continue
        if end is None:
            continue
        read = end["log"]
        try:
            ended = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() + seconds
        except (KeyError, AttributeError, ValueError):
            ended = 0.0
        if first_batch is not None and progress.get("batchId") == first_batch:
            continue
        before = start["log"] if start else [[None, 0, 0]] * len(end["log"])
        events = sum(e[1] for e in end["log"]) - sum(b[1] for b in before)
        chunks = sum(e[2] for e in end["log"]) - sum(b[2] for b in before)
        if chunks > 0:
            batches.append((seconds, max(0, events), _group_updates(progress, chunks)))
    if read is None:
        return None
    out = {"read": json.dumps(read), "batch_ended": round(ended, 3), "fixed_seconds": 0.0,
           "seconds_per_event": 0.0,
           "seconds_per_group": 0.0, "capacity": 0.0, "batch_seconds": 0.0}
    if batches:
        # The slowest of the last few, not a typical one: an event taken now waits for the
        # batch under way and the next, and on a shared machine one slow batch is what
        # breaks the 202 promise (bench_scale: p95 2.7x the median with other load).
        out["batch_seconds"] = round(max(b[0] for b in batches[-5:]), 3)
    if len(batches) >= 3:
        fixed, per_group, per_event = fit_batch_costs(batches[-30:])
        out.update(fixed_seconds=round(fixed, 4), seconds_per_group=per_group,
                   seconds_per_event=per_event,
                   capacity=round(1 / per_event, 1) if per_event > 0 else 0.0)
    return out


def _group_updates(progress: dict, chunks: int) -> int:
    """The batch's group updates: the state operator's updated and removed rows (a group
    whose update failed keeps its state, so at most the chunks), else its chunks."""
    try:
        op = progress["stateOperators"][0]
        groups = int(op.get("numRowsUpdated", 0)) + int(op.get("numRowsRemoved", 0))
    except (KeyError, IndexError, TypeError, ValueError):
        return chunks
    return min(chunks, groups) if groups > 0 else chunks


def fit_batch_costs(batches: list[tuple[float, int, int]]) -> tuple[float, float, float]:
    """``(fixed, per group, per event)`` seconds, all >= 0, that best explain
    ``seconds ≈ fixed + per_group × groups + per_event × events`` over ``batches`` of
    ``(seconds, events, groups)``: least squares over each subset of the three terms,
    keeping the best fit whose terms are all non-negative (three unknowns: exhaustive; of
    equal fits the one with fewer terms, the group term before the event term, wins: with
    requests of one size events and groups rise together, and a group costs the same
    whatever it holds)."""
    import itertools

    import numpy as np

    y = np.array([b[0] for b in batches], dtype=float)
    x = np.array([[1.0, b[2], b[1]] for b in batches], dtype=float)
    best, best_err = (float(y.min()), 0.0, 0.0), float(((y - y.min()) ** 2).sum())
    for size in (1, 2, 3):
        for cols in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if (coef < 0).any():
                continue
            err = float(((x[:, cols] @ coef - y) ** 2).sum())
            if err < best_err - 1e-12:
                full = [0.0, 0.0, 0.0]
                for c, v in zip(cols, coef):
                    full[c] = float(v)
                best, best_err = tuple(full), err
    return best


class Driver:
    """What the driver does beside Spark: heartbeat from the query's progress, and
    republishing after Redis lost the published sketches. It holds no sketch bytes."""

    def __init__(self, spark, redis_url: str, checkpoint: str):
        from workers.publish import Publisher

        self.spark, self.redis_url, self.checkpoint = spark, redis_url, checkpoint
        self.publisher = Publisher(redis_url)
        self.query = None
        self.stop_event = threading.Event()
        self.run_first_batch: int | None = None  # the first batch id of the running query

    def republish_if_needed(self) -> None:
        if self.publisher.needs_republish():
            if not has_commits(self.checkpoint + "/spark"):
                # A new checkpoint has nothing to publish: skip planning a state-store read
                # (seconds of Spark's time before the first batch).
                self.publisher.mark_published()
                return
            n = republish_all(self.spark, self.redis_url, self.checkpoint + "/spark")
            if n:
                log.warning("Redis had lost the published sketches; published %d shards again", n)
            self.publisher.mark_published()

    def beat(self) -> None:
        q = self.query
        progress = (q.lastProgress or {}) if q is not None else {}
        if self.run_first_batch is None and progress.get("batchId", -1) >= 0:
            self.run_first_batch = _first_batch_of_run(q, progress["batchId"])
            _phase(f"first batch {progress['batchId']} done, {progress.get('numInputRows', 0)} "
                   f"chunks, ms {progress.get('durationMs')}")
        self.publisher.heartbeat({
            "run_id": str(q.runId) if q is not None else None,
            "active": bool(q is not None and q.isActive),
            "batch_id": progress.get("batchId", -1),
            "batch_seconds": round(progress.get("durationMs", {}).get("triggerExecution", 0) / 1000, 4),
            "progress_at": read_everything_before(progress, self.run_first_batch),
        })
        if q is not None:
            read = log_progress(q.recentProgress, self.run_first_batch)
            if read:
                self.publisher.log_progress(read)

    def run_forever(self, every: float = 0.5) -> None:
        while not self.stop_event.wait(every):
            try:
                self.republish_if_needed()
                self.beat()
            except Exception as e:  # noqa: BLE001 — Redis away: keep trying, Spark will too
                log.warning("heartbeat failed: %s", e)


class Prepared:
    """A streaming query planned but not started: everything before ``start()`` binds the
    checkpoint, so a standby worker can do it ahead and start in a moment when told."""

    def __init__(self, spark, redis_url: str, checkpoint: str, trigger: str,
                 secret: HashSecret | None, log_partitions: int | None = None):
        from pyspark.sql.streaming.state import GroupStateTimeout

        from workers.source import RedisChunkSource

        checkpoint = checkpoint.rstrip("/")
        secret = secret or load_or_create(checkpoint)
        spark.dataSource.register(RedisChunkSource)
        self.driver = Driver(spark, redis_url, checkpoint)
        self.log_partitions = log_partitions or _log_partitions_setting()
        stream = (spark.readStream.format("tidemark-redis").option("redis_url", redis_url)
                  .option("log_partitions", str(self.log_partitions)).load())
        self.writer = (
            stream.groupBy("stream", "shard")
            .applyInPandasWithState(shard_updater(redis_url, secret), OUTPUT_SCHEMA, STATE_SCHEMA,
                                    "Update", GroupStateTimeout.NoTimeout)
            .writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint + "/spark")
            .trigger(processingTime=trigger)
        )
        _phase("query planned")

    def start(self):
        """Move an earlier run's per-stream queues into the log, republish if Redis lost the
        sketches, then start the query; ``(query, driver)``."""
        from tidemark.ingest_log import partition_count
        from workers.migrate import migrate_legacy_queues

        check_state_format(self.driver.checkpoint)
        r = self.driver.publisher.redis
        migrate_legacy_queues(r, self.driver.checkpoint + "/spark",
                              partition_count(r, self.log_partitions))
        self.driver.republish_if_needed()
        _phase("republish checked")
        query = self.writer.start()
        self.driver.query = query
        _phase("streaming query started")
        threading.Thread(target=self.driver.run_forever, daemon=True,
                         name="tidemark-heartbeat").start()
        return query, self.driver


def _log_partitions_setting() -> int:
    return int(os.environ.get("TIDEMARK_LOG_PARTITIONS", "2"))


def start(spark, redis_url: str, checkpoint: str, trigger: str = "1 second",
          secret: HashSecret | None = None, log_partitions: int | None = None):
    """Start the streaming query; returns ``(query, driver)``."""
    return Prepared(spark, redis_url, checkpoint, trigger, secret, log_partitions).start()


def stand_by(spark, stopping: threading.Event, warm_workers: bool, lines=None,
             keep_warm_every: float = 30.0, beat=None) -> bool:
    """Wait, with a started session and a planned query, until a line ``go`` arrives on
    ``lines`` (standard input: the supervisor's pipe); False when they end (the supervisor
    is gone) or the worker is stopped.

    While it waits, the warm-up job runs again every ``keep_warm_every`` seconds: Spark
    stops Python workers idle for a minute, and the first batch after a take-over should
    find them started. A standby whose Spark has stopped (its JVM died) raises, so that
    its supervisor replaces it instead of promoting it. ``beat()`` (every 2 s) tells Redis
    that it stands by."""
    import sys

    from workers.warm import warm_up_workers

    lines = lines if lines is not None else sys.stdin
    told = threading.Event()
    answer: list[bool] = []

    def read():
        for line in lines:
            if line.strip() == "go":
                answer.append(True)
                break
        told.set()

    threading.Thread(target=read, daemon=True, name="tidemark-standby").start()
    log.info("standing by: the query starts when the supervisor says go")
    warm_again = time.monotonic() + keep_warm_every
    look_again = time.monotonic() + 5.0
    beat_again = 0.0
    while not told.wait(0.2):
        if stopping.is_set():
            return False
        now = time.monotonic()
        if beat and now >= beat_again:
            beat_again = now + 2.0
            try:
                beat()
            except Exception as e:  # noqa: BLE001 — Redis away: the spare is no less ready
                log.warning("standby heartbeat failed: %s", e)
        if spark is not None and now >= look_again:
            look_again = now + 5.0
            if spark.sparkContext._jsc.sc().isStopped():  # py4j raises if the JVM is gone
                raise RuntimeError("the standby's Spark context stopped")
        if warm_workers and now >= warm_again:
            warm_up_workers(spark, stopping=stopping, planner=True)
            warm_again = now + keep_warm_every
    return bool(answer) and not stopping.is_set()


def main(redis_url: str, checkpoint: str, master: str | None = None, partitions: int = 4,
         trigger: str = "1 second", secret: HashSecret | None = None,
         spark_conf: dict[str, str] | None = None, warm_workers: bool = True,
         standby: bool = False, log_partitions: int | None = None) -> None:
    """Run the worker until SIGTERM/SIGINT or the query fails. With ``standby`` it starts
    Spark, plans the query and warms the Python workers, then waits for ``go`` on standard
    input before it starts the query (see ``stand_by``)."""
    import signal
    import subprocess
    import sys

    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    _phase("driver imports")
    stopping = threading.Event()

    def shutdown(*_):
        # Signal handlers run on the main thread, which may be inside a py4j call
        # (awaitTermination): stop the query from another thread, never re-enter py4j here.
        stopping.set()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)

    # Fill (or check) Numba's kernel cache in a child process while the JVM starts, so the
    # executors load kernels instead of compiling them. Not in the driver: it runs no
    # sketch, and the loaded compiler and kernels would stay in its memory for good.
    # (A standby starts beside a running worker, whose start filled the cache.)
    kernels = None if standby else subprocess.Popen(
        [sys.executable, "-c", "from tidemark.summary import warm_up; warm_up()"])
    spark = build_spark(master, partitions, conf=spark_conf)
    spark.sparkContext.setLogLevel("WARN")
    _phase("Spark session")
    if kernels and kernels.wait() != 0:  # executors then compile what they need
        log.warning("compiling the kernels ahead failed (exit status %s)", kernels.returncode)
    _phase("kernels in Numba's cache")
    from workers.warm import warm_up_workers

    query = None
    try:
        warming = warm_up_workers(spark, stopping=stopping, planner=standby, done=lambda n: _phase(
            f"{n} Python workers warm")) if warm_workers else None
        prepared = Prepared(spark, redis_url, checkpoint, trigger, secret, log_partitions)
        if standby:
            if warming:  # stand by only once a take-over would find its Python workers
                warming.join()
            publisher, since = prepared.driver.publisher, time.time()
            try:
                if not stand_by(spark, stopping, warm_workers,
                                beat=lambda: publisher.standby_beat(since)):
                    return
            finally:
                try:
                    publisher.standby_gone()
                except Exception:  # noqa: BLE001 — its TTL ends it
                    pass
            _STARTED[:] = [time.monotonic(), "the take-over"]
        query, driver = prepared.start()
        print("tidemark worker: streaming from Redis", flush=True)
        while not stopping.is_set() and query.isActive:
            stopping.wait(0.5)
        if query.exception() is not None:
            raise RuntimeError(f"streaming query failed: {query.exception()}")
    finally:
        stopping.set()
        if query is not None:
            driver.stop_event.set()
            if query.isActive:
                query.stop()
        spark.stop()
