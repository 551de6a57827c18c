"""Access control (contract §9): bearer API keys with scopes, the dashboard's sign-in cookie.

Scopes: ``read`` (queries, status, live updates, metrics), ``ingest`` (POST events) and
``admin`` (declare streams, manage alerts), which implies the other two. Keys are
compared in constant time and never logged.
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

__all__ = ["Keychain", "authorize", "presented_key", "api_routes", "required_scope", "SignInMiddleware", "RedactKeys", "COOKIE", "PUBLIC_PATHS"]

COOKIE = "tidemark_key"
PUBLIC_PATHS = ("/healthz", "/readyz")  # besides the dashboard's page and static files

bearer = HTTPBearer(auto_error=False, description="an API key from TIDEMARK_API_KEYS")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


class Keychain:
    """The configured keys, held as digests and compared in constant time."""

    def __init__(self, keys: list[ApiKey]):
        self._keys = [(_digest(k.key), frozenset(k.scopes)) for k in keys]

    def __len__(self) -> int:
        return len(self._keys)

    def scopes(self, presented: str) -> frozenset[str] | None:
        """The presented key's scopes, None when it is no key of ours. Every stored key is
        compared (no early exit), so timing says nothing about which one matched."""
        digest = _digest(presented)
        found = None
        for stored, scopes in self._keys:
            if hmac.compare_digest(stored, digest):
                found = scopes
        return found


def allows(scopes: frozenset[str], needed: str) -> bool:
    return "admin" in scopes or needed in scopes


def presented_key(authorization: str | None, cookie: str | None, needed: str) -> str | None:
    """The key a request presents from its raw ``Authorization`` and ``Cookie`` headers: a
    bearer credential, or the password of HTTP Basic (what Grafana's Prometheus data source
    and promtool send, contract §10; the user name is not read), else, for ``read`` only,
    the sign-in cookie (what the dashboard's
    fetches and its EventSource send; a SameSite=Strict cookie never rides a cross-site
    request). ``authorize`` and the fast answer path (``app.answer_cache``) both read it
    here, so they cannot disagree on who is asking."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    if authorization and scheme.lower() == "bearer" and credentials:
        return credentials
    if authorization and scheme.lower() == "basic" and credentials:
        password = _basic_password(credentials)
        if password:  # else, as any other scheme, the cookie may still say who asks
            return password
    if needed == "read" and cookie:
        return cookie_parser(cookie).get(COOKIE)
    return None


def _basic_password(credentials: str) -> str | None:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return decoded.partition(":")[2] or None


async def authorize(security_scopes: SecurityScopes, request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> frozenset[str]:
    """The dependency every protected route declares with ``Security(authorize, scopes=[…])``.

    ``async`` although it awaits nothing: it runs on the event loop in microseconds, where a
    plain function would cost a hop to the thread pool on every request. (The bearer
    dependency is declared for the OpenAPI security scheme; the key is read by
    ``presented_key``.)
    """
    needed = security_scopes.scopes[0] if security_scopes.scopes else "admin"
    key = presented_key(request.headers.get("authorization"), request.headers.get("cookie"), needed)
    challenge = {"WWW-Authenticate": "Bearer"}
    if not key:
        raise HTTPException(401, "missing API key: send 'Authorization: Bearer <key>' "
                            "(or HTTP Basic with the key as the password)", challenge)
    keychain: Keychain = request.app.state.keychain
    scopes = keychain.scopes(key)
    if scopes is None:
        raise HTTPException(401, "invalid API key", challenge)
    if not allows(scopes, needed):
        raise HTTPException(403, f"this API key lacks the {needed!r} scope")
    return scopes


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
        scopes = self.keychain.scopes(key) if key else None
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
