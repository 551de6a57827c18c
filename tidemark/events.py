"""Event validation: turn a request body into columns of good events plus a list of rejects.

A bad event never costs the good ones: each is checked on its own and reported with its
index and reason (contract §3).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from tidemark import limits
from tidemark.limits import MAX_KEY_BYTES, MAX_WEIGHT
from tidemark.streams import StreamConfig

__all__ = ["EventBatch", "Reject", "validate_events", "validate_arrow", "parse_body", "BodyError",
           "MAX_KEY_BYTES", "ARROW_STREAM"]

# The limits live in tidemark/limits.py, which also sizes the sketches for them.
MAX_TS = limits.TIME_HORIZON  # 9999-12-31T23:59:59Z


class BodyError(ValueError):
    """The request body as a whole cannot be read (not one event's fault)."""


@dataclass
class Reject:
    index: int
    error: str


@dataclass
class EventBatch:
    """Good events in columnar form; ``key``/``value`` use None/NaN where absent."""

    ts: np.ndarray
    key: list  # or, from an Arrow body, a pyarrow string array (``validate_arrow``)
    value: np.ndarray
    weight: np.ndarray
    rejects: list[Reject] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)


def _int_or_float(text: str):
    """JSON integers: exact when they fit a float's range of exact integers, else a float
    (``inf`` for a 5,000-digit one) that validation then rejects for this event alone."""
    return int(text) if len(text) <= 18 else float(text)


def _loads(text: str):
    return json.loads(text, parse_int=_int_or_float)


def parse_body(body: bytes, content_type: str | None) -> list:
    """A JSON array, or NDJSON (one object per line). Returns the raw items.

    An item that cannot be read (bad JSON on its line, nesting too deep for the parser)
    becomes an unparsable marker, rejected by validation with its index like any bad event.
    """
    text = body.decode("utf-8", errors="strict") if body else ""
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] == "[":
        try:
            items = _loads(text)
        except RecursionError:
            return _array_items(text)
        except json.JSONDecodeError as e:
            raise BodyError(f"body is not valid JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(items, list):
            raise BodyError("body must be a JSON array of events or NDJSON")
        return items
    items = []
    for lineno, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            items.append(_loads(line))
        except json.JSONDecodeError as e:
            items.append(_Unparsable(f"line {lineno + 1} is not valid JSON: {e.msg}"))
        except RecursionError:
            items.append(_Unparsable(f"line {lineno + 1} is nested too deeply"))
    return items


_DECODER = json.JSONDecoder(parse_int=_int_or_float)
_WS = " \t\r\n"


def _skip_value(text: str, i: int) -> int:
    """The index just past the JSON value starting at ``i`` (brackets and strings only
    matter). Taken only for a value too deep for the parser, so a char loop is fine."""
    depth, in_string, escaped = 0, False, False
    for j in range(i, len(text)):
        c = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return j + 1
            if depth < 0:
                return j
        elif depth == 0 and c in ",":
            return j
    raise BodyError("body is not valid JSON: unterminated value")


def _array_items(text: str) -> list:
    """A JSON array read element by element: a too-deep element costs only itself."""
    i = text.index("[") + 1
    items: list = []
    while True:
        while i < len(text) and text[i] in _WS:
            i += 1
        if i < len(text) and text[i] == "]" and not items:
            break
        try:
            item, i = _DECODER.raw_decode(text, i)
        except RecursionError:
            item, i = _Unparsable("event is nested too deeply"), _skip_value(text, i)
        except json.JSONDecodeError as e:
            raise BodyError(f"body is not valid JSON: {e.msg} at line {e.lineno}") from None
        items.append(item)
        while i < len(text) and text[i] in _WS:
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        if i < len(text) and text[i] == "]":
            break
        raise BodyError("body is not valid JSON: expected ',' or ']' between events")
    if text[i + 1:].strip():
        raise BodyError("body is not valid JSON: extra data after the array")
    return items


class _Unparsable:
    def __init__(self, reason: str):
        self.reason = reason


def _parse_ts(raw) -> float:
    if isinstance(raw, bool):
        raise ValueError("ts must be a number or an ISO-8601 string")
    if isinstance(raw, (int, float)):
        try:
            ts = float(raw)
        except OverflowError:
            raise ValueError("ts must be a Unix time between 0 and 9999-12-31") from None
    elif isinstance(raw, str):
        if len(raw) > 64:
            raise ValueError("ts string is too long for a time")
        try:
            ts = float(raw)
        except ValueError:
            try:
                dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"ts {raw[:40]!r} is not a number or an ISO-8601 time") from None
            if dt.tzinfo is None:
                raise ValueError("ts ISO-8601 string needs an offset (e.g. +00:00 or Z)")
            ts = dt.timestamp()
    else:
        raise ValueError("ts must be a number or an ISO-8601 string")
    if not math.isfinite(ts) or ts < 0 or ts > MAX_TS:
        raise ValueError("ts must be a Unix time between 0 and 9999-12-31")
    return ts


def _number(raw, name: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"{name} must be a number")
    try:
        x = float(raw)
    except ValueError:
        raise ValueError(f"{name} {str(raw)[:40]!r} is not a number") from None
    except OverflowError:  # an integer beyond any float
        raise ValueError(f"{name} must be finite") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite")
    return x


def _latest(max_future: float | None) -> float:
    """The latest acceptable ``ts``: ``max_future`` seconds past the wall clock (§3)."""
    return MAX_TS if max_future is None else min(MAX_TS, time.time() + max_future)


def _validate_one(item, config: StreamConfig, latest: float = MAX_TS,
                  max_future: float | None = None) -> tuple[float, str | None, float, float]:
    if isinstance(item, _Unparsable):
        raise ValueError(item.reason)
    if not isinstance(item, dict):
        raise ValueError("event must be a JSON object")
    unknown = set(item) - {"ts", "key", "value", "weight"}
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    if "ts" not in item or item["ts"] is None or item["ts"] == "":
        raise ValueError("missing ts")
    ts = _parse_ts(item["ts"])
    if ts > latest:
        raise ValueError(f"ts is more than {max_future:g} s ahead of the server's clock "
                         "(TIDEMARK_MAX_FUTURE)")
    key = item.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise ValueError("key must be a string")
        n = len(key.encode("utf-8"))
        if n == 0 or n > MAX_KEY_BYTES:
            raise ValueError(f"key must be 1-{MAX_KEY_BYTES} UTF-8 bytes, got {n}")
    value = math.nan
    if item.get("value") not in (None, ""):
        value = _number(item["value"], "value")
        if config.has_values and not config.value_min <= value <= config.value_max:
            raise ValueError(
                f"value {value:g} outside the stream's declared range "
                f"[{config.value_min:g}, {config.value_max:g}]"
            )
    weight = 1.0
    if item.get("weight") not in (None, ""):
        weight = _number(item["weight"], "weight")
        if weight < 0:
            raise ValueError("weight must be >= 0")
        if weight > MAX_WEIGHT:
            raise ValueError(f"weight must be <= {MAX_WEIGHT:g}")
    return ts, key, value, weight


def validate_events(items: list, config: StreamConfig, max_future: float | None = None) -> EventBatch:
    """Check each item against the contract; keep the good ones in columns. With
    ``max_future``, an event more than that many seconds ahead of the clock is rejected."""
    ts, keys, values, weights, rejects = [], [], [], [], []
    latest = _latest(max_future)
    for i, item in enumerate(items):
        try:
            t, k, v, w = _validate_one(item, config, latest, max_future)
        except ValueError as e:
            rejects.append(Reject(i, str(e)))
            continue
        ts.append(t)
        keys.append(k)
        values.append(v)
        weights.append(w)
    return EventBatch(
        np.asarray(ts, dtype=np.float64),
        keys,
        np.asarray(values, dtype=np.float64),
        np.asarray(weights, dtype=np.float64),
        rejects,
    )


def validate_ndjson_fast(body: bytes, config: StreamConfig,
                         max_future: float | None = None) -> EventBatch | None:
    """Columnar fast path for well-formed NDJSON: parsed and checked by Arrow in C++.

    Returns None whenever anything is irregular (a string ``ts``, an unknown field, a bad
    value...): the caller then takes the per-event path, which names each bad event.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not body or body.lstrip()[:1] != b"{":
        return None
    schema = pa.schema([("ts", pa.float64()), ("key", pa.string()), ("value", pa.float64()),
                        ("weight", pa.float64())])
    try:
        table = pj.read_json(
            pa.py_buffer(body),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(body) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except pa.ArrowException:  # anything irregular: the per-event path says what
        return None
    ts = table.column("ts").to_numpy(zero_copy_only=False)
    weight = table.column("weight").fill_null(1.0).to_numpy(zero_copy_only=False)
    value = table.column("value").to_numpy(zero_copy_only=False)  # nulls -> NaN
    key = table.column("key")
    ok = (np.isfinite(ts).all() and (ts >= 0).all() and (ts <= _latest(max_future)).all()
          and np.isfinite(weight).all() and (weight >= 0).all() and (weight <= MAX_WEIGHT).all())
    if ok and key.null_count < len(key):
        lengths = pc.binary_length(key.cast(pa.binary())).to_numpy(zero_copy_only=False)
        lengths = lengths[~np.isnan(lengths.astype(float))]
        ok = bool(((lengths >= 1) & (lengths <= MAX_KEY_BYTES)).all())
    # A NaN the parser let through is not an absent value: the per-event path rejects it.
    ok = ok and int(np.isnan(value).sum()) == table.column("value").null_count
    if ok and config.has_values:
        present = value[~np.isnan(value)]
        ok = bool(((present >= config.value_min) & (present <= config.value_max)).all())
    if not ok:
        return None
    return EventBatch(ts, key.to_pylist(), value, weight, [])


ARROW_STREAM = "application/vnd.apache.arrow.stream"
_ARROW_REASONS = [
    None,
    "missing ts",
    "ts must be a Unix time between 0 and 9999-12-31",
    "ts is more than {future:g} s ahead of the server's clock (TIDEMARK_MAX_FUTURE)",
    f"key must be 1-{MAX_KEY_BYTES} UTF-8 bytes",
    "value must be finite",
    "value outside the stream's declared range [{lo:g}, {hi:g}]",
    "weight must be finite",
    "weight must be >= 0",
    f"weight must be <= {MAX_WEIGHT:g}",
]


def validate_arrow(body: bytes, config: StreamConfig, max_future: float | None = None) -> EventBatch:
    """Columns of an Arrow IPC stream (``ts`` required; ``key``, ``value``, ``weight``
    optional), checked column-wise with the rules of the per-event path; a bad row is
    rejected with its index and reason, the good rows kept. The keys stay an Arrow array
    (``EventBatch.key``), which ``encode_chunk`` takes as it is: a body of good rows goes
    from columns to chunk without a Python object per event."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowException, OSError, ValueError):
        raise BodyError("body is not an Arrow IPC stream") from None
    names = table.column_names
    unknown = sorted(set(names) - {"ts", "key", "value", "weight"})
    if unknown or len(set(names)) != len(names) or "ts" not in names:
        raise BodyError("an Arrow body has a 'ts' column and optionally 'key', 'value', 'weight'"
                        + (f" (unknown: {', '.join(unknown)[:200]})" if unknown else ""))
    n = table.num_rows

    def numbers(name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in names:
            return np.full(n, np.nan), np.zeros(n, dtype=bool)
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise BodyError(f"Arrow column {name!r} must be numeric, not {col.type}")
        present = (np.ones(n, dtype=bool) if col.null_count == 0
                   else ~col.is_null().to_numpy(zero_copy_only=False))
        if col.type != pa.float64():
            col = col.cast(pa.float64(), safe=False)
        return col.to_numpy(zero_copy_only=False), present

    ts, has_ts = numbers("ts")
    value, has_value = numbers("value")
    weight, has_weight = numbers("weight")
    weight = np.where(has_weight, weight, 1.0)
    key_ok = np.ones(n, dtype=bool)
    key_col = None
    if "key" in names:
        key_col = table.column("key")
        if not (pa.types.is_string(key_col.type) or pa.types.is_large_string(key_col.type)):
            raise BodyError(f"Arrow column 'key' must be strings, not {key_col.type}")
        key_col = key_col.combine_chunks()
        try:  # Arrow strings are UTF-8 by definition; a body that breaks it is no Arrow body
            key_col.validate(full=True)
        except pa.ArrowInvalid:
            raise BodyError("Arrow column 'key' is not valid UTF-8") from None
        lengths = pc.binary_length(key_col.cast(pa.large_binary())).to_numpy(zero_copy_only=False)
        key_ok = np.isnan(lengths.astype(float)) | ((lengths >= 1) & (lengths <= MAX_KEY_BYTES))
    with np.errstate(invalid="ignore"):
        ts_ok = np.isfinite(ts) & (ts >= 0) & (ts <= MAX_TS)
        in_range = np.ones(n, dtype=bool)
        if config.has_values:
            in_range = ~has_value | ((value >= config.value_min) & (value <= config.value_max))
        # First failing rule wins, in the per-event path's order.
        rules = [~has_ts, ~ts_ok, ts > _latest(max_future), ~key_ok, has_value & ~np.isfinite(value),
                 ~in_range, ~np.isfinite(weight), weight < 0, weight > MAX_WEIGHT]
    value = np.where(has_value, value, np.nan)
    if not np.logical_or.reduce(rules).any():  # the usual body: every row good, nothing to pick
        return EventBatch(ts, key_col if key_col is not None else [None] * n, value, weight, [])
    code = np.select(rules, np.arange(1, 10), default=0)
    bad = np.flatnonzero(code)
    rejects = [Reject(int(i), _ARROW_REASONS[code[i]].format(
        future=max_future or 0.0, lo=config.value_min or 0.0, hi=config.value_max or 0.0)) for i in bad]
    good = code == 0
    keys = key_col.filter(pa.array(good)) if key_col is not None else [None] * int(good.sum())
    return EventBatch(ts[good], keys, value[good], weight[good], rejects)
