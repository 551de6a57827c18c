"""``TIDEMARK_SITES``: a JSON list or a file holding one, checked once at start."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tidemark.settings import Settings
from tidemark.sites import parse_sites
from tidemark.wire.records import read_sites, write_sites

EU = {"name": "eu", "url": "https://eu.example:8000/", "key": "k" * 16}


def test_sites_come_from_json_or_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_SITES", json.dumps([EU]))
    (site,) = Settings().sites
    assert (site.name, site.url, site.key) == ("eu", "https://eu.example:8000", "k" * 16)
    assert "k" * 16 not in repr(site)  # a key is never printed
    path = tmp_path / "sites.json"
    path.write_text(json.dumps([EU, {**EU, "name": "us-east-1"}]))
    monkeypatch.setenv("TIDEMARK_SITES", str(path))
    assert [s.name for s in Settings().sites] == ["eu", "us-east-1"]
    monkeypatch.delenv("TIDEMARK_SITES")
    assert Settings().sites == [] and Settings().site_max_age == 30.0


@pytest.mark.parametrize("sites, why", [
    ([{**EU, "name": "local"}], "this deployment itself"),
    ([{**EU, "name": "EU"}], "pattern"),
    ([{**EU, "name": "x" * 33}], "pattern"),
    ([EU, EU], "twice"),
    ([{**EU, "url": "eu.example"}], "http"),
    ([{**EU, "key": "short"}], "16 characters"),
    ("/no/such/file", "neither a JSON list nor a file"),
    ("[not json", "not valid JSON"),
])
def test_a_bad_site_list_is_refused_at_start(sites, why):
    with pytest.raises((ValidationError, ValueError), match=why):
        Settings(sites=sites)


def test_a_federated_streams_sites_round_trip():
    assert read_sites(write_sites(["eu", "local"])) == ("eu", "local")
    assert read_sites(None) is None
    with pytest.raises(ValueError):
        read_sites(b'{"eu": 1}')
    assert parse_sites(None) == [] and parse_sites("") == []
