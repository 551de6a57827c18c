"""A spare worker for ``tidemark up``: when the worker dies, one that has already started
its JVM, Spark session and Python workers takes over in a moment.

A worker process is most of its restart time before its query starts (JVM, Spark session,
Python helpers: about 10 s of a 15 s return). The spare is a ``tidemark worker --standby``
that does all of that, plans the query, then waits for the line ``go`` on its standard
input; it exits when that pipe closes (``up`` is gone). ``WorkerSlot.start`` is the worker
service's start for the supervisor: it says ``go`` to a live spare, or starts a fresh worker
when there is none. A new spare is started only once the worker has been processing for a
while, so that it never competes with a recovery for the cores.

Only one query ever runs on the checkpoint: a spare is told ``go`` only after the
supervisor has reaped the worker before it.
"""

from __future__ import annotations

import subprocess
import time
from typing import Callable

__all__ = ["WorkerSlot"]


class WorkerSlot:
    def __init__(self, spawn: Callable[[bool], subprocess.Popen],
                 stop: Callable[[subprocess.Popen | None], None], log: Callable[[str], None],
                 settle: float = 20.0, monotonic: Callable[[], float] = time.monotonic,
                 discard: Callable[[subprocess.Popen], None] | None = None):
        """``spawn(standby)`` starts ``tidemark worker`` (with ``--standby`` and a pipe on
        its standard input when asked); ``stop`` stops a process and what it left behind;
        ``discard`` (``stop`` by default) stops a spare at ``close``, without the grace a
        worker gets: a spare has no query to stop, and one still starting its JVM would not
        see a SIGTERM until its Spark session is up (up to 30 s of ``up``'s stop). A spare
        starts no sooner than ``settle`` seconds after the worker did."""
        self.spawn, self.stop_process, self.log = spawn, stop, log
        self.discard = discard or stop
        self.settle, self.monotonic = settle, monotonic
        self.spare: subprocess.Popen | None = None
        self.spare_at = monotonic() + settle  # no spare before this
        self.spare_failures = 0

    def start(self) -> subprocess.Popen:
        """The worker service's start: promote the spare if there is a live one."""
        spare, self.spare = self.spare, None
        self.spare_at = self.monotonic() + self.settle
        if spare is not None and spare.poll() is None:
            try:
                spare.stdin.write(b"go\n")
                spare.stdin.flush()
                self.log(f"tidemark up: the standby worker (pid {spare.pid}) takes over")
                self.spare_failures = 0
                return spare
            except OSError:  # it died just now
                pass
        if spare is not None:
            self.stop_process(spare)
        return self.spawn(False)

    def tend(self, worker_processing: bool) -> None:
        """Keep one spare while the worker processes (called from ``up``'s loop)."""
        now = self.monotonic()
        if self.spare is not None:
            code = self.spare.poll()
            if code is None:
                return
            self.stop_process(self.spare)
            self.spare = None
            self.spare_failures += 1
            wait = min(600.0, 30.0 * 2 ** (self.spare_failures - 1))
            self.spare_at = now + wait
            self.log(f"tidemark up: the standby worker exited ({code}); another in {wait:.0f} s")
            return
        if worker_processing and now >= self.spare_at:
            self.spare = self.spawn(True)
            self.log(f"tidemark up: standby worker started (pid {self.spare.pid})")

    def close(self) -> None:
        """Stop the spare (``up`` stops the worker itself through the supervisor)."""
        spare, self.spare = self.spare, None
        if spare is not None:
            self.discard(spare)
