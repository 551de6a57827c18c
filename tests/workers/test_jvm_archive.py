"""The local driver JVM's class-data archive (workers.jvm_archive): made by the install,
named for a local master, really mapped by the JVM; and left out when off or missing."""

from __future__ import annotations

import sys
from pathlib import Path

from workers import jvm_archive
from workers.jvm_archive import archive_path, java_options, make_archive


def test_the_run_s_spark_session_maps_the_archive_the_install_made(spark):
    path = make_archive()  # the install made it; made here (too late for this JVM) it fails
    assert path is not None and path.exists()
    jvm = spark.sparkContext._gateway.proc.pid  # spark-submit execs the driver's JVM
    assert Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
    # Mapped, not only named: a JVM that finds an archive it cannot use unmaps it and goes on.
    assert str(path) in Path(f"/proc/{jvm}/maps").read_text()


def test_no_archive_is_named_when_off_or_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    path = archive_path()
    assert path is not None and path.is_relative_to(tmp_path) and not path.exists()
    assert java_options() == ""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert java_options() == f"-XX:SharedArchiveFile={path}"
    monkeypatch.setenv("TIDEMARK_JVM_ARCHIVE", "off")
    assert archive_path() is None and java_options() == ""


def test_another_spark_or_java_gets_another_archive(monkeypatch, tmp_path):
    home = jvm_archive._java_home()
    assert home is not None and (home / "bin" / "java").exists()
    mine = jvm_archive._identity(home)
    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core.jar").write_bytes(b"x")
    import pyspark

    monkeypatch.setattr(pyspark, "__file__", str(tmp_path / "pyspark" / "__init__.py"))
    assert jvm_archive._identity(home) != mine
