"""Each API process answers every single-stream query kind once on a tiny summary at
start, in the background: the first real query a process takes then finds its compiled
kernels loaded (Numba's cache) instead of loading them while fifty requests wait."""

from __future__ import annotations

import logging

import numpy as np

from app.answers import QUERY_KINDS, answer
from app.store import _status

__all__ = ["warm_answers"]

log = logging.getLogger("tidemark.api")


def warm_answers() -> int:
    """Answer each kind once; returns how many answered (a kind that needs parameters
    this tiny stream cannot give is skipped: warming is best effort, never an error)."""
    from tidemark.chunks import decode_chunk, encode_chunk
    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary

    config = StreamConfig(max_window=60.0, value_min=0.0, value_max=10.0,
                          decays=[{"kind": "polynomial", "alpha": 1.5}])
    secret = HashSecret(b"tidemark-warm-answers")
    summary = StreamSummary.create(config, secret)
    ts = np.array([1.0, 2.5, 2.0])
    summary.update_table(decode_chunk(encode_chunk(ts, ["a", "b", None], np.array([1.0, 2.0, np.nan]), np.ones(3))))
    summary = StreamSummary.from_bytes(summary.to_bytes(), secret)
    status = _status({0: {"version": 1, "events": 3, "late_dropped": 0, "clock": 2.5, "updated_at": 0.0}}, {})
    params = {"window": "30", "key": "a", "q": "0.5", "phi": "0.1", "alpha": "1.5", "lo": "0", "hi": "5",
              "value": "1"}
    answered = 0
    for kind, query in sorted(QUERY_KINDS.items()):
        if query.streams != 1:
            continue
        try:
            answer(kind, "warm-up", config, summary, status, params)
            answered += 1
        except Exception as e:  # best effort: the real query will say what is wrong
            log.debug("warming %s: %s", kind, type(e).__name__)
    return answered
