"""The Redis key layout, in one place. Only the store modules use it."""

PREFIX = "tm:"
STREAMS = PREFIX + "streams"  # hash: name -> StreamConfig JSON


def ingest(stream: str) -> str:
    """Redis Stream of ingest chunks (one entry per accepted request)."""
    return f"{PREFIX}ingest:{{{stream}}}"


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
PUBLISHED = PREFIX + "worker:published"  # set by the driver; absent after a flush -> republish
GENERATIONS = PREFIX + "generations"  # hash: name -> generation of its current declaration
DELETED = PREFIX + "deleted"  # hash: name -> the generation its last DELETE ended
GENERATION_LAST = PREFIX + "generation:last"  # the last generation handed out


def idempotency_pattern(stream: str) -> str:
    """SCAN pattern of a stream's idempotency keys (names hold no glob characters)."""
    return f"{PREFIX}idem:{{{stream}}}:*"


def tenant_rate(tenant: str, second: int) -> str:
    """Events a tenant's keys were accepted in one wall-clock second (a 2 s TTL)."""
    return f"{PREFIX}rate:{tenant}:{second}"
