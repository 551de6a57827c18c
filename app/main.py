"""Builds the FastAPI app: routers, error mapping, shared state."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware

import app.kinds  # noqa: F401  (registers the query kinds)
from app.alerts.engine import AlertEngine
from app.alerts.store import AlertNotFound, AlertStore
from app.answers import QueryError
from app.metrics import Metrics
from app.routes import alerts, health, history, ingest, live, queries, streams
from app.store import Backpressure, Store, StreamConflict, StreamNotFound
from sketches.base import CorruptSketchError
from tidemark import __version__
from tidemark.capacity import CapacityError
from tidemark.hash_secret import load_or_create
from tidemark.settings import Settings

__all__ = ["create_app"]


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        if loc and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]  # where it came from; the field name is what the caller needs
        where = ".".join(str(x) for x in loc)
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "invalid request"


def _error_handlers(app: FastAPI) -> None:
    def handler(status: int, headers: dict | None = None):
        async def handle(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)
        return handle

    app.add_exception_handler(StreamNotFound, handler(404))
    app.add_exception_handler(AlertNotFound, handler(404))
    app.add_exception_handler(StreamConflict, handler(409))
    app.add_exception_handler(QueryError, handler(422))
    app.add_exception_handler(CapacityError, handler(422))
    app.add_exception_handler(Backpressure, handler(429, {"Retry-After": "1"}))
    # A published blob that does not parse is our fault, not the caller's; it is refused
    # whole and reported as unavailable until the worker publishes again.
    app.add_exception_handler(CorruptSketchError, handler(503))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


@asynccontextmanager
async def _lifespan(app: FastAPI):
    engine = AlertEngine(app.state.store, app.state.alerts, app.state.redis_url,
                         app.state.settings.webhook_retry_for)
    engine.start()
    app.state.alert_engine_wake = engine.wake
    yield
    await engine.stop()


def create_app(settings: Settings, redis_url: str) -> FastAPI:
    app = FastAPI(title="Tidemark", version=__version__, lifespan=_lifespan,
                  description="Live approximate queries over event streams, with error bounds.")
    app.state.settings = settings
    app.state.redis_url = redis_url
    secret = load_or_create(settings.checkpoint, settings.hash_secret)
    app.state.store = Store(redis_url, secret, settings.max_pending_chunks, settings.max_pending_events)
    app.state.alerts = AlertStore(redis_url)
    app.state.alert_engine_wake = lambda: None
    app.state.metrics = Metrics()
    _error_handlers(app)
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=5)  # not SSE, not pre-gzipped assets
    for module in (health, streams, ingest, alerts, history, queries, live):
        app.include_router(module.router)
    try:
        from frontend import mount
    except ImportError:  # the dashboard is optional for an API-only deployment
        pass
    else:
        mount(app)
    return app
