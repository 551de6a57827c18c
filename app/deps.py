"""Dependencies shared by the routers, as ``Annotated`` aliases and access guards: the
store's components by job (``DeclarationsDep``, ``IngestDep``, ``ReadsDep``, ``FederationDep``,
``WorkerHealthDep``; see ``app.store``), the store itself (``StoreDep``) for a route that
hands it to what spans several components, the settings and the metrics.

The getters are ``async`` (they await nothing): a plain function dependency costs a hop to
the thread pool on every request.

Tested by: tests/app/test_security.py (every route's guard: 401 without a key, 403
without its scope), and every API test through the routes that take these dependencies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security

from app.declarations import Declarations
from app.federation import Federation
from app.ingest import Ingest
from app.metrics import Metrics
from app.security import authorize
from app.store import Store
from app.summary_cache import SummaryCache
from app.worker_health import WorkerHealth
from tidemark.settings import Settings


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_declarations(request: Request) -> Declarations:
    return request.app.state.store.declarations


async def get_ingest(request: Request) -> Ingest:
    return request.app.state.store.ingest


async def get_reads(request: Request) -> SummaryCache | Federation:
    return request.app.state.store.reads


async def get_federation(request: Request) -> Federation | None:
    return request.app.state.store.federation


async def get_worker_health(request: Request) -> WorkerHealth:
    return request.app.state.store.health


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


StoreDep = Annotated[Store, Depends(get_store)]
DeclarationsDep = Annotated[Declarations, Depends(get_declarations)]
IngestDep = Annotated[Ingest, Depends(get_ingest)]
ReadsDep = Annotated[SummaryCache | Federation, Depends(get_reads)]
FederationDep = Annotated[Federation | None, Depends(get_federation)]
WorkerHealthDep = Annotated[WorkerHealth, Depends(get_worker_health)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

# Access guards (contract §9), for a route's or router's ``dependencies=[…]``.
READ = Security(authorize, scopes=["read"])
INGEST = Security(authorize, scopes=["ingest"])
ADMIN = Security(authorize, scopes=["admin"])
