"""A class-data archive of the local driver JVM (the JDK's dynamic CDS archive): a worker's
JVM maps Spark's classes, already parsed and verified, instead of loading them from the
jars. On a 2-core machine a Spark session took 3.1–4.2 s with it and 6.7–9.8 s without,
and the query's planning 2.3–2.7 s instead of 3.6–4.3; every worker start, spare and
restart gains that.

The archive is made once per Java installation and set of Spark jars, by a short run that
does what a worker's start does (``workers.jvm_archive_run``: 36 s), and kept in this
environment's ``share/tidemark`` (``make`` runs ``python -m workers.jvm_archive``).
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
        subprocess.run([sys.executable, "-m", "workers.jvm_archive_run", str(partial)],
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


if __name__ == "__main__":
    # the install's step: an archive not made only costs its speed, so it is said, not fatal
    try:
        made = make_archive()
        print(f"JVM class-data archive: {made}" if made else "JVM class-data archive: none (no Java, or off)")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"JVM class-data archive not made; Spark starts without it: {e}", file=sys.stderr)
