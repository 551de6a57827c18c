"""The Redis key layout, in one place. Only the store modules use it."""

PREFIX = "tm:"
STREAMS = PREFIX + "streams"  # hash: name -> StreamConfig JSON


def ingest(stream: str) -> str:
    """Redis Stream of ingest chunks (one entry per accepted request)."""
    return f"{PREFIX}ingest:{{{stream}}}"


def ingest_stats(stream: str) -> str:
    """Hash written by the API: received, rejected."""
    return f"{PREFIX}ingest-stats:{{{stream}}}"


def sketch(stream: str) -> str:
    """The merged, published summary of a stream (bytes)."""
    return f"{PREFIX}sketch:{{{stream}}}"


def status(stream: str) -> str:
    """Hash written by the worker with every publish."""
    return f"{PREFIX}status:{{{stream}}}"


ANNOUNCE = PREFIX + "announce"  # pub/sub channel: {"stream", "sketch_version"}
HEARTBEAT = PREFIX + "worker:heartbeat"  # string with a TTL, set by the worker
PUBLISHED = PREFIX + "worker:published"  # marker: absent after a flush -> republish
