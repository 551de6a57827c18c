"""``workers.decoded``: a kept decoded summary is used only for exactly the version, bytes
and generation it was kept for, and gives the same bytes as decoding."""

from __future__ import annotations

import math


from tests.conftest import TEST_SECRET
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

from tests.workers.frames import chunks_of  # noqa: E402

CONFIG = StreamConfig(max_window=100.0, epsilon=0.1)


def test_a_kept_decoded_summary_gives_the_same_bytes_and_never_outlives_its_version():
    import pandas as pd

    from tests.workers.frames import apply_chunks
    from workers.decoded import DecodedShards

    batches = [chunks_of([[float(10 * b + i) for i in range(5)]])[0] for b in range(4)]
    frames = [pd.DataFrame({"entry": [f"{b + 1}-0"], "payload": [c.payload],
                            "clock_before": [float(10 * b - 1) if b else -math.inf]})
              for b, c in enumerate(batches)]
    kept, plain = DecodedShards(), None
    state = None
    for frame in frames:
        plain = apply_chunks("s", plain, frame, TEST_SECRET, lambda name: (CONFIG, 0))
        state = apply_chunks("s", state, frame, TEST_SECRET, lambda name: (CONFIG, 0), 0, kept)
        assert state["blob"] == plain["blob"] and state["version"] == plain["version"]
    assert kept.hits == 3 and kept.misses == 1  # decoded once, then kept
    # A replay hands in an older version: it is decoded from its bytes, never the kept one.
    older = apply_chunks("s", None, frames[0], TEST_SECRET, lambda name: (CONFIG, 0))
    again = apply_chunks("s", older, frames[1], TEST_SECRET, lambda name: (CONFIG, 0), 0, kept)
    assert kept.misses == 2 and again["events"] == 10
    # Same version, other bytes (another writer): decoded too.
    kept.keep("t", 0, 5, 1, b"these bytes", StreamSummary.create(CONFIG, TEST_SECRET))
    assert kept.take("t", 0, 5, 1, b"other bytes") == b"other bytes"
    # Same version and bytes of another generation (the name deleted and declared again):
    # decoded, never the old generation's summary.
    kept.keep("t", 0, 5, 1, b"these bytes", StreamSummary.create(CONFIG, TEST_SECRET))
    assert kept.take("t", 0, 6, 1, b"these bytes") == b"these bytes"
    kept.keep("t", 0, 5, 1, b"these bytes", StreamSummary.create(CONFIG, TEST_SECRET))
    assert isinstance(kept.take("t", 0, 5, 1, b"these bytes"), StreamSummary)


def test_a_re_declared_stream_never_updates_the_old_generations_kept_summary():
    """Through ``apply_chunks``: the shard of generation 1 is kept decoded; a tombstone
    ends it, and generation 2's first batch starts from an empty summary."""
    import pandas as pd

    from tests.workers.frames import apply_chunks
    from workers.decoded import DecodedShards

    def frame(entry, values, generation, tombstone=False):
        payload = b"" if tombstone else chunks_of([values])[0].payload
        return pd.DataFrame({"entry": [entry], "payload": [payload], "clock_before": [-math.inf],
                             "generation": [generation], "tombstone": [tombstone]})

    kept = DecodedShards()
    old = apply_chunks("s", None, frame("1-0", [1.0, 2.0, 3.0], 1), TEST_SECRET,
                       lambda name: (CONFIG, 1), 0, kept)
    assert old["events"] == 3 and old["generation"] == 1
    assert apply_chunks("s", old, frame("2-0", [], 1, True), TEST_SECRET,
                        lambda name: (CONFIG, 2), 0, kept) is None
    new = apply_chunks("s", None, frame("3-0", [4.0], 2), TEST_SECRET, lambda name: (CONFIG, 2), 0, kept)
    assert new["events"] == 1 and new["generation"] == 2 and new["version"] == old["version"]
    summary = StreamSummary.from_bytes(new["blob"], TEST_SECRET)
    fresh = apply_chunks("s", None, frame("3-0", [4.0], 2), TEST_SECRET, lambda name: (CONFIG, 2))
    assert new["blob"] == fresh["blob"] and summary.to_bytes() == fresh["blob"]
