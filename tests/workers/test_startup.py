"""Start-up shortcuts of the worker that must never skip real work."""

from __future__ import annotations

from workers.job import has_commits


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
