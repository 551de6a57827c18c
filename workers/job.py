"""The Spark driver of the worker: the session (``build_spark``), the streaming query that
reads ingest chunks and keeps each shard's summary in Spark's state store
(``PlannedQuery``/``start``), the function Spark runs per (stream, shard) group on the
executors (``shard_updater``), republishing from the state store, and the worker's life
(``stand_by``, ``main``).

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

What a group's state becomes is ``workers.shard_state`` (no Spark there); the checkpoint's
layout mark is ``workers.checkpoint``; what the query's progress says for readiness and
back-pressure is ``workers.progress``.

Tested by: tests/workers/test_exactly_once.py (start: restart and flush),
tests/workers/test_update.py (shard_updater as Spark ships it), tests/tidemark_cli/test_standby.py
(stand_by), tests/workers/test_kill.py and tests/workers/test_many_streams.py (the worker's life
under kill -9 and many streams).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from tidemark.hash_secret import HashSecret, load_or_create
from workers.checkpoint import check_state_format, has_commits
from workers.chunk_rows import ChunkRows
from workers.decoded import decoded_shards
from workers.progress import first_batch_of_run, log_progress, read_everything_before
from workers.shard_state import STATE_SCHEMA, apply_chunks, shard_status

__all__ = ["main", "start", "PlannedQuery", "stand_by", "build_spark", "LOCAL_CONF", "shard_updater",
           "republish_all"]

log = logging.getLogger("tidemark.worker")
_STARTED = [time.monotonic(), "the worker's imports"]  # when, and since what, phases count


def _phase(what: str) -> None:
    """One start-up phase done: the log says where a start's seconds go."""
    log.info("start-up: %s (%.1f s since %s)", what, time.monotonic() - _STARTED[0], _STARTED[1])


OUTPUT_SCHEMA = "stream string, shard int, version long, events long, failed string"
_STATE_FIELDS = [f.split()[0] for f in STATE_SCHEMA.split(", ")]
_PUBLISHERS: dict[str, object] = {}  # one Redis client per Python worker process


def _publisher(redis_url: str):
    from workers.publish import Publisher

    if redis_url not in _PUBLISHERS:
        _PUBLISHERS[redis_url] = Publisher(redis_url)
    return _PUBLISHERS[redis_url]


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
                              state["blob"] or b"", _config_dict(state), state.get("segments"),
                              first=state["version"] == 1)

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

    from workers.jvm_archive import java_options

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
        archive = java_options()  # Spark's classes mapped, not loaded: half a session's start
        if archive:
            settings["spark.driver.extraJavaOptions"] += " " + archive
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


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
            self.run_first_batch = first_batch_of_run(q, progress["batchId"])
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


class PlannedQuery:
    """A streaming query planned but not started: everything before ``start()`` binds the
    checkpoint, so a standby worker can do it ahead and start in a moment when told."""

    def __init__(self, spark, redis_url: str, checkpoint: str, trigger: str,
                 secret: HashSecret | None, log_partitions: int | None = None):
        from pyspark.sql.streaming.state import GroupStateTimeout

        from workers.source import SCHEMA as SOURCE_SCHEMA, RedisChunkSource

        checkpoint = checkpoint.rstrip("/")
        secret = secret or load_or_create(checkpoint)
        spark.dataSource.register(RedisChunkSource)
        self.driver = Driver(spark, redis_url, checkpoint)
        self.log_partitions = log_partitions or _log_partitions_setting()
        # The schema given, Spark asks no Python process for it: 2-3 s of a start.
        stream = (spark.readStream.format("tidemark-redis").schema(SOURCE_SCHEMA)
                  .option("redis_url", redis_url).option("log_partitions", str(self.log_partitions)).load())
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
    return PlannedQuery(spark, redis_url, checkpoint, trigger, secret, log_partitions).start()


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
        planned = PlannedQuery(spark, redis_url, checkpoint, trigger, secret, log_partitions)
        if standby:
            if warming:  # stand by only once a take-over would find its Python workers
                warming.join()
            publisher, since = planned.driver.publisher, time.time()
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
        query, driver = planned.start()
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
