"""The spare worker of ``tidemark up``: when it is started, when it takes over, what happens
when it dies; with real child processes that behave as ``tidemark worker --standby`` does
(wait for ``go`` on standard input, exit when it closes), on a fake clock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tidemark_cli.standby import WorkerSlot
from workers.job import stand_by

# A worker: with "standby" it waits for a line "go" (then writes "started" to its file and
# runs) and exits 0 when its standard input closes first.
WORKER = """
import sys, time
out = open(sys.argv[1], "a")
if sys.argv[2] == "standby":
    for line in sys.stdin:
        if line.strip() == "go":
            break
    else:
        sys.exit(0)
out.write("started\\n"); out.flush()
time.sleep(60)
"""


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _stop(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc is not None and proc.stdin:
        proc.stdin.close()


@pytest.fixture
def slot(tmp_path):
    """``(slot, clock, spawned, logs)``; every process it spawned is stopped after."""
    clock, spawned, logs = Clock(), [], []

    def spawn(standby: bool):
        out = tmp_path / f"worker-{len(spawned)}.txt"
        out.touch()
        proc = subprocess.Popen([sys.executable, "-c", WORKER, str(out),
                                 "standby" if standby else "now"],
                                stdin=subprocess.PIPE if standby else None)
        spawned.append((proc, out, standby))
        return proc

    slot = WorkerSlot(spawn, _stop, logs.append, settle=20.0, monotonic=clock)
    yield slot, clock, spawned, logs
    slot.close()
    for proc, _, _ in spawned:
        _stop(proc)


def _with_a_spare(slot, clock):
    """Start the worker, let it settle, start the spare; the worker."""
    worker = slot.start()
    clock.now = 25.0
    slot.tend(worker_processing=True)
    return worker


def _wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_spare_comes_only_once_the_worker_processes_and_has_settled(slot):
    slot, clock, spawned, logs = slot
    worker = slot.start()  # no spare yet: a fresh worker, not a standby
    assert spawned == [(worker, spawned[0][1], False)]
    slot.tend(worker_processing=True)
    assert len(spawned) == 1  # not within `settle` s of the worker's start
    clock.now = 25.0
    slot.tend(worker_processing=False)
    assert len(spawned) == 1  # nor while the worker does not process
    slot.tend(worker_processing=True)
    assert len(spawned) == 2 and spawned[1][2] is True and slot.spare is spawned[1][0]
    assert logs[-1] == f"tidemark up: standby worker started (pid {slot.spare.pid})"
    slot.tend(worker_processing=True)
    assert len(spawned) == 2  # one spare at a time


def test_the_spare_takes_over_when_told_and_the_next_spare_waits_for_the_settle(slot):
    slot, clock, spawned, logs = slot
    first = _with_a_spare(slot, clock)
    spare, spare_out = spawned[1][0], spawned[1][1]
    assert spare_out.read_text() == ""  # standing by: nothing started
    _stop(first)  # the supervisor reaps the dead worker before it starts the next
    taken = slot.start()
    assert taken is spare and slot.spare is None and len(spawned) == 2
    assert logs[-1] == f"tidemark up: the standby worker (pid {spare.pid}) takes over"
    _wait_for(lambda: spare_out.read_text() == "started\n")
    slot.tend(True)
    assert len(spawned) == 2  # the promoted worker settles first
    clock.now = 46.0
    slot.tend(True)
    assert len(spawned) == 3 and spawned[2][2] is True


def test_a_dead_spare_is_replaced_after_a_backoff_and_never_promoted(slot):
    slot, clock, spawned, logs = slot
    _with_a_spare(slot, clock)
    spawned[1][0].kill()
    spawned[1][0].wait()
    slot.tend(True)
    assert slot.spare is None and "the standby worker exited (-9); another in 30 s" in logs[-1]
    clock.now = 54.0
    slot.tend(True)
    assert len(spawned) == 2
    clock.now = 55.0
    slot.tend(True)
    assert len(spawned) == 3
    spawned[2][0].kill()  # dies again: the wait doubles
    spawned[2][0].wait()
    slot.tend(True)
    assert "another in 60 s" in logs[-1]
    clock.now = 200.0
    slot.tend(True)
    spawned[3][0].kill()
    spawned[3][0].wait()
    worker = slot.start()  # the worker died too: the dead spare is not told, a fresh one starts
    assert worker is spawned[4][0] and spawned[4][2] is False
    _wait_for(lambda: spawned[4][1].read_text() == "started\n")


def test_a_spare_exits_when_its_pipe_closes(slot):
    slot, clock, spawned, _ = slot
    _with_a_spare(slot, clock)
    slot.spare.stdin.close()  # `up` is gone
    assert slot.spare.wait(10) == 0
    assert spawned[1][1].read_text() == ""


def test_stand_by_starts_on_go_only():
    never = threading.Event()
    assert stand_by(None, never, warm_workers=False, lines=iter(["hello\n", "go\n"]))
    beats = []

    def slow_lines():
        time.sleep(0.5)
        yield "go\n"

    assert stand_by(None, never, warm_workers=False, lines=slow_lines(),
                    beat=lambda: beats.append(1))
    assert beats  # it told Redis it stands by while it waited
    assert not stand_by(None, never, warm_workers=False, lines=iter(["gone\n"]))  # pipe closed
    stopping, pipe = threading.Event(), threading.Event()

    def lines():  # a pipe nobody writes to
        pipe.wait()
        yield "go\n"

    threading.Timer(0.3, stopping.set).start()
    started = time.monotonic()
    assert not stand_by(None, stopping, warm_workers=False, lines=lines())
    assert time.monotonic() - started < 2  # SIGTERM while standing by stops it at once
    pipe.set()


def test_up_stops_a_spare_at_once_even_one_that_does_not_yet_heed_sigterm(tmp_path):
    """A spare still starting its JVM handles SIGTERM only once its Spark session is up;
    ``up``'s stop must not wait for that (it has no query to stop)."""
    from tidemark_cli.main import _services

    deaf = "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" \
           "print('deaf', flush=True)\ntime.sleep(120)\n"
    spare = subprocess.Popen([sys.executable, "-c", deaf], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             start_new_session=True)
    assert spare.stdout.readline() == b"deaf\n"

    class Args:
        redis, checkpoint, master, host, port, verbose = None, str(tmp_path), None, "127.0.0.1", 1, True

    class Settings:
        standby_worker, spark_master, checkpoint, redis_url = True, None, str(tmp_path), None

    _, _, slot = _services(Args, Settings, tmp_path, {}, {})
    slot.spare = spare
    started = time.monotonic()
    slot.close()
    assert spare.poll() == -9 and time.monotonic() - started < 5
