"""Alert evaluation and webhook delivery, as background tasks of the API.

Evaluation runs on every announced sketch version of a stream, with the same answer code
the query endpoints use. Delivery is a loop over due deliveries kept in Redis, so pending
ones survive an API restart and several replicas share the work (see ``store.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import logging
import time

import httpx

from app.alerts.rules import AlertRule, crossed
from app.alerts.store import UNREADABLE, AlertStore
from app.alerts.webhooks import PinnedTransport, WebhookRefused
from app.answers import QueryError, answer_from_store
from app.store import Store, StreamNotFound, announcements

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
    if rule.query == "inner-product":
        from app.kinds.keyed import inner_product_from_store

        body = inner_product_from_store(store, rule.params)
        version = sum(body["as_of"]["sketch_versions"].values())
    else:
        body = answer_from_store(store, rule.query, rule.stream, rule.params)
        version = body["as_of"]["sketch_version"]
    if "items" in body:  # quantiles: the rule names one q
        item = body["items"][0]
        if item["bound"] is None:
            raise NoAnswerYet("no event in the window yet: the quantile does not exist")
        return body, item["estimate"], item["bound"]["lower"], item["bound"]["upper"], version
    return body, body["estimate"], body["bound"]["lower"], body["bound"]["upper"], version


def evaluate(store: Store, alerts: AlertStore, rule: AlertRule, answers: dict | None = None) -> bool:
    """Evaluate one rule now; queue a message when its state changes. True when queued."""
    found = judge(store, rule, {} if answers is None else answers)
    return bool(found and alerts.record([found]))


def judge(store: Store, rule: AlertRule, answers: dict):
    """The rule's evaluation ``(rule, version, state, last, body)``, or None when it cannot
    be evaluated now. ``answers`` shares one computation among rules asking the same query.
    """
    key = (rule.query, rule.stream, tuple(sorted(rule.params.items())))
    try:
        if key not in answers:
            answers[key] = rule_answer(store, rule)
        answer, estimate, lower, upper, version = answers[key]
    except (QueryError, StreamNotFound) as e:
        log.info("alert %s cannot be evaluated now: %s", rule.id, e)
        return None
    state = "firing" if crossed(rule, lower, upper) else "ok"
    bound = answer.get("bound") or answer["items"][0]["bound"]
    last = {"estimate": estimate, "bound": bound, "at": answer["at"], "sketch_version": version,
            "evaluated_at": _now_iso()}
    body = {
        "alert_id": rule.id, "state": "firing" if state == "firing" else "resolved", "stream": rule.stream, "query": rule.query,
        "params": rule.params, "op": rule.op, "threshold": rule.threshold, "mode": rule.mode,
        "estimate": estimate, "bound": bound, "at": answer["at"], "sketch_version": version,
    }
    return rule, version, state, last, body


def _involves(rule: AlertRule, stream: str) -> bool:
    if rule.query == "inner-product":
        return stream in str(rule.params.get("streams", "")).split(",")
    return rule.stream == stream


def _error_class(e: BaseException) -> str:
    """What the deliveries log says about a failure: its class, never the socket's own
    words (which would turn the log into a port scanner)."""
    if isinstance(e, WebhookRefused):
        return "refused: webhook address not allowed"
    return type(e).__name__


class AlertEngine:
    """Evaluates rules on each announced version and sends due deliveries.

    Every delivery is its own task, settled when it ends: a receiver that hangs or a URL
    that cannot even be parsed costs only its own delivery, never the others'.
    """

    def __init__(self, store: Store, alerts: AlertStore, redis_url: str, retry_for: float,
                 allow_hosts: list[str], timeout: float = 10.0, max_in_flight: int = 200):
        self.store, self.alerts, self.redis_url = store, alerts, redis_url
        self.retry_for, self.timeout, self.allow_hosts = retry_for, timeout, allow_hosts
        self.max_in_flight = max_in_flight
        self._tasks: list[asyncio.Task] = []
        self._in_flight: set[asyncio.Task] = set()
        self._outcomes: list[dict] = []  # finished sends, recorded together each round
        self._wake = asyncio.Event()

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

    def evaluate_stream(self, stream: str | None) -> int:
        answers: dict = {}
        found = [judge(self.store, rule, answers) for rule in self.alerts.rules()
                 if stream is None or _involves(rule, stream)]
        return self.alerts.record([f for f in found if f])

    async def _evaluate_loop(self) -> None:
        while True:
            try:
                if await asyncio.to_thread(self.evaluate_stream, None):
                    self._wake.set()
                async for note in announcements(self.redis_url):
                    if note and await asyncio.to_thread(self.evaluate_stream, note["stream"]):
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis restarting: listen again shortly
                log.warning("alert evaluation paused: %s", type(e).__name__)
                await asyncio.sleep(1.0)

    async def _deliver_loop(self) -> None:
        transport = PinnedTransport(self.allow_hosts)
        async with httpx.AsyncClient(transport=transport, timeout=self.timeout,
                                     follow_redirects=False) as client:
            while True:
                try:
                    await self._settle_finished()
                    await self._deliver_due(client)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("alert delivery paused: %s", type(e).__name__)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=0.25)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()

    async def _settle_finished(self) -> None:
        """Record the finished sends in one round trip. If Redis is away they stay queued
        here; their leases may run out meanwhile and they are sent again (same id)."""
        if self._outcomes:
            outcomes = list(self._outcomes)  # sends finishing meanwhile wait for the next round
            await asyncio.to_thread(self.alerts.settle, outcomes, self.retry_for)
            del self._outcomes[:len(outcomes)]

    async def _deliver_due(self, client: httpx.AsyncClient) -> None:
        """Lease the due deliveries and start each as its own task."""
        room = self.max_in_flight - len(self._in_flight)
        if room <= 0:
            return
        # The lease outlasts a send (timeout) with room to record it.
        leased = await asyncio.to_thread(self.alerts.lease_due, time.time(), self.timeout * 3,
                                         min(room, 500))
        if not leased:
            return
        rules = {r.id: r for r in await asyncio.to_thread(self.alerts.rules)}
        for lease in leased:
            task = asyncio.create_task(self._deliver_one(client, rules.get(lease["alert_id"]), lease))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
        if len(leased) >= room:
            self._wake.set()  # more may be due

    async def _deliver_one(self, client: httpx.AsyncClient, rule: AlertRule | None, lease: dict) -> None:
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

    async def _send(self, client: httpx.AsyncClient, rule: AlertRule | None, lease: dict) -> dict:
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
        headers = {"content-type": "application/json", "X-Tidemark-Signature": sign(raw, rule.secret),
                   "X-Tidemark-Delivery": body["delivery_id"]}
        started = time.perf_counter()
        try:
            resp = await client.post(rule.webhook_url, content=raw, headers=headers)
            attempt.update(status=resp.status_code, error=None)
            ok = 200 <= resp.status_code < 300  # a redirect is not followed: not delivered
        except Exception as e:
            attempt.update(status=None, error=_error_class(e))
            ok = False
        attempt["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return {"lease": lease, "ok": ok, "attempt": attempt}
