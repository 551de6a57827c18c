"""Back-pressure from the worker's real lag (contract §5: a 429 rather than a broken 202).

The worker driver publishes, about every second, what its last finished micro-batch read
of each log partition (the batch's end offset: entry id and the partition's cumulative
event and chunk counts there) and the throughput its recent batches showed (events per
second of batch time) in ``keys.LOG_PROGRESS``. The append keeps each partition's own
cumulative counts (``keys.log_stats``). So the API knows, per partition and in total,

* the events and chunks appended but not yet read by a finished batch (``pending``), and
* the age of the oldest entry not yet read (``oldest_age``: Redis' clock against the
  entry id's, which is Redis' clock at the append),

from two pipelined round trips, kept for ``ttl`` (0.1 s) per API process: an ingest
request costs one more round trip, for its own stream's waiting events, whatever the
number of streams or partitions.

An event accepted now waits for the batch under way (at least as long again as it has run
already), then for one that takes everything waiting (``LogLag.wait_estimate``: the worker
fits a batch's fixed seconds, its seconds per group update and per event to its recent
batches, since many small streams cost per group and a busy one per event). A batch makes
one group update per (stream, shard) that has chunks waiting, however many: so the groups
waiting are at most the chunks waiting, and at most the streams that appended since the
oldest unread position times the largest shard count declared (``keys.SHARDS_MAX``, kept
by every declaration, computed from all of them once if a Redis lacks it). Counting each chunk as a group instead refused 87 % of
100 streams' 100 K events/s while the worker idled half its cores (bench_scale). ``decide`` refuses with 429 before that
passes ``TIDEMARK_READY_MAX_WAIT``, fairly:

* below ``TARGET`` × max_wait of estimated wait, and while no entry has waited unread
  longer than that (the estimate's check: a fit can be wrong, an age cannot), every
  request is taken;
* beyond it, a stream is still taken while its own share of the next batch (its waiting
  events' seconds, at least one chunk's) stays within ``CEILING × max_wait / active
  streams``,
  or while it has nothing waiting (one modest request in flight per stream, whatever the
  others do), and the total estimate stays within ``CEILING`` × max_wait: a flooding
  stream is held at the target, so it gets the 429s, and the trickles beside it keep
  flowing up to the ceiling;
* an entry already unread for ``CEILING`` × max_wait leaves room for fair shares only, and
  one unread for max_wait means the promise is being broken (the worker stalled, or
  died with no spare): everything is refused until it catches up;
* the per-stream (``max_pending_events``) and total (``max_pending_chunks``) caps hold
  whatever the estimate says.

Before the worker has ever published progress (no worker on this Redis yet) only the caps
apply: there is no lag to judge from, and readiness already says the worker is missing.
Nor does an estimate refuse a request while nothing waits: the worker is idle, and only a
batch that reads something updates the fit the estimate comes from.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field

from tidemark.wire import keys, scripts
from tidemark.ingest_log import ZERO, id_tuple, partition_count

__all__ = ["LogLag", "LagReader", "decide", "Refusal", "read_positions", "TARGET", "CEILING", "FLOOR_CAPACITY"]

TARGET = 0.3  # of max_wait: the estimated wait every stream may add to
CEILING = 0.5  # of max_wait: beyond it nothing is taken (0.8 let 1,000 saturated streams wait a
# p95 of 5.4 s, not 3.3-3.6 s, for no more events; 0.4 cut 0.3-0.6 s more but took 0.77x: bench_scale)
FLOOR_CAPACITY = 20_000.0  # events/s assumed before the worker has shown its own
FLOOR_GROUPS = 50.0  # group updates/s assumed likewise (bench_scale: 11-25 ms of Spark CPU each)
CEILING_CAPACITY = 1_000_000.0  # events/s never assumed beyond (one stream does 600 K/s here)
CEILING_GROUPS = 10_000.0  # group updates/s never assumed beyond (a small one costs ~8 ms)


@dataclass
class LogLag:
    """The worker's lag on the ingest log, as of ``at`` (monotonic seconds)."""

    partitions: list[dict] = field(default_factory=list)  # {pending_events, pending_chunks, oldest_age, oldest_stream}
    capacity: float = 0.0  # events/s the worker's recent batches showed (0: not yet)
    batch_seconds: float = 0.0  # a typical recent batch
    batch_elapsed: float = 0.0  # seconds since the last batch ended (the next one's progress)
    fixed_seconds: float = 0.0  # a batch's fixed part
    seconds_per_event: float = 0.0  # a batch's variable part, per event or per group update
    seconds_per_group: float = 0.0
    streams_waiting: int | None = None  # streams appended since the oldest unread position (None: unknown)
    shards_max: int = 0  # the largest shard count declared (0: unknown)
    active_streams: int = 1  # streams that appended in the last max_wait seconds
    worker_seen: bool = False  # the worker has published progress on this Redis
    at: float = 0.0
    taken_events: int = 0  # taken by this process since the read (not in it yet)
    taken_chunks: int = 0

    @property
    def pending_events(self) -> int:
        return sum(p["pending_events"] for p in self.partitions) + self.taken_events

    @property
    def pending_chunks(self) -> int:
        return sum(p["pending_chunks"] for p in self.partitions) + self.taken_chunks

    @property
    def pending_groups(self) -> int:
        """Group updates the waiting chunks make at most: one per (stream, shard) with chunks,
        so no more than the chunks, nor than the streams waiting times the largest shard count
        (each a superset of what waits, see the module notes)."""
        waiting = sum(p["pending_chunks"] for p in self.partitions)
        if self.streams_waiting is not None and self.shards_max > 0:
            waiting = min(waiting, self.streams_waiting * self.shards_max)
        return waiting + self.taken_chunks  # each taken since the read may be a new group

    @property
    def oldest_age(self) -> float:
        return max((p["oldest_age"] for p in self.partitions), default=0.0)

    @property
    def fitted(self) -> bool:
        """The worker has fitted its costs (any term: a fit may put a batch's whole variable
        cost on group updates, and then its per-event term is 0, not unknown)."""
        return bool(self.seconds_per_event or self.seconds_per_group or self.fixed_seconds)

    @property
    def per_event(self) -> float:
        """Seconds per event: the fit's, but never below 1 µs (a fit of small batches only
        may put their whole cost on group updates), and 1/FLOOR_CAPACITY until a fit exists
        (taking a fitted 0 for "unknown" made 100 streams' 100 K events/s look like 5 s of
        work the worker did in 1)."""
        if not self.fitted:
            return 1 / FLOOR_CAPACITY
        return max(self.seconds_per_event, 1 / CEILING_CAPACITY)

    @property
    def per_group(self) -> float:
        """Seconds per group update: the fit's, but never below 0.1 ms, and 1/FLOOR_GROUPS
        until a fit exists. Requests of one size make a batch's events and group updates
        collinear, so a fit may put the whole variable cost on events: taking that 0 for
        "unknown" (20 ms) counted every waiting chunk twice, and at 1,000 streams refused
        8 s of estimated wait while the worker counted everything in 1-2 s and left 0.4 of
        its cores idle (bench_scale, 10,000:1,000)."""
        if not self.fitted:
            return 1 / FLOOR_GROUPS
        return max(self.seconds_per_group, 1 / CEILING_GROUPS)

    @property
    def running_for(self) -> float:
        """Seconds the batch under way has run: none without entries waiting; else since
        the last batch ended, or since the oldest waiting entry came if it came later (the
        worker was idle until then)."""
        if not self.pending_chunks:
            return 0.0
        return min(self.batch_elapsed, self.oldest_age)

    def wait_estimate(self, more: int = 0, chunks: int = 0) -> float:
        """Seconds a request appended now (``more`` events in ``chunks`` chunks) would wait
        to be counted: the rest of the batch under way, then one that takes everything
        waiting. The rest is a recent slow batch less what it has run, but at least what
        it has run (a batch already slower than the recent ones is taken to need as long
        again: the first batch of a thousand new streams may take ten times the last)."""
        if self.pending_chunks:
            running = self.running_for
            rest = max(self.batch_seconds - running, running)
        else:
            # Nothing waits, so no batch with events is under way (what a batch reads counts
            # as waiting until it finishes): the next starts afresh. Not "a recent batch less
            # the time since the last ended": the worker reports idle triggers as ended
            # batches too, so after one slow batch an idle worker was taken to be busy for
            # good and every post refused, which kept it idle (bench_soak.py found it).
            rest = 0.0
        return (rest + self.fixed_seconds
                + (self.pending_events + more) * self.per_event
                + (self.pending_groups + chunks) * self.per_group)

    def as_dict(self) -> dict:
        return {"pending_events": self.pending_events, "pending_chunks": self.pending_chunks,
                "oldest_age_seconds": round(self.oldest_age, 3),
                "wait_estimate_seconds": round(self.wait_estimate(), 3),
                "capacity_events_per_second": round(self.capacity, 1),
                "batch_seconds": round(self.batch_seconds, 3),
                "fixed_seconds": round(self.fixed_seconds, 3),
                "seconds_per_event": self.seconds_per_event,
                "seconds_per_group": self.seconds_per_group, "pending_groups_at_most": self.pending_groups,
                "active_streams": self.active_streams,
                "partitions": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in p.items()}
                               for p in self.partitions]}


@dataclass
class Refusal:
    reason: str
    retry_after: int


def decide(lag: LogLag, stream: str, stream_pending: int, incoming: int, max_wait: float,
           max_pending_events: int, max_pending_chunks: int) -> Refusal | None:
    """None to take a request of ``incoming`` events on ``stream`` (which has
    ``stream_pending`` events waiting), else why not and when to retry (pure)."""
    if stream_pending + incoming > max_pending_events and stream_pending > 0:
        return Refusal(f"stream {stream!r} has {stream_pending} events waiting for the worker "
                       f"(TIDEMARK_MAX_PENDING_EVENTS={max_pending_events})",
                       _seconds(stream_pending * lag.per_event))
    if lag.pending_chunks >= max_pending_chunks:
        return Refusal(f"{lag.pending_chunks} requests are waiting for the worker "
                       f"(TIDEMARK_MAX_PENDING_CHUNKS={max_pending_chunks})",
                       _seconds(lag.wait_estimate()))
    if not lag.worker_seen:
        return None
    if lag.pending_chunks == 0:
        # Nothing waits, so the worker is idle: refusing makes no one wait less, and only
        # a batch that reads something can correct the cost fit. Judged by a fit of a few
        # slow batches, an idle worker refused every post for as long as a client tried
        # (90 s): nothing was read, so the fit never changed. The age check below holds
        # the promise once this request waits.
        return None
    ceiling, target = CEILING * max_wait, TARGET * max_wait
    if lag.oldest_age > max_wait:
        return Refusal(f"the worker is behind: events have waited {lag.oldest_age:.1f} s unread "
                       f"(TIDEMARK_READY_MAX_WAIT={max_wait:g} s)", _seconds(max_wait / 4))
    wait = lag.wait_estimate(incoming, 1)
    if wait <= target and lag.oldest_age <= target:  # the age checks the estimate
        return None
    share = ceiling / max(1, lag.active_streams)  # seconds of the next batch per stream
    own = (stream_pending + incoming) * lag.per_event + lag.per_group
    first = stream_pending == 0 and own <= target / 4  # max-min: one request in flight each
    if (own <= share or first) and wait <= ceiling and lag.oldest_age <= ceiling:
        return None
    return Refusal(f"the worker is behind: about {wait:.1f} s until an event taken now is "
                   f"counted ({lag.pending_events} events in {lag.pending_chunks} requests wait; "
                   f"stream {stream!r} has {stream_pending}, over its fair share of the next "
                   f"{target:g} s)", _seconds(min(wait - target, max_wait)))


def _seconds(s: float) -> int:
    return int(min(60, max(1, math.ceil(s))))


class LagReader:
    """The log's lag read from Redis, kept ``ttl`` seconds (one reader at a time: the
    others use the last read meanwhile)."""

    def __init__(self, r, log_partitions: int, max_wait: float, ttl: float = 0.1):
        self.redis, self.wanted, self.max_wait, self.ttl = r, log_partitions, max_wait, ttl
        self.oldest = r.register_script(scripts.OLDEST)
        self._shards_max = r.register_script(scripts.SHARDS_MAX)
        self._n: int | None = None
        self._kept: LogLag | None = None
        self._lock = threading.Lock()

    def partitions(self) -> int:
        if self._n is None:
            self._n = partition_count(self.redis, self.wanted)
        return self._n

    def taken(self, events: int) -> None:
        """This process took a request: until the next read, the kept lag counts it (else
        clients posting faster than the read's ``ttl`` would all be judged on a stale lag)."""
        kept = self._kept
        if kept is not None:
            kept.taken_events += events
            kept.taken_chunks += 1

    def lag(self) -> LogLag:
        kept = self._kept
        if kept is not None and time.monotonic() - kept.at <= self.ttl:
            return kept
        if kept is not None and not self._lock.acquire(blocking=False):
            return kept
        if kept is None:
            self._lock.acquire()
        try:
            self._kept = self.read()
            return self._kept
        finally:
            self._lock.release()

    def read(self) -> LogLag:
        n = self.partitions()
        with self.redis.pipeline(transaction=False) as p:
            p.time()
            p.hgetall(keys.LOG_PROGRESS)
            p.get(keys.SHARDS_MAX)
            for partition in range(n):
                p.hmget(keys.log_stats(partition), "last", "events", "chunks")
            out = p.execute()
        (sec, usec), progress, shards_max = out[0], out[1], out[2]
        now_ms = sec * 1000 + usec // 1000
        p_read = _read_positions(progress.get(b"read"), n)
        stats = out[3:]
        num = lambda k: float(progress.get(k) or 0.0)  # noqa: E731
        lag = LogLag(worker_seen=bool(progress), at=time.monotonic(), capacity=num(b"capacity"),
                     batch_seconds=num(b"batch_seconds"), fixed_seconds=num(b"fixed_seconds"),
                     seconds_per_event=num(b"seconds_per_event"),
                     seconds_per_group=num(b"seconds_per_group"),
                     shards_max=int(shards_max) if shards_max else self._first_shards_max())
        if num(b"batch_ended"):
            lag.batch_elapsed = max(0.0, now_ms / 1000 - num(b"batch_ended"))
        unread = []
        for partition, ((last, events, chunks), (read_id, read_events, read_chunks)) in enumerate(zip(stats, p_read)):
            last = last.decode() if last else ZERO
            behind = id_tuple(last) > id_tuple(read_id)
            lag.partitions.append({
                "partition": partition,
                "pending_events": max(0, int(events or 0) - read_events) if behind else 0,
                "pending_chunks": max(0, int(chunks or 0) - read_chunks) if behind else 0,
                "oldest_age": 0.0, "oldest_stream": None})
            if behind:
                unread.append((partition, read_id))
        with self.redis.pipeline(transaction=False) as p:
            p.zcount(keys.ACTIVE, now_ms - int(self.max_wait * 1000), "+inf")
            # A stream with an entry after its partition's read position appended at or
            # after that position's millisecond: counted here (a superset).
            since = min((id_tuple(read_id)[0] for _, read_id in unread), default=now_ms)
            p.zcount(keys.ACTIVE, since, "+inf")
            for partition, read_id in unread:
                self.oldest(keys=[keys.log_partition(partition)], args=[f"({read_id}"], client=p)
            active, waiting, *oldest = p.execute()
        lag.active_streams = max(1, int(active))
        lag.streams_waiting = int(waiting)
        for (partition, _), found in zip(unread, oldest):
            if found:
                entry, stream = found
                age = max(0.0, (now_ms - id_tuple(entry.decode())[0]) / 1000)
                lag.partitions[partition].update(oldest_age=age, oldest_stream=stream.decode() or None)
        return lag


    def _first_shards_max(self) -> int:
        """The largest shard count declared, when no declaration has kept it yet (once per
        Redis: the script computes it from every declaration and keeps it)."""
        return int(self._shards_max(keys=[keys.STREAMS, keys.SHARDS_MAX]))


def read_positions(r, n: int) -> list[tuple[str, int, int]]:
    return _read_positions(r.hget(keys.LOG_PROGRESS, "read"), n)


def _read_positions(raw: bytes | None, n: int) -> list[tuple[str, int, int]]:
    """What the worker's last finished batch read of each partition (none: nothing)."""
    try:
        log = json.loads(raw) if raw else None
        if isinstance(log, list) and len(log) == n:
            return [(str(i), int(e), int(c)) for i, e, c in log]
    except (ValueError, TypeError):
        pass
    return [(ZERO, 0, 0)] * n
