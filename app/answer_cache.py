"""Rendered answers kept per decoded version, and the short way a repeated query is sent.

An answer is a function of the stream's decoded shard versions, the query and its
parameters alone (``at`` defaults to the clock of those versions), so it is rendered once
per version and question (:class:`AnswerCache`). A request asked again exactly as before
(same path, same query string) and whose stream still serves the version it was rendered
from is answered by :class:`FastAnswers` before the middleware stack, routing, dependency
injection and parameter parsing: a header scan, a host and key check and a dict lookup. Everything else — a
first question, a new version, a missing or wrong key, a stream whose statuses must be
read again — goes the full way and gets exactly the answer it got before.

Every process keeps its own: nothing here assumes one API process.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections import OrderedDict

from starlette.types import Scope, Send

from app.security import allows, may_see, presented_key
from app.summary_cache import Served

__all__ = ["AnswerCache", "AnsweredHosts", "FastAnswers", "GZIP_FROM", "MAX_SENT_QUERY"]

GZIP_FROM = 1024  # bytes: the API's GZipMiddleware ``minimum_size``
MAX_SENT_QUERY = 1024  # bytes of query string: longer requests are answered, not indexed
_PREFIX = "/v1/streams/"


class _Sent:
    """A request as sent, answered from ``versions`` of ``name``; ``ahead``: a question
    of the query route, which ``render_ahead`` may answer for the next version."""

    __slots__ = ("name", "query", "versions", "body", "gzipped", "ahead")

    def __init__(self, name: str, query: str, versions: tuple, body: bytes, ahead: bool = True):
        self.name, self.query, self.versions, self.body = name, query, versions, body
        self.gzipped: bytes | None = None
        self.ahead = ahead

    def gzip(self) -> bytes:
        if self.gzipped is None:
            self.gzipped = gzip.compress(self.body, compresslevel=5, mtime=0)
        return self.gzipped


class AnswerCache:
    """Answers by (stream, decoded shard versions, query, parameters), rendered, and an
    index of the requests that were answered, as sent (a query's answer, or a history).
    Both bounded (least recently used first out; the index also by the bytes it holds); the
    index holds one entry per request form, replaced when the version moves.
    """

    def __init__(self, size: int = 4096, sent_bytes: int = 64 << 20):
        self.size, self.sent_bytes = size, sent_bytes
        # bytes of the bodies the index holds (a history's: 0.2-3 MB; the gzip of one, made
        # once it is asked for, some fifth as much besides)
        self._sent_held = 0
        self._answers: OrderedDict[tuple, bytes] = OrderedDict()
        self._sent: OrderedDict[tuple[str, bytes], _Sent] = OrderedDict()
        self._lock = threading.Lock()  # answers are also rendered in the thread pool

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
            return found

    def put(self, key: tuple, rendered: bytes) -> None:
        with self._lock:
            self._answers[key] = rendered
            self._answers.move_to_end(key)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)

    def index(self, path: str, query_string: bytes, name: str, query: str, versions: tuple,
              rendered: bytes, ahead: bool = True) -> None:
        """Remember that ``path?query_string`` is answered by ``rendered`` at ``versions``
        (``ahead``: a question of the query route, see :class:`_Sent`)."""
        if len(query_string) > MAX_SENT_QUERY or len(path) > 256 or len(rendered) > self.sent_bytes // 16:
            return
        key = (path, query_string)
        with self._lock:
            old = self._sent.pop(key, None)
            self._sent_held += len(rendered) - (len(old.body) if old is not None else 0)
            self._sent[key] = _Sent(name, query, versions, rendered, ahead)
            while len(self._sent) > self.size or self._sent_held > self.sent_bytes:
                self._sent_held -= len(self._sent.popitem(last=False)[1].body)

    def asked(self, name: str, versions: tuple | None, limit: int = 16) -> list[tuple[str, bytes]]:
        """The query kinds and query strings asked of ``name`` while it served ``versions``
        (most recent first, at most ``limit``): the questions to answer ahead for its next
        version. A question asked only of older versions is nobody's now."""
        with self._lock:
            found = [(hit.query, qs) for (_, qs), hit in reversed(self._sent.items())
                     if hit.ahead and hit.name == name and hit.versions == versions]
        return found[:limit]

    def sent(self, path: str, query_string: bytes) -> _Sent | None:
        """The answer last given to this request form (its version may be old: the
        caller compares it with the version served now)."""
        return self._sent.get((path, query_string))

    def __len__(self) -> int:
        return len(self._answers)


class AnsweredHosts:
    """The Hosts the API answers for, as the fast paths check a request's ``Host``: by name
    (or any, for ``*``); a wildcard pattern (``*.example.com``) matches none here, so such a
    request goes the full way, whose ``TrustedHostMiddleware`` reads the patterns."""

    def __init__(self, allowed_hosts: list[str]) -> None:
        self.any = "*" in allowed_hosts
        self.names = frozenset(allowed_hosts)

    def __contains__(self, host: str) -> bool:
        return self.any or host.split(":")[0] in self.names


def first_headers(scope: Scope, *names: bytes) -> dict[bytes, str]:
    """The first value of each of ``names`` (lower case) the request carries, as Starlette
    reads a header: the fast paths (this one and ``app.fast_ingest``) look at no other."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in names and name not in found:
            found[name] = value.decode("latin-1")
    return found


def _headers(scope: Scope) -> tuple[str, str | None, str | None, bool]:
    """The Host, Authorization and Cookie headers and whether gzip is accepted (in the
    first Accept-Encoding, as GZipMiddleware reads it)."""
    h = first_headers(scope, b"host", b"authorization", b"cookie", b"accept-encoding")
    return (h.get(b"host", ""), h.get(b"authorization"), h.get(b"cookie"),
            "gzip" in h.get(b"accept-encoding", ""))


class FastAnswers:
    """Answers a repeated query from :class:`AnswerCache` when that is exactly what the
    full way would answer: the Host is one the API answers for (by name: a wildcard
    pattern goes the full way), the same request form was answered from the version the
    stream serves now, the stream needs no Redis read now (``SummaryCache.in_memory``), and the
    request carries a key with the ``read`` scope. Otherwise :meth:`answer` says False and
    the request goes the full way untouched, so errors (400, 401, 403, 404, 422) keep
    their one source. Called by the app before its middleware stack
    (``app.main.TidemarkAPI``).
    """

    def __init__(self, state, allowed_hosts: list[str]) -> None:
        self.state = state  # the app's state: store, answer_cache, keychain, metrics
        self.hosts = AnsweredHosts(allowed_hosts)

    async def answer(self, scope: Scope, send: Send) -> bool:
        if scope["method"] != "GET" or not scope["path"].startswith(_PREFIX):
            return False
        started = time.perf_counter()
        state = self.state
        hit = state.answer_cache.sent(scope["path"], scope["query_string"])
        if hit is None or not self._current(state.store.summaries, hit):
            return False
        host, authorization, cookie, gzip_ok = _headers(scope)
        if host not in self.hosts:
            return False
        key = presented_key(authorization, cookie, "read")
        principal = state.keychain.principal(key) if key else None
        if principal is None or not allows(principal.scopes, "read"):
            return False
        if principal.restricted and (not may_see(principal, hit.name) or b"streams=" in scope["query_string"]):
            return False  # the full way says 404 (app.security.authorize: the one check)
        await self._send(hit, gzip_ok, send)
        state.metrics.query_seconds.labels(hit.query).observe(time.perf_counter() - started)
        return True

    @staticmethod
    def _current(summaries: Served, hit: _Sent) -> bool:
        """Would the query route answer from ``hit.versions`` now, without Redis?"""
        return summaries.served_versions(hit.name) == hit.versions and summaries.in_memory(hit.name)

    @staticmethod
    async def _send(hit: _Sent, gzip_ok: bool, send: Send) -> None:
        body = hit.body
        headers = [(b"content-type", b"application/json")]
        if len(body) >= GZIP_FROM:  # as the API's GZipMiddleware would answer
            headers.append((b"vary", b"Accept-Encoding"))
            if gzip_ok:
                body = hit.gzip()
                headers.append((b"content-encoding", b"gzip"))
        headers.insert(0, (b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
