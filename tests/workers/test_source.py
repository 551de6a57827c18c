"""The partitioned ingest log below Spark: hashing, offsets, reads, trimming, migration.

Real Redis; the source's reader is driven the way Spark drives it (latestOffset,
partitions, read, commit), without a Spark session.
"""

from __future__ import annotations

import collections
import json
import zlib

import pytest
import redis

from app.store import Store
from tidemark.wire import keys
from tidemark.ingest_log import initial_offset, partition_count, partition_of
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from workers.chunk_rows import ChunkRows
from workers.migrate import migrate_legacy_queues
from workers.source import _Reader


@pytest.fixture
def log_redis(tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        yield server.url


def _store(url, partitions=4):
    return Store(url, log_partitions=partitions, lag_ttl=0.0)


def _append_many(store, chunks):
    """Append through the API's own script, pipelined (10,000 requests in a second)."""
    n = store.lag_reader.partitions()
    with store.redis.pipeline(transaction=False) as p:
        for name, chunk, events, max_ts in chunks:
            part = partition_of(name, n)
            store.ingest._append(keys=[keys.log_partition(part), keys.log_stats(part),
                                keys.ingest_stats(name), keys.ACTIVE, "", keys.GENERATIONS,
                                keys.STREAMS],
                          args=[chunk, events, 0, repr(max_ts), "{}", 60, name], client=p)
        p.execute()


def _drain(reader, start, end):
    """The rows read, each unpacked to (stream, shard, entry, clock before, payload,
    generation, tombstone)."""
    rows = []
    for part in reader.partitions(start, end):
        for stream, shard, chunk in reader.read(part):
            r = ChunkRows.unpack([chunk])
            rows.append((stream, shard, r.entry[0], r.clock_before[0], bytes(r.payload[0]),
                         int(r.generation[0]), bool(r.tombstone[0])))
    return rows


def test_a_stream_hashes_to_the_same_partition_in_every_process_and_version():
    # Pinned values: a change of the hash would move streams between partitions of a live run.
    assert [partition_of(s, 8) for s in ("web", "api", "tenant-42", "é")] == [1, 7, 4, 6]
    assert partition_of("web", 8) == zlib.crc32(b"web") % 8
    counts = collections.Counter(partition_of(f"stream-{i}", 8) for i in range(10_000))
    assert len(counts) == 8 and min(counts.values()) > 1_000  # spread, not piled up


def test_the_partition_count_is_fixed_at_first_use(log_redis):
    r = redis.Redis.from_url(log_redis)
    assert partition_count(r, 4) == 4
    assert partition_count(r, 16) == 4  # the stored value wins: streams never move


def test_offsets_stay_bounded_and_reads_keep_each_streams_order_with_10000_streams(log_redis):
    store = _store(log_redis)
    names = [f"s{i}" for i in range(10_000)]
    store.redis.hset(keys.STREAMS, mapping={
        name: StreamConfig(max_window=60.0, shards=2 if name == "s7" else 1).model_dump_json()
        for name in names})
    _append_many(store, [(name, f"{name}:0".encode(), 1, float(i)) for i, name in enumerate(names)])
    for k in range(1, 4):  # more chunks on a few streams, interleaved
        for name in ("s1", "s7", "s9999"):
            store.ingest.append(name, f"{name}:{k}".encode(), 2, 0, 100_000.0 + k, {"accepted": 2})
    reader = _Reader({"redis_url": log_redis, "log_partitions": "4"})
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    assert len(end["log"]) == 4 and len(json.dumps(end)) < 200  # 4 positions, not 10,000
    assert sum(e[1] for e in end["log"]) == 10_000 + 3 * 3 * 2
    assert sum(e[2] for e in end["log"]) == 10_000 + 3 * 3
    parts = reader.partitions(start, end)
    assert len(parts) == 4  # one read task per partition that moved
    rows = _drain(reader, start, end)
    assert len(rows) == 10_009
    by_stream = collections.defaultdict(list)
    for stream, shard, entry, clock, payload, *_ in rows:
        by_stream[stream].append((entry, clock, payload, shard))
    for name in ("s1", "s7", "s9999"):
        got = by_stream[name]
        assert [p for _, _, p, _ in got] == [f"{name}:{k}".encode() for k in range(4)]
        assert got[0][1] == float("-inf") and [c for _, c, _, _ in got[1:]] == [
            float(names.index(name)), 100_001.0, 100_002.0]  # the stream's clock before each chunk
    assert {s for _, _, _, s in by_stream["s7"]} <= {0, 1}
    assert all(s == 0 for _, _, _, s in by_stream["s1"])
    # Nothing new: the same offset, no task.
    assert reader.latestOffset(end) == end and reader.partitions(end, end) == []


def test_a_batch_reads_only_its_range_and_commit_trims_only_what_it_read(log_redis):
    store = _store(log_redis, partitions=2)
    for name in ("a", "b", "c"):
        store.declarations.declare(name, StreamConfig(max_window=60.0))
        store.ingest.append(name, b"first", 1, 0, 1.0, {"accepted": 1})
    reader = _Reader({"redis_url": log_redis, "log_partitions": "2"})
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    store.ingest.append("a", b"later", 1, 0, 2.0, {"accepted": 1})  # after the batch was planned
    assert sorted(r[0] for r in _drain(reader, start, end)) == ["a", "b", "c"]
    assert sorted(r[0] for r in _drain(reader, start, end)) == ["a", "b", "c"]  # a replay: the same
    reader.commit(end)
    r = redis.Redis.from_url(log_redis)
    assert sum(r.xlen(keys.log_partition(p)) for p in range(2)) == 1  # only the later one is left
    nxt = reader.latestOffset(end)
    assert [(row[0], row[4]) for row in _drain(reader, end, nxt)] == [("a", b"later")]
    reader.commit(nxt)
    reader.commit(nxt)  # again: nothing to do
    assert sum(r.xlen(keys.log_partition(p)) for p in range(2)) == 0


def test_offsets_of_another_partition_count_are_refused_with_what_to_do(log_redis):
    reader = _Reader({"redis_url": log_redis, "log_partitions": "4"})
    with pytest.raises(ValueError, match="TIDEMARK_LOG_PARTITIONS=2"):
        reader.latestOffset(initial_offset(2))


def _legacy_checkpoint(root, committed: dict | None, planned: dict | None = None):
    (root / "commits").mkdir(parents=True)
    (root / "offsets").mkdir()
    batches = [o for o in (committed, planned) if o is not None]
    for batch, offset in enumerate(batches):
        (root / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offset)}\n')
    if committed is not None:
        (root / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_an_earlier_runs_queues_move_into_the_log_beyond_the_committed_offsets(log_redis, tmp_path):
    r = redis.Redis.from_url(log_redis)
    ids = {}
    for name in ("old-a", "old-b"):
        ids[name] = [r.xadd(keys.ingest(name), {"d": f"{name}:{k}", "n": 5, "c": str(k) if k else ""}).decode()
                     for k in range(4)]
    checkpoint = tmp_path / "spark"
    # Batch 0 committed a's first two chunks and none of b's; batch 1 was planned, not committed.
    _legacy_checkpoint(checkpoint, {"old-a": ids["old-a"][1]},
                       {"old-a": ids["old-a"][3], "old-b": ids["old-b"][2]})
    store = _store(log_redis, partitions=2)
    store.declarations.declare("new", StreamConfig(max_window=60.0))
    store.ingest.append("new", b"new:0", 1, 0, 1.0, {"accepted": 1})  # the new API appended already
    assert migrate_legacy_queues(r, str(checkpoint), 2) == 2 + 4
    assert not r.exists(keys.ingest("old-a")) and not r.exists(keys.ingest("old-b"))
    assert migrate_legacy_queues(r, str(checkpoint), 2) == 0  # once
    reader = _Reader({"redis_url": log_redis, "log_partitions": "2"})
    legacy_end = {"old-a": ids["old-a"][3], "old-b": ids["old-b"][2]}
    assert reader.partitions({"old-a": ids["old-a"][1]}, legacy_end) == []  # the replay is empty
    reader.commit(legacy_end)  # nothing to trim there
    end = reader.latestOffset(legacy_end)  # from the start of every partition
    rows = _drain(reader, legacy_end, end)
    got = collections.defaultdict(list)
    for stream, _, _, clock, payload, *_ in rows:
        got[stream].append((payload.decode(), clock))
    assert got["old-a"] == [("old-a:2", 2.0), ("old-a:3", 3.0)]
    assert got["old-b"] == [("old-b:0", float("-inf")), ("old-b:1", 1.0), ("old-b:2", 2.0),
                            ("old-b:3", 3.0)]
    assert got["new"] == [("new:0", float("-inf"))]
    assert sum(e[1] for e in end["log"]) == 1 + 6 * 5


def test_queues_beside_a_partitioned_checkpoint_are_refused_clearly(log_redis, tmp_path):
    r = redis.Redis.from_url(log_redis)
    r.xadd(keys.ingest("x"), {"d": "x", "n": 1, "c": ""})
    checkpoint = tmp_path / "spark"
    _legacy_checkpoint(checkpoint, initial_offset(2))
    with pytest.raises(RuntimeError, match="earlier version"):
        migrate_legacy_queues(r, str(checkpoint), 2)


def test_every_entry_names_its_stream_and_generation_and_a_delete_tombstones_each_shard(log_redis):
    """Issue 22 x 24: the delete appends its tombstone to the stream's partition, after the
    pending entries it ends (which stay, to be dropped by generation), and the source turns
    it into one row per shard; the re-declared name's entries carry the new generation."""
    store = _store(log_redis, partitions=2)
    r = redis.Redis.from_url(log_redis)
    store.declarations.declare("x", StreamConfig(max_window=60.0, shards=3))
    store.declarations.declare("y", StreamConfig(max_window=60.0))
    first = store.declarations.generation("x")
    store.ingest.append("x", b"x:0", 2, 0, 1.0, {"accepted": 2})
    store.ingest.append("y", b"y:0", 1, 0, 1.0, {"accepted": 1})
    store.delete("x")
    assert r.zscore(keys.ACTIVE, "x") is None and r.zscore(keys.ACTIVE, "y") is not None
    store.declarations.declare("x", StreamConfig(max_window=60.0))
    second = store.declarations.generation("x")
    assert second > first
    store.ingest.append("x", b"x:1", 1, 0, 2.0, {"accepted": 1})
    for part in range(2):
        for _, fields in r.xrange(keys.log_partition(part)):
            assert b"s" in fields and b"g" in fields
    reader = _Reader({"redis_url": log_redis, "log_partitions": "2"})
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    assert sum(e[2] for e in end["log"]) == 4  # the tombstone is an entry the batch reads
    rows = [row for row in _drain(reader, start, end) if row[0] == "x"]
    assert [(row[1], row[4], row[5], row[6]) for row in rows] == [
        (rows[0][1], b"x:0", first, False),
        (0, b"", first, True), (1, b"", first, True), (2, b"", first, True),
        (0, b"x:1", second, False)]
    assert len({row[2] for row in rows[1:4]}) == 1  # one entry, one row per shard


def test_a_lifecycle_queue_moves_with_its_generations_and_tombstone(log_redis, tmp_path):
    r = redis.Redis.from_url(log_redis)
    queue = keys.ingest("old")
    r.xadd(queue, {"d": "old:0", "n": 2, "c": ""})  # from before generations
    r.xadd(queue, {"d": "old:1", "n": 3, "c": "0", "g": 7})
    r.xadd(queue, {"t": 1, "g": 7, "s": 4})  # a delete's tombstone: s was the shard count
    assert migrate_legacy_queues(r, str(tmp_path / "spark"), 2) == 3
    part = partition_of("old", 2)
    moved = [f for _, f in r.xrange(keys.log_partition(part))]
    assert moved == [{b"d": b"old:0", b"n": b"2", b"c": b"", b"s": b"old", b"g": b"0"},
                     {b"d": b"old:1", b"n": b"3", b"c": b"0.0", b"s": b"old", b"g": b"7"},
                     {b"t": b"1", b"g": b"7", b"s": b"old", b"k": b"4"}]
    assert r.hmget(keys.log_stats(part), "events", "chunks") == [b"5", b"3"]
    reader = _Reader({"redis_url": log_redis, "log_partitions": "2"})
    rows = _drain(reader, reader.initialOffset(), reader.latestOffset(None))
    assert [(row[4], row[5], row[6]) for row in rows] == [
        (b"old:0", 0, False), (b"old:1", 7, False)] + [(b"", 7, True)] * 4
