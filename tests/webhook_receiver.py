"""A real HTTP server on 127.0.0.1 that records the webhooks the alert engine sends, for the
alert tests (tests/app/test_alerts.py end to end, tests/app/alerts/test_webhooks.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tidemark.redis_server import free_port


class Receiver:
    """Records each POST (``raw``, ``body``, ``headers``, ``at``: its monotonic time) in
    ``received``. ``mode`` says how it answers: ``ok`` (500 to the first ``fail_first``
    POSTs, then 200), ``hang`` (never: the sender must time out) or ``redirect`` (302 to
    ``location``). On ``port``, else a free one."""

    def __init__(self, mode: str = "ok", location: str = "", fail_first: int = 0,
                 port: int | None = None):
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"raw": raw, "body": json.loads(raw),
                                          "headers": dict(self.headers), "at": time.monotonic()})
                if mode == "hang":
                    time.sleep(30)
                    return
                if mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", location)
                else:
                    self.send_response(500 if len(receiver.received) <= fail_first else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port or free_port()), Handler)
        self.server.daemon_threads = True  # a hanging answer must not hold up close()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def wait(self, n: int, timeout: float = 30.0) -> list[dict]:
        """The POSTs received once there are ``n`` of them (an assertion error after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.received) < n:
            assert time.monotonic() < deadline, f"{len(self.received)} of {n} webhooks arrived"
            time.sleep(0.02)
        return self.received

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
