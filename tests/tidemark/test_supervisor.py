"""The supervisor's restart, backoff and give-up rules, on a fake clock and fake services."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tidemark.supervisor import GiveUp, Service, Supervisor, describe_exit, read_state


class FakeProcess:
    def __init__(self, pid: int):
        self.pid, self.code = pid, None

    def poll(self):
        return self.code


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _supervised(tmp_path, **kw):
    clock, started, stopped, logs = Clock(), [], [], []

    def start():
        started.append(FakeProcess(100 + len(started)))
        return started[-1]

    service = Service("worker", start, stopped.append)
    sup = Supervisor([service], monotonic=clock, log=logs.append, state_file=tmp_path / "sup.json", **kw)
    sup.start()
    return sup, service, clock, started, stopped, logs


def test_a_dead_service_is_restarted_at_once_then_after_a_doubling_backoff_and_reaped_first(tmp_path):
    sup, service, clock, started, stopped, logs = _supervised(tmp_path, base_delay=0.5, window=60)
    started[-1].code = -9
    sup.tick()  # a lone failure: reaped and started again in the same tick
    assert stopped[-1] is started[0] and len(started) == 2 and service.restarts == 1
    assert "worker was killed by SIGKILL; restarting in 0.0 s (1 failure(s)" in logs[-2]
    assert logs[-1] == f"tidemark up: worker restarted (pid {started[-1].pid}, restart 1)"
    for n, wait in enumerate([0.5, 1.0, 2.0], start=2):
        started[-1].code = -9
        sup.tick()
        assert stopped[-1] is started[-1]  # its leftovers are reaped before the wait
        assert f"worker was killed by SIGKILL; restarting in {wait:.1f} s ({n} failure(s)" in logs[-1]
        clock.now += wait - 0.01
        sup.tick()
        assert len(started) == n  # not before its backoff is over
        clock.now += 0.01
        sup.tick()
        assert len(started) == n + 1 and service.restarts == n
        assert logs[-1] == f"tidemark up: worker restarted (pid {started[-1].pid}, restart {n})"
    state = json.loads((tmp_path / "sup.json").read_text())
    assert state["parts"]["worker"] == {"pid": started[-1].pid, "restarts": 4, "running": True,
                                        "last_exit": "was killed by SIGKILL"}
    assert read_state(tmp_path / "sup.json") == state  # its writer (this process) is alive


def test_repeated_failure_within_the_window_gives_up_with_one_clear_line(tmp_path):
    sup, service, clock, started, stopped, logs = _supervised(tmp_path, max_failures=3, window=60)
    for _ in range(2):
        started[-1].code = 1
        sup.tick()
        clock.now += 30
        sup.tick()
    started[-1].code = 1
    with pytest.raises(GiveUp, match=r"^worker exited with status 1 and failed 3 times within "
                                     r"60 s; stopping everything$"):
        sup.tick()
    sup.stop()
    assert not (tmp_path / "sup.json").exists()


def test_failures_further_apart_than_the_window_never_give_up_and_reset_the_backoff(tmp_path):
    sup, service, clock, started, stopped, logs = _supervised(tmp_path, max_failures=2, window=60)
    for _ in range(5):
        started[-1].code = 1
        sup.tick()
        assert "restarting in 0.0 s (1 failure(s)" in logs[-2]
        clock.now += 61
        sup.tick()
    assert service.restarts == 5


def test_a_start_that_raises_counts_as_a_failure(tmp_path):
    clock, logs, calls = Clock(), [], []

    def start():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("redis-server did not start in time")
        return FakeProcess(1)

    service = Service("redis", start, lambda _: None)
    sup = Supervisor([service], max_failures=3, monotonic=clock, log=logs.append)
    sup.start()
    service.handle.code = 0
    sup.tick()  # exited, restarted at once, that start raised: two failures, a backoff
    assert len(calls) == 2 and "redis could not start: redis-server did not start in time; " \
        "restarting in 0.5 s (2 failure(s)" in logs[-1]
    clock.now += 1
    with pytest.raises(GiveUp, match="redis could not start: redis-server did not start in time"):
        sup.tick()


def test_exit_descriptions_and_a_stale_state_file(tmp_path):
    assert describe_exit(-15) == "was killed by SIGTERM"
    assert describe_exit(3) == "exited with status 3"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "sup.json"
    path.write_text(json.dumps({"pid": dead.pid, "parts": {}}))
    assert read_state(path) is None  # left by an `up` that is gone: no restarts shown


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_sets_the_stop_event_and_the_process_goes_on(sig):
    code = ("import os, signal\nfrom tidemark.supervisor import stop_on_signals\n"
            "stopping = stop_on_signals()\nassert not stopping.is_set()\n"
            f"os.kill(os.getpid(), signal.{sig})\nprint(stopping.wait(5))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
