"""Is every service working? Redis answers, and the worker's query is processing.

A heartbeat alone proves little: a dead worker's last one stays in Redis until its TTL runs
out, and a live driver may run a query that is stuck or still starting. So the worker is
ready only when

* its heartbeat is fresh (the driver beats every second; ``stale_after`` s, default 3),
* it names a running query (``active``, a ``run_id``), and
* no ingest request has waited unread longer than ``max_wait`` s: in each log partition,
  the first entry after the end offset of the worker's last finished batch and appended
  since that batch started (``progress_at``; a batch started after an entry was appended
  has read it) must be younger than ``max_wait``, unless its stream has no events left
  uncounted. The worker leaves ``progress_at`` out until a
  run's second batch has finished (its first may replay offsets planned before a kill, and
  proves nothing about later entries); then the oldest entry not yet trimmed counts. Entry ids carry Redis' own clock, compared with
  Redis' ``TIME``; ``progress_at`` is the worker's clock (keep clocks in sync).
"""

from __future__ import annotations

import datetime as dt
import json
import time

import redis

from app.store import Store
from app.backpressure import read_positions
from tidemark.wire import keys
from tidemark.wire.records import ShardStatus
from tidemark.ingest_log import id_tuple

__all__ = ["readiness"]

def _ms(iso: str | None) -> int:
    if not iso:
        return 0
    try:
        return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return 0


def _waiting(store: Store, since_ms: int, now_ms: int, max_wait: float) -> tuple[str, int, float] | None:
    """The stream whose events wait longest unread, if that is over ``max_wait`` s:
    ``(stream, events waiting, seconds)``. Per log partition, the first entry after what
    the worker's last finished batch read (``keys.LOG_PROGRESS``) and appended since
    ``since_ms`` counts; its stream must still have events not counted."""
    r, reader = store.redis, store.lag_reader
    n = reader.partitions()
    bounds = []
    for read_id, _, _ in read_positions(r, n):
        ms, seq = id_tuple(read_id)
        bounds.append(f"({read_id}" if ms >= since_ms else str(since_ms))
    with r.pipeline(transaction=False) as p:
        for partition, bound in enumerate(bounds):
            reader.oldest(keys=[keys.log_partition(partition)], args=[bound], client=p)
        found = [f for f in p.execute() if f]
    late = [((now_ms - id_tuple(entry.decode())[0]) / 1000, stream.decode()) for entry, stream in found]
    late = sorted((a, s) for a, s in late if a > max_wait)
    if not late:
        return None
    with r.pipeline(transaction=False) as p:
        for _, s in late:
            p.hget(keys.ingest_stats(s), "received")
            p.hvals(keys.shard_status(s))
        out = p.execute()
    worst = None
    for i, (age, s) in enumerate(late):
        received, shards = out[2 * i: 2 * i + 2]
        counted = 0
        for raw in shards:
            status = ShardStatus.decode(raw)
            counted += status.events + status.late_dropped + status.failed_events
        waiting = int(received or 0) - counted
        if waiting > 0 and (worst is None or age > worst[2]):
            worst = (s, waiting, age)
    return worst


def readiness(store: Store, stale_after: float, max_wait: float) -> dict:
    """``{"ready", "redis", "worker", "why": {service: reason}, "heartbeat": {…}, "standby": {…}}``."""
    why: dict[str, str] = {}
    body: dict = {"ready": False, "redis": False, "worker": False}
    r = store.redis
    try:
        with r.pipeline(transaction=False) as p:  # one round trip: a probe answers quickly under load
            p.mget(keys.HEARTBEAT, keys.STANDBY)
            p.time()
            (raw, spare), (sec, usec) = p.execute()
        body["redis"] = True
        if spare:  # informative only: a spare makes a worker's return quick, not the worker ready
            spare = json.loads(spare)
            body["standby"] = {"pid": spare.get("pid"), "host": spare.get("host"),
                               "standing_seconds": round(time.time() - float(spare.get("since", 0)), 1)}
        beat = json.loads(raw) if raw else None
        if beat is None:
            why["worker"] = "no heartbeat: the worker is not running"
        else:
            age = time.time() - float(beat.get("time", 0))
            body["heartbeat"] = {"pid": beat.get("pid"), "host": beat.get("host"),
                                 "run_id": beat.get("run_id"), "batch_id": beat.get("batch_id"),
                                 "age_seconds": round(age, 2)}
            who = f"pid {beat.get('pid')} on {beat.get('host')}"
            if age > stale_after:
                why["worker"] = (f"last heartbeat {age:.1f} s ago ({who}); the worker is not "
                                 "running or cannot reach Redis")
            elif not beat.get("active") or not beat.get("run_id"):
                why["worker"] = f"the worker ({who}) has no running streaming query"
            else:
                late = _waiting(store, _ms(beat.get("progress_at")), sec * 1000 + usec // 1000,
                                max_wait)
                if late:
                    _, n, waited = late  # /readyz is open to all: it names no stream
                    why["worker"] = (f"{n} events of a stream waiting {waited:.0f} s and "
                                     f"no batch has finished since (query {beat['run_id']}, last "
                                     f"batch {beat.get('batch_id')}, {who})")
        body["lag"] = store.ingest.lag().as_dict()
    except redis.RedisError as e:
        why["redis"] = f"Redis does not answer ({type(e).__name__})"
    body["worker"] = body["redis"] and "worker" not in why
    body["ready"] = body["worker"]
    if why:
        body["why"] = why
    return body
