"""Stable 64-bit hashing of item keys, identical in every process and machine.

Keys are hashed once, vectorised, where events are decoded (the worker); sketches
then take ``uint64`` arrays. ``pandas.util.hash_array`` is SipHash with a fixed key,
so the same key string maps to the same id on every worker and every run, which
is what makes sketches built on different machines mergeable.

Tested by: tests/sketches/test_key_dictionary.py (hash_keys).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["hash_keys", "splitmix64"]

_HASH_KEY = "tidemark-keys-01"  # 16 bytes; changing it breaks every stored sketch


def hash_keys(keys, hash_key: str = _HASH_KEY) -> np.ndarray:
    """Hash a sequence of strings to ``uint64`` ids (vectorised, stable across runs).

    ``hash_key`` (16 characters) keys the SipHash: a deployment passes one derived from
    its secret so that nobody can craft colliding keys (``tidemark.hash_secret``)."""
    arr = np.asarray(keys, dtype=object)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(arr, hash_key=hash_key, categorize=False).astype(np.uint64)


def splitmix64(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """A fast, well-mixed 64-bit hash of ``uint64`` ids; ``seed`` gives independent families."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
