"""One validated configuration for every Tidemark process (environment ``TIDEMARK_*``)."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


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
    spark_master: str | None = None
    checkpoint: str = Field(default=".run/checkpoint", description="pyarrow.fs URI of worker state")
    state_partitions: int = Field(
        default=4, ge=1, le=4096,
        description="Spark state partitions of the worker (fixed for the life of a checkpoint)")
    hash_secret: str | None = Field(
        default=None, description="hex secret the key hashes derive from; default: the file "
        "hash-secret beside the worker checkpoint, created on first start")
    trigger: str = "1 second"
    worker_stale_after: float = Field(default=15.0, gt=0, description="seconds without heartbeat")
    max_pending_chunks: int = Field(
        default=1000, ge=1, description="chunks waiting for the worker, per stream, before 429")
    max_summary_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024 * 1024,
        description="largest summary one shard of a stream may grow to; larger settings are a 422")
    max_pending_events: int = Field(
        default=2_000_000, ge=1, description="events waiting for the worker, per stream, before 429")
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    webhook_allow_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "::1"],
        description="hosts alerts may POST to ('*' allows any)",
    )
    webhook_retry_for: float = Field(default=86400.0, gt=0, description="seconds to keep retrying")
