"""Where a webhook may go, decided after DNS resolution, and a transport that connects
exactly to the address that was checked.

A webhook URL is parsed with ``httpx.URL`` (the parser that sends it), its host resolved,
and every address it resolves to must be globally routable (``ipaddress``'s
``is_global``; an IPv4 address inside an IPv6 one is judged by the IPv4 one) unless the
host name, the IP or a CIDR containing it is in ``TIDEMARK_WEBHOOK_ALLOW_HOSTS``. The check
runs when a rule is created and again for every send, inside :class:`PinnedTransport`,
which then connects to the checked IP itself: a DNS answer that changes between check and
connect (DNS rebinding) cannot redirect the POST.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

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


async def resolve_checked(url: httpx.URL, allow: list[str]) -> IP:
    """The address to connect to for ``url``, checked now."""
    host = _normal(url.host)
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, _port(url), type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
    except (socket.gaierror, UnicodeError, OSError, asyncio.TimeoutError):
        raise WebhookRefused(f"webhook host {host!r} does not resolve") from None
    return _judge(host, _addresses(infos), allow)[0]


class PinnedTransport(httpx.AsyncBaseTransport):
    """Checks every request's host at send time and connects to the checked address,
    keeping the name for the ``Host`` header and TLS (SNI and certificate check)."""

    def __init__(self, allow: list[str], **transport_options):
        self.allow = allow
        # No kept-alive connections: a pooled connection to one IP must not carry a
        # request for another name served there.
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        self._inner = httpx.AsyncHTTPTransport(limits=limits, retries=0, **transport_options)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ip = await resolve_checked(request.url, self.allow)
        host = request.url.host
        request.url = request.url.copy_with(host=str(ip))
        request.headers.setdefault("Host", host)
        if request.url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": _normal(host)}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


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
