"""``tidemark streams list`` and ``tidemark streams delete NAME``: the stream lifecycle
from the command line, over the API like any client (contract §4).

Tested by: tests/tidemark_cli/test_main.py (test_streams_list_and_delete).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from tidemark.errors import CliError
from tidemark.settings import Settings

__all__ = ["list_streams", "delete_stream", "the_key"]


def the_key(given: str | None) -> str:
    """``--key``, else ``$TIDEMARK_KEY``, else the admin key ``tidemark up`` keeps in the run
    directory."""
    key = given or os.environ.get("TIDEMARK_KEY")
    if key:
        return key
    kept = Path(Settings().run_dir) / "api-key"
    try:
        return kept.read_text().strip()
    except OSError:
        raise CliError("no API key: give --key, set TIDEMARK_KEY, or run where 'tidemark up' "
                       f"keeps {kept}") from None


def _call(method: str, url: str, key: str, **kw) -> httpx.Response:
    try:
        r = httpx.request(method, url, headers={"Authorization": f"Bearer {key}"}, timeout=30, **kw)
    except httpx.HTTPError as e:
        raise CliError(f"cannot reach the API at {url.split('/v1/')[0]}: {type(e).__name__}") from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise CliError(f"{r.status_code}: {detail}")
    return r


def list_streams(api: str, key: str) -> list[dict]:
    """Every stream the key may see (all pages)."""
    out, cursor = [], None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = _call("GET", f"{api.rstrip('/')}/v1/streams", key, params=params).json()
        out += page["streams"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def delete_stream(api: str, key: str, name: str) -> None:
    _call("DELETE", f"{api.rstrip('/')}/v1/streams/{name}", key)


def print_streams(streams: list[dict]) -> None:
    if not streams:
        print("no streams")
        return
    width = max(len(s["name"]) for s in streams)
    print(f"{'stream':<{width}}  {'max_window':>10}  {'events':>12}  {'received':>12}  state")
    for s in streams:
        st = s["status"]
        print(f"{s['name']:<{width}}  {s['settings']['max_window']:>10g}  {st['events']:>12}  "
              f"{st['received']:>12}  {st.get('state', 'ok')}")
