"""``tidemark.capacity``: a declaration's worst-case summary size, read from each part's
spec in ``tidemark.summary.PARTS``, and the refusal of settings that would outgrow it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.capacity import CapacityError, check, worst_case_bytes
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary, spec_of

SECRET = HashSecret(b"capacity-test-secret-0123456789")


def test_settings_that_need_a_huge_summary_are_refused_with_what_fits():
    with pytest.raises(CapacityError, match="finest epsilon these settings can take is"):
        check(StreamConfig(max_window="7d", epsilon=1e-6))
    assert check(StreamConfig(max_window="7d", epsilon=0.05)) < 256 * 2**20


def _events(rng, n: int, start: float, span: float, distinct: int, skew: bool):
    ts = np.sort(start + rng.uniform(0, span, n))
    ids = rng.zipf(1.3, n) % distinct if skew else rng.integers(0, distinct, n)
    return pa.table({"ts": pa.array(ts), "key": pa.array([f"k{i}" for i in ids.tolist()], pa.string()),
                     "value": pa.array(rng.lognormal(0, 2, n)), "weight": pa.array(rng.integers(1, 5, n).astype(float))})


# The windowed quantiles' nodes follow the ticks and the values met (a count per value key
# per node: ``WindowedQuantiles.max_nbytes``), a bound the declaration does not set; the
# capacity check counts them at their declared (empty) size and this test leaves them out.
UNBOUNDED = {"values"}


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([0.05, 0.1, 0.3]), st.sampled_from([30.0, 120.0]), st.integers(10, 5000),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_a_full_summary_stays_within_the_declared_worst_case(epsilon, window, distinct, skew, seed):
    """Windows filled over and over with in-order events (many keys, or a few hot ones):
    no part ever holds more bytes than the worst case the declaration was checked against
    (each part's ``worst_bytes`` as built empty at declaration), and that check's total is
    the sum of those."""
    config = StreamConfig(max_window=window, epsilon=epsilon, delta=0.1, value_min=0.0, value_max=1e6,
                          decays=[{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}])
    declared = StreamSummary.create(config, SECRET).build_all()
    worst = {name: spec_of(name).worst_bytes(part, config) for name, part in declared.parts.items()}
    assert worst_case_bytes(config) == int(sum(worst.values()))
    summary = StreamSummary.create(config, SECRET)
    rng = np.random.default_rng(seed)
    for i in range(6):  # six half windows: every window full, its oldest ticks expiring
        summary.update_table(_events(rng, 4000, 1.7e9 + i * window / 2, window / 2, distinct, skew))
        for name, part in summary.parts.items():
            if name not in UNBOUNDED:
                assert part.nbytes <= worst[name], (name, part.nbytes, worst[name])
    assert set(summary.parts) == set(worst)  # every part was fed and checked
