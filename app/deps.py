"""Dependencies shared by the routers, as ``Annotated`` aliases and access guards.

The getters are ``async`` (they await nothing): a plain function dependency costs a hop to
the thread pool on every request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security

from app.metrics import Metrics
from app.security import authorize
from app.store import Store
from tidemark.settings import Settings


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

# Access guards (contract §9), for a route's or router's ``dependencies=[…]``.
READ = Security(authorize, scopes=["read"])
INGEST = Security(authorize, scopes=["ingest"])
ADMIN = Security(authorize, scopes=["admin"])
