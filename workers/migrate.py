"""Move the per-stream ingest queues of earlier runs into the log partitions.

Runs before the streaming query starts, so nothing reads the queues meanwhile. Earlier
runs kept one Redis Stream per Tidemark stream (``keys.ingest``) and a checkpoint whose
offsets were ``{stream: last entry id read}``. What a queue still holds after the last
*committed* batch's offset was not counted (the state store holds exactly the committed
batches): those entries move, oldest first, to the end of the stream's log partition with
their fields (``d``, ``n``, ``c``, and ``g`` the generation, ``0`` for an entry from
before generations: the worker counts it with its shard's generation) and the stream's
name; a DELETE's tombstone (``t``, ``g``, and ``s`` its shard count in the queue) moves
as the partitions' tombstone (``t``, ``g``, ``s`` the stream, ``k`` the shard count);
older ones are dropped (counted,
only not yet trimmed). Each entry moves in one Lua script (append it, count it in the
partition's stats, delete it from the queue), so a crash midway moves nothing twice. A
batch the checkpoint planned on the queues but did not commit is replayed as empty
(``workers.source``): its entries were among those moved.

Events the API appended to the partitions before this ran stay ahead of the moved ones in
the log. Nothing changes for the answers: every chunk carries the stream's clock from its
append (the late rule at arrival is unchanged) and the summaries take events in any order.

Tested by: tests/workers/test_source.py (migrate_legacy_queues).
"""

from __future__ import annotations

import json
import logging
import os

from tidemark.wire import keys, scripts
from tidemark.wire.records import LogEntry, decode_legacy_entry
from tidemark.ingest_log import id_tuple, is_legacy, partition_of

__all__ = ["migrate_legacy_queues", "committed_offset"]

log = logging.getLogger("tidemark.worker")

_PAGE = 256


def committed_offset(spark_checkpoint: str) -> dict | None:
    """The source offset of the checkpoint's last committed batch (None: no commit)."""
    import pyarrow.fs as pafs

    uri = spark_checkpoint if "://" in spark_checkpoint else os.path.abspath(spark_checkpoint)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
        commits = fs.get_file_info(pafs.FileSelector(f"{root}/commits", allow_not_found=True))
    except (OSError, ValueError):
        return None
    batches = [int(i.base_name) for i in commits if i.type == pafs.FileType.File and i.base_name.isdigit()]
    if not batches:
        return None
    with fs.open_input_stream(f"{root}/offsets/{max(batches)}") as f:
        lines = f.read().decode().splitlines()
    # "v1", the batch's metadata, then one line per source
    return json.loads(lines[2]) if len(lines) > 2 and lines[2] not in ("", "-") else None


def _legacy_queues(r) -> list[str]:
    prefix = keys.ingest("")[:-1]  # 'tm:ingest:{'
    names = []
    for key in r.scan_iter(match=prefix + "*", count=1000, _type="stream"):
        key = key.decode()
        if key.endswith("}"):
            names.append(key[len(prefix):-1])
    return sorted(names)


def migrate_legacy_queues(r, spark_checkpoint: str, partitions: int) -> int:
    """Move what the old per-stream queues hold beyond the committed offsets; the number
    of entries moved. A checkpoint of the partitioned log with queues left (an API of an
    earlier version still appending beside this worker) is refused: the queues' offsets
    are gone, so what they hold cannot be told counted or not."""
    streams = _legacy_queues(r)
    if not streams:
        return 0
    committed = committed_offset(spark_checkpoint)
    if committed and not is_legacy(committed):
        raise RuntimeError(
            f"Redis holds per-stream ingest queues ({len(streams)}, e.g. {keys.ingest(streams[0])!r}) "
            "written by an API of an earlier version after this checkpoint moved to the "
            "partitioned log: stop the old API, then remove those keys or ingest again")
    committed = committed or {}
    move = r.register_script(scripts.MOVE)
    moved = dropped = 0
    for stream in streams:
        queue = keys.ingest(stream)
        partition = partition_of(stream, partitions)
        floor = committed.get(stream)
        cursor = "-"
        while True:
            entries = r.xrange(queue, min=cursor, max="+", count=_PAGE)
            if not entries:
                break
            for entry_id, fields in entries:
                eid = entry_id.decode()
                cursor = f"({eid}"
                if floor and id_tuple(eid) <= id_tuple(floor):
                    dropped += r.xdel(queue, eid)
                    continue
                entry = decode_legacy_entry(fields, stream)
                events = entry.events if isinstance(entry, LogEntry) else 0
                moved += move(keys=[queue, keys.log_partition(partition), keys.log_stats(partition)],
                              args=[eid, events, *entry.encode()])
        if r.xlen(queue) == 0:
            r.delete(queue)
    log.warning("moved %d pending ingest chunks of %d streams from the per-stream queues into "
                "the %d log partitions (%d already counted dropped)", moved, len(streams),
                partitions, dropped)
    return moved
