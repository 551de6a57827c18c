"""Is every part working? Redis answers, and the worker's query is processing.

A heartbeat alone proves little: a dead worker's last one stays in Redis until its TTL runs
out, and a live driver may run a query that is stuck or still starting. So the worker is
ready only when

* its heartbeat is fresh (the driver beats every second; ``stale_after`` s, default 3),
* it names a running query (``active``, a ``run_id``), and
* no ingest request has waited unread longer than ``max_wait`` s: for each stream with
  events not yet counted, the first entry appended since the start of the query's last
  finished batch (``progress_at``; a batch started after an entry was appended has read
  it) must be younger than ``max_wait``. The worker leaves ``progress_at`` out until a
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
from tidemark import keys

__all__ = ["readiness"]

_MAX_STREAMS_LOOKED_AT = 1000


def _ms(iso: str | None) -> int:
    if not iso:
        return 0
    try:
        return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return 0


def _waiting(r: redis.Redis, since_ms: int, now_ms: int, max_wait: float) -> tuple[str, int, float] | None:
    """The stream whose events wait longest unread, if that is over ``max_wait`` s:
    ``(stream, events waiting, seconds)``."""
    streams = [s.decode() for s in r.zrangebyscore(keys.ACTIVE, since_ms, "+inf", start=0,
                                                     num=_MAX_STREAMS_LOOKED_AT)]
    if not streams:
        return None
    with r.pipeline(transaction=False) as p:
        for s in streams:
            p.xrange(keys.ingest(s), min=str(since_ms), count=1)
            p.hget(keys.ingest_stats(s), "received")
            p.hvals(keys.shard_status(s))
        out = p.execute()
    worst = None
    for i, s in enumerate(streams):
        first, received, shards = out[3 * i: 3 * i + 3]
        if not first:
            continue
        counted = 0
        for raw in shards:
            status = json.loads(raw)
            counted += status["events"] + status["late_dropped"] + status.get("failed_events", 0)
        waiting = int(received or 0) - counted
        age = (now_ms - int(first[0][0].split(b"-")[0])) / 1000
        if waiting > 0 and age > max_wait and (worst is None or age > worst[2]):
            worst = (s, waiting, age)
    return worst


def readiness(store: Store, stale_after: float, max_wait: float) -> dict:
    """``{"ready", "redis", "worker", "why": {part: reason}, "heartbeat": {…}, "standby": {…}}``."""
    why: dict[str, str] = {}
    body: dict = {"ready": False, "redis": False, "worker": False}
    r = store.redis
    try:
        r.ping()
        body["redis"] = True
        raw, spare = r.mget(keys.HEARTBEAT, keys.STANDBY)
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
                sec, usec = r.time()
                late = _waiting(r, _ms(beat.get("progress_at")), sec * 1000 + usec // 1000,
                                max_wait)
                if late:
                    _, n, waited = late  # /readyz is open to all: it names no stream
                    why["worker"] = (f"{n} events of a stream waiting {waited:.0f} s and "
                                     f"no batch has finished since (query {beat['run_id']}, last "
                                     f"batch {beat.get('batch_id')}, {who})")
    except redis.RedisError as e:
        why["redis"] = f"Redis does not answer ({type(e).__name__})"
    body["worker"] = body["redis"] and "worker" not in why
    body["ready"] = body["worker"]
    if why:
        body["why"] = why
    return body
