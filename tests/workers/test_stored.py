"""A shard's summary kept as pieces (``workers.stored``), through the group function as
Spark calls it (``workers.job.shard_updater`` with stand-ins for the two state handles;
the real ``transformWithState`` runs in the worker tests): the state store holds exactly
the summary's bytes, a batch writes only the pieces that changed, a kept decode reads
nothing back, and a Python worker that never saw the shard reads its pieces and goes on
to the very same bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from sketches.base import CorruptSketchError
from tests.conftest import TEST_SECRET
from tests.workers.frames import MapStateStandIn, ValueStateStandIn, spark_rows
from tidemark import segments
from tidemark.chunks import encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.wire import keys
from workers.stored import SLACK, StoredSummary, plan_write

CONFIG = StreamConfig(max_window=100.0, epsilon=0.1, value_min=0, value_max=100)
RANDOM = {"decayed", segments.HEAD}


def _summary_bytes(n: int) -> bytes:
    s = StreamSummary.create(CONFIG, TEST_SECRET)
    import pyarrow as pa

    ts = np.arange(n, dtype=float)
    s.update_table(pa.table({"ts": ts, "key": [f"k{i % 5}" for i in range(n)],
                             "value": ts % 100, "weight": np.ones(n)}))
    return s.to_bytes()


def _by_digest(blob: bytes) -> dict:
    return {segments.digest(b): b for _, b in segments.split(blob)}


def test_pieces_give_back_the_bytes_and_a_wrong_or_missing_piece_is_refused_whole():
    blob = _summary_bytes(50)
    stored = StoredSummary.of(blob)
    assert stored.blob() == blob and len(stored) == len(segments.split(blob)) > 2
    plan_write(None, stored, "v1")  # (names each piece's bundle, which the state row keeps)
    again = StoredSummary.from_json(stored.to_json(), lambda: _by_digest(blob))
    assert again.blob() == blob and again.fingerprint == stored.fingerprint
    assert again.parts() == segments.split(blob)
    held = _by_digest(blob)
    name, d = stored.manifest[1]
    altered = {**held, d: held[d][:-1] + bytes([held[d][-1] ^ 1])}
    with pytest.raises(CorruptSketchError, match=name):
        StoredSummary.from_json(stored.to_json(), lambda: altered).blob()
    with pytest.raises(CorruptSketchError, match="missing"):
        StoredSummary.from_json(stored.to_json(), lambda: {k: b for k, b in held.items() if k != d}).blob()


def test_a_batch_writes_its_new_pieces_as_one_bundle_and_drops_bundles_nothing_names():
    from workers.stored import pieces_of

    v1, v2 = StoredSummary.of(_summary_bytes(50)), StoredSummary.of(_summary_bytes(60))
    write, gone = plan_write(None, v1, "v1")
    assert [k for k, _ in write] == ["v1"] and gone == []
    held = dict(write)
    assert pieces_of(((k,), (b,)) for k, b in held.items()) == v1.pieces()
    again = StoredSummary(v1.manifest, pieces=v1.pieces())
    assert plan_write(v1, again, "v2") == ([], [])  # nothing new: nothing written
    write, gone = plan_write(v1, v2, "v2", slack=10**9)
    new = set(v2.fingerprint) - set(v1.fingerprint)
    assert [k for k, _ in write] == ["v2"] and set(pieces_of([((None,), (write[0][1],))])) == new
    held.update(write)
    for k in gone:
        del held[k]
    assert set(pieces_of(((k,), (b,)) for k, b in held.items())) >= set(v2.fingerprint)
    # past the slack, every current piece goes into the new bundle and the rest is dropped
    v3 = StoredSummary.of(_summary_bytes(70))
    write, gone = plan_write(v2, v3, "v3", slack=-10**9)  # (forced)
    assert set(gone) == set(held) and set(pieces_of([((None,), (write[0][1],))])) == set(v3.fingerprint)
    assert v3.bundles == {"v3": len(write[0][1])}
    with pytest.raises(CorruptSketchError):
        pieces_of([((None,), (write[0][1][:-1],))])


_batch = st.lists(st.tuples(st.floats(0, 300, allow_nan=False), st.sampled_from([None, "a", "b", "c"]),
                            st.one_of(st.none(), st.floats(0, 100))), min_size=1, max_size=12)


@given(batches=st.lists(_batch, min_size=1, max_size=6), forget=st.sets(st.integers(0, 5)))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_state_store_holds_the_summary_a_plain_update_makes_and_writes_what_changed(
        redis_url, batches, forget):
    """Batches of keyed, valued and bare events, out of order and late: after each, the
    pieces held are exactly the summary ``apply_chunks`` makes without the state store,
    each batch wrote only the pieces whose digest changed, and a batch that runs in a
    Python worker without the kept decode (``forget``) reads the pieces and makes the same
    bytes."""
    from workers.chunk_rows import ChunkRows, pack
    from workers.decoded import DecodedShards
    from workers.job import shard_updater
    from workers.shard_state import STATE_FIELDS
    from workers.stored import pieces_of
    from workers.shard_state import apply_chunks

    name = "pieces"
    redis.Redis.from_url(redis_url).hset(keys.STREAMS, name, CONFIG.model_dump_json())
    update, meta, pieces = shard_updater(redis_url, TEST_SECRET), ValueStateStandIn(), MapStateStandIn()
    plain, clock = None, -math.inf
    for b, events in enumerate(batches):
        ts = np.array([e[0] for e in events])
        payload = encode_chunk(ts, [e[1] for e in events], np.array([np.nan if e[2] is None else e[2] for e in events]),
                               np.ones(len(events)))
        rows = spark_rows(name, f"{b + 1}-0", payload, clock)
        plain = apply_chunks(name, plain, ChunkRows.unpack([pack(f"{b + 1}-0", clock, payload, 0, False)]),
                             TEST_SECRET, lambda n: (CONFIG, 0))
        clock = max(clock, float(ts.max()))
        had = set(StoredSummary.from_json(dict(zip(STATE_FIELDS, meta.row))["pieces"], dict).fingerprint) \
            if meta.exists() else set()
        bundles_before = set(pieces.held)
        if b in forget:
            from workers import decoded

            decoded._DECODED = DecodedShards()
        reads, writes = pieces.reads, pieces.writes
        assert list(update((name, 0), iter(rows), meta, pieces)) == []
        assert pieces.reads - reads == (1 if b in forget and b > 0 else 0)  # a kept decode reads nothing
        state = dict(zip(STATE_FIELDS, meta.row))
        stored = StoredSummary.from_json(state["pieces"], lambda: pieces_of(pieces.iterator()))
        mine, theirs = dict(segments.split(stored.blob())), dict(segments.split(plain["blob"]))
        # byte for byte but the additive decayed sum, whose random draws are each instance's
        # own (and the head, which records its length)
        assert {n: b for n, b in mine.items() if n.split("@")[0] not in RANDOM} == \
            {n: b for n, b in theirs.items() if n.split("@")[0] not in RANDOM}
        assert StreamSummary.from_bytes(stored.blob(), TEST_SECRET)["decayed"].total_weight == \
            StreamSummary.from_bytes(plain["blob"], TEST_SECRET)["decayed"].total_weight
        held = pieces_of(((k,), (v,)) for k, v in pieces.held.items())
        assert set(held) >= set(stored.fingerprint)  # every current piece is in a bundle kept
        assert set(pieces.held) == set(stored.bundles)  # and no bundle outlives its pieces
        assert pieces.writes - writes == (1 if set(stored.fingerprint) - had else 0)
        written = set(pieces.held) - bundles_before
        if written:  # the new pieces, or all of them when the bundles grew past the slack
            fresh = set(pieces_of([((None,), (pieces.held[k],)) for k in written]))
            assert fresh in (set(stored.fingerprint) - had, set(stored.fingerprint))
        summary = sum(len(b) for _, b in stored.parts())
        assert sum(map(len, pieces.held.values())) <= 2 * summary + SLACK + 64 * len(held)
        assert state["events"] == plain["events"] and state["version"] == plain["version"]
