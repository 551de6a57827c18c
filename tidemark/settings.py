"""One validated configuration for every Tidemark process (environment ``TIDEMARK_*``).

Tested by: tests/test_docs_settings.py (every setting documented),
tests/tidemark/test_sites.py, tests/app/test_security.py, tests/app/test_tenants.py."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tidemark.sites import Site, parse_sites

__all__ = ["Settings", "ApiKey", "SCOPES"]

SCOPES = ("read", "ingest", "admin")
_STREAM_PATTERN = re.compile(r"[A-Za-z0-9_.*-]{1,64}")


class ApiKey(BaseModel):
    """One API key and what it may do (contract §9); ``admin`` implies the other two."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=16, max_length=512)
    scopes: list[Literal["read", "ingest", "admin"]] = Field(min_length=1)
    streams: list[str] | None = Field(
        default=None, min_length=1, max_length=256,
        description="stream name patterns this key reaches ('*' matches any run of "
        "characters; otherwise literal); none = every stream")

    @field_validator("streams")
    @classmethod
    def _patterns(cls, patterns: list[str] | None) -> list[str] | None:
        for p in patterns or []:
            if not _STREAM_PATTERN.fullmatch(p):
                raise ValueError(f"stream pattern {p[:80]!r}: letters, digits, '_', '.', '-' "
                                 "and '*' only, at most 64 characters")
        return patterns

    def __repr__(self) -> str:  # never print the key itself
        return f"ApiKey(scopes={self.scopes}, streams={self.streams})"

    __str__ = __repr__


def _seconds(default: float, description: str) -> Any:
    """A duration setting: seconds, above 0 (no wait, age or interval is zero or negative)."""
    return Field(default=default, gt=0, description=description)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TIDEMARK_", extra="ignore")

    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "TIDEMARK_REDIS_URL"),
        description="Redis to use; none = start an embedded real Redis under run_dir",
    )
    run_dir: str = ".run"
    config_file: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_workers: int | None = Field(
        default=None, ge=1, le=64, description="API processes answering on the one port (each "
        "decodes and caches on its own, alerts are shared through Redis); none: one per core "
        "beside the worker's, at least 2 on two cores or more (tidemark_cli/serve.py)")
    ingest_processes: int = Field(
        default=1, ge=0, le=64, description="processes per API process that validate and "
        "encode posted events, off the API's GIL (0: in a thread of the API process)")
    worker_nice: int = Field(
        default=19, ge=0, le=19, description="niceness the worker (its driver, JVM and Python "
        "workers) adds to its own: on a machine it shares with the API, the API's answers "
        "come first (at 10 the worker still took enough of two cores to hold the API's p99 "
        "at 12-15 ms under 2,000 q/s; at 19, 7 ms, the worker as fresh)")
    decoder_processes: int = Field(
        default=0, ge=0, le=64, description="processes per API process that decode published "
        "summaries (0: the API process's own decode thread, the summary served is the one decoded)")
    spark_master: str | None = None
    checkpoint: str = Field(default=".run/checkpoint", description="pyarrow.fs URI of worker state")
    state_partitions: int = Field(
        default=2, ge=1, le=4096,
        description="Spark state partitions of the worker (each commits its state store every "
        "batch: about one per core) (fixed for the life of a checkpoint)")
    log_partitions: int = Field(
        default=2, ge=1, le=1024,
        description="partitions of the ingest log (each a Redis Stream; one Spark read task "
        "each): a stream's chunks stay in the one its name hashes to. Fixed for the life of a "
        "run: the first process stores it in Redis and the stored value wins")
    hash_secret: str | None = Field(
        default=None, description="hex secret the key hashes derive from; default: the file "
        "hash-secret beside the worker checkpoint, created on first start")
    trigger: str = "1 second"
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="JSON object of Spark settings for the worker; "
        "overrides every setting the worker makes itself")
    warm_workers: bool = Field(
        default=True, description="start the executors' Python workers (imports, compiled "
        "kernels) with a small job while the worker plans its stream")
    standby_worker: bool = Field(
        default=True, description="`tidemark up` with a local Spark master keeps a spare "
        "worker with its Spark session started, which takes over at once when the worker dies "
        "(one more JVM and its Python workers in memory)")
    worker_stale_after: float = _seconds(
        3.0, "seconds since the worker's last heartbeat (it beats every second) after which "
        "/readyz says it is not running")
    ready_max_wait: float = _seconds(
        10.0, "seconds an ingest request may wait unread by the worker's query before /readyz "
        "says the worker is not processing")
    max_restarts: int = Field(
        default=5, ge=1, description="failures of one service within restart_window after which "
        "`tidemark up` stops everything")
    restart_window: float = _seconds(60.0, "seconds; see max_restarts")
    max_pending_chunks: int = Field(
        default=100_000, ge=1, description="chunks (ingest requests) waiting for the worker in "
        "the whole log before 429")
    max_summary_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024 * 1024,
        description="largest summary one shard of a stream may grow to; larger settings are a 422")
    max_pending_events: int = Field(
        default=2_000_000, ge=1, description="events waiting for the worker, per stream, before 429")
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)

    # -- access (contract §9) ----------------------------------------------------------
    api_keys: list[ApiKey] = Field(
        default_factory=list, repr=False,
        description="JSON list of {key, scopes}; none = up/demo create an admin key in run_dir")
    allowed_hosts: list[str] | None = Field(
        default=None, description="Host headers answered; none = the bind host, localhost, "
        "127.0.0.1 (and the machine's names when bound to all interfaces)")
    secret_key_file: str | None = Field(
        default=None, description="Fernet key encrypting webhook secrets; none = run_dir/secret.key")

    # -- webhooks ----------------------------------------------------------------------
    webhook_allow_hosts: list[str] = Field(
        default_factory=list,
        description="non-public hosts (names, IPs or CIDRs) alerts may still POST to",
    )
    webhook_retry_for: float = _seconds(86400.0, "seconds to keep retrying")
    min_secret_length: int = Field(default=16, ge=1, le=512)

    # -- input and quotas --------------------------------------------------------------
    max_future: float = Field(default=600.0, ge=0, description="seconds an event's ts may be "
                              "ahead of the server's wall clock")
    max_streams: int = Field(default=1000, ge=1)
    max_alerts: int = Field(default=1000, ge=1)
    max_sse_clients: int = Field(default=100, ge=1)
    # Per tenant: the keys with one set of stream patterns (docs/operations.md, Security).
    tenant_max_streams: int = Field(default=100, ge=1, description="streams a tenant's "
                                    "patterns may match before declaring another is a 409")
    tenant_max_alerts: int = Field(default=100, ge=1, description="alerts on a tenant's "
                                   "streams before creating another is a 409")
    tenant_max_events_per_second: int = Field(
        default=200_000, ge=1, description="events a tenant's keys may have accepted per "
        "second, all its streams together, before ingest answers 429")

    # -- federation (contract §11) -------------------------------------------------------
    sites: Annotated[list[Site], NoDecode] = Field(
        default_factory=list, repr=False,
        description="peer sites this deployment may federate: a JSON list of {name, url, "
        "key} (key: a read key of that site), or the path of a file holding one")
    site_max_age: float = _seconds(
        30.0, "seconds a peer site's summary may go unconfirmed before answers of a federated "
        "stream call that site stale (incomplete)")
    site_pull_interval: float = _seconds(
        1.0, "seconds between pulls of a federated stream's summary from each peer site while "
        "someone reads the stream (ETag: unchanged costs a 304)")
    site_timeout: float = _seconds(
        3.0, "seconds a pull from a peer site may take before the site counts as unreachable for "
        "that pull")

    @field_validator("sites", mode="before")
    @classmethod
    def _sites(cls, value: Any) -> list[Site]:
        return parse_sites(value)

    @field_validator("webhook_allow_hosts")
    @classmethod
    def _explicit_hosts(cls, hosts: list[str]) -> list[str]:
        out = []
        for h in hosts:
            h = h.strip().lower().rstrip(".")
            if not h or "*" in h:
                raise ValueError("list hosts, IPs or CIDRs one by one: wildcards are not allowed")
            if "/" in h:
                try:
                    ipaddress.ip_network(h, strict=False)
                except ValueError:
                    raise ValueError(f"{h!r} is not a CIDR network") from None
            out.append(h)
        return out

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)

    def answered_hosts(self) -> list[str]:
        """Host header values this server answers (DNS rebinding defence)."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        hosts = {self.host, "localhost", "127.0.0.1", "::1", "[::1]", "testserver"}
        if self.host in ("0.0.0.0", "::", ""):
            import socket

            hosts |= {socket.gethostname(), socket.getfqdn()}
        return sorted(h for h in hosts if h)
