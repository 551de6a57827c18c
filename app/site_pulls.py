"""Pulling peer sites' summaries of federated streams (contract §11): one copy per (site,
stream), brought up to date by a delta from the version held (``app/site_serving.py``
serves it), else by the manifest and only the segments not held, each checked against this
deployment's settings and hash secret. A poller keeps the streams someone read in the last
``watch_for`` seconds (or an alert watches) pulled every ``pull_interval``; a new version is
announced on the local publish channel (alerts evaluate, live dashboards redraw).

Tested by: tests/app/test_federation.py (three real sites: Pulls, deltas, missing sites).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import httpx
from pydantic import ValidationError

from app.site_serving import MAX_DIGESTS, STATUS_HEADER, zstd
from sketches.base import SketchError
from tidemark import segments
from tidemark.hash_secret import HashSecret
from tidemark.sites import LOCAL, Site
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

__all__ = ["Pulls", "incompatible", "settings_diff"]

log = logging.getLogger("tidemark.federation")

# What a pull can meet: the site away, an answer that is not what it should be, a summary
# refused whole. Each leaves the site named in answers (``app/site_bounds.py``).
_PULL_ERRORS = (httpx.HTTPError, ValueError, SketchError, KeyError, TypeError) + ((zstd.ZstdError,) if zstd else ())


def settings_diff(here: StreamConfig, there: StreamConfig) -> str:
    a, b = here.model_dump(), there.model_dump()
    diff = [f"{k} {a[k]!r} here, {b[k]!r} there" for k in a if a[k] != b.get(k)]
    return "; ".join(diff) or "settings differ"


def incompatible(manifest: dict, config: StreamConfig, secret: HashSecret) -> str | None:
    """Why a site's summary (its manifest) cannot be merged with this declaration (None: it can)."""
    fingerprint = manifest.get("fingerprint")
    if fingerprint != secret.fingerprint:
        return (f"its summaries are made under another hash secret (fingerprint {fingerprint} "
                f"there, {secret.fingerprint} here): sites of a federation share "
                "TIDEMARK_HASH_SECRET")
    try:
        there = StreamConfig.model_validate(manifest.get("settings"))
    except ValidationError:
        return "its settings are unreadable here"
    if there != config:
        return f"settings differ: {settings_diff(config, there)}"
    return None


@dataclass
class _Copy:
    """What this deployment holds of one site's summary of one stream."""

    etag: str | None = None
    held: tuple = (None, {})  # (summary, its status), replaced as one
    blob: bytes = b""  # the summary's bytes (the dictionary of the next delta)
    confirmed: float | None = None  # monotonic time the site last confirmed this version
    attempted: float = -1e18  # monotonic time of the last pull started
    error: str | None = None  # why the last pull failed (None: it did not)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Pulls:
    """``config_of(name)``, ``sites_of(name)``: the stream's declaration and sites here;
    ``announce(name, site, version)``: tell this deployment a site has a new version."""

    def __init__(self, sites: list[Site], secret: HashSecret, config_of: Callable, sites_of: Callable,
                 announce: Callable, pull_interval: float = 1.0, timeout: float = 3.0, watch_for: float = 60.0):
        self.sites = {s.name: s for s in sites}
        self.secret, self.config_of, self.sites_of, self.announce = secret, config_of, sites_of, announce
        self.pull_interval, self.timeout, self.watch_for = pull_interval, timeout, watch_for
        self.also_watch = lambda: set()  # streams alerts watch (set by the app at start)
        self.federated = lambda: set()  # the federated streams this process knows of
        self._lock = threading.Lock()
        self._copies: dict[tuple[str, str], _Copy] = {}
        self._watched: dict[str, float] = {}
        self._clients: dict[str, httpx.Client] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        # bytes received from each site (bodies as sent, compressed) and pulls: /metrics says them
        self.pulled = {name: {"bytes": 0, "pulls": 0, "not_modified": 0, "deltas": 0, "segments": 0}
                       for name in self.sites}

    def watch(self, name: str) -> None:
        """Someone reads ``name``: keep its sites pulled for ``watch_for`` seconds."""
        self._watched[name] = time.monotonic()
        self._start_poller()

    def submit(self, task, *args) -> None:
        self._start_poller()
        self._pool.submit(task, *args)

    def forget(self, name: str) -> None:
        with self._lock:
            self._watched.pop(name, None)
            for key in [k for k in self._copies if k[1] == name]:
                del self._copies[key]

    def client(self, site: str) -> httpx.Client:
        client = self._clients.get(site)
        if client is None:
            s = self.sites[site]
            client = self._clients[site] = httpx.Client(
                base_url=s.url, headers={"Authorization": f"Bearer {s.key}"},
                timeout=httpx.Timeout(self.timeout), limits=httpx.Limits(max_connections=16))
        return client

    def copy(self, site: str, name: str) -> _Copy:
        with self._lock:
            copy = self._copies.get((site, name))
            if copy is None:
                copy = self._copies[(site, name)] = _Copy()
            return copy

    def pull(self, site: str, name: str, config: StreamConfig, wait: bool = True) -> None:
        """Bring this process's copy of ``site``'s summary of ``name`` up to date: the
        manifest if it changed, then only the segments not held (module notes). One pull
        per copy at a time; ``wait=False`` returns at once when one is under way."""
        copy = self.copy(site, name)
        if not copy.lock.acquire(blocking=wait):
            return
        try:
            copy.attempted = time.monotonic()
            stats = self.pulled[site]
            try:
                before = copy.etag
                self._pull(site, name, config, copy, stats)
                copy.error = None
            except _PULL_ERRORS as e:
                copy.error = (f"unreachable ({type(e).__name__})" if isinstance(e, httpx.HTTPError)
                              else str(e)[:300])
                return
        finally:
            copy.lock.release()
        if before is not None and copy.etag != before:
            self._announce(name, site, copy.held[1].get("sketch_version"))

    def _pull(self, site: str, name: str, config: StreamConfig, copy: _Copy, stats: dict) -> None:
        client = self.client(site)
        stats["pulls"] += 1
        if copy.etag and copy.blob and zstd is not None:  # what changed since the version held
            r = self._ask(client, f"/v1/streams/{name}/summary/delta", name, copy, stats,
                          params={"since": copy.etag}, headers={"If-None-Match": copy.etag})
            if r is None:
                return
            if r.status_code == 200:
                dictionary = zstd.ZstdCompressionDict(copy.blob, dict_type=zstd.DICT_TYPE_RAWCONTENT)
                blob = zstd.ZstdDecompressor(dict_data=dictionary).decompress(r.content)
                if '"' + segments.digest(blob) + '"' != r.headers.get("etag"):
                    raise ValueError("a delta did not give the version it named")
                stats["deltas"] += 1
                self._take(copy, config, blob, r.headers["etag"], json.loads(r.headers.get(STATUS_HEADER) or "{}"))
                return
            # 410: the site no longer holds the version we have; the manifest says what is new
        headers = {"If-None-Match": copy.etag} if copy.etag else {}  # set only by a whole pull
        r = self._ask(client, f"/v1/streams/{name}/summary/manifest", name, copy, stats, headers=headers)
        if r is None:
            return
        if r.status_code != 200:
            raise ValueError(f"the site answered {r.status_code}")
        manifest = r.json()
        problem = incompatible(manifest, config, self.secret)
        if problem:
            copy.held, copy.etag, copy.blob = (None, {}), None, b""
            raise ValueError(problem)
        have = {segments.digest(b): b for _, b in segments.split(copy.blob)} if copy.blob else {}
        wanted = [d for _, d, _ in manifest["segments"]]
        need = [d for d in dict.fromkeys(wanted) if d not in have]
        held = {d: have[d] for d in wanted if d in have}
        lengths = {d: n for _, d, n in manifest["segments"]}
        for i in range(0, len(need), MAX_DIGESTS):
            ask = need[i : i + MAX_DIGESTS]
            s = client.get(f"/v1/streams/{name}/summary/segments", params={"digests": ",".join(ask)})
            stats["bytes"] += s.num_bytes_downloaded
            if s.status_code != 200:
                raise ValueError(f"the site answered {s.status_code} for segments (a newer version? "
                                 "the next pull asks again)")
            body, offset = s.content, 0
            for d in ask:
                chunk = body[offset : offset + lengths[d]]
                offset += lengths[d]
                if segments.digest(chunk) != d:
                    raise ValueError("a segment did not match its digest")
                held[d] = chunk
                stats["segments"] += 1
            if offset != len(body):
                raise ValueError("the segments' lengths did not match the manifest")
        blob = segments.join([[p, d] for p, d, _ in manifest["segments"]], held)
        self._take(copy, config, blob, manifest["etag"], manifest.get("status") or {})

    @staticmethod
    def _ask(client: httpx.Client, path: str, name: str, copy: _Copy, stats: dict,
             **request) -> httpx.Response | None:
        """GET ``path`` from a site, counting the bytes; None when the version held is still
        the site's (a 304 confirms it), a ValueError when the site has no such stream."""
        r = client.get(path, **request)
        stats["bytes"] += r.num_bytes_downloaded
        if r.status_code == 304:
            stats["not_modified"] += 1
            copy.confirmed = copy.attempted
            return None
        if r.status_code == 404:
            raise ValueError(f"the site has no stream {name!r} (deleted there?)")
        return r

    def _take(self, copy: _Copy, config: StreamConfig, blob: bytes, etag: str, status: dict) -> None:
        """Decode a site's new version (refused whole under another secret or settings)."""
        summary = StreamSummary.from_bytes(blob, self.secret) if blob else None
        if summary is not None and summary.config != config:
            copy.held, copy.etag, copy.blob = (None, {}), None, b""
            raise ValueError(f"settings differ: {settings_diff(config, summary.config)}")
        copy.held, copy.blob, copy.etag = (summary, status), blob, etag
        copy.confirmed = copy.attempted

    def _announce(self, name: str, site: str, version) -> None:
        """A peer's new version, told to this deployment's alerts and live dashboards as a
        local publish is (``app.live_hub``)."""
        try:
            self.announce(name, site, version)
        except Exception as e:  # noqa: BLE001 — Redis restarting: the next read still sees it
            log.warning("announcing %s from %s failed: %s", name, site, type(e).__name__)

    def _start_poller(self) -> None:
        if self._poller is not None and self._poller.is_alive():
            return
        with self._lock:
            if self._poller is not None and self._poller.is_alive():
                return
            self._pool = self._pool or ThreadPoolExecutor(max(2, min(16, len(self.sites))),
                                                          thread_name_prefix="tidemark-site-pull")
            self._poller = threading.Thread(target=self._poll, name="tidemark-federation", daemon=True)
            self._poller.start()

    def _poll(self) -> None:
        """Keep the copies of streams someone reads (or an alert watches) pulled every
        ``pull_interval`` seconds, one pull per (site, stream) at a time."""
        pulling: set[tuple[str, str]] = set()
        while not self._stop.wait(min(0.2, self.pull_interval / 2)):
            now = time.monotonic()
            try:
                names = {n for n, at in list(self._watched.items()) if now - at < self.watch_for}
                names |= set(self.also_watch()) & self.federated()
                for name in names:
                    sites = self.sites_of(name)
                    if not sites:
                        continue
                    config = self.config_of(name)
                    for site in sites:
                        if site == LOCAL or (site, name) in pulling:
                            continue
                        if now - self.copy(site, name).attempted >= self.pull_interval:
                            pulling.add((site, name))
                            self._pool.submit(self._pull_done, site, name, config, pulling)
            except Exception as e:  # noqa: BLE001 — Redis away, a stream deleted: next round
                log.debug("federation poll: %s", type(e).__name__)

    def _pull_done(self, site: str, name: str, config: StreamConfig, pulling: set) -> None:
        try:
            self.pull(site, name, config)
        finally:
            pulling.discard((site, name))

    def close(self) -> None:
        self._stop.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients.values():
            client.close()
