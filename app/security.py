"""Access control (contract §9): bearer API keys with scopes and stream patterns, the
dashboard's sign-in cookie.

Scopes: ``read`` (queries, status, live updates, metrics), ``ingest`` (POST events) and
``admin`` (declare streams, manage alerts), which implies the other two. Keys are
compared in constant time and never logged.

Where: a key with ``"streams": [patterns]`` reaches only the streams whose names match one
(``*`` any run of characters, the rest literal). Every stream name a request names — the
path's ``{name}``, a ``streams=A,B`` parameter — is checked here, in the access dependency
every protected route declares (and by the fast answer path, ``app.answer_cache``): a
foreign stream is a ``404`` as if it did not exist, whose message names no stream. Routes
that list or follow streams (stream and alert listings, ``/v1/live``, ``/metrics``) filter
with :func:`visible`; everything asks :func:`may_see`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
from typing import Annotated

from typing import Iterator

from fastapi import Depends, HTTPException, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer, SecurityScopes
from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tidemark.settings import ApiKey

__all__ = ["Keychain", "Principal", "authorize", "may_see", "visible", "glob_match", "principal_of",
           "presented_key", "api_routes", "required_scope", "SignInMiddleware", "RedactKeys",
           "COOKIE", "PUBLIC_PATHS", "DASHBOARD_HEADER", "HIDDEN"]

COOKIE = "tidemark_key"
# A request from the dashboard's own scripts says so with this header: a cross-site page
# cannot send a custom header without a CORS preflight (never granted), so with it the
# sign-in cookie may count for more than reading (the admin's delete button).
DASHBOARD_HEADER = "x-tidemark-client"
HIDDEN = "stream not found"  # the 404 of a stream a restricted key may not see (or that is absent)
PUBLIC_PATHS = ("/healthz", "/readyz")  # besides the dashboard's page and static files

bearer = HTTPBearer(auto_error=False, description="an API key from TIDEMARK_API_KEYS")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Principal:
    """Who asks: the key's scopes and the stream patterns it is limited to (None: all)."""

    __slots__ = ("scopes", "patterns", "_match", "tenant")

    def __init__(self, scopes: frozenset[str], patterns: list[str] | None = None):
        self.scopes = frozenset(scopes)
        self.patterns = None if patterns is None else tuple(sorted(set(patterns)))
        self._match = None if patterns is None else self._any_matches
        # A tenant is one set of patterns (every key carrying it shares its quotas);
        # None for keys that reach every stream (the deployment's own).
        self.tenant = None if patterns is None else hashlib.sha256(
            "\n".join(self.patterns).encode()).hexdigest()[:16]

    @property
    def restricted(self) -> bool:
        return self.patterns is not None

    def _any_matches(self, name: str) -> bool:
        # No stream name is longer than 64 characters: a longer one matches nothing (and
        # costs nothing to refuse, whatever a request puts in ``streams=``).
        if len(name) > 64:
            return False
        for p in self.patterns:
            star = p.find("*")
            if star < 0:
                if p == name:
                    return True
            elif star == len(p) - 1:  # "team-a.*", the usual form: a prefix
                if name.startswith(p[:-1]):
                    return True
            elif glob_match(p, name):
                return True
        return False

    def __repr__(self) -> str:
        return f"Principal(scopes={sorted(self.scopes)}, patterns={self.patterns})"


def glob_match(pattern: str, name: str) -> bool:
    """Does ``name`` match ``pattern``, where ``*`` matches any run of characters and
    everything else itself? Two pointers, going back only to the last star: at most
    len(pattern) × len(name) steps, never the exponential backtracking a regular
    expression of many stars can take.

    >>> glob_match("team-a.*", "team-a.web"), glob_match("*.prod", "db.staging")
    (True, False)
    """
    p = n = 0
    star, resume = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] == "*":
            star, resume = p, n
            p += 1
        elif p < len(pattern) and pattern[p] == name[n]:
            p += 1
            n += 1
        elif star >= 0:  # let the last star take one more character
            resume += 1
            p, n = star + 1, resume
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def may_see(principal: Principal | None, name: str) -> bool:
    """May this key see (and, with the scope, touch) the stream ``name``? The one check."""
    return principal is None or principal._match is None or principal._match(name)


def visible(principal: Principal | None, names):
    """The names of ``names`` this key may see, in their order."""
    if principal is None or principal._match is None:
        return list(names)
    return [n for n in names if principal._match(n)]


def principal_of(request: Request) -> Principal | None:
    """The principal ``authorize`` found for this request (None on an unguarded route)."""
    return getattr(request.state, "principal", None)


class Keychain:
    """The configured keys, held as digests and compared in constant time."""

    def __init__(self, keys: list[ApiKey]):
        self._keys = [(_digest(k.key), Principal(frozenset(k.scopes), k.streams)) for k in keys]

    def __len__(self) -> int:
        return len(self._keys)

    def principal(self, presented: str) -> Principal | None:
        """The presented key's principal, None when it is no key of ours. Every stored key
        is compared (no early exit), so timing says nothing about which one matched."""
        digest = _digest(presented)
        found = None
        for stored, principal in self._keys:
            if hmac.compare_digest(stored, digest):
                found = principal
        return found

    def scopes(self, presented: str) -> frozenset[str] | None:
        found = self.principal(presented)
        return None if found is None else found.scopes


def allows(scopes: frozenset[str], needed: str) -> bool:
    return "admin" in scopes or needed in scopes


def presented_key(authorization: str | None, cookie: str | None, needed: str,
                  from_dashboard: bool = False) -> str | None:
    """The key a request presents from its raw ``Authorization`` and ``Cookie`` headers: a
    bearer credential, or the password of HTTP Basic (what Grafana's Prometheus data source
    and promtool send, contract §10; the user name is not read), else the sign-in cookie —
    for ``read`` (what the dashboard's fetches and its EventSource send; a SameSite=Strict
    cookie never rides a cross-site request), and for any scope the key has when the
    dashboard's scripts say so (``DASHBOARD_HEADER``). ``authorize`` and the fast answer
    path (``app.answer_cache``) both read it here, so they cannot disagree on who is asking."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if authorization and scheme.lower() == "bearer" and credentials:
        return credentials
    if authorization and scheme.lower() == "basic" and credentials:
        password = _basic_password(credentials)
        if password:  # else, as any other scheme, the cookie may still say who asks
            return password
    if (needed == "read" or from_dashboard) and cookie:
        return cookie_parser(cookie).get(COOKIE)
    return None


def _named_streams(request: Request) -> list[str]:
    """The stream names a request names: the path's ``{name}`` and ``streams=A,B``."""
    names = []
    name = request.path_params.get("name")
    if isinstance(name, str):
        names.append(name)
    for value in request.query_params.getlist("streams"):
        names.extend(n.strip() for n in value.split(",") if n.strip())
    return names


def _basic_password(credentials: str) -> str | None:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return decoded.partition(":")[2] or None


async def authorize(security_scopes: SecurityScopes, request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
    """The dependency every protected route declares with ``Security(authorize, scopes=[…])``.

    ``async`` although it awaits nothing: it runs on the event loop in microseconds, where a
    plain function would cost a hop to the thread pool on every request. (The bearer
    dependency is declared for the OpenAPI security scheme; the key is read by
    ``presented_key``.)
    """
    needed = security_scopes.scopes[0] if security_scopes.scopes else "admin"
    key = presented_key(request.headers.get("authorization"), request.headers.get("cookie"), needed,
                        request.headers.get(DASHBOARD_HEADER) == "dashboard")
    challenge = {"WWW-Authenticate": "Bearer"}
    if not key:
        raise HTTPException(401, "missing API key: send 'Authorization: Bearer <key>' "
                            "(or HTTP Basic with the key as the password)", challenge)
    keychain: Keychain = request.app.state.keychain
    principal = keychain.principal(key)
    if principal is None:
        raise HTTPException(401, "invalid API key", challenge)
    request.state.principal = principal
    # Where before what: a foreign stream is absent, whatever the key's scopes.
    if principal.restricted and not all(may_see(principal, n) for n in _named_streams(request)):
        raise HTTPException(404, HIDDEN)
    if not allows(principal.scopes, needed):
        raise HTTPException(403, f"this API key lacks the {needed!r} scope")
    return principal


def api_routes(routes, prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    """Every API route with its full path, through included routers (flat in older
    FastAPI, nested include records in newer ones)."""
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is not None:
            yield from api_routes(original.routes, prefix + route.include_context.prefix)
        elif isinstance(route, APIRoute):
            yield prefix + route.path, route


def required_scope(route: APIRoute) -> str | None:
    """The scope a route's access guard asks for, None when it has none."""
    for dep in route.dependant.dependencies:
        if dep.call is authorize:
            scopes = getattr(dep, "own_oauth_scopes", None) or getattr(dep, "security_scopes", None) or []
            return scopes[0] if scopes else "admin"
    return None


class SignInMiddleware:
    """``GET /?key=<key>``: check the key, set it as an HttpOnly SameSite=Strict cookie and
    redirect to ``/``, so the key leaves the address bar and the browser history."""

    def __init__(self, app: ASGIApp, keychain: Keychain):
        self.app, self.keychain = app, keychain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/" or b"key=" not in scope.get("query_string", b""):
            return await self.app(scope, receive, send)
        from starlette.requests import Request as StarletteRequest

        request = StarletteRequest(scope)
        key = request.query_params.get("key", "")
        scopes = self.keychain.scopes(key) if key else None  # its patterns ride with the key
        if scopes is None or not allows(scopes, "read"):
            response = JSONResponse({"detail": "invalid API key for the dashboard"}, status_code=401)
        else:
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/",
                                secure=request.url.scheme == "https", max_age=30 * 86400)
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"
        await response(scope, receive, send)


_KEY_IN_URL = re.compile(r"([?&]key=)[^&\s\"]*")


class RedactKeys(logging.Filter):
    """Blank out ``key=…`` in logged request lines (uvicorn's access log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_KEY_IN_URL.sub(r"\1***", a) if isinstance(a, str) else a
                                for a in record.args)
        if isinstance(record.msg, str):
            record.msg = _KEY_IN_URL.sub(r"\1***", record.msg)
        return True
