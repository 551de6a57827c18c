"""The Redis side of federation (``app/federation.py``): which streams are federated over
which sites, and the announcement of a peer's new version to this deployment's alerts and
live dashboards (the channel a worker's publish is announced on).

Tested by: tests/app/test_federation.py (federated streams and announcements through the
API)."""

from __future__ import annotations

import json

import redis

from tidemark.wire import keys
from tidemark.wire.records import read_sites, write_sites

__all__ = ["SiteRecords"]


class SiteRecords:
    def __init__(self, r: redis.Redis):
        self.redis = r

    def sites(self, name: str) -> tuple[str, ...] | None:
        """The sites of a federated stream (None: not federated)."""
        return read_sites(self.redis.hget(keys.FEDERATED, name))

    def declared(self, name: str) -> bool:
        return bool(self.redis.hexists(keys.STREAMS, name))

    def set(self, name: str, sites: list[str]) -> None:
        self.redis.hset(keys.FEDERATED, name, write_sites(sites))

    def drop(self, name: str) -> None:
        self.redis.hdel(keys.FEDERATED, name)

    def announce(self, name: str, site: str, version) -> None:
        """A peer's new version of ``name``, heard as a publish is (``app.live_hub``)."""
        self.redis.publish(keys.ANNOUNCE, json.dumps({"stream": name, "site": site, "sketch_version": version}))
