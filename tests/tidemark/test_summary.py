"""``tidemark.summary``'s stored form: ``read_head`` is the one reader of a summary's head,
and a blob that is not a whole, honest summary is refused whole, never half-read."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sketches.base import HEADER_SIZE, CorruptSketchError, IncompatibleSketchError, pack_header
from tidemark import segments
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary, read_head

SECRET = HashSecret(b"summary-test-secret-0123456789ab")
CONFIG = StreamConfig(max_window=60.0, epsilon=0.1, delta=0.1, value_min=0.0, value_max=100.0)


def _blob() -> bytes:
    s = StreamSummary.create(CONFIG, SECRET)
    rng = np.random.default_rng(3)
    n = 300
    s.update_table(pa.table({"ts": pa.array(1.7e9 + rng.uniform(0, 60, n)),
                             "key": pa.array([f"k{i % 7}" for i in range(n)], pa.string()),
                             "value": pa.array(rng.uniform(0, 100, n)), "weight": pa.array(np.ones(n))}))
    return s.to_bytes()


BLOB = _blob()


def _with_meta(blob: bytes, change) -> bytes:
    (n,) = struct.unpack_from("<I", blob, HEADER_SIZE)
    meta = json.loads(blob[HEADER_SIZE + 4 : HEADER_SIZE + 4 + n])
    change(meta)
    raw = json.dumps(meta).encode()
    payload = struct.pack("<I", len(raw)) + raw + blob[HEADER_SIZE + 4 + n :]
    return pack_header(blob[5], len(payload), fmt=2) + payload


def test_the_head_names_the_parts_that_make_up_the_rest():
    head = read_head(BLOB)
    assert head.parts_at + sum(length for _, length in head.layout) == len(BLOB)
    assert [name for name, _ in head.layout] == list(StreamSummary.from_bytes(BLOB, SECRET).parts)
    assert segments.split(BLOB)[0] == (segments.HEAD, BLOB[: head.parts_at])
    assert b"".join(b for _, b in segments.split(BLOB)) == BLOB


def test_a_declaration_written_as_text_is_refused():
    text = _with_meta(BLOB, lambda m: m.update(config=json.dumps(m["config"])))
    with pytest.raises(CorruptSketchError, match="metadata unreadable"):
        StreamSummary.from_bytes(text, SECRET)
    assert StreamSummary.from_bytes(_with_meta(BLOB, lambda m: None), SECRET).to_bytes() == BLOB


def test_another_secret_is_refused():
    with pytest.raises(IncompatibleSketchError):
        StreamSummary.from_bytes(BLOB, HashSecret(b"another-secret-0123456789abcdefg"))


@given(st.integers(0, len(BLOB) - 1))
def test_a_truncated_blob_is_refused_whole(cut):
    with pytest.raises(CorruptSketchError):
        read_head(BLOB[:cut])
    assert segments.split(BLOB[:cut]) == [(segments.WHOLE, BLOB[:cut])]


@given(st.integers(HEADER_SIZE, len(BLOB) - 1), st.integers(1, 255))
def test_a_changed_byte_is_read_or_refused_never_half_read(at, flip):
    """A flipped byte either leaves a summary that reads whole (a count somewhere changed)
    or is refused with a sketch error: nothing else escapes."""
    bad = bytearray(BLOB)
    bad[at] ^= flip
    try:
        StreamSummary.from_bytes(bytes(bad), SECRET)
    except (CorruptSketchError, IncompatibleSketchError):
        pass
