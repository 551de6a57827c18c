"""The Redis key layout, in one place: every key the API, the worker and the alerts use.

Nothing outside ``tidemark.wire`` spells a key (``tests/test_wire_seam.py`` greps for it).

Tested by: tests/tidemark/test_wire.py, tests/test_wire_seam.py."""

PREFIX = "tm:"
STREAMS = PREFIX + "streams"  # hash: name -> StreamConfig JSON
# hash: name -> the sites a federated stream merges (``records.write_sites``); the stream
# itself is declared in STREAMS like any other (contract §11)
FEDERATED = PREFIX + "federated"


def ingest(stream: str) -> str:
    """The per-stream ingest queue an earlier Tidemark wrote instead of the partitioned log
    (one entry per accepted request). Nothing of this version appends to it: the worker
    moves what a run directory still holds into the log partitions at start
    (``workers.migrate``)."""
    return f"{PREFIX}ingest:{{{stream}}}"


def log_partition(p: int) -> str:
    """Redis Stream of log partition ``p``: the ingest chunks of every stream whose name
    hashes to ``p`` (``tidemark.ingest_log.partition_of``), one entry per accepted
    request, fields ``d`` (Arrow chunk), ``n`` (events), ``c`` (the stream's clock before
    it), ``s`` (the stream), ``g`` (its generation, ``tidemark.generations``); a DELETE's
    tombstone has ``t``, ``g`` (the generation it ended), ``s`` and ``k`` (the stream's
    shard count). The hash tag ``{pN}`` lets a Redis Cluster hold each
    partition and its stats on one node."""
    return f"{PREFIX}log:{{p{p}}}"


def log_stats(p: int) -> str:
    """Hash beside partition ``p``, written with every append: ``last`` (its last entry
    id), ``events`` and ``chunks`` (appended since the partition began, cumulative)."""
    return f"{PREFIX}log-stats:{{p{p}}}"


def ingest_stats(stream: str) -> str:
    """Hash written by the API: received, rejected, and ``clock``, the largest accepted
    ``ts`` (the arrival clock of the late rule)."""
    return f"{PREFIX}ingest-stats:{{{stream}}}"


def shard_segments(stream: str) -> str:
    """Hash: digest -> one segment of a published shard summary (``tidemark/segments.py``;
    each shard's status names its segments in order)."""
    return f"{PREFIX}shard-segments:{{{stream}}}"


def shard_status(stream: str) -> str:
    """Hash: shard number -> JSON status of the shard's published summary."""
    return f"{PREFIX}shard-status:{{{stream}}}"


def idempotency(stream: str, digest: str) -> str:
    """The first answer to an ingest request with this Idempotency-Key (24 h)."""
    return f"{PREFIX}idem:{{{stream}}}:{digest}"


ACTIVE = PREFIX + "active"  # sorted set: stream -> ms of its last ingest entry
ANNOUNCE = PREFIX + "announce"  # pub/sub channel: {"stream", "sketch_version"}
HEARTBEAT = PREFIX + "worker:heartbeat"  # string with a TTL, set by the worker driver
STANDBY = PREFIX + "worker:standby"  # string with a TTL, set by a standing-by spare worker
LOG_PARTITIONS = PREFIX + "log:partitions"  # string: the number of log partitions, fixed at first use
LOG_PROGRESS = PREFIX + "log:progress"  # hash set by the worker driver: what its last finished batch read
PUBLISHED = PREFIX + "worker:published"  # set by the driver; absent after a flush -> republish
GENERATIONS = PREFIX + "generations"  # hash: name -> generation of its current declaration
DELETED = PREFIX + "deleted"  # hash: name -> the generation its last DELETE ended
GENERATION_LAST = PREFIX + "generation:last"  # the last generation handed out
SHARDS_MAX = PREFIX + "shards:max"  # the largest `shards` a declaration had (back-pressure: group updates per waiting stream)


def idempotency_pattern(stream: str) -> str:
    """SCAN pattern of a stream's idempotency keys (names hold no glob characters)."""
    return f"{PREFIX}idem:{{{stream}}}:*"


def tenant_rate(tenant: str, second: int) -> str:
    """Events a tenant's keys were accepted in one wall-clock second (a 2 s TTL)."""
    return f"{PREFIX}rate:{tenant}:{second}"


# -- alerts (``app/alerts/store.py``) ---------------------------------------------------
ALERT_RULES = PREFIX + "alerts"  # hash: alert id -> rule JSON
ALERTS_DUE = PREFIX + "alerts:due"  # sorted set: delivery id -> due time


def alert_state(alert_id: str) -> str:
    """Hash: the rule's state, the version it was evaluated at, its last value."""
    return f"{PREFIX}alert-state:{alert_id}"


def alert_attempts(alert_id: str) -> str:
    return f"{PREFIX}alert-attempts:{alert_id}"


def delivery(delivery_id: str) -> str:
    """Hash: one pending webhook delivery (body, attempts, first due time)."""
    return f"{PREFIX}delivery:{delivery_id}"
