"""A class-data archive of the local driver JVM (the JDK's dynamic CDS archive): a worker's
JVM maps Spark's classes, already parsed and verified, instead of loading them from the
jars. On a 2-core machine a Spark session took 3.6–4.6 s with it and 7–8 s without, and
the query's planning ran about a second faster; every worker start, spare and restart
gains that.

The archive is made once per Java installation and set of Spark jars, by a short run that
does what a worker's start and first batches do (a session, a Python streaming source, a
grouped stateful Python function over the RocksDB state store, a few batches), and kept in
this environment's ``share/tidemark`` (``make`` runs ``python -m workers.jvm_archive``).
:func:`java_options` names it for a local master when it exists. Nothing depends on it:
a JVM that finds the archive does not match (another JDK build, another class path) runs
without it (``-Xshare:auto``, Java's default), and ``TIDEMARK_JVM_ARCHIVE=off`` leaves it
out. On a cluster the executors' JVMs are the cluster's business.

Tested by: tests/workers/test_jvm_archive.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

__all__ = ["archive_path", "java_options", "make_archive"]


def _java_home() -> Path | None:
    """The JDK ``spark-submit`` runs: ``JAVA_HOME``'s, else the ``java`` on the path."""
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else None
    if java is None or not java.exists():
        found = shutil.which("java")
        java = Path(found) if found else None
    return java.resolve().parent.parent if java else None


def _identity(java_home: Path) -> str:
    """What the archive belongs to: the JVM's library and the jars on Spark's class path
    (names and sizes), so another JDK build or Spark version gets its own archive."""
    import pyspark

    parts = []
    for lib in sorted(java_home.glob("lib/server/libjvm.*")) + sorted(java_home.glob("lib/modules")):
        st = lib.stat()
        parts.append(f"{lib}:{st.st_size}:{st.st_mtime_ns}")
    jars = Path(pyspark.__file__).parent / "jars"
    parts += [f"{j.name}:{j.stat().st_size}" for j in sorted(jars.glob("*.jar"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path | None:
    """Where this environment's archive is (or would be); None without a Java or when
    ``TIDEMARK_JVM_ARCHIVE=off``."""
    if os.environ.get("TIDEMARK_JVM_ARCHIVE", "").lower() == "off":
        return None
    home = _java_home()
    if home is None:
        return None
    return Path(sys.prefix, "share", "tidemark", f"spark-driver-{_identity(home)}.jsa")


def java_options() -> str:
    """The driver JVM's option naming the archive, or "" when there is none."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path}" if path is not None and path.exists() else ""


def make_archive(timeout: float = 600.0) -> Path | None:
    """Make the archive unless it exists (written under a temporary name and renamed, so
    a concurrent run or a reader never sees half of one); its path, or None without Java.
    Raises when the run fails."""
    path = archive_path()
    if path is None or path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        subprocess.run([sys.executable, "-m", "workers.jvm_archive", "--dump", str(partial)],
                       check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        if not partial.exists():
            raise RuntimeError("the JVM wrote no class-data archive")
        os.replace(partial, path)
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"making the JVM's class-data archive failed: {e.stderr.decode()[-2000:]}") from None
    finally:
        partial.unlink(missing_ok=True)
    return path


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


def _dump(target: str) -> None:
    """The archive's run (in its own process: the JVM writes the archive as it exits)."""
    import tempfile

    from pyspark.sql.streaming.state import GroupStateTimeout

    from workers.job import LOCAL_CONF, build_spark
    # by module name, not __main__'s copies: the Python workers import them
    from workers.jvm_archive import Ticks, count_in_state

    how = os.environ.get("DUMPOPT") or f"-XX:ArchiveClassesAtExit={target}"
    options = (f"{LOCAL_CONF['spark.driver.extraJavaOptions']} {how} "
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
    if sys.argv[1:2] == ["--dump"]:
        _dump(sys.argv[2])
    else:  # the install's step: an archive not made only costs its speed, so it is said, not fatal
        try:
            made = make_archive()
            print(f"JVM class-data archive: {made}" if made else "JVM class-data archive: none (no Java, or off)")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"JVM class-data archive not made; Spark starts without it: {e}", file=sys.stderr)
