"""The peer sites a deployment may federate (contract §11): ``TIDEMARK_SITES``, parsed once.

A site is another Tidemark deployment, named here by a short name, reached at ``url`` with
``key`` (a ``read`` key of that site). ``local`` is reserved for this deployment itself: a
federated stream lists it to merge its own summary with the peers'. The setting is a JSON
list, or the path of a file holding one (so the keys stay out of the environment):

    [{"name": "eu", "url": "https://eu.example:8000", "key": "…"}]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Site", "LOCAL", "SITE_NAME", "parse_sites"]

LOCAL = "local"
SITE_NAME = r"^[a-z0-9-]{1,32}$"


class Site(BaseModel):
    """One peer: its name here, its base URL and a ``read`` key of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SITE_NAME)
    url: str = Field(min_length=1, max_length=2048)
    key: str = Field(min_length=16, max_length=512, repr=False)

    @field_validator("name")
    @classmethod
    def _not_local(cls, name: str) -> str:
        if name == LOCAL:
            raise ValueError("'local' names this deployment itself; a peer needs another name")
        return name

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError(f"site url {url[:80]!r} must be http(s)://host[:port]")
        return url.rstrip("/")


def parse_sites(value: Any) -> list[Site]:
    """Sites from a list, JSON text, or the path of a file holding JSON; names unique."""
    if value is None or value == "":
        return []
    if isinstance(value, (str, Path)):
        text = str(value).strip()
        if not text.startswith("["):
            path = Path(text)
            if not path.is_file():
                raise ValueError(f"TIDEMARK_SITES is neither a JSON list nor a file: {text[:80]!r}")
            text = path.read_text()
        try:
            value = json.loads(text)
        except ValueError as e:
            raise ValueError(f"TIDEMARK_SITES is not valid JSON: {e}") from None
    if not isinstance(value, list):
        raise ValueError("TIDEMARK_SITES must be a list of {name, url, key}")
    sites = [s if isinstance(s, Site) else Site.model_validate(s) for s in value]
    names = [s.name for s in sites]
    if len(set(names)) != len(names):
        raise ValueError("TIDEMARK_SITES names a site twice")
    return sites
