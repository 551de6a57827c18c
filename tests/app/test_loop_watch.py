"""The event loop's longest stall (``app.loop_watch``): a step that holds the loop shows
in ``/metrics`` as that process's longest stall of the last 30 s, and ages out."""

from __future__ import annotations

import asyncio
import time

from app.loop_watch import WINDOW, LoopWatch


def test_a_held_loop_shows_as_its_longest_stall():
    async def run() -> float:
        watch = LoopWatch()
        watch.start()
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # a step holding the loop
        await asyncio.sleep(0.05)
        await watch.stop()
        return watch.longest()

    assert 0.15 < asyncio.run(run()) < 1.0


def test_stalls_older_than_the_window_are_forgotten():
    watch = LoopWatch()
    watch.note(0.5, now=100.0)
    watch.note(0.01, now=100.0 + WINDOW / 2)
    assert watch.longest() == 0.5
    watch.note(0.02, now=100.0 + WINDOW + 1)
    assert watch.longest() == 0.02


def test_metrics_show_the_longest_stall(api):
    with api.client("read") as c:
        text = c.get("/metrics").text
    line = next(l for l in text.splitlines() if l.startswith("tidemark_event_loop_stall_seconds "))
    assert 0.0 <= float(line.split()[1]) < 5.0
