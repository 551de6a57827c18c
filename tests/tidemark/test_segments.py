"""The segmented published form (``tidemark/segments.py``) against a real Redis, below
Spark: any interleaving of publishes (in any order, replayed, of either shard) and reads
(by a reader that holds segments and one that holds none) gives exactly the summary a
whole-blob decode of the same shard versions gives; a replayed publish changes nothing in
Redis; no segment outlives the manifests naming it; and a reader racing a publisher never
sees a torn set."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from app.store import Store
from tests.conftest import TEST_SECRET
from tidemark import segments
from tidemark.wire import keys
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

_names = (f"seg-{i}" for i in itertools.count())
CONFIG = StreamConfig(max_window=600.0, value_min=0.0, value_max=100.0)
VERSIONS = 6


def _versions(shard: int) -> list[bytes]:
    """Blobs of versions 1..VERSIONS of one shard, each holding more events than the one
    before; every other version adds only unkeyed, unvalued events, so some of its parts
    keep their bytes (and segments are shared between versions)."""
    rng = np.random.default_rng(shard)
    summary = StreamSummary.create(CONFIG, TEST_SECRET)
    out = []
    for v in range(VERSIONS):
        n = 20
        ts = 1000.0 + 10 * v + rng.uniform(0, 10, n)
        plain = v % 2 == 1
        key = pa.array([None] * n if plain else [f"k{rng.integers(8)}" for _ in range(n)], pa.string())
        value = np.full(n, np.nan) if plain else rng.uniform(0, 100, n)
        summary.update_table(pa.table({"ts": ts, "key": key, "value": value, "weight": np.ones(n)}))
        out.append(summary.to_bytes())
    return out


BLOBS = {shard: _versions(shard) for shard in (0, 1)}


def _expected(versions: dict[int, int]) -> StreamSummary:
    """Whole-blob decode of the shard versions, merged in shard order."""
    blobs = [BLOBS[k][v - 1] for k, v in sorted(versions.items())]
    merged = StreamSummary.from_bytes(blobs[0], TEST_SECRET)
    for blob in blobs[1:]:
        merged.merge(StreamSummary.from_bytes(blob, TEST_SECRET))
    return merged


@pytest.fixture(scope="module", autouse=True)
def decoder_processes():
    """Decodes go to the decoder process (before it is ready they run in the caller)."""
    from app.decoder import Decoder

    Decoder.shared(TEST_SECRET).start()


def _snapshot(r, name: str) -> tuple:
    return (r.hgetall(keys.shard_status(name)), r.hgetall(keys.shard_segments(name)))


def _same(got: StreamSummary, want: StreamSummary) -> None:
    assert got.parts.keys() == want.parts.keys()
    for part, sketch in got.parts.items():
        assert sketch.to_bytes() == want[part].to_bytes(), part
    assert got.clock_seconds == want.clock_seconds


@pytest.fixture(scope="module")
def machine(redis_url):
    class Interleavings(RuleBasedStateMachine):
        @initialize()
        def start(self):
            self.name = next(_names)
            self.publisher = Publisher(redis_url)
            self.store = Store(redis_url, TEST_SECRET)
            self.store.declarations.declare(self.name, CONFIG)
            self.held: dict[int, int] = {}  # shard -> newest version published

        @rule(shard=st.sampled_from([0, 1]), version=st.integers(1, VERSIONS))
        def publish(self, shard, version):
            before = _snapshot(self.publisher.redis, self.name)
            status = {"version": version, "events": 20 * version, "late_dropped": 0,
                      "clock": None, "updated_at": "t", "sizes": {}, "failed": None}
            took = self.publisher.publish(self.name, shard, status, BLOBS[shard][version - 1],
                                          CONFIG.model_dump())
            assert took == (version > self.held.get(shard, 0))
            if took:
                self.held[shard] = version
            else:  # a replay or an older version: nothing in Redis moved
                assert _snapshot(self.publisher.redis, self.name) == before

        @rule(fresh_reader=st.booleans())
        def read(self, fresh_reader):
            store = Store(redis_url, TEST_SECRET) if fresh_reader else self.store
            summary, status = store.reads.summary(self.name, fresh=True)
            if not self.held:
                assert summary is None
                return
            assert status["sketch_version"] == sum(self.held.values())
            _same(summary, _expected(self.held))

        @invariant()
        def no_segment_outlives_its_manifests(self):
            if not hasattr(self, "name"):
                return
            import json

            r = self.publisher.redis
            named = {d for raw in r.hvals(keys.shard_status(self.name))
                     for _, d in json.loads(raw)["segments"]}
            assert {d.decode() for d in r.hkeys(keys.shard_segments(self.name))} == named

    return Interleavings


def test_any_interleaving_of_publishes_and_reads_equals_a_whole_blob_decode(machine):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine, settings=settings(
        max_examples=12, stateful_step_count=14, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))


def test_split_and_join_give_the_blob_back_and_a_non_summary_is_one_segment():
    for blob in BLOBS[0]:
        parts = segments.split(blob)
        assert parts[0][0] == segments.HEAD and b"".join(b for _, b in parts) == blob
        names = [n for n, _ in parts[1:]]
        parts_held = list(StreamSummary.from_bytes(blob, TEST_SECRET).parts)
        assert [n for n in names if "@" not in n] == parts_held
        # a paged part's pages follow it, numbered: values, values@1, values@2, ...
        for i, n in enumerate(names):
            if "@" in n:
                part, j = n.split("@")
                assert names[i - int(j)] == part
    assert segments.split(b"stale") == [(segments.WHOLE, b"stale")]
    # Versions that added no keyed or valued events keep those parts' bytes: shared segments.
    a, b = (dict(segments.split(x)) for x in BLOBS[0][:2])
    assert a["keys"] == b["keys"] and a["count"] != b["count"]


def test_a_reader_racing_a_publisher_never_sees_a_torn_set(redis_url):
    """A publisher goes through every version of both shards as fast as it can while
    readers (each holding what it read before) read: every read is one coherent set of
    shard versions, equal to their whole-blob decode."""
    name = next(_names)
    publisher = Publisher(redis_url)
    store = Store(redis_url, TEST_SECRET)
    store.declarations.declare(name, CONFIG)
    done = threading.Event()

    def publish():
        for v in range(1, VERSIONS + 1):
            for shard in (0, 1):
                status = {"version": v, "events": 20 * v, "late_dropped": 0, "clock": None,
                          "updated_at": "t", "sizes": {}, "failed": None}
                assert publisher.publish(name, shard, status, BLOBS[shard][v - 1], CONFIG.model_dump())
        done.set()

    thread = threading.Thread(target=publish)
    thread.start()
    seen = 0
    while not done.is_set() or seen == 0:
        summary, status = store.reads.summary(name, fresh=True)
        if summary is None:
            continue
        versions = {k: v for k, (_, v) in store.reads.served_versions(name)}
        _same(summary, _expected(versions))
        seen += 1
    thread.join()
    summary, _ = store.reads.summary(name, fresh=True)
    _same(summary, _expected({0: VERSIONS, 1: VERSIONS}))
