"""The wire between the API and the worker, without Spark: each record's encode and decode
are inverse (hypothesis), and each Lua script, run on a real Redis, writes what the
records decode and reads what they encode."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from tidemark.streams import StreamConfig
from tidemark.wire import keys, scripts
from tidemark.wire.records import (LogEntry, ShardStatus, Tombstone, declared_shards,
                                   decode_entry, decode_legacy_entry, id_tuple, read_config,
                                   write_config)

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
counts = st.integers(0, 2**62)
clocks = st.floats(allow_nan=False, allow_infinity=False)
entries = st.builds(LogEntry, stream=names, generation=counts, payload=st.binary(max_size=64),
                    events=counts, clock_before=st.none() | clocks)
tombstones = st.builds(Tombstone, stream=names, generation=counts, shards=st.integers(1, 1024))
statuses = st.builds(
    ShardStatus, version=counts, events=counts, late_dropped=counts, clock=st.none() | clocks,
    updated_at=st.none() | st.text(max_size=32),
    sizes=st.dictionaries(st.text(max_size=8), st.integers(0, 2**40), max_size=4),
    failed=st.none() | st.text(min_size=1, max_size=40), failed_events=counts,
    generation=st.none() | counts,
    segments=st.lists(st.tuples(st.text(max_size=8), st.text("0123456789abcdef", min_size=32,
                                                              max_size=32)).map(list), max_size=4))


def _as_redis(fields: list) -> dict[bytes, bytes]:
    """XADD's field/value list as redis-py reads an entry back."""
    def b(v):
        return v if isinstance(v, bytes) else str(v).encode()
    return {b(k): b(v) for k, v in zip(fields[::2], fields[1::2])}


@given(entries)
def test_an_entry_decodes_to_itself(entry):
    assert decode_entry(_as_redis(entry.encode())) == entry


@given(tombstones)
def test_a_tombstone_decodes_to_itself(tomb):
    assert decode_entry(_as_redis(tomb.encode())) == tomb


@given(statuses)
def test_a_shard_status_decodes_to_itself(status):
    assert ShardStatus.decode(status.encode()) == status
    assert ShardStatus.decode(status.encode().encode()) == status


def test_a_status_of_an_earlier_version_decodes_with_the_later_fields_empty():
    old = ShardStatus.decode(json.dumps({"version": 3, "events": 5, "late_dropped": 1}))
    assert old == ShardStatus(version=3, events=5, late_dropped=1)
    assert (old.generation, old.segments, old.sizes, old.failed_events) == (None, [], {}, 0)


@given(st.integers(0, 2**48), st.integers(0, 2**20), st.integers(0, 2**48), st.integers(0, 2**20))
def test_entry_ids_sort_in_log_order(a, b, c, d):
    assert (id_tuple(f"{a}-{b}") < id_tuple(f"{c}-{d}")) == ((a, b) < (c, d))


def test_a_declaration_reads_back_and_its_shards_without_one():
    config = StreamConfig(max_window=60.0, shards=3)
    assert read_config(write_config(config)) == config
    assert declared_shards(write_config(config).encode()) == 3
    assert declared_shards(None) == 1 and declared_shards(b"not json") == 1


def test_a_legacy_queue_entry_names_its_stream_and_its_tombstone_the_shard_count():
    assert decode_legacy_entry({b"d": b"x", b"n": b"2", b"c": b""}, "old") == LogEntry("old", 0, b"x", 2, None)
    assert decode_legacy_entry({b"t": b"1", b"g": b"7", b"s": b"4"}, "old") == Tombstone("old", 7, 4)


# -- the scripts on a real Redis ------------------------------------------------------------
@pytest.fixture(scope="module")
def r(own_redis):
    client = redis.Redis.from_url(own_redis.url)
    yield client
    client.close()


def _declare(r, name: str, config: StreamConfig) -> int:
    new, raw = r.register_script(scripts.DECLARE)(
        keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.ingest_stats(name),
              keys.shard_segments(name), keys.shard_status(name), keys.SHARDS_MAX],
        args=[name, write_config(config)])
    assert new == 1 and read_config(raw) == config
    assert int(r.get(keys.SHARDS_MAX)) >= config.shards  # back-pressure's bound per waiting stream
    return int(r.hget(keys.GENERATIONS, name))


def _append(r, name: str, chunk: bytes, events: int, max_ts: float | None) -> bytes:
    return r.register_script(scripts.APPEND)(
        keys=[keys.log_partition(0), keys.log_stats(0), keys.ingest_stats(name), keys.ACTIVE, "",
              keys.GENERATIONS, keys.STREAMS],
        args=[chunk, events, 0, "" if max_ts is None else repr(float(max_ts)), "{}", 60, name])


def test_append_writes_entries_that_decode_with_the_clock_before_each(r):
    gen = _declare(r, "app", StreamConfig(max_window=60.0))
    _append(r, "app", b"first", 2, 5.5)
    _append(r, "app", b"second", 3, 4.0)
    got = [decode_entry(f) for _, f in r.xrange(keys.log_partition(0))
           if decode_entry(f).stream == "app"]
    assert got == [LogEntry("app", gen, b"first", 2, None), LogEntry("app", gen, b"second", 3, 5.5)]
    assert _append(r, "undeclared", b"x", 1, 1.0) == b"x"  # refused: no generation


def test_delete_appends_a_tombstone_that_decodes(r):
    gen = _declare(r, "del", StreamConfig(max_window=60.0, shards=4))
    assert r.register_script(scripts.DELETE)(
        keys=[keys.STREAMS, keys.GENERATIONS, keys.DELETED, keys.log_partition(0), keys.log_stats(0),
              keys.ingest_stats("del"), keys.shard_segments("del"), keys.shard_status("del"),
              keys.ACTIVE, keys.ingest("del")],
        args=["del", keys.ANNOUNCE]) == 4
    last = r.xrevrange(keys.log_partition(0), count=1)[0][1]
    assert decode_entry(last) == Tombstone("del", gen, 4)


def test_the_oldest_unread_entry_names_its_stream(r):
    _declare(r, "old", StreamConfig(max_window=60.0))
    _append(r, "old", b"c", 1, None)
    first_id = r.xrange(keys.log_partition(0), count=1)[0][0]
    entry_id, stream = r.register_script(scripts.OLDEST)(keys=[keys.log_partition(0)], args=["-"])
    assert entry_id == first_id and stream == decode_entry(r.xrange(keys.log_partition(0), count=1)[0][1]).stream.encode()


def test_move_carries_a_legacy_entry_over_as_the_same_record(r):
    queue = keys.ingest("legacy")
    eid = r.xadd(queue, {"d": b"blob", "n": 7, "c": "2.5", "g": 3}).decode()
    entry = decode_legacy_entry(r.xrange(queue)[0][1], "legacy")
    assert r.register_script(scripts.MOVE)(keys=[queue, keys.log_partition(1), keys.log_stats(1)],
                                          args=[eid, entry.events, *entry.encode()]) == 1
    assert decode_entry(r.xrange(keys.log_partition(1))[-1][1]) == entry == LogEntry("legacy", 3, b"blob", 7, 2.5)
    assert r.xlen(queue) == 0


def test_publish_stores_the_status_that_read_returns_and_decodes(r):
    name, config = "pub", StreamConfig(max_window=60.0)
    gen = int(r.register_script(scripts.ENSURE)(keys=[keys.STREAMS, keys.GENERATIONS],
                                                  args=[name, write_config(config)]))
    assert gen == int(r.hget(keys.GENERATIONS, name))
    status = ShardStatus(version=2, events=10, late_dropped=1, clock=3.25, updated_at="now",
                         sizes={"summary": 9}, generation=gen, segments=[["_whole", "d1"]])
    publish = r.register_script(scripts.PUBLISH)

    def send(s: ShardStatus, *segs) -> int:
        return publish(keys=[keys.shard_status(name), keys.shard_segments(name), keys.STREAMS,
                             keys.GENERATIONS, keys.DELETED],
                       args=[0, s.version, s.encode(), name, write_config(config), keys.ANNOUNCE,
                             s.generation, *segs])

    assert send(status, "d1", b"bytes") == 1
    assert send(dataclasses.replace(status, version=1), "d1", b"bytes") == 0  # older: refused
    assert send(dataclasses.replace(status, version=3, segments=[["_whole", "d2"]])) == -1  # d2 unsent
    raw_statuses, _, read_gen, segs = r.register_script(scripts.READ)(
        keys=[keys.shard_status(name), keys.shard_segments(name), keys.ingest_stats(name),
              keys.GENERATIONS], args=[name])
    assert ShardStatus.decode(raw_statuses[1]) == status and int(read_gen) == gen
    assert segs == [b"d1", b"bytes"]


def test_a_new_generation_is_larger_than_every_one_before(r):
    gens = [_declare(r, f"g{i}", StreamConfig(max_window=60.0)) for i in range(5)]
    assert gens == sorted(set(gens))
