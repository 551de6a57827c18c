"""A real standalone Spark cluster (a master and two workers, from the installed PySpark),
the job pointed at it by configuration only, and one worker process killed mid-stream:
every accepted event is still counted exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TEST_SECRET, ApiServer
from tidemark.redis_server import EmbeddedRedis, free_port
from workers.jvm_archive import java_options

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0


def _spark_class(*args: str, env: dict, log: Path) -> subprocess.Popen:
    import pyspark

    home = Path(pyspark.__file__).parent
    return subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env,
                            start_new_session=True, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _events(c) -> int:
    r = c.get("/v1/streams/c")
    return r.json()["status"]["events"] if r.status_code == 200 else 0


def test_standalone_cluster_survives_losing_a_worker(tmp_path):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "TIDEMARK_HASH_SECRET": TEST_SECRET.secret.hex(), "SPARK_LOG_DIR": str(tmp_path)}
    # The cluster's JVMs map the install's class-data archive too, as an operator may have
    # theirs do: its daemons' by SPARK_DAEMON_JAVA_OPTS, the job's by its Spark settings.
    archive = java_options()
    if archive:
        env["SPARK_DAEMON_JAVA_OPTS"] = archive
        env["TIDEMARK_SPARK_CONF"] = json.dumps({"spark.driver.extraJavaOptions": archive,
                                                 "spark.executor.extraJavaOptions": archive})
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs = [_spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(free_port()),
                          env=env, log=tmp_path / "master.log")]
    time.sleep(3)
    workers = [_spark_class("org.apache.spark.deploy.worker.Worker", master_url, "--cores", "1",
                            "--memory", "1g", "--webui-port", str(free_port()),
                            "--work-dir", str(tmp_path / f"work{i}"),
                            env=env, log=tmp_path / f"worker{i}.log") for i in range(2)]
    procs += workers
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url).start()
        job = subprocess.Popen(
            [sys.executable, "-m", "tidemark_cli", "worker", "--redis", server.url,
             "--checkpoint", str(tmp_path / "checkpoint"), "--master", master_url,
             "--partitions", "2"],
            env=env, start_new_session=True, stdout=(tmp_path / "job.log").open("wb"),
            stderr=subprocess.STDOUT)
        procs.append(job)
        sent = 0
        try:
            with api.client() as c:
                assert c.put("/v1/streams/c", json={"max_window": "1h", "shards": 2}).status_code == 201
                deadline = time.monotonic() + 420
                while _events(c) == 0 or sent < 10_000:
                    assert time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
                    batch = [{"ts": T0 + (sent + i) * 0.001} for i in range(1000)]
                    r = c.post("/v1/streams/c/events", json=batch)
                    sent += r.json()["accepted"] if r.status_code == 202 else 0
                    time.sleep(0.1)
                _kill(workers[0])  # an executor's host goes away mid-stream
                for _ in range(10):
                    r = c.post("/v1/streams/c/events",
                               json=[{"ts": T0 + (sent + i) * 0.001} for i in range(1000)])
                    sent += r.json()["accepted"] if r.status_code == 202 else 0
                deadline = time.monotonic() + 420
                while _events(c) < sent:
                    assert time.monotonic() < deadline, f"{_events(c)} of {sent} events"
                    time.sleep(0.5)
                time.sleep(2)
                status = c.get("/v1/streams/c").json()["status"]
                assert status["events"] == sent and status["late_dropped"] == 0
        finally:
            for p in reversed(procs):
                _kill(p)
            api.stop()
