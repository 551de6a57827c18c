"""``POST /v1/streams/{name}/events`` taken before the app's middleware stack and router,
when the full way would take it exactly so (``app.main.TidemarkAPI``).

At a few hundred posts a second the layers a post crosses before the route (Host check,
sign-in, gzip, exception and router middleware, FastAPI's matching of every route and
its solving of the access dependency) cost a fifth of the API's CPU per post
(bench/bench_ingest_cpu.py). This takes a post only when every check of the full way
holds, by the same helpers: a Host the API answers for by name (a wildcard pattern goes
the full way, as in ``app.answer_cache.FastAnswers``), a key in ``Authorization`` with
the ``ingest`` scope that may see the stream (``app.security``), a stream name the route's
pattern takes, an ``Idempotency-Key`` within the route's 255 characters, no ``streams=``
in the query. Anything else goes the full way untouched (nothing of the body read), so
every 401, 403, 404 and 422 keeps its one source. What it takes runs the route's own code
(``app.routes.ingest.take``), its errors answered by the app's own exception handlers and
the answer sent through the app's gzip rule.
"""

from __future__ import annotations

import re

from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.answer_cache import GZIP_FROM, AnsweredHosts, first_headers
from app.routes.ingest import take
from app.security import allows, may_see, presented_key
from tidemark.streams import STREAM_NAME_PATTERN

__all__ = ["FastIngest", "exception_handler"]

_PREFIX, _SUFFIX = "/v1/streams/", "/events"
_NAME = re.compile(STREAM_NAME_PATTERN)


def _headers(scope: Scope) -> tuple[str, str | None, str | None]:
    """The Host, Authorization and Idempotency-Key headers (the first of each)."""
    h = first_headers(scope, b"host", b"authorization", b"idempotency-key")
    return h.get(b"host", ""), h.get(b"authorization"), h.get(b"idempotency-key")


class FastIngest:
    def __init__(self, app, allowed_hosts: list[str]) -> None:
        self.app = app  # its state (store, settings, keychain, ...) and exception handlers
        self.hosts = AnsweredHosts(allowed_hosts)

    async def take(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """True when this answered the request; False: nothing was read, go the full way."""
        path = scope["path"]
        if scope["method"] != "POST" or not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            return False
        name = path[len(_PREFIX):-len(_SUFFIX)]
        if not _NAME.fullmatch(name) or scope.get("root_path") or b"streams=" in scope["query_string"]:
            return False
        host, authorization, idempotency_key = _headers(scope)
        if host not in self.hosts:
            return False
        if idempotency_key is not None and len(idempotency_key) > 255:
            return False
        state = self.app.state
        key = presented_key(authorization, None, "ingest")  # a cookie's post goes the full way
        principal = state.keychain.principal(key) if key else None
        if principal is None or not allows(principal.scopes, "ingest") or not may_see(principal, name):
            return False
        scope.setdefault("state", {})["principal"] = principal  # what the handlers ask of the request
        scope["app"] = self.app
        request = Request(scope, receive)
        try:
            response = await take(state, request, name, principal, idempotency_key)
        except Exception as exc:
            handler = exception_handler(self.app, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await GZipMiddleware(response, minimum_size=GZIP_FROM, compresslevel=5)(scope, receive, send)
        return True


def exception_handler(app, exc: Exception):
    """The app's handler of ``exc`` (the nearest class up its MRO, as Starlette's exception
    middleware looks it up), None for none (a 500 as the full way's)."""
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    return None
