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
from workers import stored as stored_module
from workers.stored import INLINE, SLACK, StoredSummary, plan_bundles, plan_write

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
    write, gone = plan_bundles(None, v1, "v1")
    assert [k for k, _ in write] == ["v1"] and gone == []
    held = dict(write)
    assert pieces_of(((k,), (b,)) for k, b in held.items()) == v1.pieces()
    again = StoredSummary(v1.manifest, pieces=v1.pieces())
    assert plan_bundles(v1, again, "v2") == ([], [])  # nothing new: nothing written
    write, gone = plan_bundles(v1, v2, "v2", slack=10**9)
    new = set(v2.fingerprint) - set(v1.fingerprint)
    assert [k for k, _ in write] == ["v2"] and set(pieces_of([((None,), (write[0][1],))])) == new
    held.update(write)
    for k in gone:
        del held[k]
    assert set(pieces_of(((k,), (b,)) for k, b in held.items())) >= set(v2.fingerprint)
    # past the slack, every current piece goes into the new bundle and the rest is dropped
    v3 = StoredSummary.of(_summary_bytes(70))
    write, gone = plan_bundles(v2, v3, "v3", slack=-10**9)  # (forced)
    (key, data), = write
    assert key in held  # written over a bundle it no longer needs: one call, not two
    assert set(gone) == set(held) - {key} and set(pieces_of([((None,), (data,))])) == set(v3.fingerprint)
    assert v3.bundles == {key: len(data)}
    with pytest.raises(CorruptSketchError):
        pieces_of([((None,), (write[0][1][:-1],))])


def test_a_small_summary_rides_in_the_row_and_moves_to_the_map_when_it_grows():
    small, big = StoredSummary.of(_summary_bytes(50)), StoredSummary.of(_summary_bytes(60))
    inline, write, gone = plan_write(None, small, "v1")
    assert write == [] and gone == [] and set(small.where.values()) == {INLINE} and small.bundles == {}
    from workers.stored import held_pieces, unpack_bundle

    assert unpack_bundle(inline) == small.pieces()
    assert held_pieces(small, inline, lambda: pytest.fail("the map is not read")) == small.pieces()
    # past the limit: every piece goes to the map (none was there), the row holds none
    inline, write, gone = plan_write(small, big, "v2", inline_limit=0)
    assert inline is None and [k for k, _ in write] == ["v2"] and gone == []
    assert INLINE not in big.where.values() and big.bundles == {"v2": len(write[0][1])}
    # and back under it: the row again, the map's bundles removed
    again = StoredSummary.of(_summary_bytes(70))
    inline, write, gone = plan_write(big, again, "v3")
    assert inline is not None and write == [] and gone == ["v2"]


_batch = st.lists(st.tuples(st.floats(0, 300, allow_nan=False), st.sampled_from([None, "a", "b", "c"]),
                            st.one_of(st.none(), st.floats(0, 100))), min_size=1, max_size=12)


@given(batches=st.lists(_batch, min_size=1, max_size=6), forget=st.sets(st.integers(0, 5)),
       limit=st.sampled_from([0, 4_000, 1 << 20]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_state_store_holds_the_summary_a_plain_update_makes_and_writes_what_changed(
        redis_url, batches, forget, limit):
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
    kept_limit, stored_module.INLINE_BYTES = stored_module.INLINE_BYTES, limit  # map, row, or both
    try:
        _run_batches(redis_url, name, batches, forget)
    finally:
        stored_module.INLINE_BYTES = kept_limit


def _run_batches(redis_url, name, batches, forget):
    from tests.workers.frames import stored_of
    from workers.chunk_rows import ChunkRows, pack
    from workers.decoded import DecodedShards
    from workers.job import shard_updater
    from workers.shard_state import STATE_FIELDS, apply_chunks
    from workers.stored import pieces_of

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
        before = StoredSummary.from_json(dict(zip(STATE_FIELDS, meta.row))["pieces"], dict) if meta.exists() else None
        in_map = {d for d, k in (before.where.items() if before else ()) if k != INLINE}
        if b in forget:
            from workers import decoded

            decoded._DECODED = DecodedShards()
        reads, writes = pieces.reads, pieces.writes
        assert [r.version for r in update((name, 0), iter(rows), meta, pieces)] == [b + 1]  # one row: the group
        # a kept decode reads nothing; a miss reads the map only when the row names it
        assert pieces.reads - reads == (1 if b in forget and in_map else 0)
        state = dict(zip(STATE_FIELDS, meta.row))
        stored = stored_of(meta, pieces)
        mine, theirs = dict(segments.split(stored.blob())), dict(segments.split(plain["blob"]))
        # byte for byte but the additive decayed sum, whose random draws are each instance's
        # own (and the head, which records its length)
        assert {n: b for n, b in mine.items() if n.split("@")[0] not in RANDOM} == \
            {n: b for n, b in theirs.items() if n.split("@")[0] not in RANDOM}
        assert StreamSummary.from_bytes(stored.blob(), TEST_SECRET)["decayed"].total_weight == \
            StreamSummary.from_bytes(plain["blob"], TEST_SECRET)["decayed"].total_weight
        assert set(pieces.held) == set(stored.bundles)  # no bundle outlives its pieces
        current = set(stored.fingerprint)
        if set(stored.where.values()) == {INLINE}:  # small: in the row, the map left empty
            assert state["inline"] is not None and not pieces.held and pieces.writes == writes
        else:
            assert state["inline"] is None
            assert pieces.writes - writes == (1 if current - in_map else 0)  # one call a batch
            written = set(pieces.written[len(pieces.written) - (pieces.writes - writes):])
            if written:  # the new pieces, or all of them when the bundles grew past the slack
                fresh = set(pieces_of([((None,), (pieces.held[k],)) for k in written]))
                assert current - in_map <= fresh <= current
            summary = sum(len(b) for _, b in stored.parts())
            assert sum(map(len, pieces.held.values())) <= 2 * summary + SLACK + 64 * len(current)
        assert state["events"] == plain["events"] and state["version"] == plain["version"]
