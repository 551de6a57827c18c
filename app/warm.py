"""Each API process answers every single-stream query kind once on a tiny summary at
start, at an instant and over a range, in the background: the first real query a process
takes then finds its compiled kernels loaded (Numba's cache) instead of loading them while
fifty requests wait. ``make`` runs it once when it installs, so the cache is written before
any process starts (a compile holds the interpreter for seconds).

Tested by: tests/app/test_answer_cache.py (warm_answers)."""

from __future__ import annotations

import gc
import logging

from app.answers import QUERY_KINDS, answer
from app.ranges import answers_at, as_json
from app.stream_status import status_of
from tidemark.wire.records import ShardStatus

__all__ = ["warm_answers", "warm_install"]

log = logging.getLogger("tidemark.api")


def warm_answers() -> int:
    """Answer each kind once; returns how many answered (a kind that needs parameters
    this tiny stream cannot give is skipped: warming is best effort, never an error)."""
    from tidemark.summary import warm_up

    config, summary = warm_up()  # the worker's tiny warm-up stream, its kernels loaded too
    status = status_of({0: ShardStatus(version=1, events=3, late_dropped=0, clock=2.5, updated_at=0.0)}, {})
    params = {"window": "30", "key": "a", "q": "0.5", "phi": "0.1", "alpha": "1.5", "lo": "0", "hi": "5",
              "value": "1"}
    answered = 0
    for kind, query in sorted(QUERY_KINDS.items()):
        if query.streams != 1:
            continue
        try:
            answer(kind, "warm-up", config, summary, status, params)
            # the range kernels: enough instants for the reads ahead (app.ranges._READ_AHEAD_FROM)
            answers_at(kind, "warm-up", config, summary, status, params, [1.0 + i / 16 for i in range(24)])
            # and as the history route shows them (some kinds read as columns: QueryKind.run_columns)
            answers_at(kind, "warm-up", config, summary, status, params, [1.0 + i / 16 for i in range(24)],
                       show=as_json)
            answered += 1
        except Exception as e:  # best effort: the real query will say what is wrong
            log.debug("warming %s: %s", kind, type(e).__name__)
    # What the process holds now (modules, the app, compiled kernels) lasts its lifetime:
    # out of the collector's reach, a full collection scans only what requests made since.
    # An answer over 500 instants builds some 50,000 containers, and collections walking
    # every module object each time were a third of it.
    gc.freeze()
    return answered


def warm_install() -> None:
    """The install's warm-up (``make venv``): every sketch class's kernels and these
    answers' (:func:`warm_answers`), compiled into Numba's cache as jobs of one pool of
    processes, so the answers' kernels compile while the last classes' do (94 s against
    82 + 28 one after the other, on two cores)."""
    from tidemark.summary import warm_up_in_parallel

    warm_up_in_parallel(also=[warm_answers])
