"""How long the event loop was held: the longest stall of the last ``WINDOW`` seconds.

Every request of an API process waits for the loop; a step that holds it (or holds the
GIL from another thread) delays them all. A task asks to wake every ``EVERY`` s and
notes how late it woke; ``/metrics`` shows the longest lateness of the last ``WINDOW``
seconds as ``tidemark_event_loop_stall_seconds`` (per process: each API process answers
for its own loop).
"""

from __future__ import annotations

import asyncio
import collections
import time

__all__ = ["LoopWatch"]

EVERY = 0.01  # s between wake-ups
WINDOW = 30.0  # s of history the longest stall is taken from


class LoopWatch:
    def __init__(self, gauge=None) -> None:
        self.gauge = gauge  # set to the longest stall on every read
        self._seconds: collections.deque[tuple[int, float]] = collections.deque()  # (second, longest)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(EVERY)
            self.note(time.perf_counter() - asked - EVERY)

    def note(self, late: float, now: float | None = None) -> None:
        second = int(time.monotonic() if now is None else now)
        if self._seconds and self._seconds[-1][0] == second:
            if late > self._seconds[-1][1]:
                self._seconds[-1] = (second, late)
        else:
            self._seconds.append((second, late))
        while self._seconds and self._seconds[0][0] <= second - WINDOW:
            self._seconds.popleft()

    def longest(self) -> float:
        """The longest stall of the last ``WINDOW`` seconds (0 before any)."""
        found = max((late for _, late in self._seconds), default=0.0)
        if self.gauge is not None:
            self.gauge.set(found)
        return max(found, 0.0)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
