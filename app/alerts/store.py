"""Alert rules, their states and their pending deliveries, in Redis.

Several API replicas may run; each step that must happen once is one atomic Redis step:

* a state transition (``ok`` -> ``firing`` -> ``ok``) is a compare-and-set on the rule's
  state and the sketch version it was evaluated at, so only one replica records it and
  queues its delivery;
* a due delivery is *leased* by a compare-and-set of its due time; a replica that dies
  mid-send loses the lease, and another sends it again later with the same
  ``delivery_id`` (receivers drop duplicates by the ``X-Tidemark-Delivery`` header).
"""

from __future__ import annotations

import json
import time
import uuid

import redis

from app.alerts.rules import AlertRule
from tidemark.keys import PREFIX

__all__ = ["AlertStore", "AlertNotFound"]

RULES = PREFIX + "alerts"  # hash id -> rule json
DUE = PREFIX + "alerts:due"  # zset delivery id -> due time


def _state_key(alert_id: str) -> str:
    return f"{PREFIX}alert-state:{alert_id}"


def _attempts_key(alert_id: str) -> str:
    return f"{PREFIX}alert-attempts:{alert_id}"


def _delivery_key(delivery_id: str) -> str:
    return f"{PREFIX}delivery:{delivery_id}"


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

# KEYS: due zset. ARGV: delivery id, now, lease until. Takes the delivery if it is due.
_LEASE = """
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""


class AlertStore:
    def __init__(self, redis_url: str):
        self.redis = redis.Redis.from_url(redis_url)
        self._transition = self.redis.register_script(_TRANSITION)
        self._lease = self.redis.register_script(_LEASE)

    # -- rules -------------------------------------------------------------------------
    def add(self, rule: AlertRule) -> None:
        self.redis.hset(RULES, rule.id, rule.model_dump_json())

    def rules(self) -> list[AlertRule]:
        return [AlertRule.model_validate_json(v) for v in self.redis.hvals(RULES)]

    def get(self, alert_id: str) -> AlertRule:
        raw = self.redis.hget(RULES, alert_id)
        if raw is None:
            raise AlertNotFound(alert_id)
        return AlertRule.model_validate_json(raw)

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
    def record(self, rule: AlertRule, version: int, state: str, last: dict, body: dict | None) -> bool:
        """Record an evaluation; queue ``body`` if the state changed. True if queued."""
        delivery_id = f"{rule.id}:{uuid.uuid4().hex}"
        payload = "" if body is None else json.dumps({**body, "delivery_id": delivery_id})
        result = self._transition(
            keys=[_state_key(rule.id), DUE, _delivery_key(delivery_id)],
            args=[version, state, json.dumps(last), payload, delivery_id, time.time()],
        )
        return result == 2

    # -- deliveries ----------------------------------------------------------------------
    def due(self, now: float, limit: int = 100) -> list[str]:
        return [m.decode() for m in self.redis.zrangebyscore(DUE, "-inf", now, start=0, num=limit)]

    def lease(self, delivery_id: str, now: float, seconds: float) -> dict | None:
        if not self._lease(keys=[DUE], args=[delivery_id, now, now + seconds]):
            return None
        raw = self.redis.hgetall(_delivery_key(delivery_id))
        if not raw:
            self.redis.zrem(DUE, delivery_id)
            return None
        return {"body": raw[b"body"].decode(), "attempts": int(raw[b"attempts"]),
                "first_due": float(raw[b"first_due"])}

    def log_attempt(self, alert_id: str, attempt: dict) -> None:
        with self.redis.pipeline() as p:
            p.lpush(_attempts_key(alert_id), json.dumps(attempt))
            p.ltrim(_attempts_key(alert_id), 0, 499)
            p.execute()

    def attempts(self, alert_id: str) -> list[dict]:
        return [json.loads(x) for x in self.redis.lrange(_attempts_key(alert_id), 0, -1)]

    def done(self, delivery_id: str) -> None:
        with self.redis.pipeline() as p:
            p.zrem(DUE, delivery_id)
            p.delete(_delivery_key(delivery_id))
            p.execute()

    def retry_at(self, delivery_id: str, when: float, attempts: int) -> None:
        with self.redis.pipeline() as p:
            p.hset(_delivery_key(delivery_id), "attempts", attempts)
            p.zadd(DUE, {delivery_id: when}, xx=True)
            p.execute()
