"""Stream declarations and status (contract §4)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from app.deps import SettingsDep, StoreDep
from tidemark import capacity
from tidemark.streams import STREAM_NAME_PATTERN, StreamConfig

router = APIRouter(prefix="/v1/streams", tags=["streams"])
StreamName = Annotated[str, Path(pattern=STREAM_NAME_PATTERN, description="stream name")]


def describe(store, name: str) -> dict:
    return {"name": name, "settings": store.config(name).public(), "status": store.status(name)}


@router.get("")
def list_streams(store: StoreDep) -> dict:
    return {"streams": [describe(store, n) for n in store.names()]}


@router.put("/{name}", status_code=201)
def declare_stream(name: StreamName, config: StreamConfig, store: StoreDep, settings: SettingsDep,
                   response: Response) -> dict:
    capacity.check(config, settings.max_summary_bytes)  # 422 before anything is stored
    if not store.declare(name, config):
        response.status_code = 200
    return describe(store, name)


@router.get("/{name}")
def get_stream(name: StreamName, store: StoreDep) -> dict:
    return describe(store, name)
