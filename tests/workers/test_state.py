"""The worker's checkpointed state: atomic, exact round trip, corruption refused."""

import pytest

from workers.state import StateError, StateStore, StreamState, WorkerState


def _state() -> WorkerState:
    s = WorkerState(batch_id=7)
    s.streams["a"] = StreamState({"max_window": 60.0}, {0: b"\x01\x02", 1: b""}, 10, 2, 99.5, 3, "now")
    s.streams["b"] = StreamState({"max_window": 1.0}, {3: b"xyz" * 100})
    return s


def test_round_trip(tmp_path):
    store = StateStore(str(tmp_path))
    assert store.load().batch_id == -1
    store.save(_state())
    assert store.load() == _state()


def test_corrupt_state_is_refused_not_half_read(tmp_path):
    data = bytearray(_state().to_bytes())
    data[-1] ^= 0xFF
    with pytest.raises(StateError, match="CRC"):
        WorkerState.from_bytes(bytes(data))
    with pytest.raises(StateError):
        WorkerState.from_bytes(b"nope")
