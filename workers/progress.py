"""What the streaming query's progress says, for readiness and back-pressure: whether
every entry appended before a time was read (``read_everything_before``), what the last
batch read of each log partition, and what a batch costs (``log_progress``, a fit by
``fit_batch_costs``). The worker's driver publishes it; ``app.backpressure`` reads it.
"""

from __future__ import annotations

import datetime as dt

__all__ = ["read_everything_before", "first_batch_of_run", "log_progress", "fit_batch_costs"]


def read_everything_before(progress: dict, run_first_batch: int | None) -> str | None:
    """The start of the last finished batch, when it proves that every entry appended
    before it was read (readiness relies on that), else None.

    A batch reads every entry there is when it plans its offsets, right after it starts,
    except the first batch of a run: it may replay the offsets the previous run planned
    before it was killed, and then entries that came in since are still unread."""
    batch = progress.get("batchId", -1)
    if run_first_batch is None or batch <= run_first_batch:
        return None
    return progress.get("timestamp")


def first_batch_of_run(query, seen: int) -> int:
    """The first batch id of this query run (the oldest progress kept, at worst the one
    seen now: then one more batch is needed before readiness trusts the progress)."""
    try:
        recent = query.recentProgress
        return min(int(seen), int(recent[0]["batchId"])) if recent else int(seen)
    except Exception:  # noqa: BLE001 — py4j hiccup: be conservative
        return int(seen)


def _offset(raw) -> dict | None:
    import json

    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("log"), list) else None


def log_progress(recent: list, first_batch: int | None = None) -> dict | None:
    """What the last finished batch read of each log partition (its end offset) and what
    recent batches cost, for back-pressure and readiness (``app.backpressure``); None
    before any batch of the partitioned log finished.

    A batch costs a fixed part (planning, tasks, state commits) plus a part per group update
    (one per (stream, shard) that had chunks, however many: what many small streams cost;
    the state operator's updated and removed rows) and a part per event (what a busy
    stream costs): ``fixed_seconds``, ``seconds_per_group`` and ``seconds_per_event`` are a
    non-negative least-squares fit of the recent batches that read something
    (``fit_batch_costs``). The run's first batch (``first_batch``) counts for ``read`` only:
    it pays the start of the Python workers. ``batch_seconds`` is the slowest of the last
    five batches (the wait estimate must hold for the slow ones)."""
    import json

    batches, read, ended = [], None, 0.0
    for progress in recent:
        try:
            source = progress["sources"][0]
            start, end = _offset(source["startOffset"]), _offset(source["endOffset"])
            seconds = progress["durationMs"]["triggerExecution"] / 1000
        except (KeyError, IndexError, TypeError):
            continue
        if end is None:
            continue
        read = end["log"]
        try:
            ended = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() + seconds
        except (KeyError, AttributeError, ValueError):
            ended = 0.0
        if first_batch is not None and progress.get("batchId") == first_batch:
            continue
        before = start["log"] if start else [[None, 0, 0]] * len(end["log"])
        events = sum(e[1] for e in end["log"]) - sum(b[1] for b in before)
        chunks = sum(e[2] for e in end["log"]) - sum(b[2] for b in before)
        if chunks > 0:
            batches.append((seconds, max(0, events), _group_updates(progress, chunks)))
    if read is None:
        return None
    out = {"read": json.dumps(read), "batch_ended": round(ended, 3), "fixed_seconds": 0.0,
           "seconds_per_event": 0.0,
           "seconds_per_group": 0.0, "capacity": 0.0, "batch_seconds": 0.0}
    if batches:
        # The slowest of the last few, not a typical one: an event taken now waits for the
        # batch under way and the next, and on a shared machine one slow batch is what
        # breaks the 202 promise (bench_scale: p95 2.7x the median with other load).
        out["batch_seconds"] = round(max(b[0] for b in batches[-5:]), 3)
    if len(batches) >= 3:
        fixed, per_group, per_event = fit_batch_costs(batches[-30:])
        out.update(fixed_seconds=round(fixed, 4), seconds_per_group=per_group,
                   seconds_per_event=per_event,
                   capacity=round(1 / per_event, 1) if per_event > 0 else 0.0)
    return out


def _group_updates(progress: dict, chunks: int) -> int:
    """The batch's group updates: the state operator's updated and removed rows (a group
    whose update failed keeps its state, so at most the chunks), else its chunks."""
    try:
        op = progress["stateOperators"][0]
        groups = int(op.get("numRowsUpdated", 0)) + int(op.get("numRowsRemoved", 0))
    except (KeyError, IndexError, TypeError, ValueError):
        return chunks
    return min(chunks, groups) if groups > 0 else chunks


def fit_batch_costs(batches: list[tuple[float, int, int]]) -> tuple[float, float, float]:
    """``(fixed, per group, per event)`` seconds, all >= 0, that best explain
    ``seconds ≈ fixed + per_group × groups + per_event × events`` over ``batches`` of
    ``(seconds, events, groups)``: least squares over each subset of the three terms,
    keeping the best fit whose terms are all non-negative (three unknowns: exhaustive; of
    equal fits the one with fewer terms, the group term before the event term, wins: with
    requests of one size events and groups rise together, and a group costs the same
    whatever it holds)."""
    import itertools

    import numpy as np

    y = np.array([b[0] for b in batches], dtype=float)
    x = np.array([[1.0, b[2], b[1]] for b in batches], dtype=float)
    best, best_err = (float(y.min()), 0.0, 0.0), float(((y - y.min()) ** 2).sum())
    for size in (1, 2, 3):
        for cols in itertools.combinations(range(3), size):
            coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if (coef < 0).any():
                continue
            err = float(((x[:, cols] @ coef - y) ** 2).sum())
            if err < best_err - 1e-12:
                full = [0.0, 0.0, 0.0]
                for c, v in zip(cols, coef):
                    full[c] = float(v)
                best, best_err = tuple(full), err
    return best
