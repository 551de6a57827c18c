"""Builds the FastAPI app: routers, error mapping, shared state.

Tested by: every API test through tests/conftest.py (create_app),
tests/app/test_readiness.py, tests/app/test_security.py."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from functools import partial

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware

from app.alerts.engine import AlertEngine
from app.alerts.secrets import SecretBox
from app.alerts.store import AlertNotFound, AlertStore
from app.answer_cache import AnswerCache, FastAnswers
from app.answers import QueryError
from app.fast_ingest import FastIngest
from app.fast_ranges import FastRanges
from app.fast_reads import FastReads
from app.ingest_pool import IngestPool
from app.live_hub import LiveHub
from app.loop_watch import LoopWatch
from app.metrics import Metrics
from app.federation import Federation, UnknownSite
from app.ranges import RangeCache
from app.routes import alerts, federation, health, history, ingest, live, prometheus, queries, streams
from app.security import (HIDDEN, PUBLIC_PATHS, Keychain, RedactKeys, SignInMiddleware, api_routes,
                          principal_of, required_scope)
from app.store import Backpressure, Store, StreamConflict, StreamNotFound
from app.warm import warm_answers
from sketches.base import CorruptSketchError, IncompatibleSketchError
from tidemark import __version__
from tidemark.capacity import CapacityError
from tidemark.credentials import secret_key
from tidemark.hash_secret import load_or_create
from tidemark.redis_server import config_problems
from tidemark.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("tidemark.api")


def _validation_message(exc: RequestValidationError) -> str:
    messages = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        if loc and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]  # where it came from; the field name is what the caller needs
        where = ".".join(str(x) for x in loc)
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        messages.append(f"{where}: {msg}" if where else msg)
    return "; ".join(messages) or "invalid request"


def _error_handlers(app: FastAPI) -> None:
    def handler(status: int, headers: dict | None = None):
        async def handle(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)
        return handle

    @app.exception_handler(StreamNotFound)
    async def no_stream(request: Request, exc: StreamNotFound) -> JSONResponse:
        # A key limited to some streams is told of no stream by name: an absent stream and
        # one it may not see look the same.
        principal = principal_of(request)
        detail = HIDDEN if principal is not None and principal.restricted else str(exc)
        return JSONResponse({"detail": detail}, status_code=404)

    app.add_exception_handler(AlertNotFound, handler(404))
    app.add_exception_handler(StreamConflict, handler(409))
    app.add_exception_handler(QueryError, handler(422))
    app.add_exception_handler(UnknownSite, handler(422))
    app.add_exception_handler(CapacityError, handler(422))

    @app.exception_handler(Backpressure)
    async def behind(request: Request, exc: Backpressure) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=429,
                            headers={"Retry-After": str(exc.retry_after)})

    # A published blob that does not parse is our fault, not the caller's; it is refused
    # whole and reported as unavailable until the worker publishes again.
    app.add_exception_handler(CorruptSketchError, handler(503))
    # Likewise a published blob of another deployment's hash secret (refused whole on read).
    app.add_exception_handler(IncompatibleSketchError, handler(503))

    @app.exception_handler(redis.RedisError)
    async def storage_down(request: Request, exc: redis.RedisError) -> JSONResponse:
        # Redis' own words may quote stored bytes or addresses: log the class only.
        log.warning("Redis error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        # A supervised Redis is back within a second of a crash: ask for a retry in one.
        return JSONResponse({"detail": "storage unavailable; retry shortly"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


async def _check_redis(redis_url: str) -> None:
    """Say at start what in the Redis configuration could lose accepted events."""
    try:
        problems = await asyncio.to_thread(config_problems, redis_url)
    except redis.RedisError as e:
        log.warning("cannot check the Redis configuration now: %s", type(e).__name__)
        return
    for problem in problems:
        log.warning("Redis configuration: %s", problem)


@asynccontextmanager
async def _lifespan(app: FastAPI):
    settings = app.state.settings
    await _check_redis(app.state.redis_url)
    engine = AlertEngine(app.state.store, app.state.alerts, app.state.redis_url,
                         settings.webhook_retry_for, settings.webhook_allow_hosts)
    app.state.live_hub.listen(engine.heard, engine.paused)
    app.state.live_hub.listen(app.state.range_cache.heard, app.state.range_cache.paused)
    app.state.store.federation.also_watch = engine.watched_streams  # alerts keep their sites pulled
    engine.start()
    app.state.loop_watch.start()
    app.state.live_hub.start()
    app.state.alert_engine_wake = engine.wake
    # Off the start-up path: /healthz answers at once, the first queries find warm kernels.
    warming = asyncio.create_task(asyncio.to_thread(warm_answers))
    decoder = asyncio.create_task(asyncio.to_thread(app.state.store.decoder.start))
    app.state.ingest_pool.start()  # in the background; posts validate in a thread until then
    yield
    app.state.ingest_pool.close()
    if getattr(app, "fast_reads", None) is not None:
        app.fast_reads.close()
    warming.cancel()
    decoder.cancel()
    app.state.store.decoder.close()
    app.state.store.federation.close()
    await app.state.live_hub.stop()
    await app.state.loop_watch.stop()
    await engine.stop()


def _check_guarded(app: FastAPI) -> None:
    """Fail fast if an API route was added without an access guard (contract §9)."""
    for path, route in api_routes(app.routes):
        if path in PUBLIC_PATHS or not (path.startswith(("/v1/", "/api/v1/")) or path == "/metrics"):
            continue
        if required_scope(route) is None:
            raise RuntimeError(f"route {path} has no access guard")


class TidemarkAPI(FastAPI):
    """FastAPI, with the requests asked most answered before the middleware stack when the
    full way would answer them exactly so: a repeated query whose kept answer is current
    (``app.answer_cache.FastAnswers``), ``/healthz`` and ``/readyz`` (``app.fast_reads``),
    a Prometheus range (``app.fast_ranges``) and an ingest post (``app.fast_ingest``). At thousands of requests a second the stack's
    layers cost more than the answer (bench/bench_request_cpu.py)."""

    fast_answers: FastAnswers | None = None
    fast_ingest: FastIngest | None = None  # likewise a post the full way would take (app.fast_ingest)
    fast_reads: FastReads | None = None  # and /healthz, /readyz (app.fast_reads)
    fast_ranges: FastRanges | None = None  # and a Prometheus range (app.fast_ranges)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if scope["method"] == "GET":
                if self.fast_answers and await self.fast_answers.answer(scope, send):
                    return
                if self.fast_reads and await self.fast_reads.answer(scope, send):
                    return
                if self.fast_ranges and await self.fast_ranges.take(scope, receive, send):
                    return
            elif self.fast_ranges and await self.fast_ranges.take(scope, receive, send):
                return
            elif self.fast_ingest and await self.fast_ingest.take(scope, receive, send):
                return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, redis_url: str) -> FastAPI:
    app = TidemarkAPI(title="Tidemark", version=__version__, lifespan=_lifespan,
                  description="Live approximate queries over event streams, with error bounds.")
    app.state.settings = settings
    app.state.redis_url = redis_url
    secret = load_or_create(settings.checkpoint, settings.hash_secret)
    app.state.store = Store(redis_url, secret, settings.max_pending_chunks, settings.max_pending_events,
                            log_partitions=settings.log_partitions, max_wait=settings.ready_max_wait,
                            decoders=settings.decoder_processes)
    app.state.store.federate(Federation(app.state.store, settings.sites, secret, settings.site_max_age,
                                        settings.site_pull_interval, settings.site_timeout))
    app.state.ingest_pool = IngestPool(settings.ingest_processes)
    app.state.alerts = AlertStore(redis_url, SecretBox(secret_key(settings)))
    app.state.alert_engine_wake = lambda: None
    app.state.metrics = Metrics()
    app.state.loop_watch = LoopWatch(app.state.metrics.loop_stall)
    app.state.answer_cache = AnswerCache()
    app.state.range_cache = RangeCache(counter=app.state.metrics.range_points)
    app.state.store.summaries.on_decoded = partial(queries.render_ahead, app.state.answer_cache)
    app.state.live_hub = LiveHub(redis_url, settings.max_sse_clients,
                                 prepare=lambda name: app.state.store.reads.summary(name, fresh=True))
    app.state.keychain = keychain = Keychain(settings.api_keys)
    if not keychain:
        log.warning("no API key configured (TIDEMARK_API_KEYS): every /v1 request is refused")
    access_log = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactKeys) for f in access_log.filters):
        access_log.addFilter(RedactKeys())
    _error_handlers(app)
    # Not SSE, not pre-gzipped assets. Level 1 (nginx's default): a 500-point heavy-hitter
    # history is 3.3 MB of JSON, 10 ms to compress at 1 against 20 at 5, for 160 KB not 115.
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=1)
    # federation before queries: /v1/streams/{name}/summary is not a query kind
    for module in (health, streams, ingest, alerts, federation, history, queries, live, prometheus):
        app.include_router(module.router)
    # The last added runs first: a request for a Host we do not answer for (DNS
    # rebinding) is refused before anything else, then the dashboard's sign-in link.
    app.add_middleware(SignInMiddleware, keychain=keychain)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.answered_hosts())
    try:
        from frontend import mount
    except ImportError:  # the dashboard is optional for an API-only deployment
        pass
    else:
        mount(app)
    _check_guarded(app)
    app.fast_answers = FastAnswers(app.state, settings.answered_hosts())
    app.fast_ingest = FastIngest(app, settings.answered_hosts())
    app.fast_reads = FastReads(app.state, settings.answered_hosts())
    app.fast_ranges = FastRanges(app, settings.answered_hosts())
    return app
