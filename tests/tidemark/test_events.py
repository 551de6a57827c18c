"""Event validation: each bad event is rejected with its index and reason, the rest kept."""

import numpy as np
import pytest

from tidemark.events import BodyError, parse_body, validate_events
from tidemark.streams import StreamConfig

CONFIG = StreamConfig(max_window="1h", value_min=0, value_max=100)


def test_good_events_become_columns():
    batch = validate_events(
        [{"ts": 10}, {"ts": "1970-01-01T00:00:20+00:00", "key": "a", "value": 5, "weight": 2.5}],
        CONFIG,
    )
    assert batch.rejects == []
    np.testing.assert_array_equal(batch.ts, [10.0, 20.0])
    assert batch.key == [None, "a"]
    assert np.isnan(batch.value[0]) and batch.value[1] == 5
    np.testing.assert_array_equal(batch.weight, [1.0, 2.5])


@pytest.mark.parametrize(
    "event, reason",
    [
        ({}, "missing ts"),
        ({"ts": "yesterday"}, "is not a number or an ISO-8601 time"),
        ({"ts": "2024-01-01T00:00:00"}, "needs an offset"),
        ({"ts": True}, "ts must be a number"),
        ({"ts": 1e300}, "between 0 and 9999-12-31"),
        ({"ts": -5}, "between 0 and 9999-12-31"),
        ({"ts": 1, "weight": -1}, "weight must be >= 0"),
        ({"ts": 1, "weight": "heavy"}, "is not a number"),
        ({"ts": 1, "weight": 1e16}, "weight must be <= 1e+15"),
        ({"ts": 1, "key": 7}, "key must be a string"),
        ({"ts": 1, "key": ""}, "key must be 1-256 UTF-8 bytes"),
        ({"ts": 1, "key": "é" * 129}, "key must be 1-256 UTF-8 bytes, got 258"),
        ({"ts": 1, "value": 101}, "outside the stream's declared range"),
        ({"ts": 1, "value": float("nan")}, "value must be finite"),
        ({"ts": 1, "colour": "red"}, "unknown field(s): colour"),
        (["ts", 1], "event must be a JSON object"),
    ],
)
def test_each_bad_event_is_rejected_with_its_reason(event, reason):
    batch = validate_events([{"ts": 1}, event, {"ts": 2}], CONFIG)
    assert len(batch) == 2
    assert [r.index for r in batch.rejects] == [1]
    assert reason in batch.rejects[0].error


def test_ndjson_with_a_broken_line_keeps_the_others():
    items = parse_body(b'{"ts": 1}\nnot json\n\n{"ts": 2}\n', "application/x-ndjson")
    batch = validate_events(items, CONFIG)
    assert len(batch) == 2
    assert batch.rejects[0].index == 1 and "not valid JSON" in batch.rejects[0].error


def test_a_body_that_is_not_an_array_is_refused_whole():
    with pytest.raises(BodyError):
        parse_body(b"[1, 2", None)


def test_fast_path_agrees_with_the_per_event_path():
    from tidemark.events import validate_ndjson_fast

    body = b'{"ts": 1, "key": "a", "value": 3, "weight": 2}\n{"ts": 2.5}\n\n{"ts": 3, "key": "b"}\n'
    fast = validate_ndjson_fast(body, CONFIG)
    slow = validate_events(parse_body(body, None), CONFIG)
    assert fast is not None
    np.testing.assert_array_equal(fast.ts, slow.ts)
    np.testing.assert_array_equal(fast.weight, slow.weight)
    np.testing.assert_array_equal(fast.value, slow.value)
    assert fast.key == slow.key


@pytest.mark.parametrize("line", [b'{"ts": "2024-01-01T00:00:00Z"}', b'{"ts": -1}', b'{"ts": 1e300}', b'{"x": 1, "ts": 1}',
                                  b'{"ts": 1, "weight": -1}', b'{"ts": 1, "value": 1000}',
                                  b'{"ts": 1, "key": ""}', b'{"ts": 1, "key": 5}', b'not json'])
def test_fast_path_declines_anything_irregular(line):
    from tidemark.events import validate_ndjson_fast

    assert validate_ndjson_fast(b'{"ts": 1}\n' + line + b"\n", CONFIG) is None


def _arrow_body(columns: dict, batches: int = 1) -> bytes:
    import pyarrow as pa

    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        n = table.num_rows
        for i in range(batches):  # a body of several record batches is one table
            writer.write_table(table.slice(i * n // batches, (i + 1) * n // batches - i * n // batches))
    return sink.getvalue().to_pybytes()


_ARROW_ROWS = None
_REASONS = ("missing ts", "ahead", "ts must", "key must", "value must be finite", "outside",
            "weight must be finite", "weight must be >=", "weight must be <=")


def _reason(error: str) -> str:
    """Which rule an error names (the two paths word the details differently)."""
    return next((r for r in _REASONS if r in error), error)


def _arrow_rows():
    from hypothesis import strategies as st

    global _ARROW_ROWS
    if _ARROW_ROWS is None:
        _ARROW_ROWS = st.lists(st.fixed_dictionaries({
            "ts": st.one_of(st.none(), st.floats(-10, 1e6), st.sampled_from([1e300, float("inf"), float("nan")])),
            "key": st.one_of(st.none(), st.text(max_size=3), st.just("k" * 257)),
            "value": st.one_of(st.none(), st.floats(-50, 150), st.just(float("nan"))),
            "weight": st.one_of(st.none(), st.floats(-1, 10), st.just(1e16)),
        }), max_size=40)
    return _ARROW_ROWS


def test_arrow_bodies_agree_with_the_per_event_path_through_the_chunk():
    """The columnar Arrow path (keys kept as an Arrow array into the chunk) stores what
    the per-event path stores for the same rows, and rejects the same rows for the same
    reasons (a null is an absent field there)."""
    import pyarrow as pa
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tidemark.chunks import decode_chunk, encode_chunk
    from tidemark.events import validate_arrow

    @settings(max_examples=60, deadline=None)
    @given(rows=_arrow_rows(), large=st.booleans(), batches=st.integers(1, 3))
    def check(rows, large, batches):
        columns = {
            "ts": pa.array([r["ts"] for r in rows], pa.float64()),
            "key": pa.array([r["key"] for r in rows], pa.large_string() if large else pa.string()),
            "value": pa.array([r["value"] for r in rows], pa.float64()),
            "weight": pa.array([r["weight"] for r in rows], pa.float64()),
        }
        arrow = validate_arrow(_arrow_body(columns, batches), CONFIG, max_future=None)
        items = [{k: v for k, v in r.items() if v is not None} for r in rows]
        slow = validate_events(items, CONFIG)
        assert [r.index for r in arrow.rejects] == [r.index for r in slow.rejects]
        assert [_reason(r.error) for r in arrow.rejects] == [_reason(r.error) for r in slow.rejects]
        fast = decode_chunk(encode_chunk(arrow.ts, arrow.key, arrow.value, arrow.weight))
        kept = decode_chunk(encode_chunk(slow.ts, slow.key, slow.value, slow.weight))
        assert fast.equals(kept), (fast.to_pydict(), kept.to_pydict())

    check()


def test_an_arrow_body_without_keys_or_with_integer_times():
    import pyarrow as pa

    from tidemark.chunks import decode_chunk, encode_chunk
    from tidemark.events import validate_arrow

    batch = validate_arrow(_arrow_body({"ts": pa.array([1, 2, 3], pa.int64())}), CONFIG)
    table = decode_chunk(encode_chunk(batch.ts, batch.key, batch.value, batch.weight))
    assert table.column("ts").to_pylist() == [1.0, 2.0, 3.0]
    assert table.column("key").null_count == 3 and table.column("value").null_count == 3
    assert table.column("weight").to_pylist() == [1.0, 1.0, 1.0]


def test_an_arrow_key_column_of_invalid_utf8_is_refused_whole():
    """Strings that are not UTF-8 never reach a chunk (the worker would choke on them)."""
    import pyarrow as pa

    from tidemark.events import validate_arrow

    key = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([0, 2], np.int32).tobytes()),
                                                 pa.py_buffer(b"\xff\xfe")])
    with pytest.raises(BodyError, match="UTF-8"):
        validate_arrow(_arrow_body({"ts": pa.array([1.0]), "key": key}), CONFIG)
