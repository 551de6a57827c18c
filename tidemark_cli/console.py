"""What ``tidemark up`` and ``demo`` say on the terminal: their own phases, the URL and the
key, then one line per event that matters — never the engine's chatter.

Spark and the JVM write dozens of warnings and ``[Stage N: …]`` bars; the services' output
goes to log files under the run directory instead (``logs/worker.log``, ``logs/api.log``;
``--verbose`` keeps it on the terminal). Phases are watched from the outside, as a user
would: Redis answers, the worker's heartbeat names a running query, the API answers
``/healthz``, and ``/readyz`` says the first batch is through. On a terminal the phase
being waited for is one line redrawn in place; elsewhere (a pipe, a log) each phase is one
line when it is done.

Tested by: tests/test_operations.py (_first_start: the phases, no engine chatter).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

__all__ = ["Console", "PHASES", "Watch"]

PHASES = ("Redis", "worker", "API", "first batch")
_SPIN = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Console:
    def __init__(self, out: TextIO | None = None, monotonic: Callable[[], float] = time.monotonic):
        self.out = out or sys.stdout
        self.monotonic = monotonic
        self.started = monotonic()
        self.done: dict[str, float] = {}
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self._drawn = False
        self._spin = 0

    def _clear(self) -> None:
        if self._drawn:
            self.out.write("\r\033[2K")
            self._drawn = False

    def say(self, line: str) -> None:
        """One line that stays (an event, the URL)."""
        self._clear()
        self.out.write(line + "\n")
        self.out.flush()

    def phase_done(self, phase: str, detail: str = "") -> None:
        if phase in self.done:
            return
        self.done[phase] = self.monotonic() - self.started
        self.say(f"  ✓ {phase:<12} {self.done[phase]:5.1f} s" + (f"  {detail}" if detail else ""))

    def waiting(self) -> str | None:
        """The first phase not done yet (None when all are)."""
        return next((p for p in PHASES if p not in self.done), None)

    def tick(self, note: str = "") -> None:
        """Redraw the line of the phase being waited for (terminals only)."""
        phase = self.waiting()
        if not self.tty or phase is None:
            return
        self._spin = (self._spin + 1) % len(_SPIN)
        self._clear()
        self.out.write(f"  {_SPIN[self._spin]} {phase:<12} {self.monotonic() - self.started:5.1f} s"
                       + (f"  {note}" if note else ""))
        self.out.flush()
        self._drawn = True


class Watch:
    """Turns what ``up`` polls into event lines, each said once when it changes: the
    worker not processing (and why), back-pressure, a stream that failed or recovered."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.why: str | None = None
        self.failed: dict[str, str] = {}

    def readiness(self, ready: bool | None, body: dict | None) -> None:
        """``/readyz`` as seen now (None: the API did not answer; the supervisor says why)."""
        if ready is None:
            return
        why = None
        if not ready:
            reasons = (body or {}).get("why") or {}
            why = "; ".join(f"{service}: {text}" for service, text in sorted(reasons.items())) or "not ready"
        if why == self.why:
            return
        if why is None:
            self.say("tidemark up: " + ("back-pressure off; " if "waiting" in (self.why or "") else "")
                     + "ready again")
        elif "waiting" in why:
            self.say(f"tidemark up: back-pressure on: {why}")
        else:
            self.say(f"tidemark up: not ready: {why}")
        self.why = why

    def streams(self, failed: dict[str, str]) -> None:
        """The streams whose status says ``failed`` now, with why."""
        for name, why in sorted(failed.items()):
            if self.failed.get(name) != why:
                self.say(f"tidemark up: stream {name!r} failed: {why}")
        for name in sorted(set(self.failed) - set(failed)):
            self.say(f"tidemark up: stream {name!r} recovered")
        self.failed = dict(failed)
