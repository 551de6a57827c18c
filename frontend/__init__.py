"""The dashboard: static HTML, CSS and JavaScript modules served next to the API.

The page talks to the API over HTTP only (``/v1/...`` and the ``/v1/live`` event stream),
exactly as any other client would. Its scripts are plain ES modules (``static/js/``, one per
panel), loaded by the browser as they are: there is no build step. plotly.js is the
vendored partial bundle ``static/vendor/plotly-basic.min.js`` (scatter and bar, the only
trace types the dashboard draws; MIT, see ``plotly-basic.LICENSE``), or the full bundle of
the installed ``plotly`` package if that file is missing, so the dashboard works offline and
never reaches a CDN.

Routes added by :func:`mount`:

* ``/`` — the page, its asset URLs rewritten to versioned ones (revalidated on each load);
* ``/static/r/{version}/{path}`` — an asset under a content hash: cached for a year
  (``immutable``), gzip-compressed once and kept in memory. Our own files share one hash of
  all of them, so a module's relative imports carry the version too; plotly.js has its own;
* ``/static/vendor/plotly.min.js`` and ``/static/{path}`` — the same files at plain URLs,
  revalidated on each use.

Tested by: tests/frontend/test_dashboard.py (Assets, plotly_js_path, the dashboard in a
browser).
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import os
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["mount", "plotly_js_path", "Assets", "STATIC_DIR", "VENDORED_PLOTLY"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDORED_PLOTLY = STATIC_DIR / "vendor" / "plotly-basic.min.js"
PLOTLY_URL_PATH = "vendor/plotly.min.js"  # where the page asks for plotly.js, whichever it is

_REVALIDATE = {"Cache-Control": "no-cache"}
_FOREVER = {"Cache-Control": "public, max-age=31536000, immutable"}
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".md": "text/plain; charset=utf-8"}
_ASSET_URL = re.compile(r'(?P<attr>\b(?:src|href))="/static/(?P<path>[^"?#]+)"')
_GZIP_FROM = 1024  # bytes; smaller files are sent as they are


@lru_cache(maxsize=1)
def plotly_js_path() -> Path:
    """The vendored partial bundle, else ``plotly.min.js`` of the installed ``plotly`` package."""
    if VENDORED_PLOTLY.is_file():
        return VENDORED_PLOTLY
    package = resources.files("plotly")
    for candidate in ("package_data/plotly.min.js", "offline/plotly.min.js"):
        path = Path(str(package.joinpath(candidate)))
        if path.is_file():
            return path
    found = sorted(Path(str(package)).rglob("plotly.min.js"))
    if not found:
        raise FileNotFoundError("plotly.min.js is not in the installed plotly package")
    return found[0]


@dataclass(frozen=True)
class _File:
    signature: tuple[int, int]  # (mtime_ns, size): read again only when it changes
    digest: str
    body: bytes
    media_type: str

    @property
    def etag(self) -> str:
        return f'"{self.digest}"'


class Assets:
    """Content hashes, versioned URLs and cached (raw and gzip) bodies of the static files."""

    def __init__(self, root: Path = STATIC_DIR):
        self.root = root.resolve()
        self._files: dict[Path, _File] = {}
        self._gzipped: dict[str, bytes] = {}  # digest -> gzip body
        self._lock = threading.Lock()

    def path_of(self, rel: str) -> Path | None:
        """The file behind ``rel`` (a path under /static), or None if there is none."""
        if rel == PLOTLY_URL_PATH:
            return plotly_js_path()
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return None
        return path

    def file(self, path: Path) -> _File:
        st = path.stat()
        signature = (st.st_mtime_ns, st.st_size)
        cached = self._files.get(path)
        if cached is None or cached.signature != signature:
            body = path.read_bytes()
            media_type = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            cached = _File(signature, hashlib.sha256(body).hexdigest()[:16], body, media_type)
            with self._lock:
                self._files[path] = cached
        return cached

    def release(self) -> str:
        """One hash of all our own files (plotly.js has its own)."""
        h = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if path == VENDORED_PLOTLY.resolve():
                    continue
                h.update(f"{path.relative_to(self.root).as_posix()}\0{self.file(path).digest}\0".encode())
        return h.hexdigest()[:16]

    def version_of(self, rel: str, release: str | None = None) -> str:
        if rel == PLOTLY_URL_PATH:
            return self.file(plotly_js_path()).digest
        return release or self.release()

    def url(self, rel: str, release: str | None = None) -> str:
        return f"/static/r/{self.version_of(rel, release)}/{rel}"

    def page(self) -> bytes:
        """index.html with every ``/static/...`` URL of its tags made versioned."""
        release = self.release()
        html = self.file(self.root / "index.html").body.decode()
        html = _ASSET_URL.sub(lambda m: f'{m["attr"]}="{self.url(m["path"], release)}"', html)
        return html.encode()

    def response(self, request: Request, body: bytes, digest: str, media_type: str, headers: dict) -> Response:
        """``body`` as an answer to ``request``: 304 when the browser has it, gzip when it takes it."""
        headers = {**headers, "ETag": f'"{digest}"', "Vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == headers["ETag"]:
            return Response(status_code=304, headers=headers)
        if len(body) >= _GZIP_FROM and "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self._gzip_cached(body, digest), media_type=media_type,
                            headers={**headers, "Content-Encoding": "gzip"})
        return Response(body, media_type=media_type, headers=headers)

    def _gzip_cached(self, body: bytes, digest: str) -> bytes:
        cached = self._gzipped.get(digest)
        if cached is None:
            cached = gzip.compress(body, compresslevel=9, mtime=0)
            with self._lock:
                self._gzipped[digest] = cached
        return cached


class _Static(StaticFiles):
    """``StaticFiles`` that asks the browser to revalidate, so a new release shows at once."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers.update(_REVALIDATE)
        return response


def mount(app: FastAPI, assets: Assets | None = None) -> None:
    """Serve the dashboard at ``/`` and its assets under ``/static``."""
    assets = assets or Assets()

    @app.get("/", include_in_schema=False)
    def dashboard(request: Request) -> Response:
        body = assets.page()
        digest = hashlib.sha256(body).hexdigest()[:16]
        return assets.response(request, body, digest, _TYPES[".html"], _REVALIDATE)

    @app.get("/static/r/{version}/{rel:path}", include_in_schema=False)
    def versioned(version: str, rel: str, request: Request) -> Response:
        path = assets.path_of(rel)
        if path is None:
            raise HTTPException(404, f"no static file {rel!r}")
        f = assets.file(path)
        # An old page (from before a release) still gets a file, but not one to keep.
        fresh = version == assets.version_of(rel)
        return assets.response(request, f.body, f.digest, f.media_type, _FOREVER if fresh else _REVALIDATE)

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(plotly_js_path(), media_type="text/javascript", headers=_REVALIDATE)

    # Registered after the routes above, so theirs win for their paths.
    app.mount("/static", _Static(directory=STATIC_DIR), name="static")
