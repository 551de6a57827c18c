"""Alert rules: what a user registers (contract §7), validated like a query.

Tested by: tests/app/alerts/test_engine.py (AlertRule, crossed), tests/app/test_kinds.py
(AlertCreate per kind), tests/app/test_alert_rule_lookup.py."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.answers import alert_kinds

__all__ = ["AlertRule", "AlertCreate", "crossed", "ALERT_QUERIES"]

# The kinds declared with ``alert=True`` (one estimate to compare with a threshold).
ALERT_QUERIES = alert_kinds()


class AlertCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: str = Field(min_length=1, max_length=64)
    query: Literal[ALERT_QUERIES]  # type: ignore[valid-type]
    params: dict[str, str | float | int] = Field(default_factory=dict)
    op: Literal[">", "<"]
    threshold: float
    webhook_url: str = Field(max_length=2048)
    secret: str = Field(min_length=1, max_length=512)
    mode: Literal["certain", "possible"] = "certain"

    @field_validator("threshold")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("threshold must be finite")
        return v

    @field_validator("params")
    @classmethod
    def _strings(cls, v: dict) -> dict:
        return {str(k): str(x) for k, x in v.items()}


class AlertRule(AlertCreate):
    id: str
    created_at: str
    # Sealed at rest (see ``store.py``), so longer than the plain values.
    secret: str = Field(max_length=4096)
    webhook_url: str = Field(max_length=8192)

    def public(self) -> dict:
        """What ``GET /v1/alerts`` shows: no secret, no path or query of the webhook URL."""
        from app.alerts.webhooks import public_url

        d = self.model_dump()
        d["secret"] = "***"
        d["webhook_url"] = public_url(self.webhook_url)
        return d


def crossed(rule: AlertCreate, lower: float, upper: float) -> bool:
    """Is the threshold crossed? ``certain``: the whole bound is past it (no false alarm
    within the bound's confidence); ``possible``: some of it is (no missed crossing)."""
    if rule.op == ">":
        return (lower if rule.mode == "certain" else upper) > rule.threshold
    return (upper if rule.mode == "certain" else lower) < rule.threshold
