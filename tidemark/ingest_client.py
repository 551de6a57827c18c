"""``tidemark ingest``: send NDJSON or CSV files to a stream, with a progress bar."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from tidemark.errors import CliError

__all__ = ["send_files", "read_events"]


def read_events(path: Path) -> Iterator[dict | str]:
    """Events of a file: NDJSON lines are passed through as text, CSV rows as dicts."""
    with path.open(newline="", encoding="utf-8") as f:
        if path.suffix.lower() == ".csv":
            for row in csv.DictReader(f):
                yield {k: v for k, v in row.items() if v not in (None, "")}
        else:
            for line in f:
                if line.strip():
                    yield line.rstrip("\n")


def _body(events: list) -> bytes:
    lines = (e if isinstance(e, str) else json.dumps(e) for e in events)
    return ("\n".join(lines) + "\n").encode()


def send_files(api: str, stream: str, files: list[str], batch: int = 5000,
               key: str | None = None) -> tuple[int, int]:
    paths = [Path(f) for f in files]
    for p in paths:
        if not p.is_file():
            raise CliError(f"no such file: {p}")
    if not key:
        raise CliError("ingest needs an API key with the 'ingest' scope: --key KEY or TIDEMARK_KEY")
    total_bytes = sum(p.stat().st_size for p in paths)
    accepted, rejected, offset = 0, [], 0
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TransferSpeedColumn(),
               TimeRemainingColumn()]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api, timeout=60, headers=headers) as client, \
            Progress(*columns, transient=False, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task(f"ingest → {stream}", total=total_bytes)
        for path in paths:
            pending: list = []
            size = 0
            for event in read_events(path):
                pending.append(event)
                size += len(event) + 1 if isinstance(event, str) else 64
                if len(pending) >= batch:
                    a, r = _post(client, stream, pending, offset)
                    accepted, offset = accepted + a, offset + len(pending)
                    rejected += r
                    progress.advance(task, size)
                    pending, size = [], 0
            if pending:
                a, r = _post(client, stream, pending, offset)
                accepted, offset = accepted + a, offset + len(pending)
                rejected += r
            progress.update(task, completed=sum(p.stat().st_size for p in paths[: paths.index(path) + 1]))
    print(f"accepted {accepted}, rejected {len(rejected)}")
    for r in rejected[:10]:
        print(f"  event {r['index']}: {r['error']}")
    if len(rejected) > 10:
        print(f"  … and {len(rejected) - 10} more")
    return accepted, len(rejected)


def _post(client: httpx.Client, stream: str, events: list, offset: int) -> tuple[int, list]:
    for attempt in range(30):
        try:
            resp = client.post(f"/v1/streams/{stream}/events", content=_body(events),
                               headers={"content-type": "application/x-ndjson"})
        except httpx.HTTPError as e:
            raise CliError(f"cannot reach the API at {client.base_url}: {e}") from None
        if resp.status_code == 429:  # the worker is behind: wait, never drop
            time.sleep(float(resp.headers.get("Retry-After", "1")))
            continue
        if resp.status_code != 202:
            raise CliError(f"{resp.status_code} from the API: {resp.json().get('detail', resp.text)}")
        body = resp.json()
        return body["accepted"], [{"index": r["index"] + offset, "error": r["error"]} for r in body["rejected"]]
    raise CliError("the API kept answering 429 (worker behind); try again later")
