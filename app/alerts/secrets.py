"""Webhook secrets encrypted at rest (Fernet: AES-128-CBC with HMAC-SHA256).

The key is kept in a file beside the API keys (``TIDEMARK_SECRET_KEY_FILE``), never in
Redis, so a copy of Redis or of its append-only file does not give away the secrets.

Tested by: tests/app/alerts/test_engine.py and tests/app/test_alert_rule_lookup.py
(SecretBox under the alert store).
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["SecretBox", "SEALED"]

SEALED = "fernet:"


class SecretBox:
    def __init__(self, key: bytes):
        self._fernet = Fernet(key)

    def seal(self, secret: str) -> str:
        return SEALED + self._fernet.encrypt(secret.encode()).decode()

    def open(self, stored: str) -> str | None:
        """The secret; None when it was sealed under another key. A secret stored before
        encryption existed (no prefix) is returned as it is."""
        if not stored.startswith(SEALED):
            return stored
        try:
            return self._fernet.decrypt(stored[len(SEALED):].encode()).decode()
        except InvalidToken:
            return None
