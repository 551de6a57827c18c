"""Stream settings: what a stream promises its users, validated once, shared by every layer."""

from __future__ import annotations

import math
from fractions import Fraction
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tidemark import limits

__all__ = ["StreamConfig", "DecaySpec", "parse_duration", "STREAM_NAME_PATTERN"]

STREAM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# A decimal number of seconds, exponent allowed ("90", "0.5", ".5", "1e-3", "1E2"), with an
# optional unit.
_DURATION = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(value: Any, name: str = "duration") -> float:
    """Seconds from a number or a string such as ``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``.

    >>> parse_duration("7d"), parse_duration(90), parse_duration("1.5h"), parse_duration("1e-3")
    (604800.0, 90.0, 5400.0, 0.001)
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number of seconds or a duration like '30m'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(
                f"{name} {value[:40]!r} is not a duration: use seconds (e.g. '90', '0.5', "
                "'1e-3') or a number with a unit ms, s, m, h, d or w (e.g. '45s', '30m', '12h', '7d')"
            )
        unit = m.group(2) or "s"
        # Seconds as written are one float; a unit multiplies once (one rounding).
        seconds = float(m.group(1)) if unit == "s" else float(m.group(1)) * _UNITS[unit]
    else:
        raise ValueError(f"{name} must be a number of seconds or a duration like '30m'")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be positive and finite")
    return seconds


class DecaySpec(BaseModel):
    """A decay function declared up front for relative-error decayed sums."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["none", "sliding", "exponential", "polynomial", "finite-exponential"]
    alpha: float | None = Field(default=None, gt=0)
    half_life: float | None = None
    window: float | None = None
    threshold: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("half_life", "window", mode="before")
    @classmethod
    def _durations(cls, v: Any, info) -> float | None:
        return None if v is None else parse_duration(v, info.field_name)

    @model_validator(mode="after")
    def _needs_its_parameter(self) -> "DecaySpec":
        needed = {"polynomial": "alpha", "exponential": "half_life", "sliding": "window",
                  "finite-exponential": "half_life"}.get(self.kind)
        if needed and getattr(self, needed) is None:
            raise ValueError(f"decay kind {self.kind!r} needs {needed!r}")
        if self.kind == "finite-exponential" and self.threshold is None:
            raise ValueError("decay kind 'finite-exponential' needs 'threshold' in (0, 1)")
        return self


class StreamConfig(BaseModel):
    """Settings of one stream (contract §4). Durations are stored in seconds."""

    model_config = ConfigDict(extra="forbid")

    max_window: float = Field(description="longest window a query may ask, seconds or '7d'")
    epsilon: Annotated[float, Field(gt=0, lt=1)] = 0.05
    delta: Annotated[float, Field(gt=0, lt=1)] = 0.05
    value_min: float | None = None
    value_max: float | None = None
    value_accuracy: Annotated[float, Field(ge=1e-4, le=0.5)] = Field(
        default=0.01,
        description="relative value error α of quantiles (logarithmic value buckets); "
        "value_min/value_max are not needed for them",
    )
    decays: list[DecaySpec] = Field(default_factory=list)
    shards: int = Field(
        default=1, ge=1, le=limits.MAX_SHARDS,
        description="summaries the stream's events are spread over (more for streams whose "
        "rate one core cannot take); answers merge them",
    )
    resolution: float = Field(
        default=1.0,
        description="time resolution in seconds: event times are kept to this grain "
        "(bounds account for the grain at window edges)",
    )

    @field_validator("max_window", "resolution", mode="before")
    @classmethod
    def _duration(cls, v: Any, info) -> float:
        return parse_duration(v, info.field_name)

    @field_validator("value_min", "value_max")
    @classmethod
    def _finite(cls, v: float | None, info) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError(f"{info.field_name} must be finite")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "StreamConfig":
        if (self.value_min is None) != (self.value_max is None):
            raise ValueError("value_min and value_max must be given together")
        if self.value_min is not None and not self.value_min < self.value_max:
            raise ValueError("value_min must be less than value_max")
        if self.value_min is not None and not math.isfinite(self.value_max - self.value_min):
            raise ValueError("value_max - value_min must be a finite number (the range is too wide)")
        if self.max_window > limits.TIME_HORIZON:
            raise ValueError(f"max_window must be at most {limits.TIME_HORIZON:g} s "
                             "(event times end at 9999-12-31)")
        if self.resolution < limits.FINEST_RESOLUTION:
            raise ValueError(
                f"resolution {self.resolution:g} s is finer than event times can be ticked "
                f"exactly up to 9999-12-31: the finest grain a stream can take is "
                f"{limits.FINEST_RESOLUTION:.6g} s (2^-23 s; float64 Unix times today are "
                "already 2.4e-07 s apart)")
        if self.resolution > self.max_window:
            raise ValueError("resolution must not exceed max_window")
        if self.window_ticks > limits.MAX_WINDOW_TICKS:
            raise ValueError("max_window / resolution is too large (2^40 ticks or more); "
                             f"at this resolution max_window can be at most "
                             f"{float(limits.MAX_WINDOW_TICKS * Fraction(self.resolution)):g} s")
        return self

    @property
    def window_ticks(self) -> int:
        """The longest window in ticks (the sketches' ``W``), in exact arithmetic: the
        window rule of ``tidemark/ticks.py`` is exact, so a float quotient rounded down to a
        whole number would make the longest window one tick short."""
        return math.ceil(Fraction(self.max_window) / Fraction(self.resolution))

    @property
    def has_values(self) -> bool:
        return self.value_min is not None

    def public(self) -> dict:
        return self.model_dump()
