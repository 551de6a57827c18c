"""``GET /healthz`` and ``GET /readyz`` answered before the app's middleware stack and
router (``app.main.TidemarkAPI``), with the one check the full way makes of them: the
``Host`` is one the API answers for (by name; a wildcard pattern, or anything else, goes
the full way untouched, as in ``app.answer_cache.FastAnswers``). Both need no key
(contract §9).

Why: the stack (Host check, sign-in, gzip, exception and router middleware, FastAPI's
matching of every route, a hop to the thread pool for a plain ``def`` route) cost about
0.3 ms of CPU per ``/healthz``, so a process answered under 3,000 a second of a request
that does nothing (bench/bench_query_latency.py, flat out). ``/healthz`` is one prepared
reply. ``/readyz`` reads Redis (``app.readiness``): it runs on a thread of its own, so a
thread pool busy with ingest or queries never holds up a probe, and probes arriving while
one read is under way share it (each then says what Redis held at most one read ago).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from starlette.types import Scope, Send

from app.answer_cache import AnsweredHosts, first_headers
from app.readiness import readiness

__all__ = ["FastReads", "HEALTHY"]

HEALTHY = b'{"status":"ok"}'  # the bytes FastAPI renders for the route's {"status": "ok"}
_JSON = (b"content-type", b"application/json")


class FastReads:
    def __init__(self, state, allowed_hosts: list[str]) -> None:
        self.state = state  # the app's state: store, settings
        self.hosts = AnsweredHosts(allowed_hosts)
        self._probe: ThreadPoolExecutor | None = None
        self._reading: asyncio.Future | None = None

    async def answer(self, scope: Scope, send: Send) -> bool:
        """True when this answered the request; False: go the full way."""
        path = scope["path"]
        if path not in ("/healthz", "/readyz") or scope["method"] != "GET" or scope.get("root_path"):
            return False
        host = first_headers(scope, b"host").get(b"host", "")
        if host not in self.hosts:
            return False  # the full way's TrustedHostMiddleware refuses it, in its words
        if path == "/healthz":
            await _send(send, 200, HEALTHY)
            return True
        body = await self._readiness()
        await _send(send, 200 if body["ready"] else 503, _render(body))
        return True

    async def _readiness(self) -> dict:
        """One read of readiness at a time, on the probe's own thread; callers arriving
        meanwhile wait for that read."""
        if self._reading is None or self._reading.done():
            if self._probe is None:
                self._probe = ThreadPoolExecutor(1, thread_name_prefix="tidemark-readyz")
            settings = self.state.settings
            self._reading = asyncio.get_running_loop().run_in_executor(
                self._probe, readiness, self.state.store, settings.worker_stale_after, settings.ready_max_wait)
        return await asyncio.shield(self._reading)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.shutdown(wait=False)


def _render(body: dict) -> bytes:
    """The bytes Starlette's JSONResponse renders (the full way's ``/readyz``)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


async def _send(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), _JSON]})
    await send({"type": "http.response.body", "body": body})
