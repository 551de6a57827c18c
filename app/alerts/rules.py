"""Alert rules: what a user registers (contract §7), validated like a query."""

from __future__ import annotations

import ipaddress
import math
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AlertRule", "AlertCreate", "crossed", "check_webhook", "ALERT_QUERIES"]

ALERT_QUERIES = ("count", "sum", "frequency", "distinct", "self-join", "inner-product",
                 "quantiles", "decayed-sum")


class AlertCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: str = Field(min_length=1, max_length=64)
    query: Literal["count", "sum", "frequency", "distinct", "self-join", "inner-product",
                   "quantiles", "decayed-sum"]
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

    def public(self) -> dict:
        d = self.model_dump()
        d["secret"] = "***"
        return d


def crossed(rule: AlertCreate, lower: float, upper: float) -> bool:
    """Is the threshold crossed? ``certain``: the whole bound is past it (no false alarm
    within the bound's confidence); ``possible``: some of it is (no missed crossing)."""
    if rule.op == ">":
        return (lower if rule.mode == "certain" else upper) > rule.threshold
    return (upper if rule.mode == "certain" else lower) < rule.threshold


def check_webhook(url: str, allow_hosts: list[str]) -> None:
    """Only http(s), and only to allowed hosts: alerts must not become a way to reach
    internal services."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("webhook_url must be an http or https URL")
    host = parsed.hostname.lower()
    if "*" in allow_hosts or host in allow_hosts:
        return
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for allowed in allow_hosts:
        if ip is not None and "/" in allowed:
            try:
                if ip in ipaddress.ip_network(allowed, strict=False):
                    return
            except ValueError:
                continue
        if allowed.startswith(".") and host.endswith(allowed):
            return
    raise ValueError(
        f"webhook host {host!r} is not in the allow-list (TIDEMARK_WEBHOOK_ALLOW_HOSTS)"
    )
