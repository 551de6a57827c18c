"""``/api/v1/query_range`` (GET or form POST) taken before the app's middleware stack and
router, when the full way would take it exactly so (``app.main.TidemarkAPI``).

A Grafana panel asks its range again every few seconds; the refresh computes only its
new steps (``app.ranges.RangeCache``, ``app.promql.blocks``), a millisecond or so, while
the layers it crossed before the route (Host check, sign-in, gzip, exception and router
middleware, FastAPI's matching of every route and its solving of the access dependency)
cost more than that again. This takes a range only when every check of the full way
holds, by the same helpers: a Host the API answers for by name (a wildcard pattern goes
the full way), a key (Bearer, the password of HTTP Basic, or the sign-in cookie, as
``app.security.presented_key`` reads them) with the ``read`` scope, no ``streams=`` in the
query string for a key limited to some streams (``authorize``'s one check), and a POST's
body no larger than the route reads (its ``Content-Length`` given). Anything else goes the
full way untouched (nothing of the body read), so every 401, 403 and 404 keeps its one
source. What it takes runs the route's own code (``app.routes.prometheus.query_range``:
its envelope, its errors), any other exception answered by the app's own handlers, the
answer sent through the app's gzip rule.

Tested by: tests/app/test_fast_ranges.py.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.answer_cache import GZIP_FROM, first_headers
from app.fast_ingest import exception_handler
from app.routes.prometheus import MAX_BODY, query_range
from app.security import allows, presented_key

__all__ = ["FastRanges", "PATH"]

PATH = "/api/v1/query_range"
GZIP_LEVEL = 1  # the app's GZipMiddleware's (app.main)


class FastRanges:
    def __init__(self, app, allowed_hosts: list[str]) -> None:
        self.app = app  # its state (store, keychain, range cache, ...) and exception handlers
        self.any_host = "*" in allowed_hosts
        self.hosts = frozenset(allowed_hosts)

    async def take(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """True when this answered the request; False: nothing was read, go the full way."""
        method = scope["method"]
        if scope["path"] != PATH or method not in ("GET", "POST") or scope.get("root_path"):
            return False
        h = first_headers(scope, b"host", b"authorization", b"cookie", b"content-length")
        if not (self.any_host or h.get(b"host", "").split(":")[0] in self.hosts):
            return False
        if method == "POST":
            length = h.get(b"content-length", "")
            if not (length.isdigit() and int(length) <= MAX_BODY):
                return False
        state = self.app.state
        key = presented_key(h.get(b"authorization"), h.get(b"cookie"), "read")
        principal = state.keychain.principal(key) if key else None
        if principal is None or not allows(principal.scopes, "read"):
            return False
        if principal.restricted and b"streams=" in scope["query_string"]:
            return False
        scope.setdefault("state", {})["principal"] = principal  # what the route asks of the request
        scope["app"] = self.app
        request = Request(scope, receive)
        try:
            response = await query_range(request)
        except Exception as exc:
            handler = exception_handler(self.app, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await GZipMiddleware(response, minimum_size=GZIP_FROM, compresslevel=GZIP_LEVEL)(scope, receive, send)
        return True
