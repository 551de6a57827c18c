"""Federated streams (contract §11): one answer across sites, from their merged summaries.

A *site* is a Tidemark deployment (``tidemark/sites.py``); a *federated stream* is declared
here with ``"sites": ["eu", "us", "local"]`` and answered by merging each listed site's
published summary of the stream of the same name (``local``: this deployment's own, read
from Redis like any stream's). Remote summaries are *pulled* (``app/site_pulls.py``):
while someone reads the stream (a query, an alert, a live dashboard), each remote site is
asked every ``TIDEMARK_SITE_PULL_INTERVAL`` seconds for what changed since the version held
(a ``304`` when nothing did; a delta, or the content-addressed segments not held, when
something did: ``app/site_serving.py`` serves them). The query path never waits for a peer
except on a stream's first read (or the first after it went unread); it answers from the
copies held and says how old each is (``as_of.sites``); a newer version of the same sites is
merged in the background.

``store.reads.summary(name)`` of a federated stream returns the merge of the sites' summaries
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

import logging
import pickle
import threading
import time

import httpx

from app.declarations import StreamConflict
from app.site_pulls import Pulls, incompatible
from app.site_records import SiteRecords
from app.site_serving import Serving
from app.stream_status import Status
from tidemark.hash_secret import HashSecret
from tidemark.sites import LOCAL, Site
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

__all__ = ["Federation", "UnknownSite", "SiteConflict", "as_of_site", "merge_sites"]

log = logging.getLogger("tidemark.federation")


class UnknownSite(ValueError):
    """A declaration names a site this deployment does not know (a 422)."""


class SiteConflict(StreamConflict):
    """A site's stream cannot be merged with this declaration (a 409)."""


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
    """Federated declarations and merged summaries of one API process. ``store`` is the
    ``app.store.Store`` it serves (its summary cache's methods are captured before the
    store reads every stream through this federation, ``Store.federate``); ``pulls`` keeps the peers' copies
    (``app.site_pulls``), ``serving`` serves this deployment's own to peers
    (``app.site_serving``)."""

    def __init__(self, store, sites: list[Site], secret: HashSecret, max_age: float = 30.0,
                 pull_interval: float = 1.0, timeout: float = 3.0, watch_for: float = 60.0):
        self.store, self.secret = store, secret
        self.records = SiteRecords(store.redis)
        self.sites = {s.name: s for s in sites}
        self.max_age, self.pull_interval = max_age, pull_interval
        self.local_summary, self.local_status = store.summaries.summary, store.summaries.status
        self.local_in_memory, self.local_versions = store.summaries.in_memory, store.summaries.served_versions
        self.ttl = store.declarations.config_ttl
        self.serving = Serving(self.local_summary)
        self.pulls = Pulls(sites, secret, store.declarations.config, self.sites_of, self.records.announce, pull_interval, timeout,
                           watch_for)
        self.pulls.federated = lambda: {n for n, kept in list(self._federated.items()) if kept[1]}
        self.pulled = self.pulls.pulled
        self._lock = threading.Lock()
        self._federated: dict[str, tuple[float, tuple[str, ...] | None]] = {}
        # name -> (key, merged summary, the gathered sites it was made of, monotonic time)
        self._merged: dict[str, tuple[tuple, StreamSummary | None, dict, float]] = {}
        self._merging: set[str] = set()

    @property
    def also_watch(self):
        """Streams alerts watch, kept pulled (set by the app at start)."""
        return self.pulls.also_watch

    @also_watch.setter
    def also_watch(self, watched) -> None:
        self.pulls.also_watch = watched

    def close(self) -> None:
        self.pulls.close()

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
        new = self.store.declarations.declare(name, config)
        if sites is not None:
            self.records.set(name, sites)
        elif current is not None and new:  # a federation left by a delete that did not finish
            self.records.drop(name)
        self.forget(name)
        return new

    def _check_remote(self, site: str, name: str, config: StreamConfig) -> None:
        try:
            r = self.pulls.client(site).get(f"/v1/streams/{name}/summary/manifest")
        except httpx.HTTPError as e:
            raise SiteConflict(f"site {site!r} could not be reached to check its stream {name!r} "
                               f"({type(e).__name__}); declare again when it answers") from None
        if r.status_code == 404:
            raise SiteConflict(f"site {site!r} has no stream {name!r} that the key held for it may see "
                               "(declare it there first, with the same settings; a key limited to "
                               "stream patterns sees only those)")
        if r.status_code in (401, 403):
            raise SiteConflict(f"site {site!r} refused the read key this deployment holds for it "
                               f"({r.status_code}): TIDEMARK_SITES")
        if r.status_code != 200:
            raise SiteConflict(f"site {site!r} answered {r.status_code} for its stream {name!r}")
        problem = incompatible(r.json(), config, self.secret)
        if problem:
            raise SiteConflict(f"site {site!r} cannot be federated in {name!r}: {problem}")

    def forget(self, name: str) -> None:
        """Drop all this process holds of ``name`` (deleted or declared anew)."""
        with self._lock:
            self._federated.pop(name, None)
            self._merged.pop(name, None)
        self.pulls.forget(name)
        self.serving.forget(name)

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

    # -- reading a federated stream ------------------------------------------------------
    def _gather(self, name: str, sites: tuple[str, ...], fresh: bool, watch: bool = True):
        """Each site's (summary, status, age, why missing) as held now; ``watch``: someone
        reads the stream, so the poller keeps its sites pulled for ``watch_for`` seconds."""
        config = self.store.declarations.config(name)
        now = time.monotonic()
        if watch:
            self.pulls.watch(name)
        out = {}
        for site in sites:
            if site == LOCAL:
                summary, status = self.local_summary(name, fresh)
                out[site] = (summary, status, 0.0, None)
                continue
            copy = self.pulls.copy(site, name)
            since = now - copy.attempted
            # A first read, a read after the stream went unwatched, and an alert's read wait
            # for the site; the others answer from the copy the poller keeps.
            first = copy.confirmed is None and copy.error is None
            if first or since > self.max_age or fresh and since >= self.pull_interval:
                self.pulls.pull(site, name, config, wait=first)  # never behind a hung pull
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
        """``SummaryCache.summary`` for ``store.reads``: a plain stream's own; a federated stream's merge of its
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
        self.pulls.submit(self._merge_newest, name)

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
        """``SummaryCache.status`` for ``store.reads``: a federated stream's combined status (no merge). Reading a
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
        """``SummaryCache.in_memory`` for ``store.reads``: a federated stream is always answered in a thread."""
        return self.known_federated(name) is False and self.local_in_memory(name)

    def served_versions(self, name: str):
        """``SummaryCache.served_versions`` for ``store.reads``: None for a federated stream, whose answer also
        depends on its sites' ages, so it is not kept per version."""
        return None if self.known_federated(name) is not False else self.local_versions(name)
