"""How large a stream's summary can grow, checked when the stream is declared.

Every part is built empty (the sketches refuse parameters they cannot take), then asked
its worst-case size through its spec in the registry of query families
(``tidemark.families``; ``worst_bytes``: the sketch's own ``max_nbytes()`` where its
parameters bound it, else the spec's ``data_bound``, from what its paper lets it keep on
an orderly stream; each family's module says which). A stream whose
summary could outgrow ``limit`` bytes per shard is refused with the finest ``epsilon``
it could take instead, so no declaration can make the worker run out of memory later.
"""

from __future__ import annotations

import math

from sketches.base import SketchError
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig

__all__ = ["worst_case_bytes", "check", "CapacityError"]

_PROBE = HashSecret(b"capacity-probe-secret")
DEFAULT_LIMIT = 256 * 1024 * 1024


class CapacityError(ValueError):
    """The settings would need an unreasonably large summary."""


def worst_case_bytes(config: StreamConfig) -> int:
    """Upper estimate of one shard summary's bytes under these settings."""
    from tidemark.families import spec_of
    from tidemark.summary import StreamSummary

    try:
        summary = StreamSummary.create(config, _PROBE).build_all()
    except SketchError as e:
        raise CapacityError(f"these settings cannot be summarised: {e}") from None
    return int(sum(spec_of(n).worst_bytes(p, config) for n, p in summary.parts.items()))


def check(config: StreamConfig, limit: int = DEFAULT_LIMIT) -> int:
    """The worst-case bytes, or :class:`CapacityError` naming the finest epsilon that fits."""
    try:
        need = worst_case_bytes(config)
        why = f"could need {need / 2**20:,.0f} MB per shard"
    except CapacityError as e:
        need, why = math.inf, str(e)
    if need <= limit:
        return need
    lo, hi = config.epsilon, 0.5  # bisect on epsilon: sizes fall as it grows
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        try:
            fits = worst_case_bytes(config.model_copy(update={"epsilon": mid})) <= limit
        except CapacityError:
            fits = False
        lo, hi = (lo, mid) if fits else (mid, hi)
    raise CapacityError(
        f"epsilon {config.epsilon:g} with delta {config.delta:g} and max_window "
        f"{config.max_window:g}s: {why}, above the limit of {limit / 2**20:,.0f} MB per shard "
        f"(TIDEMARK_MAX_SUMMARY_BYTES); the finest epsilon these settings can take is "
        f"{math.ceil(hi * 1e4) / 1e4:g}")
