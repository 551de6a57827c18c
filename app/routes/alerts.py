"""Alert rules (contract §7).

Tested by: tests/app/test_alerts.py (rules through the API, refusals with reasons),
tests/app/alerts/test_webhooks.py (webhook checks and masked listings through the API),
tests/app/test_security.py (test_alerts_are_capped), tests/app/test_tenants.py.
"""

from __future__ import annotations

import datetime as dt
import uuid

from fastapi import APIRouter, HTTPException, Request

from app.alerts.engine import NoAnswerYet, evaluate, rule_answer, rule_streams
from app.alerts.rules import AlertCreate, AlertRule
from app.alerts.store import AlertNotFound
from app.alerts.webhooks import WebhookRefused, check_webhook
from app.deps import ADMIN, READ, SettingsDep, StoreDep
from app.security import HIDDEN, may_see, principal_of

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])


def _alerts(request: Request):
    return request.app.state.alerts


def _describe(request: Request, rule: AlertRule) -> dict:
    return {**rule.public(), **_alerts(request).state(rule.id)}


def _sees(principal, rule: AlertRule) -> bool:
    """A key limited to some streams sees the alerts on those only (every stream the
    rule's query reads)."""
    return all(may_see(principal, s) for s in [rule.stream, *rule_streams(rule)])


def _visible_rule(request: Request, alert_id: str) -> AlertRule:
    """The rule, or 404 as if absent when it watches a stream the key may not see."""
    rule = _alerts(request).get(alert_id)
    if not _sees(principal_of(request), rule):
        raise AlertNotFound(alert_id)
    return rule


@router.post("", status_code=201, dependencies=[ADMIN])
def create_alert(body: AlertCreate, request: Request, store: StoreDep, settings: SettingsDep) -> dict:
    if len(body.secret) < settings.min_secret_length:
        raise HTTPException(422, f"secret: at least {settings.min_secret_length} characters "
                                 "(TIDEMARK_MIN_SECRET_LENGTH)")
    try:
        check_webhook(body.webhook_url, settings.webhook_allow_hosts)
    except WebhookRefused as e:
        raise HTTPException(422, str(e)) from None
    principal = principal_of(request)
    rule = AlertRule(**body.model_dump(), id=uuid.uuid4().hex[:16],
                     created_at=dt.datetime.now(dt.timezone.utc).isoformat())
    if not _sees(principal, rule):  # as if the stream did not exist: named nowhere
        raise HTTPException(404, HIDDEN)
    if _alerts(request).count() >= settings.max_alerts:
        raise HTTPException(409, f"this deployment already has {settings.max_alerts} alerts, "
                                 "its limit (TIDEMARK_MAX_ALERTS)")
    if principal.restricted:
        mine = sum(_sees(principal, r) for r in _alerts(request).rules())
        if mine >= settings.tenant_max_alerts:
            raise HTTPException(409, f"your streams already have {mine} alerts, the limit per "
                                     "tenant (TIDEMARK_TENANT_MAX_ALERTS)")
    if body.query == "quantiles" and len(str(body.params.get("q", "")).split(",")) != 1:
        raise HTTPException(422, "a quantiles alert watches exactly one q (e.g. params.q = '0.99')")
    try:
        rule_answer(store, rule)  # validates stream, query and parameters like a query would
    except NoAnswerYet:
        pass  # valid, just nothing to compare yet
    _alerts(request).add(rule)
    if evaluate(store, _alerts(request), rule):
        request.app.state.alert_engine_wake()
    return _describe(request, rule)


@router.get("", dependencies=[READ])
def list_alerts(request: Request) -> dict:
    principal = principal_of(request)
    rules = [r for r in _alerts(request).rules() if _sees(principal, r)]
    return {"alerts": [_describe(request, r) for r in sorted(rules, key=lambda r: r.created_at)]}


@router.get("/{alert_id}", dependencies=[READ])
def get_alert(alert_id: str, request: Request) -> dict:
    return _describe(request, _visible_rule(request, alert_id))


@router.delete("/{alert_id}", status_code=204, dependencies=[ADMIN])
def delete_alert(alert_id: str, request: Request) -> None:
    _visible_rule(request, alert_id)
    _alerts(request).delete(alert_id)


@router.get("/{alert_id}/deliveries", dependencies=[READ])
def deliveries(alert_id: str, request: Request) -> dict:
    _visible_rule(request, alert_id)
    return {"alert_id": alert_id, "deliveries": _alerts(request).attempts(alert_id)}
