"""Generated secrets kept in the run directory: the first-start API key, the key that
encrypts webhook secrets, the embedded Redis password.

Each lives in its own file, created with mode 0600 (never wider), read back on later
starts so that restarts keep working with what was printed once.

Tested by: tests/app/test_security.py (private_file, ensure_api_keys).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable

from tidemark.settings import ApiKey, Settings

__all__ = ["private_file", "ensure_api_keys", "API_KEY_FILE", "SECRET_KEY_FILE"]

API_KEY_FILE = "api-key"
SECRET_KEY_FILE = "secret.key"


def private_file(path: str | os.PathLike, generate: Callable[[], str]) -> str:
    """The content of ``path``; created from ``generate()`` with mode 0600 when absent."""
    path = Path(path)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    value = generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its value
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def ensure_api_keys(settings: Settings) -> tuple[list[ApiKey], str | None]:
    """The configured keys; with none, the run directory's admin key (created on first
    start). Returns the keys and the generated key's value (None when configured)."""
    if settings.api_keys:
        return settings.api_keys, None
    key = private_file(settings.run_path / API_KEY_FILE, lambda: secrets.token_urlsafe(32))
    return [ApiKey(key=key, scopes=["admin"])], key


def secret_key(settings: Settings) -> bytes:
    """The Fernet key that encrypts webhook secrets at rest (not kept in Redis)."""
    from cryptography.fernet import Fernet

    path = settings.secret_key_file or settings.run_path / SECRET_KEY_FILE
    return private_file(path, lambda: Fernet.generate_key().decode()).encode()
