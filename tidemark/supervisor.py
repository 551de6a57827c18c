"""Keeps the parts of ``tidemark up`` running: a part that dies is restarted at once the
first time, then after an exponential backoff while it keeps failing; only a crash loop (``max_failures`` failures of one part within
``window`` seconds) stops everything.

Each part is a ``start()`` that returns a handle with ``poll()`` (``None`` while it runs,
else its exit status, like ``subprocess.Popen``) and a ``stop(handle)`` that also reaps
what the part left behind (Spark's JVM and Python workers). The supervisor writes what it
did (pids, restarts, last exit) to a small JSON file that the API's ``/metrics`` reads.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Part", "Supervisor", "GiveUp", "describe_exit", "read_state", "STATE_FILE"]

# The supervisor's state file in a run directory: `tidemark up` writes it, /metrics reads it.
STATE_FILE = "supervisor.json"


class GiveUp(RuntimeError):
    """A part keeps failing: restarting it again would only hide the cause."""


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
class Part:
    name: str
    start: Callable[[], Any]
    stop: Callable[[Any], None]
    handle: Any = None
    restarts: int = 0
    last_exit: str = ""
    restart_at: float | None = None  # set while the part waits out its backoff
    failures: deque = field(default_factory=deque)  # times of its recent failures

    @property
    def pid(self) -> int | None:
        return getattr(self.handle, "pid", None)


class Supervisor:
    def __init__(self, parts: list[Part], max_failures: int = 5, window: float = 60.0,
                 base_delay: float = 0.5, max_delay: float = 30.0,
                 state_file: str | os.PathLike | None = None,
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic):
        self.parts = parts
        self.max_failures, self.window = max_failures, window
        self.base_delay, self.max_delay = base_delay, max_delay
        self.state_file = Path(state_file) if state_file else None
        self.log, self.clock = log, clock

    def start(self) -> None:
        """Start every part in order (a part that fails to start at all is an error)."""
        for part in self.parts:
            part.handle = part.start()
        self._write_state()

    def delay(self, failures: int) -> float:
        """Seconds to wait before the restart that follows ``failures`` recent failures:
        none after a lone failure (a crash or a kill is not a loop, and every second of
        the wait is a second without answers), then ``base_delay`` doubling."""
        if failures <= 1:
            return 0.0
        return min(self.max_delay, self.base_delay * 2 ** (failures - 2))

    def tick(self) -> None:
        """Notice dead parts and restart those whose backoff is over; raises ``GiveUp``."""
        now = self.clock()
        for part in self.parts:
            if part.restart_at is None:
                code = part.handle.poll() if part.handle is not None else "is not running"
                if code is None:
                    continue
                self._failed(part, describe_exit(code), now)
            if part.restart_at is not None and now >= part.restart_at:
                part.restart_at = None
                try:
                    part.handle = part.start()
                except Exception as e:  # noqa: BLE001 — a failed start is one more failure
                    part.handle = None
                    self._failed(part, f"could not start: {e}", now)
                    continue
                part.restarts += 1
                self.log(f"tidemark up: {part.name} restarted (pid {part.pid}, restart "
                         f"{part.restarts})")
                self._write_state()

    def _failed(self, part: Part, why: str, now: float) -> None:
        try:
            part.stop(part.handle)  # reap what it left behind before a new one starts
        except Exception:  # noqa: BLE001
            pass
        part.last_exit = why
        part.failures.append(now)
        while part.failures and now - part.failures[0] > self.window:
            part.failures.popleft()
        recent = len(part.failures)
        self._write_state()
        if recent >= self.max_failures:
            raise GiveUp(f"{part.name} {why} and failed {recent} times within "
                         f"{self.window:g} s; stopping everything")
        wait = self.delay(recent)
        part.restart_at = now + wait
        self.log(f"tidemark up: {part.name} {why}; restarting in {wait:.1f} s "
                 f"({recent} failure(s) in the last {self.window:g} s, {part.restarts} "
                 "restart(s) so far)")

    def stop(self) -> None:
        """Stop every part, last started first; the state file goes with them."""
        for part in reversed(self.parts):
            if part.handle is not None:
                try:
                    part.stop(part.handle)
                except Exception as e:  # noqa: BLE001 — stop the others regardless
                    self.log(f"tidemark up: stopping {part.name}: {e}")
        if self.state_file:
            self.state_file.unlink(missing_ok=True)

    def _write_state(self) -> None:
        if not self.state_file:
            return
        state = {"pid": os.getpid(), "parts": {
            p.name: {"pid": p.pid, "restarts": p.restarts, "last_exit": p.last_exit,
                     "running": p.restart_at is None and p.handle is not None}
            for p in self.parts}}
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
