"""Federated streams (contract §11): one answer across sites, from their merged summaries.

A *site* is a Tidemark deployment (``tidemark/sites.py``); a *federated stream* is declared
here with ``"sites": ["eu", "us", "local"]`` and answered by merging each listed site's
published summary of the stream of the same name (``local``: this deployment's own, read
from Redis like any stream's). Remote summaries are *pulled*: while someone reads the
stream (a query, an alert, a live dashboard), each remote site is asked every
``TIDEMARK_SITE_PULL_INTERVAL`` seconds for the manifest of its summary with the version
held (``If-None-Match``: unchanged costs a ``304``), and for the segments it lacks only
(content-addressed: a part that did not change is never sent again). The query path never
waits for a peer except for the very first read of a stream; it answers from the copies
held and says how old each is (``as_of.sites``).

``Store.summary(name)`` of a federated stream returns the merge of the sites' summaries
and a status that says each site's ``as_of`` (``Federation.summary``), so every query
kind, the alerts, the dashboard, ``/v1/live`` (a pulled new version is announced on the
local channel) and the Prometheus API serve it as any other stream.

**Why the merged bound holds (composition across sites).** Each site's published summary
is already a merge of that site's shard summaries; merging the sites' summaries is the
same operation one level up, on summaries built with equal settings and the same hash
secret (checked at declaration and at every pull: settings and the secret's fingerprint,
and ``StreamSummary.from_bytes``/``merge`` refuse anything else). Let ``E_s`` be the events
site ``s`` counts (its late rule applied on its own clock, as its own answers count them)
and ``E = ⊎_s E_s``. Per family (each module's merge notes, which hold for any merge tree):

* *Deterministic parts.* ``count``/``sum`` (splittable histogram): the merged sketch keeps
  each site's parts side by side and adds their answers and intervals, so
  ``|Ŷ − S| ≤ Σ_s ε·S_s = ε·S`` (relative errors per part add up to the same relative
  error of the union). Quantiles (windowed quantile sketch): the union of the nodes, a node
  in both adds its histograms, and the collapse invariant holds for the union, so ranks stay
  within ``ε·n`` of ``E``. Relative decayed sums: partitions coarsen alike, the merge is the
  sketch of the union, no added error. Heavy-hitter candidates (per-bucket Misra–Gries):
  the mergeable-summaries bound survives the merge. These keep ``confidence`` 1.
* *Randomized parts.* With a shared hash secret every site draws the same hash functions
  (the seed derives from the secret), and for each family the merge of sketches with the
  same seed is **the sketch of the union**: randomized waves (lossless merge, Lemma A:
  ``A.merge(B)`` equals the wave fed both streams), ECM-sketch (Count-Min counters add;
  time buckets merge losslessly, same ε at any depth) and the additive decayed sketch
  (the stored set is a function of the multiset of (key, level) pairs; independent random
  streams per sketch). So the merged sketch's (ε, δ) guarantee is a statement about ``E``
  with the same failure probability δ: one event, no union bound over sites needed. (Were
  the sites' sketches independent instances answered separately and summed, the union
  bound would give ``1 − Σ_s δ_s``; merging sketches of one seed avoids that loss.)

So an answer over a complete federation carries exactly the bound of a single site that
had counted ``E``. A site that cannot be read, is older than ``TIDEMARK_SITE_MAX_AGE``, or
cannot be merged leaves ``E_s`` out: ``app/site_bounds.py`` then keeps only the sides of
each bound that still hold for ``E`` (a monotone kind's lower bound), names the site in
``incomplete`` and sets ``confidence`` 0. Never a silent partial answer.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError

from app.declarations import StreamConflict
from app.site_records import SiteRecords
from app.stream_status import Status
from sketches.base import SketchError
from tidemark import segments
from tidemark.hash_secret import HashSecret
from tidemark.sites import LOCAL, Site
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

__all__ = ["Federation", "UnknownSite", "SiteConflict", "Published", "STATUS_HEADER", "as_of_site",
           "merge_sites"]

log = logging.getLogger("tidemark.federation")

STATUS_HEADER = "Tidemark-Status"  # the served version's status, JSON, beside the summary bytes
_STATUS_FIELDS = ("sketch_version", "updated_at", "events", "late_dropped", "clock", "received",
                  "rejected", "failed_events")
MAX_DIGESTS = 64  # segments one request may ask (a summary has about ten)
KEPT_VERSIONS = 4  # versions of a stream's summary kept to serve deltas and segments from

try:  # deltas between versions; without it a peer gets the changed segments whole
    import zstandard as zstd
except ImportError:  # pragma: no cover — a dependency; an install without it still federates
    zstd = None


# What a pull can meet: the site away, an answer that is not what it should be, a summary
# refused whole. Each leaves the site named in answers (``app/site_bounds.py``).
_PULL_ERRORS = (httpx.HTTPError, ValueError, SketchError, KeyError, TypeError) + ((zstd.ZstdError,) if zstd else ())


class UnknownSite(ValueError):
    """A declaration names a site this deployment does not know (a 422)."""


class SiteConflict(StreamConflict):
    """A site's stream cannot be merged with this declaration (a 409)."""


def _settings_diff(here: StreamConfig, there: StreamConfig) -> str:
    a, b = here.model_dump(), there.model_dump()
    diff = [f"{k} {a[k]!r} here, {b[k]!r} there" for k in a if a[k] != b.get(k)]
    return "; ".join(diff) or "settings differ"


@dataclass
class Published:
    """This deployment's published summary of a stream, as peers are served it."""

    source: object  # the decoded summary it was encoded from (None: nothing published)
    blob: bytes
    etag: str
    manifest: list  # [[part, digest, length], ...]
    segments: dict[str, bytes]
    status: dict


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


def merge_sites(summaries: list[StreamSummary]) -> StreamSummary | None:
    """The merge of the sites' summaries (module notes: the bound of the union), into a
    copy: each site's summary stays as held. None when no site has published."""
    merged = None
    for s in summaries:
        merged = pickle.loads(pickle.dumps(s)) if merged is None else merged.merge(s)
    return merged


def as_of_site(status: dict, age: float | None, error: str | None = None) -> dict:
    out = {"sketch_version": status.get("sketch_version"), "updated_at": status.get("updated_at"),
           "events": status.get("events"), "age": None if age is None else round(age, 3)}
    if error:
        out["error"] = error
    return out


class Federation:
    """Federated declarations, pulls from peer sites and merged summaries of one API
    process. ``store`` is the ``app.store.Store`` it serves (its local methods are
    captured before the store routes federated names here, ``Store.federate``)."""

    def __init__(self, store, sites: list[Site], secret: HashSecret, max_age: float = 30.0,
                 pull_interval: float = 1.0, timeout: float = 3.0, watch_for: float = 60.0):
        self.store, self.secret = store, secret
        self.records = SiteRecords(store.redis)
        self.sites = {s.name: s for s in sites}
        self.max_age, self.pull_interval, self.timeout, self.watch_for = (
            max_age, pull_interval, timeout, watch_for)
        self.local_summary, self.local_status = store.summaries.summary, store.summaries.status
        self.local_in_memory, self.local_versions = store.summaries.in_memory, store.summaries.served_versions
        self.ttl = store.declarations.config_ttl
        self.also_watch = lambda: set()  # streams alerts watch (set by the app at start)
        self._lock = threading.Lock()
        self._federated: dict[str, tuple[float, tuple[str, ...] | None]] = {}
        self._copies: dict[tuple[str, str], _Copy] = {}
        # name -> (key, merged summary, the gathered sites it was made of, monotonic time)
        self._merged: dict[str, tuple[tuple, StreamSummary | None, dict, float]] = {}
        self._merging: set[str] = set()
        self._watched: dict[str, float] = {}
        self._served: dict[str, list[Published]] = {}  # newest first, KEPT_VERSIONS of them
        self._deltas: dict[tuple[str, str, str], bytes] = {}  # (name, from, to) -> delta
        self._clients: dict[str, httpx.Client] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        # bytes received from each site (bodies as sent, compressed) and pulls: the bench reads it
        self.pulled = {name: {"bytes": 0, "pulls": 0, "not_modified": 0, "deltas": 0, "segments": 0}
                       for name in self.sites}

    # -- declarations --------------------------------------------------------------------
    def sites_of(self, name: str) -> tuple[str, ...] | None:
        """The sites of ``name`` when it is federated, else None (read at most ``ttl`` ago)."""
        now = time.monotonic()
        kept = self._federated.get(name)
        if kept and now - kept[0] < self.ttl:
            return kept[1]
        sites = self.records.sites(name)
        if len(self._federated) >= 4096:
            self._federated.clear()
        self._federated[name] = (now, sites)
        return sites

    def known_federated(self, name: str) -> bool | None:
        """Is ``name`` federated, as last read (None: not read yet); never reads Redis."""
        kept = self._federated.get(name)
        return None if kept is None else kept[1] is not None

    def check_sites(self, sites: list[str]) -> list[str]:
        if not sites:
            raise UnknownSite("sites must name at least one site")
        if len(set(sites)) != len(sites):
            raise UnknownSite("sites names a site twice")
        unknown = [s for s in sites if s != LOCAL and s not in self.sites]
        if unknown:
            known = ", ".join([LOCAL, *sorted(self.sites)])
            raise UnknownSite(f"unknown site(s) {', '.join(unknown)}: this deployment knows {known} "
                              "(TIDEMARK_SITES)")
        return list(sites)

    def declare(self, name: str, config: StreamConfig, sites: list[str] | None) -> bool:
        """Declare ``name``, federated over ``sites`` (None: a plain stream); True when
        new. Each remote site must hold a stream of that name with equal settings, made
        under this deployment's hash secret: else ``SiteConflict`` naming the site and what
        differs. A stream's sites never change (delete it and declare it again)."""
        if sites is not None:
            sites = self.check_sites(sites)
        current = self.records.sites(name)
        if current is not None or sites is not None:
            exists = self.records.declared(name)
            if exists and (tuple(sites) if sites is not None else None) != current:
                what = (f"federated over {', '.join(current)}" if current is not None else "not federated")
                raise StreamConflict(f"stream {name!r} already exists, {what}; its sites cannot change "
                                     "(delete it, or declare a new stream)")
        if sites is not None:
            for site in sites:
                if site != LOCAL:
                    self._check_remote(site, name, config)
        new = self.store.declare(name, config)
        if sites is not None:
            self.records.set(name, sites)
        elif current is not None and new:  # a federation left by a delete that did not finish
            self.records.drop(name)
        self.forget(name)
        return new

    def _check_remote(self, site: str, name: str, config: StreamConfig) -> None:
        try:
            r = self._client(site).get(f"/v1/streams/{name}/summary/manifest")
        except httpx.HTTPError as e:
            raise SiteConflict(f"site {site!r} could not be reached to check its stream {name!r} "
                               f"({type(e).__name__}); declare again when it answers") from None
        if r.status_code == 404:
            raise SiteConflict(f"site {site!r} has no stream {name!r} (declare it there first, "
                               "with the same settings)")
        if r.status_code in (401, 403):
            raise SiteConflict(f"site {site!r} refused the read key this deployment holds for it "
                               f"({r.status_code}): TIDEMARK_SITES")
        if r.status_code != 200:
            raise SiteConflict(f"site {site!r} answered {r.status_code} for its stream {name!r}")
        problem = self._incompatible(r.json(), config)
        if problem:
            raise SiteConflict(f"site {site!r} cannot be federated in {name!r}: {problem}")

    def _incompatible(self, manifest: dict, config: StreamConfig) -> str | None:
        """Why a site's summary cannot be merged with this declaration (None: it can)."""
        fingerprint = manifest.get("fingerprint")
        if fingerprint != self.secret.fingerprint:
            return (f"its summaries are made under another hash secret (fingerprint {fingerprint} "
                    f"there, {self.secret.fingerprint} here): sites of a federation share "
                    "TIDEMARK_HASH_SECRET")
        try:
            there = StreamConfig.model_validate(manifest.get("settings"))
        except ValidationError:
            return "its settings are unreadable here"
        if there != config:
            return f"settings differ: {_settings_diff(config, there)}"
        return None

    def forget(self, name: str) -> None:
        """Drop all this process holds of ``name`` (deleted or declared anew)."""
        with self._lock:
            self._federated.pop(name, None)
            self._merged.pop(name, None)
            self._watched.pop(name, None)
            self._served.pop(name, None)
            for key in [k for k in self._deltas if k[0] == name]:
                del self._deltas[key]
            for key in [k for k in self._copies if k[1] == name]:
                del self._copies[key]

    def delete(self, name: str) -> None:
        """The federation's declaration goes with the stream; a remote site's stream is
        never touched (contract §11)."""
        self.records.drop(name)
        self.forget(name)

    def refuse_ingest(self, name: str) -> None:
        """A federated stream takes events only when ``local`` is one of its sites."""
        sites = self.sites_of(name)
        if sites is not None and LOCAL not in sites:
            raise StreamConflict(f"stream {name!r} is federated over {', '.join(sites)}, which do not "
                                 "include this deployment (local): post its events to a site")

    # -- the served side: this deployment's published summary, for peers ---------------
    def published(self, name: str) -> Published:
        """This deployment's own published summary of ``name`` (never a merge of peers':
        a federation of federations would count a site twice), encoded once per version."""
        summary, status = self.local_summary(name, fresh=True)
        kept = self._served.get(name)
        if kept and kept[0].source is summary and summary is not None:
            return kept[0]
        blob = summary.to_bytes() if summary is not None else b""
        parts = segments.split(blob) if blob else []
        etag = '"' + segments.digest(blob) + '"'
        if kept and kept[0].etag == etag:
            kept[0].source = summary
            return kept[0]
        published = Published(summary, blob, etag, [[p, segments.digest(b), len(b)] for p, b in parts],
                              {segments.digest(b): b for _, b in parts},
                              {k: status.get(k) for k in _STATUS_FIELDS})
        with self._lock:
            self._served[name] = [published, *(kept or [])[: KEPT_VERSIONS - 1]]
        return published

    def delta(self, name: str, since: str) -> tuple[Published, bytes | None]:
        """The newest version of ``name`` and its bytes as a delta from the version
        ``since`` (an ETag a peer holds): Zstandard with the old bytes as its dictionary, so
        what travels is what changed, byte by byte. None when ``since`` is not one of the
        ``KEPT_VERSIONS`` newest (or Zstandard is missing): the peer asks the manifest."""
        published = self.published(name)
        if zstd is None or since == published.etag:
            return published, None
        old = next((p for p in self._served.get(name) or [] if p.etag == since), None)
        if old is None or not old.blob or not published.blob:
            return published, None
        key = (name, since, published.etag)
        made = self._deltas.get(key)
        if made is None:
            dictionary = zstd.ZstdCompressionDict(old.blob, dict_type=zstd.DICT_TYPE_RAWCONTENT)
            made = zstd.ZstdCompressor(level=3, dict_data=dictionary).compress(published.blob)
            with self._lock:
                if len(self._deltas) >= 256:
                    self._deltas.clear()
                self._deltas[key] = made
        return published, made

    def segments_of(self, name: str, digests: list[str]) -> list[bytes] | None:
        """The segments named, from the newest versions served (None: one is gone)."""
        held: dict[str, bytes] = {}
        for p in reversed(self._served.get(name) or []):
            held.update(p.segments)
        try:
            return [held[d] for d in digests]
        except KeyError:
            return None

    # -- the pulling side ----------------------------------------------------------------
    def _client(self, site: str) -> httpx.Client:
        client = self._clients.get(site)
        if client is None:
            s = self.sites[site]
            client = self._clients[site] = httpx.Client(
                base_url=s.url, headers={"Authorization": f"Bearer {s.key}"},
                timeout=httpx.Timeout(self.timeout), limits=httpx.Limits(max_connections=16))
        return client

    def _copy(self, site: str, name: str) -> _Copy:
        with self._lock:
            copy = self._copies.get((site, name))
            if copy is None:
                copy = self._copies[(site, name)] = _Copy()
            return copy

    def pull(self, site: str, name: str, config: StreamConfig, wait: bool = True) -> None:
        """Bring this process's copy of ``site``'s summary of ``name`` up to date: the
        manifest if it changed, then only the segments not held (module notes). One pull
        per copy at a time; ``wait=False`` returns at once when one is under way."""
        copy = self._copy(site, name)
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
        client = self._client(site)
        stats["pulls"] += 1
        if copy.etag and copy.blob and zstd is not None:  # what changed since the version held
            r = client.get(f"/v1/streams/{name}/summary/delta", params={"since": copy.etag},
                           headers={"If-None-Match": copy.etag})
            stats["bytes"] += r.num_bytes_downloaded
            if r.status_code == 304:
                stats["not_modified"] += 1
                copy.confirmed = copy.attempted
                return
            if r.status_code == 200:
                dictionary = zstd.ZstdCompressionDict(copy.blob, dict_type=zstd.DICT_TYPE_RAWCONTENT)
                blob = zstd.ZstdDecompressor(dict_data=dictionary).decompress(r.content)
                if '"' + segments.digest(blob) + '"' != r.headers.get("etag"):
                    raise ValueError("a delta did not give the version it named")
                stats["deltas"] += 1
                self._take(copy, config, blob, r.headers["etag"], json.loads(r.headers.get(STATUS_HEADER) or "{}"))
                return
            if r.status_code == 404:
                raise ValueError(f"the site has no stream {name!r} (deleted there?)")
            # 410: the site no longer holds the version we have; the manifest says what is new
        headers = {"If-None-Match": copy.etag} if copy.etag else {}  # set only by a whole pull
        r = client.get(f"/v1/streams/{name}/summary/manifest", headers=headers)
        stats["bytes"] += r.num_bytes_downloaded
        if r.status_code == 304:
            stats["not_modified"] += 1
            copy.confirmed = copy.attempted
            return
        if r.status_code == 404:
            raise ValueError(f"the site has no stream {name!r} (deleted there?)")
        if r.status_code != 200:
            raise ValueError(f"the site answered {r.status_code}")
        manifest = r.json()
        problem = self._incompatible(manifest, config)
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

    def _take(self, copy: _Copy, config: StreamConfig, blob: bytes, etag: str, status: dict) -> None:
        """Decode a site's new version (refused whole under another secret or settings)."""
        summary = StreamSummary.from_bytes(blob, self.secret) if blob else None
        if summary is not None and summary.config != config:
            copy.held, copy.etag, copy.blob = (None, {}), None, b""
            raise ValueError(f"settings differ: {_settings_diff(config, summary.config)}")
        copy.held, copy.blob, copy.etag = (summary, status), blob, etag
        copy.confirmed = copy.attempted

    def _announce(self, name: str, site: str, version) -> None:
        """A peer's new version, told to this deployment's alerts and live dashboards as a
        local publish is (``app.live_hub``)."""
        try:
            self.records.announce(name, site, version)
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
                names |= set(self.also_watch()) & {n for n, kept in list(self._federated.items()) if kept[1]}
                for name in names:
                    sites = self.sites_of(name)
                    if not sites:
                        continue
                    config = self.store.config(name)
                    for site in sites:
                        if site == LOCAL or (site, name) in pulling:
                            continue
                        if now - self._copy(site, name).attempted >= self.pull_interval:
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

    # -- reading a federated stream ------------------------------------------------------
    def _gather(self, name: str, sites: tuple[str, ...], fresh: bool, watch: bool = True):
        """Each site's (summary, status, age, why missing) as held now; ``watch``: someone
        reads the stream, so the poller keeps its sites pulled for ``watch_for`` seconds."""
        config = self.store.config(name)
        now = time.monotonic()
        if watch:
            self._watched[name] = now
            self._start_poller()
        out = {}
        for site in sites:
            if site == LOCAL:
                summary, status = self.local_summary(name, fresh)
                out[site] = (summary, status, 0.0, None)
                continue
            copy = self._copy(site, name)
            since = now - copy.attempted
            # A first read, a read after the stream went unwatched, and an alert's read wait
            # for the site; the others answer from the copy the poller keeps.
            first = copy.confirmed is None and copy.error is None
            if first or since > self.max_age or fresh and since >= self.pull_interval:
                self.pull(site, name, config, wait=first)  # never behind a hung pull
            now = time.monotonic()
            age = None if copy.confirmed is None else now - copy.confirmed
            why = None
            if copy.error:
                why = copy.error
            elif age is None:
                why = "not read yet"
            elif age > self.max_age:
                why = (f"stale: its summary was last confirmed {age:.1f} s ago "
                       f"(TIDEMARK_SITE_MAX_AGE {self.max_age:g} s)")
            summary, status = copy.held
            out[site] = (summary, status, age, why)
        return out

    def summary(self, name: str, fresh: bool = False) -> tuple[StreamSummary | None, Status]:
        """``Store.summary``: a plain stream's own; a federated stream's merge of its
        sites' summaries, with a status whose ``sites`` says each site's ``as_of`` and
        whose ``incomplete_sites`` names those left out, and why."""
        sites = self.sites_of(name)
        if sites is None:
            return self.local_summary(name, fresh)
        gathered = self._gather(name, sites, fresh)
        key = self._key(gathered)
        kept = self._merged.get(name)
        if kept and kept[0] == key:
            return kept[1], self._status(gathered)
        if kept and not fresh and [site for site, _ in kept[0]] == [site for site, _ in key]:
            # The same sites with newer versions: merged in the background (a query does not
            # wait for it); until then answers come from the merge before, as of its versions.
            self._merge_later(name)
            return kept[1], self._status(self._aged(kept[2], kept[3]))
        return self._merge(name, gathered, key), self._status(gathered)

    @staticmethod
    def _key(gathered: dict) -> tuple:
        """Which summaries a merge of ``gathered`` is made of (the objects are kept with it,
        so their ids stay theirs)."""
        return tuple((site, id(s)) for site, (s, _, _, why) in gathered.items() if why is None and s is not None)

    def _merge(self, name: str, gathered: dict, key: tuple) -> StreamSummary | None:
        merged = merge_sites([s for s, _, _, why in gathered.values() if why is None and s is not None])
        with self._lock:
            self._merged[name] = (key, merged, gathered, time.monotonic())
        return merged

    def _merge_later(self, name: str) -> None:
        with self._lock:
            if name in self._merging:
                return
            self._merging.add(name)
        self._pool.submit(self._merge_newest, name)

    def _merge_newest(self, name: str) -> None:
        try:
            sites = self.sites_of(name)
            if sites is not None:
                gathered = self._gather(name, sites, False, watch=False)
                self._merge(name, gathered, self._key(gathered))
        except Exception as e:  # noqa: BLE001 — the next query merges in its own thread and says why
            log.warning("merging %s in the background failed: %s", name, type(e).__name__)
            with self._lock:
                self._merged.pop(name, None)
        finally:
            with self._lock:
                self._merging.discard(name)

    def _aged(self, gathered: dict, at: float) -> dict:
        """A merge's sites as of now: older by the time since it was made, and stale past
        ``max_age`` as any copy."""
        since = time.monotonic() - at
        out = {}
        for site, (s, status, age, why) in gathered.items():
            age = None if age is None else age + since
            if why is None and age is not None and age > self.max_age:
                why = (f"stale: its summary was last confirmed {age:.1f} s ago "
                       f"(TIDEMARK_SITE_MAX_AGE {self.max_age:g} s)")
            out[site] = (s, status, age, why)
        return out

    def status(self, name: str) -> Status:
        """``Store.status``: a federated stream's combined status (no merge). Reading a
        status (a listing, ``/metrics``) does not keep the stream's sites pulled."""
        sites = self.sites_of(name)
        if sites is None:
            return self.local_status(name)
        return self._status(self._gather(name, sites, False, watch=False))

    @staticmethod
    def _status(gathered: dict) -> Status:
        counted = [st for s, st, _, why in gathered.values() if why is None]
        total = lambda field: sum(int(st.get(field) or 0) for st in counted)  # noqa: E731
        clocks = [st["clock"] for st in counted if st.get("clock") is not None]
        missing = {site: why for site, (_, _, _, why) in gathered.items() if why is not None}
        status = Status(
            received=total("received"), events=total("events"),
            clock=max(clocks) if clocks else None, late_dropped=total("late_dropped"),
            rejected=total("rejected"), sketch_version=total("sketch_version"),
            updated_at=max((st["updated_at"] for st in counted if st.get("updated_at")), default=None),
            sketch_bytes={part: sum(int((st.get("sketch_bytes") or {}).get(part, 0)) for st in counted)
                          for part in sorted({p for st in counted for p in (st.get("sketch_bytes") or {})})},
            state="incomplete" if missing else "ok",
            sites={site: as_of_site(st, age, why) for site, (_, st, age, why) in gathered.items()},
        )
        if missing:
            status["incomplete_sites"] = missing
        lost = total("failed_events")
        if lost:
            status["failed_events"] = lost
        return status

    def in_memory(self, name: str) -> bool:
        """``Store.in_memory``: a federated stream is always answered in a thread."""
        return self.known_federated(name) is False and self.local_in_memory(name)

    def served_versions(self, name: str):
        """``Store.served_versions``: None for a federated stream, whose answer also
        depends on its sites' ages, so it is not kept per version."""
        return None if self.known_federated(name) is not False else self.local_versions(name)
