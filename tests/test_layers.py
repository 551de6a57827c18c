"""The import graph has no arrow running back up: each layer imports only those below it.

    sketches  <  tidemark (core)  <  app, workers  <  tidemark_cli (entry points)

``frontend`` talks to the API over HTTP only (the app mounts it, so it imports nothing of
ours above the core)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE = {
    "sketches": {"tidemark", "app", "workers", "frontend", "tidemark_cli"},
    "tidemark": {"app", "workers", "frontend", "tidemark_cli"},
    "app": {"workers", "tidemark_cli"},
    "workers": {"app", "frontend", "tidemark_cli"},
    "frontend": {"workers", "tidemark_cli"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_import_runs_back_up(package):
    wrong = {str(p.relative_to(ROOT)): sorted(_imports(p) & ABOVE[package])
             for p in (ROOT / package).rglob("*.py")}
    assert not {k: v for k, v in wrong.items() if v}
