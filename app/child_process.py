"""What every helper process of an API process does first: leave when its parent does.

The decoder and ingest pools are ``ProcessPoolExecutor`` processes, which wait on their
task queue for ever: an API process that is killed (``kill -9``, the OOM killer, a
supervisor's restart) or that exits without closing its pools would leave them behind,
one set per restart. Each one therefore watches its parent and exits once it is gone.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["exit_with_parent"]


def exit_with_parent(parent: int, every: float = 1.0) -> None:
    """Start a daemon thread that ends this process once ``parent`` (the pid the parent
    passed in, not ``getppid()`` read here: a parent killed while this process was still
    starting has already handed it to init) is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
