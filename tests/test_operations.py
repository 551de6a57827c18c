"""`tidemark up` as a newcomer first runs it, then healing itself: its terminal shows its
phases and the dashboard's URL with a key it made, none of the engine's chatter; then kill
-9 of the worker (its standby takes over), the API and the embedded Redis in turn, then a
frozen worker, under a steady in-order load sent by the ingest client; every accepted
event counts exactly once, nobody helps, /readyz never says 200 while accepted events wait
uncounted (and says 503 while the worker is frozen), and a SIGTERM stops it all cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tidemark.redis_server import free_port
from tidemark_cli.ingest_client import NDJSON, post_batch

pytestmark = pytest.mark.spark
READY_MAX_WAIT = 5.0
STALE_AFTER = 3.0
# A 200 from /readyz means every event accepted this many seconds ago is counted.
HONEST_WITHIN = READY_MAX_WAIT + 2.0


class Load(threading.Thread):
    """In-order events, 100 per request every 0.1 s, through the retrying client."""

    def __init__(self, url: str, key: str):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {key}"})
        self.accepted, self.sent, self.stop, self.error = 0, 0, threading.Event(), None
        self.t0 = time.time() - 600
        self.history = [(time.monotonic(), 0)]  # (when, accepted so far)

    def run(self):
        try:
            while not self.stop.is_set():
                body = "".join(json.dumps({"ts": self.t0 + (self.sent + i) * 0.001}) + "\n"
                               for i in range(100)).encode()
                self.accepted += post_batch(self.client, "ops", body, NDJSON, retry_for=600)["accepted"]
                self.sent += 100
                self.history.append((time.monotonic(), self.accepted))
                time.sleep(0.1)
        except Exception as e:  # noqa: BLE001 — reported by the test
            self.error = e


class Watch(threading.Thread):
    """Samples the published count and /readyz, in that order, four times a second."""

    def __init__(self, url: str, key: str):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, timeout=2, headers={"Authorization": f"Bearer {key}"})
        self.samples: list[tuple[float, int | None, int | None]] = []  # (time, events, /readyz)
        self.stop = threading.Event()

    def _get(self, path):
        try:
            return self.client.get(path)
        except httpx.HTTPError:
            return None

    def run(self):
        while not self.stop.wait(0.25):
            r = self._get("/v1/streams/ops")
            events = r.json()["status"]["events"] if r is not None and r.status_code == 200 else None
            r = self._get("/readyz")
            self.samples.append((time.monotonic(), events, r.status_code if r is not None else None))

    def events(self) -> int:
        return max((e for _, e, _ in self.samples if e is not None), default=0)

    def dishonest(self, history: list[tuple[float, int]]) -> list[str]:
        """200s from /readyz while events accepted HONEST_WITHIN s before were not counted."""
        bad = []
        for t, events, ready in self.samples:
            if ready != 200 or events is None:
                continue
            due = max((n for when, n in history if when <= t - HONEST_WITHIN), default=0)
            if events < due:
                bad.append(f"200 at {t:.1f} with {events} counted of {due} accepted "
                           f"{HONEST_WITHIN:g} s before")
        return bad


def _wait(what, check, timeout, log, load=None, watch=None):
    """Wait for ``check``; on a timeout (or the load thread's failure) say what the load and
    the watch saw last, and the end of ``tidemark up``'s log."""
    deadline = time.monotonic() + timeout
    while not check():
        failed = load is not None and load.error is not None
        if failed or time.monotonic() >= deadline:
            seen = "" if load is None else (f"load: {load.accepted} accepted of {load.sent} sent, "
                                            f"error {load.error!r}\n")
            seen += "" if watch is None else f"watch, last samples: {watch.samples[-4:]}\n"
            raise AssertionError(f"{what} after {timeout} s:\n{seen}" + _tails(log))
        time.sleep(0.25)


def _tails(log) -> str:
    """The end of `up`'s terminal and of the worker's own log (the engine's output)."""
    worker = log.parent / "run" / "logs" / "worker.log"
    return (log.read_text()[-3000:] + "\n--- worker.log:\n"
            + (worker.read_text(errors="replace")[-3000:] if worker.exists() else ""))


def _first_start(log, port: int, run_dir) -> str:
    """What a newcomer sees up to "Tidemark is up": its own phases and the URL with the
    admin key it made (kept private in the run directory), none of the engine's chatter,
    which goes to the run directory's logs; the key."""
    whole = log.read_text()
    text = whole[:whole.index("Tidemark is up")]
    line = whole[len(text):].splitlines()[0]
    for phase in ("Redis", "worker", "API", "first batch"):
        assert f"✓ {phase}" in text, text
    for chatter in ("WARN", "[Stage", "log4j", "SparkSession", "py4j", "NativeCodeLoader", "INFO"):
        assert chatter not in text, (chatter, text)
    assert len(text.splitlines()) <= 7, text
    assert (run_dir / "logs" / "worker.log").stat().st_size > 0
    key_file = run_dir / "api-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    assert f"http://127.0.0.1:{port}/?key={key} " in line, line
    assert httpx.get(f"http://127.0.0.1:{port}/v1/streams").status_code == 401
    streams = httpx.get(f"http://127.0.0.1:{port}/v1/streams", headers={"Authorization": f"Bearer {key}"})
    assert [s["name"] for s in streams.json()["streams"]] == ["ops"]
    return key


def test_up_first_start_then_kill_9_of_each_part_counting_every_event_once(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = tmp_path / "streams.yaml"
    config.write_text("streams:\n  ops: {max_window: 1h}\n")
    env = {**os.environ, "TIDEMARK_RUN_DIR": str(tmp_path / "run"),
           "TIDEMARK_CHECKPOINT": str(tmp_path / "ckpt"), "TIDEMARK_STATE_PARTITIONS": "2",
           "TIDEMARK_READY_MAX_WAIT": str(READY_MAX_WAIT),
           "TIDEMARK_WORKER_STALE_AFTER": str(STALE_AFTER)}
    for setting in ("REDIS_URL", "TIDEMARK_API_KEYS"):  # a first start: `up` makes its key
        env.pop(setting, None)
    log = tmp_path / "up.log"
    up = subprocess.Popen([sys.executable, "-m", "tidemark_cli", "up", "--config", str(config),
                           "--port", str(port), "--master", "local[2]"], env=env,
                          stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    state_file = tmp_path / "run" / "supervisor.json"
    load = watch = None
    try:
        _wait("not up", lambda: "Tidemark is up" in log.read_text(), 300, log)
        key = _first_start(log, port, tmp_path / "run")
        load, watch = Load(url, key), Watch(url, key)
        load.start()
        _wait("no events counted", lambda: httpx.get(
            f"{url}/v1/streams/ops", headers={"Authorization": f"Bearer {key}"}
        ).json()["status"]["events"] > 0, 400, log)
        watch.start()
        back = {}
        # The worker last: its spare starts after it, and stands by by then.
        for part in ("api", "redis", "worker"):
            time.sleep(3)
            if part == "worker":  # the spare worker stands by (and says so): it takes over
                _wait("no standby worker", lambda: "tidemark_standby_workers 1.0" in httpx.get(
                    f"{url}/metrics", headers={"Authorization": f"Bearer {key}"}).text, 300, log)
            parts = json.loads(state_file.read_text())["parts"]
            before = parts[part]["restarts"]
            accepted = load.accepted
            killed = time.monotonic()
            os.kill(parts[part]["pid"], signal.SIGKILL)
            _wait(f"{part} not restarted", lambda: json.loads(state_file.read_text())["parts"][part]
                  ["restarts"] > before, 120, log)
            # Flowing again: what was accepted after the kill is counted too.
            _wait(f"events not flowing after killing the {part}",
                  lambda: watch.events() >= accepted + 1000, 300, log, load, watch)
            back[part] = round(time.monotonic() - killed, 1)
        print(f"events flowing again after kill -9 of: {back} s")
        # A stuck worker (its JVM frozen; nothing dies, so the supervisor sees nothing):
        # /readyz must say so, and the worker goes on once it thaws.
        worker = json.loads(state_file.read_text())["parts"]["worker"]["pid"]
        jvm = int(subprocess.run(["pgrep", "-P", str(worker), "java"], capture_output=True,
                                 text=True).stdout.split()[0])
        accepted = load.accepted
        os.kill(jvm, signal.SIGSTOP)
        frozen = time.monotonic()
        time.sleep(STALE_AFTER + 3)
        os.kill(jvm, signal.SIGCONT)
        thawed = time.monotonic()
        _wait("events not flowing after the thaw", lambda: watch.events() >= accepted + 1000, 300, log,
              load, watch)
        load.stop.set()
        load.join(150)
        assert load.error is None, repr(load.error)
        _wait("not every event counted", lambda: watch.events() >= load.accepted, 300, log, None, watch)
        time.sleep(2)  # a double count would show by now
        watch.stop.set()
        watch.join(5)
        h = {"Authorization": f"Bearer {key}"}
        status = httpx.get(f"{url}/v1/streams/ops", headers=h).json()["status"]
        assert load.accepted == load.sent > 0
        assert status["events"] == status["received"] == load.accepted, status
        assert status["late_dropped"] == 0
        assert watch.dishonest(load.history) == []
        # It did notice the freeze (and so the honesty check above could fail).
        assert any(ready == 503 for t, _, ready in watch.samples if frozen < t < thawed)
        metrics = httpx.get(f"{url}/metrics", headers=h).text
        for part in ("worker", "api", "redis"):
            assert f'tidemark_part_restarts{{part="{part}"}}' in metrics
        count = httpx.get(f"{url}/v1/streams/ops/count", params={"window": "1h"}, headers=h).json()
        assert count["bound"]["lower"] <= load.accepted <= count["bound"]["upper"], count
        text = log.read_text()
        for part in ("worker", "api", "redis"):
            assert f"tidemark up: {part} was killed by SIGKILL; restarting in" in text
        assert "tidemark up: the standby worker (pid" in text and "takes over" in text
        worker_log = tmp_path / "run" / "logs" / "worker.log"
        worker_before = worker_log.read_bytes()
        up.send_signal(signal.SIGTERM)
        assert up.wait(90) == 0
        assert "Tidemark stopped." in log.read_text()[len(text):]
        stopping = worker_log.read_bytes()[len(worker_before):].decode(errors="replace")
        # a clean stop: the query stopped, no py4j errors
        assert "Py4J" not in stopping and "reentrant call" not in stopping, stopping[-3000:]
    finally:
        for thread in (load, watch):
            if thread is not None:
                thread.stop.set()
        if up.poll() is None:  # failed: stop `up` (and its Redis), then the parts' groups
            os.killpg(up.pid, signal.SIGKILL)
            for part in json.loads(state_file.read_text())["parts"].values() if state_file.exists() else ():
                try:
                    os.killpg(part["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError, TypeError):
                    pass
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == [], f"orphan processes: {left}"
