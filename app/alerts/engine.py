"""Alert evaluation and webhook delivery, as background tasks of the API.

Evaluation runs on every announced sketch version of a stream (``app.live_hub.LiveHub``,
the process's one subscriber, hands each announcement over), with the same answer code
the query endpoints use: announcements that arrive while an evaluation runs are gathered
into the next one, and rules asking the same query of the same stream share one answer
(one decoded summary, one query per distinct stream, kind and parameters). Rules are
parsed and their secrets opened once per stored form, not once per publish. Delivery is a
loop over due deliveries kept in Redis, so pending ones survive an API restart and several
replicas share the work (see ``store.py``); sends go through a bounded pool of kept-alive
connections, one pool per checked address and name (``webhooks.PinnedTransport``).

Tested by: tests/app/alerts/test_engine.py (evaluation and delivery),
tests/app/test_alert_rule_lookup.py (RuleCache).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import logging
import math
import time

import httpx

from app.alerts.rules import AlertRule, crossed
from app.alerts.store import RULES, UNREADABLE, AlertStore
from app.alerts.webhooks import PinnedTransport, WebhookRefused
from app.answers import QueryError, answer_from_store, lookup, streams_of
from app.store import Store, StreamNotFound

__all__ = ["AlertEngine", "sign", "evaluate"]

log = logging.getLogger("tidemark.alerts")


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


class NoAnswerYet(QueryError):
    """The query is valid but has no value yet (a quantile of an empty window)."""


def rule_answer(store: Store, rule: AlertRule) -> tuple[dict, float, float, float, int]:
    """The rule's current answer: (answer, estimate, lower, upper, version)."""
    body = answer_from_store(store, rule.query, rule.stream, rule.params)
    versions = body["as_of"].get("sketch_versions")  # a query over several streams
    version = sum(versions.values()) if versions else body["as_of"]["sketch_version"]
    if "items" in body:  # quantiles: the rule names one q
        item = body["items"][0]
        if item["bound"] is None:
            raise NoAnswerYet("no event in the window yet: the quantile does not exist")
        return body, item["estimate"], *_sides(item["bound"]), version
    return body, body["estimate"], *_sides(body["bound"]), version


def _sides(bound: dict) -> tuple[float, float]:
    """A bound's sides; a side that no longer holds (null: a federated stream missing a
    site, ``app/site_bounds.py``) is unbounded."""
    lower, upper = bound["lower"], bound["upper"]
    return (-math.inf if lower is None else lower), (math.inf if upper is None else upper)


def evaluate(store: Store, alerts: AlertStore, rule: AlertRule, answers: dict | None = None) -> bool:
    """Evaluate one rule now; queue a message when its state changes. True when queued."""
    found = judge(store, rule, {} if answers is None else answers)
    return bool(found and alerts.record([found]))


def query_key(rule: AlertRule) -> tuple:
    """Rules with equal keys ask the same question: one answer serves them all."""
    return rule.query, rule.stream, tuple(sorted(rule.params.items()))


def judge(store: Store, rule: AlertRule, answers: dict, now_iso: str | None = None):
    """The rule's evaluation ``(rule, version, state, last, body)``, or None when it cannot
    be evaluated now. ``answers`` shares one computation among rules asking the same query
    (a failure too: it is the same for all of them).
    """
    key = query_key(rule)
    if key not in answers:
        try:
            answers[key] = rule_answer(store, rule)
        except (QueryError, StreamNotFound) as e:
            answers[key] = e
    found = answers[key]
    if isinstance(found, Exception):
        log.info("alert %s cannot be evaluated now: %s", rule.id, found)
        return None
    answer, estimate, lower, upper, version = found
    state = "firing" if crossed(rule, lower, upper) else "ok"
    bound = answer.get("bound") or answer["items"][0]["bound"]
    last = {"estimate": estimate, "bound": bound, "at": answer["at"], "sketch_version": version,
            "evaluated_at": now_iso or _now_iso()}
    body = {
        "alert_id": rule.id, "state": "firing" if state == "firing" else "resolved", "stream": rule.stream, "query": rule.query,
        "params": rule.params, "op": rule.op, "threshold": rule.threshold, "mode": rule.mode,
        "estimate": estimate, "bound": bound, "at": answer["at"], "sketch_version": version,
    }
    return rule, version, state, last, body


def rule_streams(rule: AlertRule) -> list[str]:
    """The streams the rule's query reads, as its kind in the query table says."""
    try:
        return streams_of(lookup(rule.query), rule.stream, rule.params)
    except QueryError:  # its evaluation says why
        return []


def _error_class(e: BaseException) -> str:
    """What the deliveries log says about a failure: its class, never the socket's own
    words (which would turn the log into a port scanner)."""
    if isinstance(e, WebhookRefused):
        return "refused: webhook address not allowed"
    return type(e).__name__


class RuleCache:
    """The stored rules, each parsed and its secret and URL opened once per stored form.

    One ``HGETALL`` per read tells which rules exist now (another replica may have added or
    deleted some); only a rule whose stored bytes changed is parsed again.
    """

    def __init__(self, alerts: AlertStore):
        self.alerts = alerts
        self._parsed: dict[bytes, tuple[bytes, AlertRule]] = {}
        self._streams: dict[int, tuple[AlertRule, frozenset[str]]] = {}

    def _entry(self, rule_id: bytes, raw: bytes) -> tuple[bytes, AlertRule]:
        """The parsed rule for this stored form: kept if the bytes did not change."""
        hit = self._parsed.get(rule_id)
        return hit if hit and hit[0] == raw else (raw, self.alerts._load(raw))

    def rules(self) -> list[AlertRule]:
        stored = self.alerts.redis.hgetall(RULES)
        self._parsed = {rule_id: self._entry(rule_id, raw) for rule_id, raw in stored.items()}
        return [rule for _, rule in self._parsed.values()]

    def some(self, ids: list[str]) -> dict[str, AlertRule]:
        """The rules of ``ids`` that exist now (one ``HMGET`` of those alone), parsed once
        per stored form like ``rules``."""
        wanted = list(dict.fromkeys(ids))
        found = {}
        for rule_id, raw in zip(wanted, self.alerts.redis.hmget(RULES, wanted) if wanted else []):
            if raw is None:
                continue
            key = rule_id.encode()
            self._parsed[key] = self._entry(key, raw)
            found[rule_id] = self._parsed[key][1]
        return found

    def streams(self, rule: AlertRule) -> frozenset[str]:
        """The streams ``rule`` reads, worked out once per parsed rule: a publish picks
        the rules of its stream with a set test each, never a query-table lookup."""
        kept = self._streams.get(id(rule))
        if kept is None or kept[0] is not rule:
            if len(self._streams) > 4 * max(len(self._parsed), 256):
                self._streams.clear()
            kept = self._streams[id(rule)] = (rule, frozenset(rule_streams(rule)))
        return kept[1]

    def outdated(self) -> bool:
        """Are rules stored that are not parsed yet (or gone)? A hint: ``rules`` is exact."""
        return self.alerts.count() != len(self._parsed)


class AlertEngine:
    """Evaluates rules on each announced version and sends due deliveries.

    Every delivery is its own task, settled when it ends: a receiver that hangs or a URL
    that cannot even be parsed costs only its own delivery, never the others'. At most
    ``max_in_flight`` sends run at once, at most ``per_target`` of them to one address.
    """

    def __init__(self, store: Store, alerts: AlertStore, redis_url: str, retry_for: float,
                 allow_hosts: list[str], timeout: float = 10.0, max_in_flight: int = 200,
                 per_target: int = 100):
        self.store, self.alerts, self.redis_url = store, alerts, redis_url
        self.retry_for, self.timeout, self.allow_hosts = retry_for, timeout, allow_hosts
        self.max_in_flight, self.per_target = max_in_flight, per_target
        self.rule_cache = RuleCache(alerts)
        self._timeouts = httpx.Timeout(timeout).as_dict()
        self._tasks: list[asyncio.Task] = []
        self._in_flight: set[asyncio.Task] = set()
        self._outcomes: list[dict] = []  # finished sends, recorded together each round
        self._wake = asyncio.Event()
        self._announced: set[str] = set()  # streams published since the last evaluation
        self._evaluate_all = True  # at start: every rule
        self._announce = asyncio.Event()
        self._urls: dict[str, httpx.URL] = {}  # webhook URLs parsed once, not once per send
        self._prepared_at = -float("inf")

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= 4096:
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        return parsed

    def wake(self) -> None:
        """Look for due deliveries now (called from request threads)."""
        self._loop.call_soon_threadsafe(self._wake.set)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [asyncio.create_task(self._evaluate_loop()),
                       asyncio.create_task(self._deliver_loop())]

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._in_flight]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def evaluate_streams(self, streams: set[str] | None) -> int:
        """Evaluate every rule involving one of ``streams`` (all rules for None), each
        distinct query once; record them in one round trip. Returns how many were queued."""
        answers: dict = {}
        now = _now_iso()
        rules = [rule for rule in self.rule_cache.rules()
                 if streams is None or not self.rule_cache.streams(rule).isdisjoint(streams)]
        # The announced versions themselves: queries may still be answered from the
        # version before while these decode, alerts wait for them.
        asked = {s for r in rules for s in rule_streams(r)}
        for stream in sorted(asked if streams is None else asked & set(streams)):
            try:
                self.store.reads.summary(stream, fresh=True)
            except Exception:  # the rules asking it say why, one by one
                pass
        found = [judge(self.store, rule, answers, now) for rule in rules]
        found = [f for f in found if f]
        return self.alerts.record(found) if found else 0

    def watched_streams(self) -> set[str]:
        """The streams the rules read, as last loaded (no Redis read): a federated one
        keeps its sites pulled (``app.federation``)."""
        try:
            return {s for _, rule in list(self.rule_cache._parsed.values()) for s in self.rule_cache.streams(rule)}
        except RuntimeError:  # the rules changed meanwhile: the next round asks again
            return set()

    def heard(self, note: dict) -> None:
        """A publish announcement (``app.live_hub.LiveHub``, the process's one subscriber,
        hands each one over as it arrives)."""
        if note.get("deleted"):
            # Deleted through another API process: nothing of it is served here
            # from now (the hub listens in every process, always).
            self.store.forget(note["stream"])
        else:
            self.store.summaries.forget_reads(note["stream"])
            self._announced.add(note["stream"])
            self._announce.set()

    def paused(self) -> None:
        """The subscription broke (Redis restarting): some announcements were missed, so
        the next evaluation looks at every rule."""
        log.warning("alert evaluation paused: the announcements' subscription broke")
        self._evaluate_all = True
        self._announce.set()

    async def _evaluate_loop(self) -> None:
        """Evaluate the streams announced meanwhile: publishes that arrive during an
        evaluation are taken together by the next one."""
        self._announce.set()
        while True:
            await self._announce.wait()
            self._announce.clear()
            streams, everything = self._announced, self._evaluate_all
            self._announced, self._evaluate_all = set(), False
            try:
                if await asyncio.to_thread(self.evaluate_streams, None if everything else streams):
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis restarting: try these again shortly
                log.warning("alert evaluation paused: %s", type(e).__name__)
                self._announced |= streams
                self._evaluate_all |= everything
                await asyncio.sleep(1.0)
                self._announce.set()

    async def _deliver_loop(self) -> None:
        # Sends go straight to the transport: no redirect is followed, no cookie kept, and
        # none of a client's per-request bookkeeping is paid a thousand times per publish.
        transport = PinnedTransport(self.allow_hosts, per_target=self.per_target)
        try:
            while True:
                try:
                    await self._settle_finished()
                    await self._deliver_due(transport)
                    await self._prepare_rules()
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("alert delivery paused: %s", type(e).__name__)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=0.25)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
        finally:
            await transport.aclose()

    async def _prepare_rules(self) -> None:
        """Parse rules created meanwhile before a publish needs them (one HLEN at most
        every 0.25 s: a thousand sends finishing must not ask a thousand times)."""
        now = time.monotonic()
        if now - self._prepared_at < 0.25:
            return
        self._prepared_at = now
        if await asyncio.to_thread(self.rule_cache.outdated):
            await asyncio.to_thread(self.rule_cache.rules)

    async def _settle_finished(self) -> None:
        """Record the finished sends in one round trip. If Redis is away they stay queued
        here; their leases may run out meanwhile and they are sent again (same id)."""
        if self._outcomes:
            outcomes = list(self._outcomes)  # sends finishing meanwhile wait for the next round
            await asyncio.to_thread(self.alerts.settle, outcomes, self.retry_for)
            del self._outcomes[:len(outcomes)]

    async def _deliver_due(self, client: PinnedTransport) -> None:
        """Lease the due deliveries and start each as its own task."""
        room = self.max_in_flight - len(self._in_flight)
        if room <= 0:
            return
        # The lease outlasts a send (timeout) with room to record it.
        leased = await asyncio.to_thread(self.alerts.lease_due, time.time(), self.timeout * 3,
                                         min(room, 500))
        if not leased:
            return
        rules = await asyncio.to_thread(self.rule_cache.some, [lease["alert_id"] for lease in leased])
        for lease in leased:
            task = asyncio.create_task(self._deliver_one(client, rules.get(lease["alert_id"]), lease))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if len(leased) >= room:
            self._wake.set()  # more may be due

    async def _deliver_one(self, client: PinnedTransport, rule: AlertRule | None, lease: dict) -> None:
        try:
            outcome = await self._send(client, rule, lease)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # whatever went wrong, it is this delivery's alone
            outcome = {"lease": lease, "ok": False,
                       "attempt": {"delivery_id": lease["delivery_id"], "time": _now_iso(),
                                   "attempt": lease["attempts"] + 1, "status": None,
                                   "error": _error_class(e), "latency_ms": None}}
        self._outcomes.append(outcome)
        self._wake.set()

    async def _send(self, client: PinnedTransport, rule: AlertRule | None, lease: dict) -> dict:
        if rule is None:  # deleted meanwhile: nothing is sent
            return {"lease": lease, "ok": True, "attempt": None}
        body = json.loads(lease["body"])
        body["sent_at"] = _now_iso()
        attempt = {"delivery_id": body["delivery_id"], "state": body["state"], "time": body["sent_at"],
                   "attempt": lease["attempts"] + 1}
        if rule.secret == UNREADABLE:
            attempt.update(status=None, latency_ms=None,
                           error="secret unreadable: TIDEMARK_SECRET_KEY_FILE changed")
            return {"lease": lease, "ok": False, "attempt": attempt}
        raw = json.dumps(body).encode()
        headers = {"content-type": "application/json", "user-agent": "tidemark-webhooks",
                   "X-Tidemark-Signature": sign(raw, rule.secret),
                   "X-Tidemark-Delivery": body["delivery_id"]}
        started = time.perf_counter()
        try:
            request = httpx.Request("POST", self._url(rule.webhook_url), content=raw, headers=headers,
                                    extensions={"timeout": self._timeouts})
            resp = await client.handle_async_request(request)
            attempt.update(status=resp.status_code, error=None)
            ok = 200 <= resp.status_code < 300  # a redirect is not followed: not delivered
        except Exception as e:
            attempt.update(status=None, error=_error_class(e))
            ok = False
        attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return {"lease": lease, "ok": ok, "attempt": attempt}
