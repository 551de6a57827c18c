"""The run whose JVM writes the driver's class-data archive (``workers.jvm_archive``): in
small, what a worker's start makes the JVM load (a session, a Python streaming source, a
grouped stateful Python function, the streaming query planned). Its own process, started
by ``jvm_archive.make_archive``: the JVM writes the archive as it exits. The query is not
started: an archive of its first batches as well took 58 s to make instead of 36, and a
session, the planning and the first batch took as long with either (3.1–4.2, 2.3–2.7 and
10.8–11.4 s; 6.7–7.8, 3.6–4.3 and 13.0–13.3 without an archive).

Tested by: tests/workers/test_jvm_archive.py (the run's Spark session maps the archive this
run made at install).
"""

from __future__ import annotations

import sys

from pyspark.sql.datasource import DataSource

__all__ = ["dump"]


class Ticks(DataSource):
    """A Python streaming source as the worker's is declared (never read: not started)."""

    SCHEMA = "stream string, shard int, chunk binary"

    @classmethod
    def name(cls) -> str:
        return "tidemark-jvm-archive-ticks"

    def schema(self):
        return self.SCHEMA


def count_in_state(key, frames, state):
    """A grouped stateful function in small: events counted in the group's state."""
    import pandas as pd

    events = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((events,))
    yield pd.DataFrame({"stream": [key[0]], "shard": [key[1]], "events": [events]})


def dump(target: str) -> None:
    """The archive's run; the JVM writes the archive to ``target`` as it exits."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    from workers.job import LOCAL_CONF, build_spark
    # by module name, not __main__'s copies, as a worker's functions are pickled
    from workers.jvm_archive_run import Ticks, count_in_state

    options = (f"{LOCAL_CONF['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={target} "
               "-Xlog:cds=off -Xlog:cds+dynamic=off")
    spark = build_spark("local[2]", 2, app_name="tidemark-jvm-archive",
                        conf={"spark.driver.extraJavaOptions": options})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Ticks)
    (spark.readStream.format(Ticks.name()).schema(Ticks.SCHEMA).load()
     .groupBy("stream", "shard")
     .applyInPandasWithState(count_in_state, "stream string, shard int, events long", "events long",
                             "Update", GroupStateTimeout.NoTimeout)
     .writeStream.outputMode("update").format("noop").option("checkpointLocation", "unused")
     .trigger(processingTime="1 second"))
    gateway = spark.sparkContext._gateway.proc  # the JVM: it exits (and writes) when its stdin closes
    spark.stop()
    gateway.stdin.close()
    gateway.wait(300)


if __name__ == "__main__":
    dump(sys.argv[1])
