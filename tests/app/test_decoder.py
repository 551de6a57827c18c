"""What the decoder keeps (``app.decoder``): per stream only the shards of the version it
decoded last, an unchanged shard of a many-shard stream reused, not decoded again, and
in all no more than its bound in blob bytes; a decode gives the same summary wherever it
runs."""

from __future__ import annotations

import numpy as np

from app.decoder import Decoder, Kept, _decode
from tests.conftest import TEST_SECRET
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

T0 = 1_700_000_000.0


def _blob(n: int) -> bytes:
    summary = StreamSummary.create(StreamConfig(max_window=600), TEST_SECRET)
    ts = T0 + np.arange(float(n))
    summary.update_table(decode_chunk(encode_chunk(ts, [f"k{i % 7}" for i in range(n)],
                                                   np.full(n, np.nan), np.ones(n))))
    return summary.to_bytes()


def test_each_stream_keeps_only_its_last_version():
    kept = Kept()
    a1, a2, b1 = _blob(10), _blob(20), _blob(30)
    _decode([(("a1",), a1)], TEST_SECRET, "a", kept)
    _decode([(("b1",), b1)], TEST_SECRET, "b", kept)
    assert len(kept) == 2 and kept.bytes == len(a1) + len(b1)
    _decode([(("a2",), a2)], TEST_SECRET, "a", kept)  # a's new version: its old one goes
    assert kept.get("a", ("a1",)) is None and kept.get("a", ("a2",)) is not None
    assert len(kept) == 2 and kept.bytes == len(a2) + len(b1)
    kept.forget("b")
    assert len(kept) == 1 and kept.bytes == len(a2)


def test_an_unchanged_shard_is_reused_and_the_merge_leaves_it_intact():
    kept = Kept()
    s0, s1, s1b = _blob(10), _blob(20), _blob(25)
    merged, _ = _decode([(("s0",), s0), (("s1",), s1)], TEST_SECRET, "m", kept)
    shard0 = kept.get("m", ("s0",))
    merged2, _ = _decode([(("s0",), s0), (("s1b",), s1b)], TEST_SECRET, "m", kept)
    assert kept.get("m", ("s0",)) is shard0  # not decoded again
    assert kept.get("m", ("s1",)) is None and len(kept) == 2
    assert shard0.to_bytes() == s0  # merging into a copy left the kept shard as it was
    want = StreamSummary.from_bytes(s0, TEST_SECRET)
    want.merge(StreamSummary.from_bytes(s1b, TEST_SECRET))
    assert merged2.to_bytes() == want.to_bytes()


def test_past_its_bytes_the_least_recently_decoded_streams_go():
    blob = _blob(10)
    kept = Kept(limit=3 * len(blob))
    for name in "abcde":
        _decode([((name,), blob)], TEST_SECRET, name, kept)
    assert kept.bytes <= 3 * len(blob)
    assert [n for n in "abcde" if kept.get(n, (n,)) is not None] == ["c", "d", "e"]


def test_in_process_and_in_a_decoder_process_decode_the_same():
    blobs = [(("x0",), _blob(10)), (("x1",), _blob(40))]
    here = Decoder(TEST_SECRET, processes=0)
    there = Decoder(TEST_SECRET, processes=1)
    there.start()
    try:
        a, _ = here.decode(blobs, "x")
        b, _ = there.decode(blobs, "x")
        assert a.to_bytes() == b.to_bytes()
        assert len(here.kept) == 2  # this process's own
    finally:
        there.close()
