"""The run whose JVM writes the driver's class-data archive (``workers.jvm_archive``): in
small, what a worker's start and first batches make the JVM load. Its own process, started
by ``jvm_archive.make_archive``: the JVM writes the archive as it exits.

Tested by: tests/workers/test_jvm_archive.py (the run's Spark session maps the archive this
run made at install).
"""

from __future__ import annotations

import sys

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

__all__ = ["dump"]


class _Tick(InputPartition):
    def __init__(self, batch: int):
        self.batch = batch


class _TickReader(DataSourceStreamReader):
    """One batch of a few rows for each offset asked: a worker's Python source, in small."""

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        return {"batch": (start or {"batch": 0})["batch"] + 1}

    def partitions(self, start: dict, end: dict):
        return [_Tick(b) for b in range(start["batch"], end["batch"])]

    def read(self, partition: _Tick):
        for shard in range(4):
            yield ("archive", shard, bytes([partition.batch % 256]) * 64)

    def commit(self, end: dict) -> None:
        pass


class Ticks(DataSource):
    SCHEMA = "stream string, shard int, chunk binary"

    @classmethod
    def name(cls) -> str:
        return "tidemark-jvm-archive-ticks"

    def schema(self):
        return self.SCHEMA

    def streamReader(self, schema):
        return _TickReader()


def count_in_state(key, frames, state):
    """A grouped stateful function in small: events counted in the group's state."""
    import pandas as pd

    events = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((events,))
    yield pd.DataFrame({"stream": [key[0]], "shard": [key[1]], "events": [events]})


def dump(target: str) -> None:
    """The archive's run; the JVM writes the archive to ``target`` as it exits."""
    import tempfile

    from pyspark.sql.streaming.state import GroupStateTimeout

    from workers.job import LOCAL_CONF, build_spark
    # by module name, not __main__'s copies: the Python workers import them
    from workers.jvm_archive_run import Ticks, count_in_state

    options = (f"{LOCAL_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={target} "
               "-Xlog:cds=off -Xlog:cds+dynamic=off")
    spark = build_spark("local[2]", 2, app_name="tidemark-jvm-archive",
                        conf={"spark.driver.extraJavaOptions": options,
                              "spark.sql.streaming.noDataMicroBatches.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Ticks)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (spark.readStream.format(Ticks.name()).schema(Ticks.SCHEMA).load()
                 .groupBy("stream", "shard")
                 .applyInPandasWithState(count_in_state, "stream string, shard int, events long",
                                         "events long", "Update", GroupStateTimeout.NoTimeout)
                 .writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start())
        try:
            while (query.lastProgress or {}).get("batchId", -1) < 1:  # a first batch and a later one
                query.awaitTermination(0.2)
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
        finally:
            query.stop()
    gateway = spark.sparkContext._gateway.proc  # the JVM: it exits (and writes) when its stdin closes
    spark.stop()
    gateway.stdin.close()
    gateway.wait(300)


if __name__ == "__main__":
    dump(sys.argv[1])
