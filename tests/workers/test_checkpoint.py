"""``workers.checkpoint``: a checkpoint counts as holding state only once a batch committed,
and one of another shard-state layout is refused before Spark reads it."""

from __future__ import annotations

import pytest

from workers.checkpoint import has_commits


def test_a_checkpoint_has_commits_only_once_a_batch_committed(tmp_path):
    spark = tmp_path / "spark"
    assert not has_commits(str(spark))  # nothing there yet
    (spark / "offsets").mkdir(parents=True)
    (spark / "offsets" / "0").write_text("v1")  # planned, not committed
    (spark / "commits").mkdir()
    (spark / "commits" / ".0.crc").write_text("")
    assert not has_commits(str(spark))
    (spark / "commits" / "0").write_text("v1")
    assert has_commits(str(spark))
    assert has_commits(f"file://{spark}")


def test_a_file_system_it_cannot_read_counts_as_having_commits(tmp_path):
    # Spark may read schemes pyarrow does not: then the state store is read, never skipped.
    assert has_commits("nosuchscheme://bucket/checkpoint/spark")


def test_a_checkpoint_of_an_earlier_state_layout_is_refused_with_what_to_do(tmp_path):
    """A new checkpoint is marked with the state layout; one an earlier Tidemark committed
    batches to (no mark) or marked otherwise is refused before Spark reads its state."""
    from workers.checkpoint import STATE_FORMAT, CheckpointFormatError, check_state_format

    fresh = tmp_path / "fresh"
    check_state_format(str(fresh))
    assert (fresh / "state-format").read_text().strip() == STATE_FORMAT
    check_state_format(str(fresh))  # marked: accepted again
    old = tmp_path / "old"
    (old / "spark" / "commits").mkdir(parents=True)
    (old / "spark" / "commits" / "0").write_text("v1\n{}")
    with pytest.raises(CheckpointFormatError, match="layout 1, written by an earlier Tidemark"):
        check_state_format(str(old))
    (old / "state-format").write_text("2\n")  # the single-row layout before pieces
    with pytest.raises(CheckpointFormatError, match="layout 2"):
        check_state_format(str(old))
