"""Alert rules, their states and their pending deliveries, in Redis.

Several API replicas may run; each step that must happen once is one atomic Redis step:

* a state transition (``ok`` -> ``firing`` -> ``ok``) is a compare-and-set on the rule's
  state and the sketch version it was evaluated at, so only one replica records it and
  queues its delivery;
* a due delivery is *leased* by a compare-and-set of its due time; a replica that dies
  mid-send loses the lease, and another sends it again later with the same
  ``delivery_id`` (receivers drop duplicates by the ``X-Tidemark-Delivery`` header).

Tested by: tests/app/alerts/test_engine.py and tests/app/test_alert_rule_lookup.py
(AlertStore on a real Redis).
"""

from __future__ import annotations

import json
import random
import time
import uuid

import redis

from app.alerts.rules import AlertRule
from app.alerts.secrets import SecretBox
from tidemark.wire import keys

__all__ = ["AlertStore", "AlertNotFound"]

RULES = keys.ALERT_RULES
DUE = keys.ALERTS_DUE
_state_key, _attempts_key, _delivery_key = keys.alert_state, keys.alert_attempts, keys.delivery


class AlertNotFound(LookupError):
    def __init__(self, alert_id: str):
        super().__init__(f"alert {alert_id!r} does not exist")


# KEYS: state hash, due zset, delivery hash. ARGV: version, new state, value json,
# delivery json (or ""), delivery id, due time. Moves the state only forward in versions;
# queues the delivery only when the state changed.
_TRANSITION = """
local cur_version = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
if tonumber(ARGV[1]) <= cur_version then return 0 end
local cur_state = redis.call('HGET', KEYS[1], 'state') or 'ok'
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'state', ARGV[2], 'last', ARGV[3])
if cur_state ~= ARGV[2] and ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], 'body', ARGV[4], 'attempts', 0, 'first_due', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
  return 2
end
return 1
"""

# KEYS: due zset. ARGV: now, lease until, limit, key prefix of delivery hashes. Takes up
# to `limit` due deliveries (moving their due time to the lease's end) and returns, for
# each, its id, body, attempts and first due time.
_LEASE_DUE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  local h = redis.call('HMGET', ARGV[4] .. id, 'body', 'attempts', 'first_due')
  if h[1] then
    table.insert(out, id); table.insert(out, h[1]); table.insert(out, h[2]); table.insert(out, h[3])
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
"""


UNREADABLE = ""  # the secret of a rule sealed under another key: nothing is sent


class AlertStore:
    def __init__(self, redis_url: str, box: SecretBox):
        self.redis = redis.Redis.from_url(redis_url)
        self.box = box
        self._transition = self.redis.register_script(_TRANSITION)
        self._lease_due = self.redis.register_script(_LEASE_DUE)

    # -- rules -------------------------------------------------------------------------
    def add(self, rule: AlertRule) -> None:
        # The URL too: for Slack-style hooks the URL is the credential.
        sealed = rule.model_copy(update={"secret": self.box.seal(rule.secret),
                                         "webhook_url": self.box.seal(rule.webhook_url)})
        self.redis.hset(RULES, rule.id, sealed.model_dump_json())

    def _load(self, raw: bytes) -> AlertRule:
        rule = AlertRule.model_validate_json(raw)
        secret, url = self.box.open(rule.secret), self.box.open(rule.webhook_url)
        if secret is None or url is None:
            secret, url = UNREADABLE, "http://unreadable.invalid/"
        return rule.model_copy(update={"secret": secret, "webhook_url": url})

    def rules(self) -> list[AlertRule]:
        return [self._load(v) for v in self.redis.hvals(RULES)]

    def count(self) -> int:
        return int(self.redis.hlen(RULES))

    def get(self, alert_id: str) -> AlertRule:
        raw = self.redis.hget(RULES, alert_id)
        if raw is None:
            raise AlertNotFound(alert_id)
        return self._load(raw)

    def delete(self, alert_id: str) -> None:
        if not self.redis.hdel(RULES, alert_id):
            raise AlertNotFound(alert_id)
        # Cancel its pending deliveries: a deleted rule sends nothing more.
        for member in self.redis.zrange(DUE, 0, -1):
            if member.decode().startswith(alert_id + ":"):
                self.redis.zrem(DUE, member)
        self.redis.delete(_state_key(alert_id))

    def state(self, alert_id: str) -> dict:
        raw = self.redis.hgetall(_state_key(alert_id))
        return {
            "state": raw.get(b"state", b"ok").decode(),
            "version": int(raw.get(b"version", b"-1")),
            "last": json.loads(raw[b"last"]) if b"last" in raw else None,
        }

    # -- transitions -------------------------------------------------------------------
    def record(self, evaluations: list[tuple[AlertRule, int, str, dict, dict | None]]) -> int:
        """Record evaluations ``(rule, version, state, last, body)`` in one round trip;
        queue each ``body`` whose rule changed state. Returns how many were queued."""
        now = time.time()
        with self.redis.pipeline(transaction=False) as p:
            for rule, version, state, last, body in evaluations:
                delivery_id = f"{rule.id}:{uuid.uuid4().hex}"
                payload = "" if body is None else json.dumps({**body, "delivery_id": delivery_id})
                self._transition(keys=[_state_key(rule.id), DUE, _delivery_key(delivery_id)],
                                 args=[version, state, json.dumps(last), payload, delivery_id, now],
                                 client=p)
            return sum(r == 2 for r in p.execute())

    # -- deliveries ----------------------------------------------------------------------
    def lease_due(self, now: float, seconds: float, limit: int = 500) -> list[dict]:
        """Take the due deliveries for ``seconds``; another replica will not see them."""
        flat = self._lease_due(keys=[DUE], args=[now, now + seconds, limit, _delivery_key("")])
        out = []
        for i in range(0, len(flat), 4):
            delivery_id = flat[i].decode()
            out.append({"delivery_id": delivery_id, "alert_id": delivery_id.split(":", 1)[0],
                        "body": flat[i + 1].decode(), "attempts": int(flat[i + 2]),
                        "first_due": float(flat[i + 3])})
        return out

    def settle(self, outcomes: list[dict], retry_for: float) -> None:
        """Record each attempt; finish delivered ones, reschedule the rest with backoff and
        jitter until ``retry_for`` seconds after their first due time."""
        now = time.time()
        with self.redis.pipeline(transaction=False) as p:
            for o in outcomes:
                lease, attempt = o["lease"], o["attempt"]
                did, alert_id = lease["delivery_id"], lease["alert_id"]
                if attempt is not None:
                    p.lpush(_attempts_key(alert_id), json.dumps(attempt))
                    p.ltrim(_attempts_key(alert_id), 0, 499)
                tries = lease["attempts"] + 1
                if o["ok"] or now - lease["first_due"] > retry_for:
                    if not o["ok"]:
                        p.lpush(_attempts_key(alert_id), json.dumps(
                            {**attempt, "error": "gave up: retry period exhausted"}))
                    p.zrem(DUE, did)
                    p.delete(_delivery_key(did))
                else:
                    backoff = min(2.0 ** (tries - 1) * 0.5, 300.0) * random.uniform(0.5, 1.5)
                    p.hset(_delivery_key(did), "attempts", tries)
                    p.zadd(DUE, {did: now + backoff}, xx=True)
            p.execute()

    def attempts(self, alert_id: str) -> list[dict]:
        return [json.loads(x) for x in self.redis.lrange(_attempts_key(alert_id), 0, -1)]
