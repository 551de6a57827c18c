"""Start-up shortcuts of the worker that must never skip real work."""

from __future__ import annotations

from workers.checkpoint import has_commits
from workers.progress import read_everything_before


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


def test_the_first_batch_of_a_run_never_proves_that_everything_was_read():
    """A run's first batch may replay offsets planned before a kill: entries appended
    since are unread, so readiness must not take its start as the line (it did, and
    /readyz said 200 while 20 s of events waited)."""
    at = "2026-11-23T22:00:00.000Z"
    assert read_everything_before({}, None) is None  # no batch yet
    assert read_everything_before({"batchId": 7, "timestamp": at}, None) is None
    assert read_everything_before({"batchId": 7, "timestamp": at}, 7) is None  # the run's first
    assert read_everything_before({"batchId": 8, "timestamp": at}, 7) == at
