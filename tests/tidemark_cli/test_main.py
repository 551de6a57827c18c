"""The ``tidemark`` command as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.conftest import KEYS, auth
from tidemark.redis_server import free_port


def _tidemark(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tidemark_cli", *args], capture_output=True,
                          text=True, timeout=120, **kw)


def test_ingest_sends_ndjson_and_csv_and_reports_counts(api, stream_name, tmp_path):
    httpx.put(f"{api.url}/v1/streams/{stream_name}", json={"max_window": "1h"}, headers=auth("admin"))
    nd = tmp_path / "events.ndjson"
    nd.write_text("\n".join(json.dumps({"ts": 1000 + i, "key": f"k{i % 3}"}) for i in range(25))
                  + '\n{"ts": "never"}\n')
    csv = tmp_path / "events.csv"
    csv.write_text("ts,key,value,weight\n1000,a,,2\n1001,b,,\n1002,c,,-1\n")
    out = _tidemark("ingest", "--stream", stream_name, "--api", api.url, "--batch", "10",
                    "--key", KEYS["ingest"], str(nd), str(csv))
    assert out.returncode == 0, out.stderr
    assert "accepted 27, rejected 2" in out.stdout
    assert "event 25:" in out.stdout and "event 28: weight must be >= 0" in out.stdout
    status = httpx.get(f"{api.url}/v1/streams/{stream_name}", headers=auth("read")).json()["status"]
    assert status["received"] == 27 and status["rejected"] == 2


def test_streams_list_and_delete(api, stream_name):
    httpx.put(f"{api.url}/v1/streams/{stream_name}", json={"max_window": "1h"}, headers=auth("admin"))
    out = _tidemark("streams", "list", "--api", api.url, "--key", KEYS["read"])
    assert out.returncode == 0, out.stderr
    assert any(line.split()[0] == stream_name for line in out.stdout.splitlines()[1:])
    # Without a terminal to ask on, deleting needs --yes; nothing is deleted meanwhile.
    out = _tidemark("streams", "delete", stream_name, "--api", api.url, "--key", KEYS["admin"],
                    stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and out.stderr.strip() == \
        "tidemark: error: deleting a stream cannot be undone: add --yes to confirm"
    assert httpx.get(f"{api.url}/v1/streams/{stream_name}", headers=auth("read")).status_code == 200
    out = _tidemark("streams", "delete", stream_name, "--yes", "--api", api.url, "--key", KEYS["read"])
    assert out.returncode == 1 and out.stderr.strip() == \
        "tidemark: error: 403: this API key lacks the 'admin' scope"
    out = _tidemark("streams", "delete", stream_name, "--yes", "--api", api.url, "--key", KEYS["admin"])
    assert out.returncode == 0 and f"deleted stream '{stream_name}'" in out.stdout, out.stderr
    assert httpx.get(f"{api.url}/v1/streams/{stream_name}", headers=auth("read")).status_code == 404
    out = _tidemark("streams", "delete", stream_name, "--yes", "--api", api.url, "--key", KEYS["admin"])
    assert out.returncode == 1 and out.stderr.strip().startswith("tidemark: error: 404: ")


def test_errors_are_one_clear_line_and_a_nonzero_status(tmp_path):
    out = _tidemark("ingest", "--stream", "s", "--api", "http://127.0.0.1:9", str(tmp_path / "nope.ndjson"))
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [f"tidemark: error: no such file: {tmp_path / 'nope.ndjson'}"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams:\n  web: {max_window: 1x}\n")
    out = _tidemark("up", "--config", str(bad), "--port", str(free_port()))
    assert out.returncode != 0 and "stream 'web'" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.spark
def test_ingest_retries_a_dropped_connection_and_503_under_one_idempotency_key(api, stream_name, tmp_path):
    from tidemark.errors import CliError
    from tidemark.events import ARROW_STREAM
    from tidemark_cli.ingest_client import NDJSON, batches, post_batch

    httpx.put(f"{api.url}/v1/streams/{stream_name}", json={"max_window": "1h"}, headers=auth("admin"))
    nd = tmp_path / "events.ndjson"
    nd.write_text("".join(json.dumps({"ts": 1000 + i, "key": f"k{i}"}) + "\n" for i in range(7))
                  + '{"ts": "1970-01-01T00:20:00Z"}\n')
    sent = list(batches(nd, 4))
    # Arrow when Arrow reads the batch into the contract's columns, else NDJSON as it was.
    assert [t for t, _, _ in sent] == [ARROW_STREAM, NDJSON]
    seen = []
    real = httpx.Client(base_url=api.url, headers=auth("ingest"))

    def flaky(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        if len(seen) == 2:
            return httpx.Response(503, headers={"Retry-After": "0.25"}, json={"detail": "down"})
        answer = real.send(real.build_request(request.method, request.url.path,
                                              content=request.content, headers=request.headers))
        if len(seen) == 1:  # stored, then the connection drops before the answer arrives
            raise httpx.RemoteProtocolError("peer closed connection", request=request)
        return answer

    waits = []
    with httpx.Client(base_url=api.url, transport=httpx.MockTransport(flaky)) as client:
        receipts = [post_batch(client, stream_name, body, kind, sleep=waits.append)
                    for kind, body, _ in sent]
    assert [r["accepted"] for r in receipts] == [4, 4]
    assert len(seen) == 4 and seen[0] == seen[1] == seen[2] != seen[3]
    assert waits[1] == 0.25  # Retry-After honoured; the dropped connection waited a backoff
    status = httpx.get(f"{api.url}/v1/streams/{stream_name}", headers=auth("read")).json()["status"]
    assert status["received"] == 8  # the retried first batch was stored once

    def down(request):
        return httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "storage unavailable"})

    with httpx.Client(base_url=api.url, transport=httpx.MockTransport(down)) as client, \
            pytest.raises(CliError, match="the API kept answering 503: storage unavailable; gave up after 2 s"):
        post_batch(client, stream_name, sent[0][1], sent[0][0], retry_for=2)
    real.close()


# The kernel names a session's autogroup and its nice value in this file, and prints nothing
# for the default autogroup (a process whose session never left it) or where it has none.
_AUTOGROUP = ("import os\n"
              "text = open('/proc/self/autogroup').read().split() if os.path.exists('/proc/self/autogroup') else []\n"
              "print(text[-1] if text else 'none')\n")


def test_the_worker_yields_the_cpu_and_its_session_too_when_it_leads_one():
    """`tidemark worker` lowers its priority before Spark starts; leading its own session
    (as `tidemark up` starts it) it lowers the session's autogroup too, where the kernel
    schedules by autogroup; run inside another session, it leaves that session alone."""
    script = "import os; from tidemark_cli.main import _yield_cpu; _yield_cpu(7); print(os.nice(0))\n" + _AUTOGROUP
    led = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         start_new_session=True)
    nice, group = led.stdout.split()
    assert nice == str(min(19, os.nice(0) + 7)) and group in ("7", "none"), led.stderr
    ours = subprocess.run([sys.executable, "-c", _AUTOGROUP], capture_output=True, text=True, timeout=60).stdout.strip()
    inside = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    nice, group = inside.stdout.split()
    assert nice == str(min(19, os.nice(0) + 7)) and group == ours, inside.stderr
