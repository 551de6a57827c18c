"""The dashboard: static HTML, CSS and JavaScript served next to the API.

The page talks to the API over HTTP only (``/v1/...`` and the ``/v1/live`` event stream),
exactly as any other client would. plotly.js comes from the installed ``plotly`` Python
package, so the dashboard works offline and never reaches a CDN.

Routes added by :func:`mount`:

* ``/`` — the dashboard page;
* ``/static/vendor/plotly.min.js`` — plotly.js from the ``plotly`` package;
* ``/static/...`` — the files of ``frontend/static``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["mount", "plotly_js_path", "STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parent / "static"

# Our own files change with the code: the browser revalidates them (ETag) on each load.
_REVALIDATE = {"Cache-Control": "no-cache"}
# plotly.js changes only with the installed package (its version is in the ETag).
_CACHE_A_DAY = {"Cache-Control": "public, max-age=86400"}


@lru_cache(maxsize=1)
def plotly_js_path() -> Path:
    """The ``plotly.min.js`` bundled with the installed ``plotly`` Python package."""
    package = resources.files("plotly")
    for candidate in ("package_data/plotly.min.js", "offline/plotly.min.js"):
        path = Path(str(package.joinpath(candidate)))
        if path.is_file():
            return path
    found = sorted(Path(str(package)).rglob("plotly.min.js"))
    if not found:
        raise FileNotFoundError("plotly.min.js is not in the installed plotly package")
    return found[0]


class _Static(StaticFiles):
    """``StaticFiles`` that asks the browser to revalidate, so a new release shows at once."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers.update(_REVALIDATE)
        return response


def mount(app: FastAPI) -> None:
    """Serve the dashboard at ``/`` and its assets under ``/static``."""

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=_REVALIDATE)

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(plotly_js_path(), media_type="text/javascript", headers=_CACHE_A_DAY)

    # Registered after the route above, so the plotly route wins for its path.
    app.mount("/static", _Static(directory=STATIC_DIR), name="static")
