"""Stream declarations and status (contract §4).

Tested by: tests/app/test_security.py (declarations capped, listed page by page),
tests/app/test_lifecycle.py (delete), tests/app/test_tenants.py (listings per key),
tests/tidemark_cli/test_main.py (test_streams_list_and_delete).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from pydantic import Field

from app.deps import ADMIN, READ, DeclarationsDep, FederationDep, ReadsDep, SettingsDep, StoreDep
from app.security import principal_of, visible
from app.store import StreamNotFound
from tidemark import capacity
from tidemark.streams import STREAM_NAME_PATTERN, StreamConfig

router = APIRouter(prefix="/v1/streams", tags=["streams"])
StreamName = Annotated[str, Path(pattern=STREAM_NAME_PATTERN, description="stream name")]


class StreamDeclaration(StreamConfig):
    """A stream's settings (contract §4) and, for a federated stream, its sites (§11)."""

    sites: list[str] | None = Field(
        default=None, min_length=1, max_length=64,
        description="sites whose summaries of this stream answer it ('local': this deployment)")


def describe(declarations, reads, federation, name: str) -> dict:
    out = {"name": name, "settings": declarations.config(name).public(), "status": reads.status(name)}
    sites = federation.sites_of(name) if federation is not None else None
    if sites is not None:
        out["sites"] = list(sites)
    return out


@router.get("", dependencies=[READ])
def list_streams(
    declarations: DeclarationsDep,
    reads: ReadsDep,
    federation: FederationDep,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="streams per page")] = 1000,
    cursor: Annotated[str | None, Query(pattern=STREAM_NAME_PATTERN,
                                        description="the previous page's next_cursor")] = None,
) -> dict:
    """Streams in name order, a page at a time; ``next_cursor`` is null on the last page.
    A key limited to some streams lists those only."""
    names = visible(principal_of(request), declarations.names())
    if cursor is not None:
        names = [n for n in names if n > cursor]
    page = names[:limit]
    described = []
    for n in page:
        try:
            described.append(describe(declarations, reads, federation, n))
        except StreamNotFound:  # deleted while the page was read
            pass
    return {"streams": described, "next_cursor": page[-1] if len(names) > limit else None}


@router.put("/{name}", status_code=201, dependencies=[ADMIN])
def declare_stream(name: StreamName, declaration: StreamDeclaration, declarations: DeclarationsDep,
                   reads: ReadsDep, federation: FederationDep, settings: SettingsDep,
                   request: Request, response: Response) -> dict:
    sites = declaration.sites
    config = StreamConfig.model_validate(declaration.model_dump(exclude={"sites"}))
    capacity.check(config, settings.max_summary_bytes)  # 422 before anything is stored
    names = declarations.names()
    if name not in names and len(names) >= settings.max_streams:
        raise HTTPException(409, f"this deployment already has {len(names)} streams, its limit "
                                 "(TIDEMARK_MAX_STREAMS)")
    principal = principal_of(request)
    if name not in names and principal.restricted:
        mine = visible(principal, names)
        if len(mine) >= settings.tenant_max_streams:
            raise HTTPException(409, f"your streams already number {len(mine)}, the limit per "
                                     "tenant (TIDEMARK_TENANT_MAX_STREAMS)")
    new = (federation.declare(name, config, sites) if federation is not None
           else declarations.declare(name, config))
    if not new:
        response.status_code = 200
    return describe(declarations, reads, federation, name)


@router.get("/{name}", dependencies=[READ])
def get_stream(name: StreamName, declarations: DeclarationsDep, reads: ReadsDep,
               federation: FederationDep) -> dict:
    return describe(declarations, reads, federation, name)


@router.delete("/{name}", status_code=204, dependencies=[ADMIN])
def delete_stream(name: StreamName, store: StoreDep, request: Request) -> None:
    """Remove a stream at once: its answers, pending events and alerts; the worker drops
    its state within seconds, and the name may be declared again, afresh (contract §4)."""
    store.delete(name)
    request.app.state.metrics.forget(name)
    alerts = request.app.state.alerts
    from app.alerts.engine import rule_streams

    for rule in alerts.rules():
        if name in rule_streams(rule) or rule.stream == name:
            try:
                alerts.delete(rule.id)  # its pending deliveries are cancelled with it
            except LookupError:
                pass  # deleted meanwhile by another request
