"""The Spark job: read ingest chunks, update shard summaries, publish merged ones.

``main()`` only wires. Per micro-batch (``apply_batch``):

1. a batch whose id is not above the saved state's is a replay of one already applied:
   skipped (exactly-once, see ``workers/state.py``);
2. chunks are grouped by (stream, shard) and each group's events are inserted into that
   shard's previous summary on the executors (``update_shard``);
3. the driver saves the new state, then merges each changed stream's shard summaries once
   and publishes the result with a higher ``sketch_version``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import pandas as pd

from tidemark.summary import StreamSummary
from tidemark.streams import StreamConfig
from workers.publish import Publisher
from workers.state import StateStore, StreamState, WorkerState
from workers.update import SHARD_RESULT_SCHEMA, shard_frame, update_shard

__all__ = ["Worker", "main"]

log = logging.getLogger("tidemark.worker")
SEED = 0x7D1DE  # one seed for every stream, so sketches of different streams combine


def _entry_key(entry: str) -> tuple[int, int]:
    ms, seq = entry.split("-")
    return int(ms), int(seq)


def make_group_updater(previous: dict, clocks: dict, configs: dict):
    """The function Spark runs per (stream, shard) group on the executors."""

    def update(pdf: pd.DataFrame) -> pd.DataFrame:
        stream, shard = pdf["stream"].iloc[0], int(pdf["shard"].iloc[0])
        order = sorted(range(len(pdf)), key=lambda i: _entry_key(pdf["entry"].iloc[i]))
        payloads = [pdf["payload"].iloc[i] for i in order]
        config = StreamConfig.model_validate(configs[stream])
        result = update_shard(stream, shard, previous.get((stream, shard)),
                              clocks.get(stream, float("-inf")), config, SEED, payloads)
        return shard_frame(result)

    return update


def merge_shards(shards: dict[int, bytes]) -> StreamSummary:
    """One aggregation level: every shard summary merged into a fresh one."""
    parts = [StreamSummary.from_bytes(b) for _, b in sorted(shards.items())]
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    return merged


class Worker:
    """Owns the state and the publisher; Spark calls ``apply_batch`` for each micro-batch."""

    def __init__(self, spark, redis_url: str, state_uri: str, shards: int):
        self.spark = spark
        self.redis_url = redis_url
        self.shards = shards
        self.store = StateStore(state_uri)
        self.state: WorkerState = self.store.load()
        self.publisher = Publisher(redis_url)
        self.lock = threading.Lock()
        self.last_batch_seconds = 0.0

    # -- publishing -------------------------------------------------------------------
    def publish_stream(self, name: str) -> None:
        stream = self.state.streams[name]
        if not stream.shards:
            return
        merged = merge_shards(stream.shards)
        self.publisher.publish(name, stream, merged.to_bytes(), merged.sizes())

    def republish_all(self) -> None:
        with self.lock:
            for name in self.state.streams:
                self.publish_stream(name)

    # -- one micro-batch ----------------------------------------------------------------
    def apply_batch(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        with self.lock:
            if batch_id <= self.state.batch_id:
                log.info("batch %s already applied; skipping its replay", batch_id)
                return
            configs = {n: c.model_dump() for n, c in self.publisher.configs().items()}
            for name, s in self.state.streams.items():
                configs.setdefault(name, s.config)
            previous = {(n, k): b for n, s in self.state.streams.items() for k, b in s.shards.items()}
            clocks = {n: s.clock for n, s in self.state.streams.items() if s.clock is not None}
            sc = self.spark.sparkContext
            b_prev, b_clocks, b_conf = sc.broadcast(previous), sc.broadcast(clocks), sc.broadcast(configs)

            def run(pdf: pd.DataFrame) -> pd.DataFrame:
                return make_group_updater(b_prev.value, b_clocks.value, b_conf.value)(pdf)

            known = list(configs)
            rows = (
                df.where(df.stream.isin(known))
                .groupBy("stream", "shard")
                .applyInPandas(run, SHARD_RESULT_SCHEMA)
                .collect()
            )
            for b in (b_prev, b_clocks, b_conf):
                b.unpersist()
            changed = self._fold(rows, configs)
            self.state.batch_id = batch_id
            self.store.save(self.state)
            for name in changed:
                self.publish_stream(name)
            self.last_batch_seconds = time.perf_counter() - started
            self.publisher.heartbeat(batch_id, self.last_batch_seconds)
        log.debug("batch %s: %d shard updates in %.2fs", batch_id, len(rows),
                 time.perf_counter() - started)

    def _fold(self, rows, configs: dict) -> set[str]:
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        changed = set()
        for row in rows:
            s = self.state.streams.setdefault(row.stream, StreamState(configs[row.stream]))
            s.shards[row.shard] = bytes(row.state)
            s.events += row.events
            s.late_dropped += row.late_dropped
            if row.events:
                s.clock = row.clock if s.clock is None else max(s.clock, row.clock)
            changed.add(row.stream)
        for name in changed:
            s = self.state.streams[name]
            s.version += 1
            s.updated_at = now
        return changed

    # -- liveness -----------------------------------------------------------------------
    def heartbeat_forever(self, stop: threading.Event, every: float = 1.0) -> None:
        while not stop.wait(every):
            try:
                if self.publisher.needs_republish():
                    log.warning("Redis lost the published sketches; publishing them again")
                    self.republish_all()
                    self.publisher.mark_published()
                self.publisher.heartbeat(self.state.batch_id, self.last_batch_seconds)
            except Exception as e:  # Redis away: keep trying, the batch loop will too
                log.warning("heartbeat failed: %s", e)


def build_spark(master: str | None, shards: int, app_name: str = "tidemark-worker"):
    import os
    import sys

    from pyspark.sql import SparkSession

    # Spark's Python helpers (the streaming source runner among them) start
    # PYSPARK_PYTHON, not the driver's interpreter: point them at this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = {
        "spark.sql.shuffle.partitions": str(shards),
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.minBatchesToRetain": "20",
    }
    if not master or master.startswith("local"):
        # On a cluster the executors' Python is the cluster's business (spark-defaults).
        conf["spark.pyspark.python"] = sys.executable
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def start(spark, redis_url: str, checkpoint: str, shards: int, trigger: str = "1 second",
          worker_cls: type[Worker] = Worker):
    """Start the streaming query; returns ``(query, worker, stop_event)``."""
    from workers.source import RedisChunkSource

    spark.dataSource.register(RedisChunkSource)
    worker = worker_cls(spark, redis_url, checkpoint.rstrip("/") + "/state", shards)
    worker.republish_all()
    stop = threading.Event()
    threading.Thread(target=worker.heartbeat_forever, args=(stop,), daemon=True).start()
    stream = (
        spark.readStream.format("tidemark-redis")
        .option("redis_url", redis_url)
        .option("shards", str(shards))
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(worker.apply_batch)
        .option("checkpointLocation", checkpoint.rstrip("/") + "/spark")
        .trigger(processingTime=trigger)
        .start()
    )
    return query, worker, stop


def main(redis_url: str, checkpoint: str, master: str | None = None, shards: int = 2,
         trigger: str = "1 second") -> None:
    import signal

    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = build_spark(master, shards)
    spark.sparkContext.setLogLevel("WARN")
    query, worker, stop = start(spark, redis_url, checkpoint, shards, trigger)

    def shutdown(*_):
        stop.set()
        query.stop()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    print("tidemark worker: streaming from Redis", flush=True)
    try:
        query.awaitTermination()
    finally:
        stop.set()
        spark.stop()
