"""The dashboard in a real headless Chromium, against the real API (and the real pipeline).

Each browser test loads the page, reads the numbers it drew (from the DOM and from the
Plotly figures) and compares them with the API's own answers, so the dashboard is checked
for showing what the API says, not for looking a certain way. Every test also checks good
manners: no script error, no request leaving localhost, and every 4xx the browser logs is a
query the page explains in words (a query the server lacks, or a refused guarantee).

Screenshots of each view go to ``tests/artifacts/``.
"""

from __future__ import annotations

import http.server
import json
import re
import socketserver
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import numpy as np
import pytest

from tests.conftest import KEYS, auth, post_events

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
STATIC = Path(__file__).resolve().parents[2] / "frontend" / "static"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
T0 = 1_700_000_000.0
# Queries the API may lack or refuse; the page says so in words (a 4xx is logged by Chromium).
OPTIONAL_QUERIES = {"frequency", "heavy-hitters", "quantiles", "distinct", "self-join", "decayed-sum"}


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium (make system-deps installs it)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Dashboard:
    """One browser page on the dashboard, with everything it logged and requested."""

    def __init__(self, browser, base_url: str):
        self.base = base_url.rstrip("/")
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        # Signed in as /?key=… would do it: the read key in an HttpOnly SameSite=Strict cookie.
        self.context.add_cookies([{"name": "tidemark_key", "value": KEYS["read"], "url": self.base,
                                   "httpOnly": True, "sameSite": "Strict"}])
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.console, self.errors, self.requests, self.failed = [], [], [], []
        self.page.on("console", lambda m: self.console.append(m))
        self.page.on("pageerror", lambda e: self.errors.append(e))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(r))

    def open(self, hash_: str = "") -> "Dashboard":
        self.page.goto(f"{self.base}/{hash_}")
        self.page.wait_for_function("() => window.Plotly && window.tidemark && window.tidemark.state.selected")
        return self

    # -- reading what the page shows ----------------------------------------------------------
    def tile(self, query: str) -> dict:
        return self.page.evaluate(
            """q => { const v = document.querySelector(`#tile-${q} .tile-value`);
                      return v && v.dataset.estimate !== undefined
                        ? {estimate: +v.dataset.estimate, lower: +v.dataset.lower, upper: +v.dataset.upper,
                           text: document.getElementById(`tile-${q}`).innerText}
                        : {text: document.getElementById(`tile-${q}`).innerText}; }""", query)

    def wait_tile(self, query: str, estimate: float, timeout: float = 30_000) -> None:
        self.page.wait_for_function(
            """([q, e]) => { const v = document.querySelector(`#tile-${q} .tile-value`);
                             return v && Math.abs(+v.dataset.estimate - e) <= 1e-9 * Math.max(1, Math.abs(e)); }""",
            arg=[query, estimate], timeout=timeout)

    def figure(self, chart_id: str) -> list[dict]:
        """The traces Plotly drew: x, y and names (the figure's data, as drawn)."""
        return self.page.evaluate(
            """id => (document.getElementById(id).data || []).map(t => ({
                  name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []),
                  customdata: t.customdata ? Array.from(t.customdata) : null,
                  error_x: t.error_x ? {array: Array.from(t.error_x.array || []),
                                        arrayminus: Array.from(t.error_x.arrayminus || [])} : null}))""",
            chart_id)

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text()

    def shot(self, name: str, selector: str | None = None) -> Path:
        path = ARTIFACTS / name
        if selector:
            self.page.locator(selector).screenshot(path=str(path))
        else:
            self.page.evaluate("() => window.scrollTo(0, 0)")  # the sticky stream list at the top
            self.page.screenshot(path=str(path), full_page=True)
        return path

    # -- good manners -----------------------------------------------------------------------------
    def assert_clean(self, allow_unreachable: bool = False) -> None:
        assert not self.errors, f"script errors: {self.errors}"
        assert self.page.locator("#banner").count() == 0, self.text("#banner")
        for url in self.requests:
            parsed = urlparse(url)
            assert parsed.scheme == "data" or parsed.hostname in ("127.0.0.1", "localhost"), \
                f"request left localhost: {url}"
        for msg in self.console:
            if msg.type not in ("error", "warning"):
                continue
            path = urlparse(msg.location.get("url", "")).path
            explained_4xx = (msg.text.startswith("Failed to load resource: the server responded with a status of 4")
                             and (path in ("/v1/inner-product", "/v1/alerts")
                                  or path.rsplit("/", 1)[-1] in OPTIONAL_QUERIES))
            # While the API restarts: its live stream is cut and connections are refused.
            unreachable = allow_unreachable and any(
                e in msg.text for e in ("ERR_CONNECTION_REFUSED", "ERR_INCOMPLETE_CHUNKED_ENCODING",
                                        "ERR_EMPTY_RESPONSE", "ERR_CONNECTION_RESET"))
            assert explained_4xx or unreachable, f"console {msg.type}: {msg.text} at {msg.location}"
        # Each refusal about the stream on view is explained on the page, in the API's own words.
        page_text = self.page.evaluate("() => document.body.innerText")
        selected = self.page.evaluate("() => window.tidemark.state.selected")
        for response in self.failed:
            if not urlparse(response.url).path.startswith(f"/v1/streams/{selected}/"):
                continue
            try:
                detail = response.json().get("detail")
            except Exception:  # noqa: BLE001 - a refused connection has no body
                continue
            assert detail and detail in page_text, f"{response.url} answered {detail!r}, not shown"

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def dashboard(browser):
    opened = []

    def make(base_url: str) -> Dashboard:
        d = Dashboard(browser, base_url)
        opened.append(d)
        return d

    yield make
    for d in opened:
        d.close()


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook target that accepts everything (alerts need somewhere to POST)."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


# -- helpers -----------------------------------------------------------------------------------
def _events(rng, n, start, span, n_keys=200):
    ts = np.sort(start + rng.uniform(0, span, n))
    keys = rng.zipf(1.4, n) % n_keys
    values = np.clip(rng.lognormal(4.0, 0.8, n), 0, 1000)
    weights = np.round(rng.exponential(2.0, n), 3)
    return [{"ts": float(t), "key": f"user-{k}", "value": round(float(v), 2), "weight": float(w)}
            for t, k, v, w in zip(ts, keys, values, weights)]


def _send(c: httpx.Client, stream: str, events: list[dict]) -> None:
    for i in range(0, len(events), 2000):
        r = post_events(c, stream, json=events[i:i + 2000])
        assert r.status_code == 202 and not r.json()["rejected"], r.text


def _declare(c: httpx.Client, stream: str, **settings) -> None:
    r = c.put(f"/v1/streams/{stream}", json={"max_window": "1h", "epsilon": 0.05, **settings})
    assert r.status_code in (200, 201), r.text


def _counted(pipeline, c: httpx.Client, stream: str, events: list[dict]) -> None:
    """Declare ``stream``, send ``events`` and wait until the worker has counted them all."""
    _declare(c, stream)
    _send(c, stream, events)
    pipeline.wait_events(stream, len(events))


def _answer(c: httpx.Client, stream: str, query: str, **params) -> httpx.Response:
    return c.get(f"/v1/streams/{stream}/{query}", params=params)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


# -- no browser needed -------------------------------------------------------------------------
def _asset_urls(html: str) -> dict[str, str]:
    """Plain path under /static -> the versioned URL the page uses for it."""
    return {path: url for url, path in re.findall(r'"(/static/r/[0-9a-f]{16}/([^"]+))"', html)}


def test_page_and_assets_are_served_locally(api):
    with httpx.Client(base_url=api.url, timeout=30, headers=auth("admin")) as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
        assert page.headers["cache-control"] == "no-cache"
        plotly_js = c.get("/static/vendor/plotly.min.js")
        assert plotly_js.status_code == 200 and "javascript" in plotly_js.headers["content-type"]
        assert len(plotly_js.content) > 1_000_000 and b"plotly" in plotly_js.content[:2000].lower()
        # The partial bundle (scatter and bar): a third of the full one.
        assert b"(basic - minified)" in plotly_js.content[:400]
        for asset in ("js/main.js", "js/api.js", "dashboard.css", "vendor/plotly-basic.LICENSE"):
            assert c.get(f"/static/{asset}").status_code == 200
        assert c.get("/static/nothing-here.js").status_code == 404
        assert c.get("/static/r/0123456789abcdef/nothing-here.js").status_code == 404
        for escape in ("../../app/main.py", "%2e%2e/%2e%2e/app/main.py", "..%2f..%2fapp/main.py"):
            assert c.get(f"/static/r/0123456789abcdef/{escape}").status_code == 404, escape


def test_assets_have_versioned_urls_long_cache_and_gzip(api):
    with httpx.Client(base_url=api.url, timeout=30) as c:
        urls = _asset_urls(c.get("/").text)
        modules = {p.name for p in (STATIC / "js").glob("*.js")}
        # Every module is named in the page (preloaded), so none is fetched late or unversioned.
        assert {f"js/{m}" for m in modules} <= set(urls), sorted(modules)
        assert {"dashboard.css", "vendor/plotly.min.js"} <= set(urls)
        versions = {u.split("/")[3] for path, u in urls.items() if path != "vendor/plotly.min.js"}
        assert len(versions) == 1  # one release hash: relative imports carry it too
        for path, url in urls.items():
            r = c.get(url, headers={"Accept-Encoding": "gzip"})
            assert r.status_code == 200, url
            assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert r.content == c.get(f"/static/{path}").content  # the same file (httpx un-gzips)
            if len(r.content) >= 1024:
                assert r.headers["content-encoding"] == "gzip"
            again = c.get(url, headers={"If-None-Match": r.headers["etag"]})
            assert again.status_code == 304
        plotly_url = urls["vendor/plotly.min.js"]
        sent = c.get(plotly_url, headers={"Accept-Encoding": "gzip"}).headers
        assert sent["content-encoding"] == "gzip"
        # An outdated version (a page from before a release) gets the file, but not to keep.
        stale = c.get(plotly_url.replace(plotly_url.split("/")[3], "0" * 16))
        assert stale.status_code == 200 and stale.headers["cache-control"] == "no-cache"
        # API answers are compressed too, the live stream is not.
        streams = c.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
        assert streams.headers.get("content-encoding") == "gzip"


def test_a_changed_file_changes_the_release(tmp_path):
    import shutil

    from frontend import Assets

    root = tmp_path / "static"
    shutil.copytree(STATIC, root, ignore=shutil.ignore_patterns("plotly-basic.min.js"))
    assets = Assets(root)
    before = assets.release()
    assert before == Assets(root).release()  # the content decides, nothing else
    css = root / "dashboard.css"
    css.write_text(css.read_text() + "\n/* changed */\n")
    assert assets.release() != before and f"/static/r/{assets.release()}/js/main.js" in assets.page().decode()


def test_full_plotly_bundle_when_the_partial_one_is_missing(monkeypatch, tmp_path):
    import frontend

    monkeypatch.setattr(frontend, "VENDORED_PLOTLY", tmp_path / "absent.min.js")
    frontend.plotly_js_path.cache_clear()
    try:
        path = frontend.plotly_js_path()
        assert path.name == "plotly.min.js" and "plotly" in str(path.parent)
        assert path.stat().st_size > 3_000_000
    finally:
        monkeypatch.undo()
        frontend.plotly_js_path.cache_clear()
    assert frontend.plotly_js_path() == frontend.VENDORED_PLOTLY


# -- the pipeline: real events, real sketches ------------------------------------------------------
@pytest.mark.browser
@pytest.mark.spark
def test_count_and_sum_draw_the_api_answers_and_follow_the_window(pipeline, stream_name, dashboard):
    rng = np.random.default_rng(11)
    events = _events(rng, 4000, T0, 1800)
    with pipeline.client() as c:
        _counted(pipeline, c, stream_name, events)
        want = {q: _answer(c, stream_name, q, window=600).json() for q in ("count", "sum")}

        d = dashboard(pipeline.api).open(f"#stream={stream_name}&window=10m")
        for query, answer in want.items():
            d.wait_tile(query, answer["estimate"])
            tile = d.tile(query)
            assert _close(tile["lower"], answer["bound"]["lower"]) and _close(tile["upper"], answer["bound"]["upper"])
            assert answer["estimate"] > 0
            # The chart: band (lower, upper) and estimate, its last point the current answer.
            d.page.wait_for_function("id => (document.getElementById(id).data || []).length === 3",
                                     arg=f"{query}-chart")
            lower, upper, estimate = d.figure(f"{query}-chart")
            assert _close(estimate["y"][-1], answer["estimate"])
            assert _close(lower["y"][-1], answer["bound"]["lower"]) and _close(upper["y"][-1], answer["bound"]["upper"])
            assert all(lo <= e <= up for lo, e, up in zip(lower["y"], estimate["y"], upper["y"]))
        # A 10-minute window in a 1-hour stream leaves room for earlier answers (`at` before the clock).
        d.page.wait_for_function("() => window.tidemark.state.backfill === 'done'")
        for query in ("count", "sum"):
            _, _, estimate = d.figure(f"{query}-chart")
            assert len(estimate["x"]) > 30 and estimate["x"] == sorted(estimate["x"])
            assert d.text(f"#{query}-caption").startswith(f"{len(estimate['x'])} answers kept")
            # The line comes from one history request, answered from the same summary.
            asked = [urlparse(u) for u in d.requests if urlparse(u).path.startswith(f"/v1/streams/{stream_name}/{query}")]
            assert sum(u.path.endswith("/history") for u in asked) == 1
            assert not any("at" in parse_qs(u.query) for u in asked)
            history = c.get(f"/v1/streams/{stream_name}/{query}/history", params={"window": 600, "points": 120}).json()
            drawn = set(estimate["y"])
            assert sum(a["estimate"] in drawn for a in history["answers"]) >= 100
        assert d.page.input_value("#window-input") == "10m"
        status = d.text("#status")
        assert "4,000" in status and "EVENTS" in status.upper()
        d.shot("dashboard-overview.png")
        d.shot("dashboard-count-sum.png", "section[aria-labelledby=totals-title]")

        # The window control (keyboard only): type a new window, press Enter.
        asked = len(d.requests)
        d.page.focus("#window-input")
        d.page.fill("#window-input", "5m")
        d.page.keyboard.press("Enter")
        want5 = _answer(c, stream_name, "count", window=300).json()
        d.wait_tile("count", want5["estimate"])
        count_asks = [parse_qs(urlparse(u).query) for u in d.requests[asked:] if urlparse(u).path.endswith("/count")]
        assert count_asks and all(q.get("window") == ["300"] for q in count_asks)
        assert "window=5m" in d.page.url
        d.page.wait_for_function("() => window.tidemark.state.backfill === 'done'")
        _, _, estimate = d.figure("count-chart")
        assert _close(estimate["y"][-1], want5["estimate"]) and len(estimate["y"]) > 30
        d.shot("dashboard-window-5m.png", "section[aria-labelledby=totals-title]")
        # Too long a window is refused on the spot, with the limit named.
        d.page.fill("#window-input", "2h")
        d.page.keyboard.press("Enter")
        assert "1h" in d.text("#window-error")
        assert d.page.get_attribute("#window-input", "aria-invalid") == "true"
        d.assert_clean()


@pytest.mark.browser
@pytest.mark.spark
def test_new_events_reach_the_page_live_without_a_reload(pipeline, stream_name, dashboard):
    rng = np.random.default_rng(12)
    first = _events(rng, 2000, T0, 900)
    with pipeline.client() as c:
        _counted(pipeline, c, stream_name, first)
        before = _answer(c, stream_name, "count", window=3600).json()

        d = dashboard(pipeline.api).open(f"#stream={stream_name}")
        d.wait_tile("count", before["estimate"])
        d.page.evaluate("() => { window.__sameDocument = true; }")
        d.page.wait_for_function("() => document.getElementById('live-status').dataset.state === 'live'")

        later = _events(rng, 1500, T0 + 900, 600)
        _send(c, stream_name, later)
        status = pipeline.wait_events(stream_name, len(first) + len(later))
        after = _answer(c, stream_name, "count", window=3600).json()
        assert after["estimate"] > before["estimate"]
        started = time.monotonic()
        d.wait_tile("count", after["estimate"], timeout=20_000)
        # The list of streams is polled every 10 s; only the live announcement is this quick.
        assert time.monotonic() - started < 9
        assert d.page.evaluate("() => window.__sameDocument === true")  # no reload
        _, _, estimate = d.figure("count-chart")
        assert _close(estimate["y"][-1], after["estimate"]) and len(estimate["y"]) >= 2
        assert estimate["x"][-1].startswith(time.strftime("%Y-%m-%d %H:%M", time.gmtime(status["clock"])))
        d.page.wait_for_function(
            "v => document.querySelector('[data-key=sketch_version] dd').innerText === String(v)",
            arg=status["sketch_version"])
        d.shot("dashboard-live-updated.png", "section[aria-labelledby=totals-title]")
        d.assert_clean()


@pytest.mark.browser
@pytest.mark.spark
def test_key_and_value_panels_show_the_api_answers_or_say_why_not(pipeline, stream_name, dashboard, receiver):
    rng = np.random.default_rng(13)
    events = _events(rng, 5000, T0, 1800)
    with pipeline.client() as c:
        _declare(c, stream_name, value_min=0, value_max=1000, decays=[{"kind": "polynomial", "alpha": 1.5}])
        _send(c, stream_name, events)
        twin = f"{stream_name}-b"  # the other side of an inner product
        _declare(c, twin, value_min=0, value_max=1000, decays=[{"kind": "polynomial", "alpha": 1.5}])
        _send(c, twin, _events(rng, 1000, T0 + 1000, 800))
        pipeline.wait_events(stream_name, len(events))
        pipeline.wait_events(twin, 1000)
        rules = [c.post("/v1/alerts", json={"stream": stream_name, "query": "count", "params": {"window": "3600"},
                                            "op": op, "threshold": 1000, "webhook_url": receiver,
                                            "secret": "s" * 16, "mode": "certain"}) for op in (">", "<")]
        assert all(r.status_code == 201 for r in rules), [r.text for r in rules]
        try:
            d = dashboard(pipeline.api).open(f"#stream={stream_name}")
            _check_heavy_hitters(c, d, stream_name)
            _check_quantiles(c, d, stream_name)
            _check_tiles(c, d, stream_name)
            _check_frequency(c, d, stream_name)
            _check_inner_product(c, d, stream_name, twin)
            _check_decayed_sums(c, d, stream_name)
            _check_alerts(d, stream_name)
            d.shot("dashboard-all-panels.png")
            d.assert_clean()
        finally:
            for r in rules:
                c.delete(f"/v1/alerts/{r.json()['id']}")


def _check_heavy_hitters(c, d, stream):
    r = _answer(c, stream, "heavy-hitters", window=3600, phi=0.01)
    if r.status_code != 200:
        d.page.wait_for_function("() => !document.getElementById('hh-note').hidden")
        assert r.json()["detail"] in d.text("#hh-note")
        return
    items = sorted(r.json()["items"], key=lambda it: -it["estimate"])
    assert items, "5000 Zipf events have heavy hitters at phi = 0.01"
    d.page.wait_for_function("() => (document.getElementById('hh-chart').data || []).length === 1")
    (bars,) = d.figure("hh-chart")
    assert [cd[0] for cd in bars["customdata"]] == [it["key"] for it in items][:40]
    assert all(_close(a, it["estimate"]) for a, it in zip(bars["x"], items))
    assert all(_close(up, it["bound"]["upper"] - it["estimate"]) for up, it in zip(bars["error_x"]["array"], items))
    # The φ control: a larger φ lists fewer keys (keyboard: type, Enter).
    fewer = _answer(c, stream, "heavy-hitters", window=3600, phi=0.1).json()["items"]
    d.page.fill("#hh-phi", "0.1")
    d.page.keyboard.press("Enter")
    d.page.wait_for_function(
        "n => { const t = (document.getElementById('hh-chart').data || [])[0]; return n === 0 ? !t : t && t.x.length === n; }",
        arg=len(fewer))
    d.shot("dashboard-heavy-hitters.png", "section[aria-labelledby=hh-title]")


def _check_quantiles(c, d, stream):
    qs = "0,0.01,0.05,0.1,0.25,0.5,0.75,0.9,0.95,0.99,1"
    r = _answer(c, stream, "quantiles", window=3600, q=qs)
    if r.status_code != 200:
        d.page.wait_for_function("() => !document.getElementById('q-note').hidden")
        assert r.json()["detail"] in d.text("#q-note")
        return
    items = r.json()["items"]
    d.page.wait_for_function("() => (document.getElementById('q-chart').data || []).length === 3")
    lower, upper, curve = d.figure("q-chart")
    assert [round(x, 6) for x in curve["x"]] == [round(it["q"], 6) for it in items]
    assert all(_close(y, it["estimate"]) for y, it in zip(curve["y"], items))
    assert all(_close(y, it["bound"]["lower"]) for y, it in zip(lower["y"], items))
    assert all(_close(y, it["bound"]["upper"]) for y, it in zip(upper["y"], items))
    assert "p50" in d.text("#q-summary")
    # Over time: p50, p90 and p99 each a band and a line, opened from the history route;
    # the newest point is the answer at the clock.
    d.page.wait_for_function("() => (document.getElementById('q-time-chart').data || []).length === 9")
    assert any("/quantiles/history" in url for url in d.requests)
    traces = d.figure("q-time-chart")
    by_q = {it["q"]: it for it in items}
    for k, q in enumerate((0.5, 0.9, 0.99)):
        lower, upper, line = traces[3 * k:3 * k + 3]
        assert line["name"] == f"p{round(q * 100)}"
        it = by_q[q]
        assert _close(line["y"][-1], it["estimate"])
        assert _close(lower["y"][-1], it["bound"]["lower"]) and _close(upper["y"][-1], it["bound"]["upper"])
    d.shot("dashboard-quantiles.png", "section[aria-labelledby=q-title]")


@pytest.mark.browser
def test_quantiles_over_time_open_with_their_history(api, redis_url, dashboard):
    """p50/p90/p99 over time, without Spark: a summary built and published as the worker
    does, a 10-minute window in a 1-hour stream; one history request draws each line, every
    point inside its band, the newest the answer at the clock."""
    from tests.conftest import TEST_SECRET
    from tidemark.chunks import decode_chunk, encode_chunk
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary
    from workers.publish import Publisher

    name = "quantiles-over-time"
    settings = {"max_window": 3600.0, "epsilon": 0.05, "value_min": 0.0, "value_max": 1000.0}
    with httpx.Client(base_url=api.url, timeout=30, headers=auth("admin")) as c:
        _declare(c, name, **settings)
        config = StreamConfig(**c.get(f"/v1/streams/{name}").json()["settings"])
        rng = np.random.default_rng(14)
        n = 20_000
        ts = np.sort(T0 + rng.uniform(0, 3600, n))
        values = np.round(np.clip(rng.lognormal(4.0, 0.8, n), 0, 1000), 1)
        summary = StreamSummary.create(config, TEST_SECRET)
        summary.update_table(decode_chunk(encode_chunk(ts, [None] * n, values, np.ones(n))))
        Publisher(redis_url).publish_summary(name, summary, version=1, events=n)
        want = _answer(c, name, "quantiles", window=600, q="0.5,0.9,0.99").json()["items"]
    d = dashboard(api.url).open(f"#stream={name}&window=10m")
    d.page.wait_for_function(
        "() => { const t = document.getElementById('q-time-chart').data || []; return t.length === 9 && t[2].x.length > 30; }")
    traces = d.figure("q-time-chart")
    for k, it in enumerate(want):
        lower, upper, line = traces[3 * k:3 * k + 3]
        assert line["name"] == f"p{round(it['q'] * 100)}" and line["x"] == sorted(line["x"])
        assert all(lo <= y <= up for lo, y, up in zip(lower["y"], line["y"], upper["y"]))
        assert _close(line["y"][-1], it["estimate"]) and _close(upper["y"][-1], it["bound"]["upper"])
    assert sum(urlparse(u).path.endswith("/quantiles/history") for u in d.requests) == 1
    d.shot("dashboard-quantiles-over-time.png", "section[aria-labelledby=q-title]")
    d.assert_clean()


def test_a_kind_the_server_does_not_list_is_not_asked_and_says_why(api, dashboard):
    """The page reads the query kinds from the server's registry (``GET /v1/kinds``): a kind
    the list lacks (``distinct``, taken out of the answer in transit) is not asked after
    discovery, and its tile says so in words that name the list."""
    name = "kinds-from-the-server"
    with httpx.Client(base_url=api.url, timeout=30, headers=auth("admin")) as c:
        _declare(c, name)
    d = dashboard(api.url)

    def without_distinct(route):
        got = route.fetch()
        body = got.json()
        body["kinds"] = [k for k in body["kinds"] if k["name"] != "distinct"]
        route.fulfill(response=got, json=body)

    d.page.route("**/v1/kinds", without_distinct)
    d.open(f"#stream={name}")
    # Panels opened before discovery may have asked; after a refresh (discovery first) none does.
    # The refresh forgets what was missing and learns it again: wait for the entry itself,
    # since the tile still shows the first load's "no" meanwhile.
    d.page.evaluate("() => window.tidemark.refresh()")
    d.page.wait_for_function("() => window.tidemark.missing.has('distinct')"
                             " && document.getElementById('tile-distinct').dataset.available === 'no'")
    asked = sum(urlparse(u).path == f"/v1/streams/{name}/distinct" for u in d.requests)
    detail = d.page.evaluate("() => window.tidemark.missing.get('distinct').detail")
    assert detail.startswith("unknown query 'distinct'") and "GET /v1/kinds" in detail and "self-join" in detail
    assert detail in d.text("#tile-distinct")
    # The tiles are asked together: another round asks self-join again and distinct still not.
    self_join = f"/v1/streams/{name}/self-join"
    before = sum(urlparse(u).path == self_join for u in d.requests)
    d.page.evaluate("() => window.tidemark.refresh()")
    deadline = time.monotonic() + 30
    while sum(urlparse(u).path == self_join for u in d.requests) == before and time.monotonic() < deadline:
        d.page.wait_for_timeout(100)
    assert sum(urlparse(u).path == self_join for u in d.requests) > before
    assert sum(urlparse(u).path == f"/v1/streams/{name}/distinct" for u in d.requests) == asked
    d.assert_clean()


def _check_tiles(c, d, stream):
    for query in ("distinct", "self-join"):
        r = _answer(c, stream, query, window=3600)
        if r.status_code == 200:
            d.wait_tile(query, r.json()["estimate"])
        else:
            d.page.wait_for_function("q => document.getElementById(`tile-${q}`).dataset.available !== undefined",
                                     arg=query)
            assert r.json()["detail"] in d.text(f"#tile-{query}")


def _check_frequency(c, d, stream):
    r = _answer(c, stream, "frequency", window=3600, key="user-1")
    d.page.focus("#freq-key")
    d.page.keyboard.type("user-1")
    d.page.keyboard.press("Enter")
    if r.status_code == 200:
        d.page.wait_for_function(
            "e => { const v = document.querySelector('#freq-result .result-value'); return v && +v.dataset.estimate === e; }",
            arg=r.json()["estimate"])
        assert r.json()["estimate"] > 0
    else:
        d.page.wait_for_function("t => document.getElementById('freq-result').innerText.includes(t)",
                                 arg=r.json()["detail"])
    d.shot("dashboard-frequency.png", "section[aria-labelledby=freq-title]")


def _check_inner_product(c, d, a, b):
    r = c.get("/v1/inner-product", params={"streams": f"{a},{b}", "window": 3600})
    d.page.select_option("#ip-a", a)
    d.page.select_option("#ip-b", b)
    d.page.focus("#ip-window")
    d.page.keyboard.type("1h")
    d.page.keyboard.press("Enter")
    if r.status_code == 200:
        d.page.wait_for_function(
            "e => { const v = document.querySelector('#ip-result .result-value'); return v && +v.dataset.estimate === e; }",
            arg=r.json()["estimate"])
    else:
        d.page.wait_for_function("t => document.getElementById('ip-result').innerText.includes(t)",
                                 arg=r.json()["detail"])
    d.shot("dashboard-inner-product.png", "section[aria-labelledby=ip-title]")


def _check_decayed_sums(c, d, stream):
    probe = _answer(c, stream, "decayed-sum", tau=0, decay="polynomial", alpha=1.5)
    if probe.status_code != 200:
        d.page.wait_for_function("() => !document.getElementById('decay-note').hidden")
        assert probe.json()["detail"] in d.text("#decay-note")
        d.shot("dashboard-decayed.png", "section[aria-labelledby=decay-title]")
        return
    d.page.wait_for_function("() => (document.getElementById('decay-chart').data || []).length >= 3")
    names = [t["name"] for t in d.figure("decay-chart") if t["name"] and "bound" not in t["name"]
             and "lower" not in t["name"]]
    assert any("polynomial" in n and ("relative" in n or "additive" in n) for n in names), names
    # Ask for a relative guarantee: where the API refuses it, the page shows the refusal.
    refused = _answer(c, stream, "decayed-sum", tau=0, decay="sliding", window=3600, guarantee="relative")
    d.page.select_option("#decay-guarantee", "relative")
    if refused.status_code == 422:
        d.page.wait_for_function("t => document.getElementById('decay-refusals').innerText.includes(t)",
                                 arg=refused.json()["detail"])
    d.shot("dashboard-decayed.png", "section[aria-labelledby=decay-title]")


def _check_alerts(d, stream):
    listed = httpx.get(f"{d.base}/v1/alerts", headers=auth("read")).json()["alerts"]
    mine = [a for a in listed if a["stream"] == stream]
    d.page.wait_for_function("n => document.querySelectorAll('#alerts-table tbody tr').length === n", arg=len(mine))
    rows = d.page.locator("#alerts-table tbody tr")
    states = sorted(rows.nth(i).get_attribute("data-state") for i in range(rows.count()))
    assert states == sorted(a["state"] for a in mine)
    d.shot("dashboard-alerts.png", "section[aria-labelledby=alerts-title]")


# -- without the worker: many streams, empty streams, restarts ----------------------------------------
@pytest.fixture
def own_api(tmp_path):
    """A Redis and an API of this test alone (hundreds of streams stay out of the shared one)."""
    from tests.conftest import ApiServer
    from tidemark.redis_server import EmbeddedRedis

    redis_server = EmbeddedRedis(tmp_path / "redis").start()
    servers = []

    def start(port: int | None = None) -> ApiServer:
        import uvicorn

        server = ApiServer(redis_server.url)
        if port is not None:
            server.port = port
        # An open /v1/live stream must not hold a stopping server for long.
        server.server = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=server.port,
                                                      log_level="warning", timeout_graceful_shutdown=1))
        server.thread = threading.Thread(target=server.server.run, daemon=True)
        servers.append(server.start())
        return server

    start.redis_url = redis_server.url
    yield start
    for server in servers:
        server.stop()
    redis_server.stop()


@pytest.mark.browser
def test_hundreds_of_streams_and_an_empty_one(own_api, dashboard):
    server = own_api()
    names = [f"svc-{i:03d}" for i in range(300)]
    with httpx.Client(base_url=server.url, timeout=30, headers=auth("admin")) as c:
        for n in names:
            _declare(c, n, max_window="30m")
        _declare(c, "empty", value_min=0, value_max=10)
    d = dashboard(server.url)
    started = time.monotonic()
    d.open("#stream=empty")
    d.page.wait_for_function("() => document.querySelectorAll('#stream-picker option').length === 301")
    assert time.monotonic() - started < 15
    assert d.text("#stream-count") == "301"
    # An empty stream: exact zeros, and charts that say there is nothing yet.
    d.page.wait_for_function("() => document.querySelector('#tile-count .tile-value[data-estimate]')")
    assert d.tile("count")["estimate"] == 0 and "exact" in d.tile("count")["text"]
    d.page.wait_for_function("() => document.getElementById('count-chart').innerText.includes('no events')")
    assert "no events yet" in d.text("[data-key=clock]")
    d.shot("dashboard-empty-stream.png")
    # The filter narrows the list; the keyboard moves through it.
    d.page.fill("#stream-filter", "svc-01")
    d.page.wait_for_function("() => document.querySelectorAll('#stream-picker option').length === 11")
    assert "of 301" in d.text("#stream-count")
    d.page.focus("#stream-picker")
    d.page.keyboard.press("ArrowDown")
    d.page.wait_for_function("() => window.tidemark.state.selected.startsWith('svc-01')")
    d.page.wait_for_function("() => document.getElementById('stream-title').innerText.startsWith('svc-01')")
    assert "max window 30m" in d.text("#stream-settings")
    d.shot("dashboard-many-streams.png")
    d.assert_clean()


@pytest.mark.browser
def test_live_updates_resume_after_the_api_restarts(own_api, dashboard):
    import redis

    from tidemark.wire import keys

    server = own_api()
    with httpx.Client(base_url=server.url, timeout=30, headers=auth("admin")) as c:
        _declare(c, "restarted")
    d = dashboard(server.url).open("#stream=restarted")
    live = "() => document.getElementById('live-status').dataset.state === 'live'"
    d.page.wait_for_function(live)
    port = server.port
    server.stop()
    d.page.wait_for_function("() => document.getElementById('live-status').dataset.state === 'offline'")
    d.shot("dashboard-reconnecting.png", ".topbar")
    own_api(port)  # the same address, a new process of the API
    d.page.wait_for_function(live, timeout=30_000)
    # A worker's announcement now reaches the page through the new server (announced until
    # seen: the server subscribes a moment after the connection opens).
    d.page.wait_for_timeout(1000)  # the refresh that follows a reconnect is done
    asked = len(d.requests)
    announce = redis.Redis.from_url(own_api.redis_url)
    note = json.dumps({"stream": "restarted", "sketch_version": 1})
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(urlparse(u).path == "/v1/streams/restarted/count"
                                                  for u in d.requests[asked:]):
        announce.publish(keys.ANNOUNCE, note)
        d.page.wait_for_timeout(500)
    assert any(urlparse(u).path == "/v1/streams/restarted/count" for u in d.requests[asked:])
    d.assert_clean(allow_unreachable=True)


@pytest.mark.browser
def test_an_admin_deletes_a_stream_after_confirming_and_a_team_key_sees_its_own(own_api, dashboard):
    """The delete button is an admin's only, asks for the stream's name, and the stream
    leaves the page; a key limited to some streams shows those alone."""
    from tests.conftest import API_KEYS, ApiServer

    team_key = f"team-a-read-{uuid.uuid4().hex}"
    server = ApiServer(own_api.redis_url, api_keys=API_KEYS + [
        {"key": team_key, "scopes": ["read"], "streams": ["team-a.*"]}]).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers=auth("admin")) as c:
            for n in ("team-a.web", "team-a.doomed", "team-b.db"):
                _declare(c, n)
        # A reader: the streams, no delete button.
        reader = dashboard(server.url).open("#stream=team-a.doomed")
        reader.page.wait_for_function("() => document.querySelectorAll('#stream-picker option').length === 3")
        assert reader.page.locator("#delete-stream").is_hidden()
        # A team's key: only its streams, anywhere on the page.
        team = dashboard(server.url)
        team.context.clear_cookies()
        team.context.add_cookies([{"name": "tidemark_key", "value": team_key, "url": server.url,
                                   "httpOnly": True, "sameSite": "Strict"}])
        team.open()
        team.page.wait_for_function("() => document.querySelectorAll('#stream-picker option').length === 2")
        assert "team-b" not in team.page.evaluate("() => document.body.innerText")
        # An admin: the button, a confirmation that needs the name, then the stream is gone.
        admin = dashboard(server.url)
        admin.context.clear_cookies()
        admin.context.add_cookies([{"name": "tidemark_key", "value": KEYS["admin"], "url": server.url,
                                    "httpOnly": True, "sameSite": "Strict"}])
        admin.open("#stream=team-a.doomed")
        admin.page.wait_for_function("() => window.tidemark.state.selected === 'team-a.doomed'")
        admin.page.locator("#delete-stream").click()
        assert admin.page.locator("#delete-dialog").is_visible()
        assert admin.page.locator("#delete-confirm").is_disabled()
        admin.page.fill("#delete-confirm-name", "team-a.doome")
        assert admin.page.locator("#delete-confirm").is_disabled()
        admin.page.fill("#delete-confirm-name", "team-a.doomed")
        admin.shot("dashboard-delete-stream.png")
        admin.page.locator("#delete-confirm").click()
        admin.page.wait_for_function(
            "() => ![...document.querySelectorAll('#stream-picker option')].some(o => o.value === 'team-a.doomed')")
        admin.page.wait_for_function("() => window.tidemark.state.selected === 'team-a.web'")
        with httpx.Client(base_url=server.url, timeout=30, headers=auth("admin")) as c:
            assert c.get("/v1/streams/team-a.doomed").status_code == 404
        # The reader's page hears of it live and drops it too.
        reader.page.wait_for_function("() => document.querySelectorAll('#stream-picker option').length === 2")
        for d in (reader, team, admin):
            d.assert_clean()
    finally:
        server.stop()
