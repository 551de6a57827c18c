"""The rules a batch of leased deliveries needs are read by id (``RuleCache.some``): only
the rules that exist now, each parsed once per stored form, a changed one parsed again, a
deleted one absent (its delivery sends nothing), and agreeing with the full read."""

from __future__ import annotations

import uuid

import pytest
from cryptography.fernet import Fernet

from app.alerts.engine import RuleCache
from app.alerts.rules import AlertRule
from app.alerts.secrets import SecretBox
from app.alerts.store import AlertStore
from tidemark.redis_server import EmbeddedRedis


@pytest.fixture(scope="module")
def alerts(tmp_path_factory):
    server = EmbeddedRedis(tmp_path_factory.mktemp("rule-lookup-redis")).start()
    yield AlertStore(server.url, SecretBox(Fernet.generate_key()))
    server.stop()


def _rule(i: int, threshold: float = 1.0) -> AlertRule:
    return AlertRule(id=f"r{i}-{uuid.uuid4().hex[:8]}", created_at="2026-01-01T00:00:00+00:00",
                     stream=f"s{i % 7}", query="count", params={"window": "60"}, op=">",
                     threshold=threshold, webhook_url=f"http://127.0.0.1:9/hook/{i}", secret=f"secret-{i}")


def test_rules_read_by_id_are_those_that_exist_parsed_once_per_form(alerts, monkeypatch):
    rules = [_rule(i) for i in range(60)]
    for rule in rules:
        alerts.add(rule)
    cache = RuleCache(alerts)
    loads = []
    original = alerts._load
    monkeypatch.setattr(alerts, "_load", lambda raw: loads.append(raw) or original(raw))
    asked = [r.id for r in rules[:40]] + [rules[0].id, "no-such-rule", "", "x" * 5000, "r\x00\xff"]
    found = cache.some(asked)
    assert set(found) == {r.id for r in rules[:40]}
    for rule in rules[:40]:  # opened: the secret and URL in the clear, as sent
        assert found[rule.id].secret == rule.secret and found[rule.id].webhook_url == rule.webhook_url
    assert len(loads) == 40
    assert cache.some(asked) == found and len(loads) == 40  # parsed once per stored form
    # Changed, deleted: read again / absent; the full read agrees with the read by id.
    changed = rules[1].model_copy(update={"threshold": 99.0})
    alerts.add(changed)
    alerts.delete(rules[2].id)
    again = cache.some([r.id for r in rules[:40]])
    assert again[rules[1].id].threshold == 99.0 and rules[2].id not in again
    everything = {r.id: r for r in cache.rules()}
    assert all(everything[i] == r for i, r in again.items())
    assert cache.some([]) == {}
