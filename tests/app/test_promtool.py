"""Prometheus' own client against Tidemark (contract §10): ``promtool query instant|range|
labels|series`` (Debian's ``prometheus`` package, installed by ``make test``'s bootstrap)
reads every query kind with its bounds from the real API.

Debian's promtool (2.42) has no ``--http.config.file``: the key goes as the password in the
server URL (Go's HTTP client sends it as HTTP Basic, as Grafana does) and, for ``range``, as
a Bearer header through ``--header``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.app.test_prometheus_api import native, publish
from tests.conftest import KEYS

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: make system-deps installs it")


def promtool(*args: str) -> str:
    done = subprocess.run([PROMTOOL, "query", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


@pytest.fixture(scope="module")
def stream(api, redis_url):
    end = float(int(time.time()))
    name = "promtool-web"
    publish(redis_url, name, end, seed=7)
    return name, end


@pytest.fixture(scope="module")
def server(api) -> str:
    """The API's URL with the read key as the Basic password."""
    return f"http://grafana:{KEYS['read']}@127.0.0.1:{api.port}"


@pytest.mark.parametrize("kind, params, item", [
    ("count", {}, None),
    ("sum", {}, None),
    ("frequency", {"key": "k1"}, None),
    ("distinct", {}, None),
    ("self_join", {}, None),
    ("quantiles", {"q": "0.5,0.99"}, "q"),
    ("heavy_hitters", {"phi": "0.05"}, "key"),
])
def test_promtool_instant_reads_every_kind_with_its_bounds(api, server, stream, kind, params, item):
    name, end = stream
    at = end if kind == "distinct" else end - 30  # a randomized wave answers at its clock only
    labels = "".join(f', {k}="{v}"' for k, v in params.items())
    out = promtool("instant", "-o", "json", "--time", str(int(at)), server,
                   f'tidemark_{kind}{{stream="{name}", window="10m"{labels}}}')
    vector = json.loads(out)
    assert vector, out
    want = native(api, name, kind.replace("_", "-"), {**params, "window": 600, "at": repr(at)})
    bounds = set()
    for sample in vector:
        m = sample["metric"]
        answer = want if item is None else next(
            i for i in want["items"] if str(i[item]) == m[item] or repr(i[item]) == m[item])
        expected = answer["estimate"] if m["bound"] == "estimate" else answer["bound"][m["bound"]]
        assert float(sample["value"][1]) == expected and sample["value"][0] == at
        bounds.add(m["bound"])
    assert bounds == {"estimate", "lower", "upper"}


def test_promtool_range_with_a_bearer_header(api, stream):
    name, end = stream
    out = promtool("range", "-o", "json", "--header", f"Authorization: Bearer {KEYS['read']}",
                   "--start", str(int(end - 1500)), "--end", str(int(end)), "--step", "1m",
                   f"http://127.0.0.1:{api.port}",
                   f'tidemark_quantiles{{stream="{name}", q="0.5,0.99", window="5m"}}')
    matrix = json.loads(out)
    assert {(s["metric"]["q"], s["metric"]["bound"]) for s in matrix} == {
        (q, b) for q in ("0.5", "0.99") for b in ("estimate", "lower", "upper")}
    for s in matrix:
        assert len(s["values"]) == 26
        assert all(float(v) > 0 for _, v in s["values"])


def test_promtool_promql_output_and_scalar(server, stream):
    name, end = stream
    out = promtool("instant", "--time", str(int(end)), server, f'tidemark_count{{stream="{name}", bound="upper"}}')
    assert out.startswith(f'tidemark_count{{bound="upper", stream="{name}"}} => ') and f"@[{int(end)}]" in out
    assert promtool("instant", server, "1+1").startswith("scalar: 2 @[")


def test_promtool_labels_and_series(server, stream):
    name, end = stream
    assert name in promtool("labels", server, "stream").split()
    names = promtool("labels", server, "__name__").split()
    assert "tidemark_count" in names and "tidemark_quantiles" in names
    out = promtool("series", "--match", f'tidemark_count{{stream="{name}"}}', server)
    assert out.count(f'stream="{name}"') == 3 and 'bound="lower"' in out


def test_promtool_without_a_key_is_refused(api):
    done = subprocess.run([PROMTOOL, "query", "instant", f"http://127.0.0.1:{api.port}", "1+1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "401" in done.stderr + done.stdout
