"""Start Spark's Python helpers before the first micro-batch needs them.

A micro-batch of the worker's query uses three kinds of Python helper processes beside the
JVM: the executors' workers that run the shard updater, and the planner's helpers that
create the streaming source and plan each batch's read. Spark starts each on first use
(a second or more apiece on a small machine) and keeps them for reuse
(``spark.python.worker.reuse``). A small job whose every task imports the updater and
loads its compiled kernels starts the executors' workers ahead; reading ``WarmUpSource``,
a batch source made of such tasks, starts the planner's helpers too. The first batch then
finds them ready. Spark stops a worker idle for a minute, so a standby worker warms them
again every half minute.

Tested by: tests/test_operations.py (``tidemark up``'s worker and its standby start and
warm these helpers; no test checks that the first batch finds them ready).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

__all__ = ["WarmUpSource", "warm_up_workers"]

log = logging.getLogger("tidemark.worker")


class WarmUpSource(DataSource):
    """``spark.read.format("tidemark-warm-up").option("tasks", n)``: n partitions, no rows."""

    @classmethod
    def name(cls) -> str:
        return "tidemark-warm-up"

    def schema(self):
        return "id long"

    def reader(self, schema):
        return _WarmUpReader(int(self.options.get("tasks", 1)))


class _WarmUpReader(DataSourceReader):
    def __init__(self, tasks: int):
        self.tasks = tasks

    def partitions(self):
        return [InputPartition(i) for i in range(self.tasks)]

    def read(self, partition):
        import workers.update  # noqa: F401 — the updater's imports
        from tidemark.summary import warm_up

        warm_up()
        return iter(())


def _warm_batches(batches):
    """Runs in each Python worker of the plain warm-up job (``mapInPandas``)."""
    _WarmUpReader(0).read(None)
    yield from batches


def warm_up_workers(spark, tasks: int | None = None, stopping: threading.Event | None = None,
                    done: Callable[[int], None] | None = None,
                    planner: bool = False) -> threading.Thread:
    """Start ``tasks`` (default: Spark's parallelism) executor Python workers with their
    kernels loaded, in a thread: it only overlaps with the driver's work (the first batch's
    tasks queue behind it at worst). With ``planner`` it reads ``WarmUpSource``, which
    also starts the planner's helpers: a second or two more, worth it for a standby, which
    has the time, but not for a first start, whose own planning starts them anyway.
    ``done(tasks)`` is called once they are warm."""
    tasks = tasks or spark.sparkContext.defaultParallelism

    def run():
        if spark.sparkContext.master.startswith("local"):
            try:  # the executor is this JVM: unpack and load RocksDB's native library now,
                # not when the first batch opens its state
                spark.sparkContext._jvm.org.rocksdb.RocksDB.loadLibrary()
            except Exception as e:  # noqa: BLE001 — the state store loads it itself
                log.info("RocksDB not loaded ahead: %s", e)
        try:
            if planner:
                spark.dataSource.register(WarmUpSource)
                job = spark.read.format(WarmUpSource.name()).option("tasks", tasks).load()
            else:
                job = spark.range(tasks, numPartitions=tasks).mapInPandas(_warm_batches, "id long")
            job.write.format("noop").mode("overwrite").save()
            if done:
                done(tasks)
        except Exception as e:  # noqa: BLE001 — only a head start: the batches start their own
            if not (stopping and stopping.is_set()):  # else Spark stopped under it: no news
                log.warning("warming up the Python workers failed: %s", e)

    thread = threading.Thread(target=run, daemon=True, name="tidemark-warm-workers")
    thread.start()
    return thread
