"""``docker/grafana/``: the Tidemark data source and dashboard Grafana is provisioned with
(Grafana itself is not installable here): the files parse, the data source is a Prometheus
one pointing at the API with the read key from the environment, every panel uses it, and
every panel's query — with its variables filled in as Grafana fills them — parses with the
API's own parser and names a query kind that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from app.answers import QUERY_KINDS
from app.promql.query import SeriesQuery, read_query

ROOT = Path(__file__).resolve().parents[2] / "docker"
GRAFANA = ROOT / "grafana"
# As Grafana interpolates them: a multi-value variable as a regex alternation.
VARIABLES = {"$stream": "(web|api\\\\.eu)", "$window": "5m", "$phi": "0.05"}


def _datasource() -> dict:
    (source,) = yaml.safe_load((GRAFANA / "provisioning/datasources/tidemark.yaml").read_text())["datasources"]
    return source


def _dashboard() -> dict:
    return json.loads((GRAFANA / "dashboards/tidemark.json").read_text())


def test_the_data_source_is_prometheus_pointing_at_the_api_with_the_key_from_the_environment():
    source = _datasource()
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    assert source["url"] == "${TIDEMARK_URL}"
    assert source["basicAuth"] is True and source["secureJsonData"]["basicAuthPassword"] == "${TIDEMARK_READ_KEY}"
    assert source["jsonData"]["httpMethod"] == "POST"


def test_the_dashboard_provider_loads_the_mounted_folder():
    (provider,) = yaml.safe_load((GRAFANA / "provisioning/dashboards/tidemark.yaml").read_text())["providers"]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert compose["services"]["grafana"]["environment"]["TIDEMARK_URL"] == "http://api:8000"


def _fill(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_every_panel_query_parses_and_names_an_existing_kind():
    dashboard = _dashboard()
    uid = _datasource()["uid"]
    kinds = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid
            query = read_query(_fill(target["expr"]))
            assert isinstance(query, SeriesQuery) and query.kind in QUERY_KINDS, target["expr"]
            assert query.selects("web") and query.selects("api.eu") and not query.selects("other")
            kinds.add(query.kind)
    assert {"count", "quantiles", "heavy-hitters"} <= kinds
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    assert all(word in titles for word in ("count", "p50", "p99", "heavy hitters", "alert"))


def test_the_stream_variable_asks_label_values_of_a_metric_that_exists():
    (stream,) = [v for v in _dashboard()["templating"]["list"] if v["name"] == "stream"]
    metric = re.fullmatch(r"label_values\((\w+), stream\)", stream["definition"]).group(1)
    assert read_query(metric + '{stream="x"}').kind in QUERY_KINDS
    assert stream["multi"] and stream["includeAll"]
    window = [v for v in _dashboard()["templating"]["list"] if v["name"] == "window"][0]
    for option in window["options"]:
        assert read_query(f'tidemark_count{{stream="x", window="{option["value"]}"}}').window_ms > 0
