"""Keeps the services of ``tidemark up`` running (a service: one supervised process with
whatever it starts, such as the worker and its JVM; not a summary's part). A service that
dies is restarted at once the first time, then after an exponential backoff while it keeps
failing; only a crash loop (``max_failures`` failures of one service within ``window``
seconds) stops everything.

Each service is a ``start()`` that returns a handle with ``poll()`` (``None`` while it runs,
else its exit status, like ``subprocess.Popen``) and a ``stop(handle)`` that also reaps
what the service left behind (Spark's JVM and Python workers). The supervisor writes what it
did (pids, restarts, last exit) to a small JSON file that the API's ``/metrics`` reads.

What every loop that owns processes needs is here too: ``stop_on_signals`` (the stop
request of ``tidemark up`` and ``tidemark api``) and ``terminate`` (SIGTERM, then SIGKILL
after a grace).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Service", "Supervisor", "GiveUp", "describe_exit", "read_state", "stop_on_signals",
           "terminate", "STATE_FILE", "SERVICES_KEY"]

# The supervisor's state file in a run directory: `tidemark up` writes it, /metrics reads it.
STATE_FILE = "supervisor.json"
# The file's key for its services: "parts" is the file's own word, kept because other
# processes (an API of another version, the operations tests, the bench) read it.
SERVICES_KEY = "parts"


class GiveUp(RuntimeError):
    """A service keeps failing: restarting it again would only hide the cause."""


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM or SIGINT sets: what a supervising loop checks between rounds,
    so a stop is noticed there, never in the middle of starting or reaping a process."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    return stopping


def terminate(process: subprocess.Popen, grace: float) -> None:
    """Stop ``process`` with SIGTERM, or SIGKILL once ``grace`` seconds have not been enough
    (a process that will not finish must not hold up a stop); reaped either way."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def describe_exit(code: int | str) -> str:
    if isinstance(code, str):
        return code
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Service:
    name: str
    start: Callable[[], Any]
    stop: Callable[[Any], None]
    handle: Any = None
    restarts: int = 0
    last_exit: str = ""
    restart_at: float | None = None  # set while the service waits out its backoff
    failures: deque = field(default_factory=deque)  # times of its recent failures

    @property
    def pid(self) -> int | None:
        return getattr(self.handle, "pid", None)


class Supervisor:
    def __init__(self, services: list[Service], max_failures: int = 5, window: float = 60.0,
                 base_delay: float = 0.5, max_delay: float = 30.0,
                 state_file: str | os.PathLike | None = None,
                 log: Callable[[str], None] = print, monotonic: Callable[[], float] = time.monotonic):
        self.services = services
        self.max_failures, self.window = max_failures, window
        self.base_delay, self.max_delay = base_delay, max_delay
        self.state_file = Path(state_file) if state_file else None
        self.log, self.monotonic = log, monotonic

    def start(self) -> None:
        """Start every service in order (a service that fails to start at all is an error)."""
        for service in self.services:
            service.handle = service.start()
        self._write_state()

    def delay(self, failures: int) -> float:
        """Seconds to wait before the restart that follows ``failures`` recent failures:
        none after a lone failure (a crash or a kill is not a loop, and every second of
        the wait is a second without answers), then ``base_delay`` doubling."""
        if failures <= 1:
            return 0.0
        return min(self.max_delay, self.base_delay * 2 ** (failures - 2))

    def tick(self) -> None:
        """Notice dead services and restart those whose backoff is over; raises ``GiveUp``."""
        now = self.monotonic()
        for service in self.services:
            if service.restart_at is None:
                code = service.handle.poll() if service.handle is not None else "is not running"
                if code is None:
                    continue
                self._failed(service, describe_exit(code), now)
            if service.restart_at is not None and now >= service.restart_at:
                service.restart_at = None
                try:
                    service.handle = service.start()
                except Exception as e:  # noqa: BLE001 — a failed start is one more failure
                    service.handle = None
                    self._failed(service, f"could not start: {e}", now)
                    continue
                service.restarts += 1
                self.log(f"tidemark up: {service.name} restarted (pid {service.pid}, restart "
                         f"{service.restarts})")
                self._write_state()

    def _failed(self, service: Service, why: str, now: float) -> None:
        try:
            service.stop(service.handle)  # reap what it left behind before a new one starts
        except Exception:  # noqa: BLE001
            pass
        service.last_exit = why
        service.failures.append(now)
        while service.failures and now - service.failures[0] > self.window:
            service.failures.popleft()
        recent = len(service.failures)
        self._write_state()
        if recent >= self.max_failures:
            raise GiveUp(f"{service.name} {why} and failed {recent} times within "
                         f"{self.window:g} s; stopping everything")
        wait = self.delay(recent)
        service.restart_at = now + wait
        self.log(f"tidemark up: {service.name} {why}; restarting in {wait:.1f} s "
                 f"({recent} failure(s) in the last {self.window:g} s, {service.restarts} "
                 "restart(s) so far)")

    def stop(self) -> None:
        """Stop every service, last started first; the state file goes with them."""
        for service in reversed(self.services):
            if service.handle is not None:
                try:
                    service.stop(service.handle)
                except Exception as e:  # noqa: BLE001 — stop the others regardless
                    self.log(f"tidemark up: stopping {service.name}: {e}")
        if self.state_file:
            self.state_file.unlink(missing_ok=True)

    def _write_state(self) -> None:
        if not self.state_file:
            return
        # Read by /metrics (app/routes/health.py, the gauge tidemark_part_restarts{part=...},
        # whose names stay: "part" there is a service) and by the operations tests and bench.
        state = {"pid": os.getpid(), SERVICES_KEY: {
            s.name: {"pid": s.pid, "restarts": s.restarts, "last_exit": s.last_exit,
                     "running": s.restart_at is None and s.handle is not None}
            for s in self.services}}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_file)


def read_state(path: str | os.PathLike) -> dict | None:
    """The state a live supervisor wrote (None when there is none, or its writer is gone)."""
    try:
        state = json.loads(Path(path).read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state
