"""Answers over time, ``/api/v1/query_range`` (GET or form POST) and
``GET /v1/streams/{name}/{query}/history``, taken before the app's middleware stack and
router when the full way would take them exactly so (``app.main.TidemarkAPI``).

A Grafana panel asks its range again every few seconds; the refresh computes only its
new steps (``app.ranges.RangeCache``, ``app.promql.blocks``), a millisecond or so, while
the layers it crossed before the route (Host check, sign-in, gzip, exception and router
middleware, FastAPI's matching of every route and its solving of the access dependency)
cost more than that again. This takes a range only when every check of the full way
holds, by the same helpers: a Host the API answers for by name (a wildcard pattern goes
the full way), a key (Bearer, the password of HTTP Basic, or the sign-in cookie, as
``app.security.presented_key`` reads them) with the ``read`` scope, for a key limited to
some streams no ``streams=`` in the query string and a history's stream one it may see
(``authorize``'s one check), a POST's body no larger than the route reads (its
``Content-Length`` given), a history's stream name and ``points`` as its parameters'
validation takes them. Anything else goes the full way untouched (nothing of the body
read), so every 401, 403, 404 and 422 of the checks keeps its one source. What it takes
runs the route's own code (``app.routes.prometheus.query_range``, ``app.routes.history``:
their envelopes, their errors), any exception answered by the app's own handlers, the
answer sent through the app's gzip rule.

Tested by: tests/app/test_fast_ranges.py.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.answer_cache import GZIP_FROM, AnsweredHosts, first_headers
from app.fast_ingest import exception_handler
from app.routes.history import DEFAULT_POINTS, MAX_POINTS, history
from app.routes.prometheus import MAX_BODY, query_range
from app.security import allows, may_see, presented_key
from tidemark.streams import STREAM_NAME_PATTERN

__all__ = ["FastRanges", "PATH"]

PATH = "/api/v1/query_range"
GZIP_LEVEL = 1  # the app's GZipMiddleware's (app.main)


class FastRanges:
    def __init__(self, app, allowed_hosts: list[str]) -> None:
        self.app = app  # its state (store, keychain, range cache, ...) and exception handlers
        self.hosts = AnsweredHosts(allowed_hosts)

    async def take(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """True when this answered the request; False: nothing was read, go the full way."""
        method, path = scope["method"], scope["path"]
        if scope.get("root_path"):
            return False
        if path == PATH and method in ("GET", "POST"):
            route = None
        elif method == "GET" and path.startswith(_STREAMS) and path.endswith(_HISTORY):
            route = _history_call(path, scope["query_string"])
            if route is None:
                return False
        else:
            return False
        h = first_headers(scope, b"host", b"authorization", b"cookie", b"content-length")
        if h.get(b"host", "") not in self.hosts:
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
        if principal.restricted and (b"streams=" in scope["query_string"]
                                     or (route is not None and not may_see(principal, route[0]))):
            return False  # the full way says 404 (app.security.authorize: the one check)
        scope.setdefault("state", {})["principal"] = principal  # what the route asks of the request
        scope["app"] = self.app
        request = Request(scope, receive)
        try:
            if route is None:
                response = await query_range(request)
            else:
                name, query, points = route
                response = await run_in_threadpool(history, name, query, request, state.store,
                                                   state.metrics, points)
        except Exception as exc:
            handler = exception_handler(self.app, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await GZipMiddleware(response, minimum_size=GZIP_FROM, compresslevel=GZIP_LEVEL)(scope, receive, send)
        return True


_STREAMS, _HISTORY = "/v1/streams/", "/history"
_NAME = re.compile(STREAM_NAME_PATTERN)
_POINTS = re.compile(r"[1-9][0-9]{0,2}")


def _history_call(path: str, query_string: bytes) -> tuple[str, str, int] | None:
    """``(name, query, points)`` of a history request the route would take as they are: a
    stream name its pattern takes, one ``points`` written as a plain integer in range (or
    none); None for anything else (the full way's validation answers it)."""
    parts = path[len(_STREAMS):-len(_HISTORY)].split("/")
    if len(parts) != 2 or not parts[1] or not _NAME.fullmatch(parts[0]):
        return None
    points = [v for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True) if k == "points"]
    if len(points) > 1 or (points and not (_POINTS.fullmatch(points[0]) and int(points[0]) <= MAX_POINTS)):
        return None
    return parts[0], parts[1], int(points[0]) if points else DEFAULT_POINTS
