"""The deployment's hash secret: every key hash and sketch seed is derived from it.

With a public seed anyone who reads the source can search for keys that collide with a
victim key in every Count-Min row and inflate its frequency at will. The secret is
generated at first start and kept beside the worker's checkpoint (never in Redis, never in
the source); sketch blobs carry only its fingerprint, so a summary built under another
secret is refused instead of answering with the wrong hashes (as DataSketches refuses a
mismatched seed hash). Every stream of one deployment shares it, so inner products
between streams keep working.

Where it comes from, first match wins: ``TIDEMARK_HASH_SECRET`` (hex, for clusters whose
API machines cannot read the checkpoint), else the file ``hash-secret`` under the
checkpoint URI (any ``pyarrow.fs`` URI), created there when absent.

Tested by: tests/app/test_api_workers.py (HashSecret, load_or_create),
tests/tidemark/test_summary_columns.py.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

__all__ = ["HashSecret", "load_or_create", "SECRET_FILE"]

SECRET_FILE = "hash-secret"
_MIN_BYTES = 16


def _derive(secret: bytes, purpose: str, n: int) -> bytes:
    return hmac.new(secret, purpose.encode(), hashlib.sha256).digest()[:n]


@dataclass(frozen=True)
class HashSecret:
    """Seeds derived from one secret.

    >>> s = HashSecret(bytes(range(32)))
    >>> len(s.key_hash_key), 0 <= s.seed < 2**62, len(s.fingerprint)
    (16, True, 16)
    """

    secret: bytes

    def __post_init__(self):
        if len(self.secret) < _MIN_BYTES:
            raise ValueError(f"the hash secret must have at least {_MIN_BYTES} bytes")

    @property
    def key_hash_key(self) -> str:
        """SipHash key for item keys (16 characters, as pandas' ``hash_array`` takes)."""
        return _derive(self.secret, "key-hash", 8).hex()

    @property
    def seed(self) -> int:
        """Seed of the sketches' own hash families."""
        return int.from_bytes(_derive(self.secret, "sketch-seed", 8), "little") >> 2

    @property
    def fingerprint(self) -> str:
        """What blobs store instead of the secret: equal secrets, equal fingerprints."""
        return _derive(self.secret, "fingerprint", 8).hex()

    @classmethod
    def from_hex(cls, text: str) -> "HashSecret":
        try:
            return cls(bytes.fromhex(text.strip()))
        except ValueError as e:
            raise ValueError(f"TIDEMARK_HASH_SECRET is not a hex string of >= 16 bytes: {e}") from None

    def __repr__(self) -> str:  # never print the secret itself
        return f"HashSecret(fingerprint={self.fingerprint})"


def load_or_create(checkpoint_uri: str, from_env: str | None = None) -> HashSecret:
    """The deployment's secret: from ``from_env`` (hex) or the checkpoint, created there
    on first start (write to a temporary name, then rename, then read back what won)."""
    if from_env:
        return HashSecret.from_hex(from_env)
    import pyarrow.fs as pafs

    uri = checkpoint_uri
    if "://" not in uri:
        os.makedirs(uri, exist_ok=True)
        uri = os.path.abspath(uri)
    fs, root = pafs.FileSystem.from_uri(uri)
    fs.create_dir(root, recursive=True)
    path = f"{root}/{SECRET_FILE}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        tmp = f"{path}.{secrets.token_hex(4)}.tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(secrets.token_hex(32).encode())
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            fs.move(tmp, path)
        else:
            fs.delete_file(tmp)
        if "://" not in checkpoint_uri:
            os.chmod(path, 0o600)
    with fs.open_input_stream(path) as f:
        return HashSecret.from_hex(f.read().decode())
