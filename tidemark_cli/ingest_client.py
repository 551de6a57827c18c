"""``tidemark ingest``: send NDJSON or CSV files to a stream, with a progress bar.

Batches travel as Arrow IPC (``application/vnd.apache.arrow.stream``) whenever Arrow reads
them into the contract's columns; a batch it cannot (a string ``ts``, an unknown field, a
line that is not JSON) goes as NDJSON, so that the API names each bad event.

Every request carries its own ``Idempotency-Key``, so retrying it is always safe: on 429
(the worker is behind) and 503 (storage unavailable) it waits as long as ``Retry-After``
says, on a dropped connection with a growing backoff, for up to ``retry_for`` seconds.

Tested by: tests/tidemark_cli/test_main.py (test_ingest_sends_ndjson_and_csv_and_reports_counts,
test_ingest_retries_a_dropped_connection_and_503_under_one_idempotency_key),
tests/test_operations.py (post_batch under kill -9).
"""

from __future__ import annotations

import csv
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from tidemark.errors import CliError
from tidemark.events import ARROW_STREAM

__all__ = ["send_files", "batches", "post_batch"]

NDJSON = "application/x-ndjson"
RETRY_STATUSES = (429, 502, 503, 504)
COLUMNS = ("ts", "key", "value", "weight")


# -- reading -------------------------------------------------------------------------------
def _line_batches(f, lines: int, block: int = 1 << 22) -> Iterator[bytes]:
    """Whole lines of a binary file, ``lines`` at a time (newlines found by NumPy)."""
    carry = b""
    while True:
        data = f.read(block)
        if not data:
            break
        buf = carry + data
        ends = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)[lines - 1::lines]
        start = 0
        for end in ends:
            yield buf[start:end + 1]
            start = int(end) + 1
        carry = buf[start:]
    if carry.strip():
        yield carry


def _arrow_body(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _ndjson_as_arrow(data: bytes) -> bytes | None:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("ts", pa.float64()), ("key", pa.string()), ("value", pa.float64()),
                        ("weight", pa.float64())])
    try:
        table = pj.read_json(
            pa.py_buffer(data), read_options=pj.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"))
    except pa.ArrowException:
        return None
    return _arrow_body(table) if table.num_rows else None


def _csv_as_arrow(table) -> bytes | None:
    """A batch of CSV rows (all read as strings) as Arrow with numeric columns, or None
    when a column is unknown or a number does not parse."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    if "ts" not in names or not set(names) <= set(COLUMNS):
        return None
    try:
        columns = [table.column(n) if n == "key" else pc.cast(table.column(n), pa.float64())
                   for n in names]
    except pa.ArrowException:
        return None
    return _arrow_body(pa.table(columns, names=names))


def _csv_as_ndjson(table) -> bytes:
    rows = ({k: v for k, v in row.items() if v is not None} for row in table.to_pylist())
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def batches(path: Path, size: int) -> Iterator[tuple[str, bytes, int]]:
    """``(content type, body, position in the file)`` for each batch of ``size`` events."""
    with path.open("rb") as f:
        if path.suffix.lower() != ".csv":
            for data in _line_batches(f, size):
                if data.strip():
                    arrow = _ndjson_as_arrow(data)
                    yield (ARROW_STREAM, arrow, f.tell()) if arrow else (NDJSON, data, f.tell())
            return
        yield from _csv_batches(f, size)


def _csv_batches(f, size: int) -> Iterator[tuple[str, bytes, int]]:
    import pyarrow as pa
    import pyarrow.csv as pc_csv

    header = f.readline().decode("utf-8")
    names = next(csv.reader([header]), [])
    f.seek(0)
    if not names:
        return
    reader = pc_csv.open_csv(
        f, read_options=pc_csv.ReadOptions(block_size=1 << 22),
        parse_options=pc_csv.ParseOptions(newlines_in_values=True),
        convert_options=pc_csv.ConvertOptions(
            column_types={n: pa.string() for n in names}, strings_can_be_null=True,
            quoted_strings_can_be_null=True, null_values=[""]))
    pending, rows = [], 0
    for record_batch in reader:
        pending.append(record_batch)
        rows += record_batch.num_rows
        while rows >= size:
            table = pa.Table.from_batches(pending)
            yield _csv_body(table.slice(0, size), f.tell())
            rest = table.slice(size)
            pending, rows = rest.to_batches(), rest.num_rows
    if rows:
        yield _csv_body(pa.Table.from_batches(pending), f.tell())


def _csv_body(table, position: int) -> tuple[str, bytes, int]:
    arrow = _csv_as_arrow(table)
    return (ARROW_STREAM, arrow, position) if arrow else (NDJSON, _csv_as_ndjson(table), position)


# -- sending -------------------------------------------------------------------------------
def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return max(0.0, float(resp.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None


def _detail(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("detail", resp.text))[:300]
    except ValueError:
        return resp.text[:300]


def post_batch(client: httpx.Client, stream: str, body: bytes, content_type: str,
               retry_for: float = 300.0, sleep=time.sleep) -> dict:
    """POST one batch and return the API's receipt, retrying what is safe to retry under
    one ``Idempotency-Key`` (the first answer comes back, nothing is stored twice)."""
    headers = {"content-type": content_type, "Idempotency-Key": str(uuid.uuid4())}
    give_up_at = time.monotonic() + retry_for
    attempt = 0
    while True:
        backoff = min(30.0, 0.5 * 2 ** min(attempt, 10)) * random.uniform(0.5, 1.0)
        try:
            resp = client.post(f"/v1/streams/{stream}/events", content=body, headers=headers)
        except httpx.TransportError as e:  # refused, dropped or timed out: was it stored? the key knows
            why, wait = f"cannot reach the API at {client.base_url} ({type(e).__name__})", backoff
        else:
            if resp.status_code == 202:
                return resp.json()
            if resp.status_code not in RETRY_STATUSES:
                raise CliError(f"{resp.status_code} from the API: {_detail(resp)}")
            why = f"the API kept answering {resp.status_code}: {_detail(resp)}"
            after = _retry_after(resp)
            wait = backoff if after is None else min(after, 60.0)
        if time.monotonic() + wait > give_up_at:
            raise CliError(f"{why}; gave up after {retry_for:g} s (--retry-for)")
        sleep(wait)
        attempt += 1


def send_files(api: str, stream: str, files: list[str], batch: int = 5000,
               key: str | None = None, retry_for: float = 300.0) -> tuple[int, int]:
    paths = [Path(f) for f in files]
    for p in paths:
        if not p.is_file():
            raise CliError(f"no such file: {p}")
    if not key:
        raise CliError("ingest needs an API key with the 'ingest' scope: --key KEY or TIDEMARK_KEY")
    if batch < 1:
        raise CliError("--batch must be at least 1")
    total_bytes = sum(p.stat().st_size for p in paths)
    accepted, rejected, offset, done = 0, [], 0, 0
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TransferSpeedColumn(),
               TimeRemainingColumn()]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api, timeout=60, headers=headers) as client, \
            Progress(*columns, transient=False, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task(f"ingest → {stream}", total=total_bytes)
        for path in paths:
            for content_type, body, position in batches(path, batch):
                receipt = post_batch(client, stream, body, content_type, retry_for)
                accepted += receipt["accepted"]
                rejected += [{"index": r["index"] + offset, "error": r["error"]}
                             for r in receipt["rejected"]]
                offset += receipt["accepted"] + len(receipt["rejected"])
                progress.update(task, completed=done + position)
            done += path.stat().st_size
            progress.update(task, completed=done)
    print(f"accepted {accepted}, rejected {len(rejected)}")
    for r in rejected[:10]:
        print(f"  event {r['index']}: {r['error']}")
    if len(rejected) > 10:
        print(f"  … and {len(rejected) - 10} more")
    return accepted, len(rejected)
