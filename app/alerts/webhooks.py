"""Where a webhook may go, decided after DNS resolution, and a transport that connects
exactly to the address that was checked.

A webhook URL is parsed with ``httpx.URL`` (the parser that sends it), its host resolved,
and every address it resolves to must be globally routable (``ipaddress``'s
``is_global``; an IPv4 address inside an IPv6 one is judged by the IPv4 one) unless the
host name, the IP or a CIDR containing it is in ``TIDEMARK_WEBHOOK_ALLOW_HOSTS``. The check
runs when a rule is created and again for every send, inside :class:`PinnedTransport`,
which then connects to the checked IP itself: a DNS answer that changes between check and
connect (DNS rebinding) cannot redirect the POST.

Connections are kept alive in one bounded pool per (scheme, checked IP, port, host name):
a pooled connection is only ever reused for the same name at the same checked address,
never for another name served there (TLS was verified for that name) nor for an address
that this send's check did not return.

Tested by: tests/app/alerts/test_webhooks.py (public addresses, check_webhook),
tests/app/alerts/test_engine.py (PinnedTransport, kept-alive connections).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections import OrderedDict
from functools import lru_cache

import httptools
import httpx

__all__ = ["WebhookRefused", "parse_webhook", "check_webhook", "PinnedTransport", "public_url",
           "is_public"]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT = 5.0


class WebhookRefused(ValueError):
    """A webhook URL that may not be used; the message is safe to show to the caller."""


def parse_webhook(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise WebhookRefused("webhook_url is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise WebhookRefused("webhook_url must be an http or https URL with a host")
    return parsed


def _normal(host: str) -> str:
    return host.lower().rstrip(".").strip("[]")


def is_public(ip: IP) -> bool:
    """Globally routable, judging an embedded IPv4 address (mapped, 6to4, Teredo) by itself."""
    if ip.version == 6:
        embedded = [ip.ipv4_mapped, ip.sixtofour, ip.teredo[1] if ip.teredo else None]
        if any(e is not None and not is_public(e) for e in embedded):
            return False
    return ip.is_global and not (ip.is_multicast or ip.is_unspecified or ip.is_reserved)


def _allowed(host: str, ip: IP, allow: list[str]) -> bool:
    """Is this address explicitly allowed by name, IP or CIDR?"""
    for entry in allow:
        if entry == host:
            return True
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _judge(host: str, addresses: list[IP], allow: list[str]) -> list[IP]:
    if not addresses:
        raise WebhookRefused("webhook host does not resolve")
    for ip in addresses:
        if not (is_public(ip) or _allowed(host, ip, allow)):
            # Never say which address: that would make the API a resolver of internal names.
            raise WebhookRefused(
                f"webhook host {host!r} is not a public address and is not in the allow-list "
                "(TIDEMARK_WEBHOOK_ALLOW_HOSTS)")
    return addresses


def _addresses(infos) -> list[IP]:
    out = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(sockaddr[0].split("%")[0])
        if ip not in out:
            out.append(ip)
    return out


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def check_webhook(url: str, allow: list[str]) -> httpx.URL:
    """Refuse (``WebhookRefused``) a URL that may not be used now; return it parsed."""
    parsed = parse_webhook(url)
    host = _normal(parsed.host)
    try:
        infos = socket.getaddrinfo(host, _port(parsed), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None
    _judge(host, _addresses(infos), allow)
    return parsed


def _literal(host: str) -> IP | None:
    """The address a host names literally (no lookup needed), in its one canonical
    spelling; None for a name, or for a spelling only a resolver reads (``127.1``)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return ip if str(ip) == host else None


@lru_cache(maxsize=1024)
def _judge_literal(host: str, allow: tuple[str, ...]) -> IP:
    """A literal address's judgement, a function of its spelling and the allow-list alone
    (refusals are not kept: they raise)."""
    return _judge(host, [_literal(host)], list(allow))[0]


async def resolve_checked(url: httpx.URL, allow: list[str]) -> IP:
    """The address to connect to for ``url``, checked now."""
    host = _normal(url.host)
    if _literal(host) is not None:  # nothing to resolve: judged the same way, without a thread hop
        return _judge_literal(host, tuple(allow))
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, _port(url), type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
    except (socket.gaierror, UnicodeError, OSError, asyncio.TimeoutError):
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None
    return _judge(host, _addresses(infos), allow)[0]


MAX_REPLY_HEADERS = 64 * 1024  # a receiver's reply is read only for its status
MAX_REPLY_BODY = 1024 * 1024
IDLE_FOR = 4.0  # seconds an idle connection is kept (below common 5 s server keep-alives)


class _Reply:
    """The parser's callbacks: a reply's headers and (bounded) body."""

    def __init__(self):
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.head_size = 0
        self.head_done = self.done = self.keep_alive = False
        self.messages = 0
        self.parser: httptools.HttpResponseParser | None = None

    def on_message_begin(self) -> None:
        self.messages += 1

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value)
        if self.head_size > MAX_REPLY_HEADERS:
            raise httpx.RemoteProtocolError("webhook reply headers too large")
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, data: bytes) -> None:
        if len(self.body) + len(data) > MAX_REPLY_BODY:
            raise httpx.RemoteProtocolError("webhook reply body too large")
        self.body += data

    def on_message_complete(self) -> None:
        # A second message begun in the same bytes (sent unasked) rules out reuse, since it
        # would be read as the next request's reply. Asked here: once the message is complete the parser resets and says False.
        self.keep_alive = self.parser.should_keep_alive()
        self.done = True


class _Connection:
    """One HTTP/1.1 connection to a checked address, carrying one exchange at a time.

    Opened with the IP itself (no name is resolved here) and, for https, the name as SNI
    and for the certificate check.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    @classmethod
    async def open(cls, ip: str, port: int, name: str, tls: ssl.SSLContext | None,
                   timeout: float) -> "_Connection":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                ip, port, ssl=tls, server_hostname=name if tls else None), timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout("connect timed out") from None
        except OSError as e:  # refused, unreachable, TLS failure (ssl.SSLError is one)
            raise httpx.ConnectError(type(e).__name__) from None
        return cls(reader, writer)

    def fresh(self) -> bool:
        """Reusable: idle briefly, not closed, and nothing arrived unasked while idle
        (it would be read as the next request's reply). Without the reader's buffer to look
        at (a private attribute of ``asyncio.StreamReader``), never reused."""
        unasked = getattr(self.reader, "_buffer", b"?")
        return time.monotonic() - self.idle_since < IDLE_FOR and not self.reader.at_eof() and not unasked

    async def exchange(self, head: bytes, body: bytes, timeouts: dict) -> tuple[int, _Reply, bool]:
        """Send one request; (status, reply, whether the connection may carry another)."""
        try:
            self.writer.write(head + body)
            # asyncio.timeout, not wait_for: no task per step, a thousand sends a publish
            async with asyncio.timeout(timeouts.get("write") or 10.0):
                await self.writer.drain()
        except asyncio.TimeoutError:
            raise httpx.WriteTimeout("write timed out") from None
        except OSError as e:
            raise _Stale(httpx.WriteError(type(e).__name__)) from None
        reply = _Reply()
        parser = reply.parser = httptools.HttpResponseParser(reply)
        seen = False
        # The whole reply within the read timeout: a receiver trickling bytes cannot hold
        # a send past its lease.
        try:
            async with asyncio.timeout(timeouts.get("read") or 10.0):
                while not reply.done:
                    try:
                        data = await self.reader.read(65536)
                    except OSError as e:
                        error = httpx.ReadError(type(e).__name__)
                        raise (error if seen else _Stale(error)) from None
                    if not data:
                        if reply.head_done:  # a body that ends with the connection
                            return parser.get_status_code(), reply, False
                        error = httpx.RemoteProtocolError("webhook closed the connection")
                        raise error if seen else _Stale(error)
                    seen = True
                    try:
                        parser.feed_data(data)
                    except httptools.HttpParserUpgrade:
                        raise httpx.RemoteProtocolError("webhook asked to upgrade the connection") from None
                    except httptools.HttpParserError:
                        raise httpx.RemoteProtocolError("webhook reply is not HTTP/1.1") from None
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout("read timed out") from None
        self.idle_since = time.monotonic()
        return parser.get_status_code(), reply, reply.keep_alive and reply.messages == 1

    def close(self) -> None:
        self.writer.close()


class _Stale(Exception):
    """The connection failed before any reply byte: a kept-alive one the receiver closed
    meanwhile gets one more try on a fresh connection; otherwise ``error`` is raised."""

    def __init__(self, error: httpx.TransportError):
        super().__init__(str(error))
        self.error = error


class _Pool:
    """Kept-alive connections for one (scheme, checked IP, port, name), at most ``limit``
    at once; taking and returning one is constant work."""

    def __init__(self, limit: int):
        self.room = asyncio.Semaphore(limit)
        self.idle: list[_Connection] = []
        self.retired = False  # evicted: its connections close as their sends end

    def take_idle(self) -> _Connection | None:
        while self.idle:
            connection = self.idle.pop()
            if connection.fresh():
                return connection
            connection.close()
        return None

    def give_back(self, connection: _Connection, reusable: bool) -> None:
        if reusable and not self.retired:
            self.idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()


def _head(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path or b"/"
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if name.lower() not in (b"content-length", b"transfer-encoding", b"connection"):
            lines.append(name + b": " + value)
    lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


class PinnedTransport(httpx.AsyncBaseTransport):
    """Checks every request's host at send time and connects to the checked address,
    keeping the name for the ``Host`` header and TLS (SNI and certificate check).

    Connections are kept alive in pools per (scheme, checked IP, port, name), at most
    ``per_target`` each; at most ``max_pools`` pools are kept (the least recently used is
    closed). A reply is read whole (bounded) and never followed.
    """

    def __init__(self, allow: list[str], per_target: int = 100, max_pools: int = 64,
                 verify: ssl.SSLContext | bool = True):
        self.allow = allow
        self.per_target, self.max_pools = per_target, max_pools
        # One TLS context for every connection (building one loads the CA bundle).
        self._tls = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        self._pools: OrderedDict[tuple, _Pool] = OrderedDict()

    def _pool(self, key: tuple) -> _Pool:
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(self.per_target)
            while len(self._pools) > self.max_pools:
                _, old = self._pools.popitem(last=False)
                old.retired = True
                old.close()
        self._pools.move_to_end(key)
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ip = await resolve_checked(request.url, self.allow)
        host = request.url.host
        name = _normal(host)
        port = _port(request.url)
        tls = self._tls if request.url.scheme == "https" else None
        request.headers.setdefault("Host", host)
        body = await request.aread()
        head = _head(request, body)
        timeouts = request.extensions.get("timeout") or {}
        pool = self._pool((request.url.scheme, str(ip), port, name))
        async with pool.room:
            connection = pool.take_idle()
            reused = connection is not None
            while True:
                if connection is None:
                    connection = await _Connection.open(str(ip), port, name, tls,
                                                        timeouts.get("connect") or 10.0)
                try:
                    status, reply, keep = await connection.exchange(head, body, timeouts)
                except _Stale as stale:
                    connection.close()
                    if not reused:
                        raise stale.error from None
                    connection, reused = None, False
                    continue
                except BaseException:
                    connection.close()
                    raise
                pool.give_back(connection, keep)
                break
        return httpx.Response(status, headers=reply.headers, content=bytes(reply.body),
                              request=request, extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            pool.retired = True
            pool.close()


def public_url(url: str) -> str:
    """The URL with its credentials, path and query hidden: for Slack-style hooks the
    path is the secret."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "***"
    host = parsed.host if ":" not in parsed.host else f"[{parsed.host}]"
    port = f":{parsed.port}" if parsed.port else ""
    hidden = parsed.raw_path not in (b"", b"/") or bool(parsed.query)
    return f"{parsed.scheme}://{host}{port}/" + ("***" if hidden else "")
