"""The worker's checkpoint as Tidemark reads it beside Spark: whether the streaming query
ever committed a batch (``has_commits``), and which layout of shard state it holds
(``STATE_FORMAT``), so a checkpoint written in another layout is refused with a message
that says what to do instead of Spark's schema error.
"""

from __future__ import annotations

import os

__all__ = ["has_commits", "STATE_FORMAT", "CheckpointFormatError", "check_state_format"]


def has_commits(spark_checkpoint: str) -> bool:
    """Has the streaming query ever committed a batch under this checkpoint? (Spark writes
    ``commits/<batch id>`` after each batch; a checkpoint without one holds no state.)"""
    import pyarrow.fs as pafs

    uri = spark_checkpoint if "://" in spark_checkpoint else os.path.abspath(spark_checkpoint)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/commits", allow_not_found=True))
    except Exception:  # noqa: BLE001 — a file system only Spark reads: let Spark look
        return True
    return any(i.type == pafs.FileType.File and i.base_name.isdigit() for i in infos)


# The layout of the shard state kept in Spark's state store (``STATE_SCHEMA``): 2 since
# generations (stream deletion) joined it, 3 since the summaries' sketches write their
# bytes in content-defined pages (sketch formats 3, ``sketches/_pages.py``), which a blob
# of layout 2 does not hold. Spark refuses a state of another schema with an error that
# names none of this, and the sketches a blob of another format, so a checkpoint says
# which layout it holds.
STATE_FORMAT = "3"
_STATE_FORMAT_FILE = "state-format"


class CheckpointFormatError(RuntimeError):
    """The checkpoint's shard state was written by a Tidemark this one cannot read."""


def check_state_format(checkpoint: str) -> None:
    """Refuse a checkpoint whose shard state an earlier layout wrote; mark a new one."""
    import pyarrow.fs as pafs

    uri = checkpoint if "://" in checkpoint else os.path.abspath(checkpoint)
    fs, root = pafs.FileSystem.from_uri(uri)
    path = f"{root}/{_STATE_FORMAT_FILE}"
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as f:
            found = f.read().decode().strip()
    else:
        found = "1" if has_commits(f"{checkpoint}/spark") else None  # older ones had no mark
    if found == STATE_FORMAT:
        return
    if found is not None:
        raise CheckpointFormatError(
            f"the checkpoint {checkpoint} holds shard state in layout {found}, written by an "
            f"earlier Tidemark; this one keeps layout {STATE_FORMAT} and cannot read it: start "
            "afresh with a new checkpoint and Redis (for `tidemark up`, move the run directory "
            "away), then declare the streams and send their events again")
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(f"{STATE_FORMAT}\n".encode())
