"""Alert rules (contract §7)."""

from __future__ import annotations

import datetime as dt
import uuid

from fastapi import APIRouter, HTTPException, Request

from app.alerts.engine import NoAnswerYet, evaluate, rule_answer
from app.alerts.rules import AlertCreate, AlertRule
from app.alerts.webhooks import WebhookRefused, check_webhook
from app.deps import ADMIN, READ, SettingsDep, StoreDep

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])


def _alerts(request: Request):
    return request.app.state.alerts


def _describe(request: Request, rule: AlertRule) -> dict:
    return {**rule.public(), **_alerts(request).state(rule.id)}


@router.post("", status_code=201, dependencies=[ADMIN])
def create_alert(body: AlertCreate, request: Request, store: StoreDep, settings: SettingsDep) -> dict:
    if len(body.secret) < settings.min_secret_length:
        raise HTTPException(422, f"secret: at least {settings.min_secret_length} characters "
                                 "(TIDEMARK_MIN_SECRET_LENGTH)")
    try:
        check_webhook(body.webhook_url, settings.webhook_allow_hosts)
    except WebhookRefused as e:
        raise HTTPException(422, str(e)) from None
    if _alerts(request).count() >= settings.max_alerts:
        raise HTTPException(409, f"this deployment already has {settings.max_alerts} alerts, "
                                 "its limit (TIDEMARK_MAX_ALERTS)")
    if body.query == "quantiles" and len(str(body.params.get("q", "")).split(",")) != 1:
        raise HTTPException(422, "a quantiles alert watches exactly one q (e.g. params.q = '0.99')")
    rule = AlertRule(**body.model_dump(), id=uuid.uuid4().hex[:16],
                     created_at=dt.datetime.now(dt.timezone.utc).isoformat())
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
    return {"alerts": [_describe(request, r) for r in sorted(_alerts(request).rules(), key=lambda r: r.created_at)]}


@router.get("/{alert_id}", dependencies=[READ])
def get_alert(alert_id: str, request: Request) -> dict:
    return _describe(request, _alerts(request).get(alert_id))


@router.delete("/{alert_id}", status_code=204, dependencies=[ADMIN])
def delete_alert(alert_id: str, request: Request) -> None:
    _alerts(request).delete(alert_id)


@router.get("/{alert_id}/deliveries", dependencies=[READ])
def deliveries(alert_id: str, request: Request) -> dict:
    _alerts(request).get(alert_id)
    return {"alert_id": alert_id, "deliveries": _alerts(request).attempts(alert_id)}
