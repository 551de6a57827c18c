"""Times and durations as the Prometheus HTTP API takes them (``web/api/v1/api.go``:
``parseTime``, ``parseDuration``; ``common/model``'s ``ParseDuration``).

A time is Unix seconds (fractions allowed) or RFC 3339; a duration is seconds (fractions
allowed) or units in descending order, each once: ``1y2w3d4h5m6s7ms`` (``5m``, ``1h30m``).
Both are kept as whole milliseconds, Prometheus' own grain: a sample's time is what the
answer was computed at, to the millisecond the client reads back.

Tested by: tests/app/test_promql_regex_times.py (parse_time, parse_duration).
"""

from __future__ import annotations

import datetime as dt
import math
import re

__all__ = ["BadParameter", "parse_time", "parse_duration", "seconds"]

_UNITS_MS = {"y": 365 * 86_400_000, "w": 7 * 86_400_000, "d": 86_400_000, "h": 3_600_000,
             "m": 60_000, "s": 1_000, "ms": 1}
_DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?\Z")
_MAX_MS = 2**63 - 1


class BadParameter(ValueError):
    """A time or duration that does not parse (the caller's ``bad_data``)."""


def _float(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def _seconds(raw: str, name: str, what: str) -> float | None:
    """``raw`` as a number of seconds (None if it is not a number), refused when it is not
    finite or its milliseconds are out of range."""
    x = _float(raw)
    if x is not None and (not math.isfinite(x) or abs(x) * 1000 >= _MAX_MS):
        raise BadParameter(f'invalid parameter "{name}": cannot parse "{raw}" to a valid {what}')
    return x


def parse_time(raw: str, name: str = "time") -> int:
    """Milliseconds since the epoch from Unix seconds or RFC 3339 (rounded to the ms)."""
    raw = raw.strip()
    x = _seconds(raw, name, "timestamp")
    if x is not None:
        whole = math.floor(x)
        return whole * 1000 + round((x - whole) * 1000)
    try:
        t = dt.datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise BadParameter(f'invalid parameter "{name}": cannot parse "{raw}" to a valid timestamp') from None
    if t.tzinfo is None:
        raise BadParameter(f'invalid parameter "{name}": "{raw}" has no time zone (RFC 3339 needs one)')
    delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + round(delta.microseconds / 1000)


def parse_duration(raw: str, name: str = "step") -> int:
    """Milliseconds from seconds (``"15"``, ``"0.5"``) or a Prometheus duration (``"1h30m"``)."""
    raw = raw.strip()
    x = _seconds(raw, name, "duration")
    if x is not None:
        return round(x * 1000)
    m = _DURATION.match(raw)
    if not raw or not m:
        raise BadParameter(f'invalid parameter "{name}": cannot parse "{raw}" to a valid duration '
                           "(seconds, or units in order like 5m, 1h30m, 1d)")
    units = ("y", "w", "d", "h", "m", "s", "ms")
    total = sum(int(n) * _UNITS_MS[u] for n, u in zip(m.groups(), units) if n)
    if total >= _MAX_MS:
        raise BadParameter(f'invalid parameter "{name}": duration "{raw}" is too long')
    return total


def seconds(ms: int) -> float:
    """The Unix seconds of a millisecond time, as Prometheus writes a sample's time."""
    return ms / 1000
