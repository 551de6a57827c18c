"""The import graph has no arrow running back up, and no circle.

    sketches, sketches_extra  <  tidemark (core)  <  app, workers  <  tidemark_cli (entry points)

``frontend`` talks to the API over HTTP only (the app mounts it, so it imports nothing of
ours above the core). ``sketches_extra`` (structures no stream uses) may import
``sketches``; nothing of the product imports it. Inside a package, no module imports
itself back through others, not even from inside a function: a circle means two modules
that cannot be read, tested or moved apart."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE = {
    "sketches": {"sketches_extra", "tidemark", "app", "workers", "frontend", "tidemark_cli"},
    "sketches_extra": {"tidemark", "app", "workers", "frontend", "tidemark_cli"},
    "tidemark": {"sketches_extra", "app", "workers", "frontend", "tidemark_cli"},
    "app": {"sketches_extra", "workers", "tidemark_cli"},
    "workers": {"sketches_extra", "app", "frontend", "tidemark_cli"},
    "frontend": {"sketches_extra", "workers", "tidemark_cli"},
}
PACKAGES = sorted(ABOVE) + ["tidemark_cli"]


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


# -- circles ------------------------------------------------------------------------------
def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (anywhere in its body, relative
    imports resolved; ``from p import m`` counts ``p.m`` when ``m`` is a module, else ``p``)."""
    files = {_module_name(root, p): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                parent = base
                for _ in range(max(0, node.level - 1)):
                    parent = parent.rpartition(".")[0]
                mod = ".".join(filter(None, [parent if node.level else "", node.module or ""]))
                out |= {f"{mod}.{a.name}" if f"{mod}.{a.name}" in files else mod for a in node.names}
        graph[name] = {m for m in out if m in files and m != name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle ``[a, b, ..., a]`` of ``graph``, or None (depth-first search).

    An ``__init__`` that imports its own submodules is not a circle by itself: a package's
    modules are read through it, so an arrow from a submodule to its own package counts
    only when the package's ``__init__`` does not import that submodule."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node.rpartition(".")[0] or nxt.startswith(node + "."):
                continue  # a module and its own package: Python loads the package first
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    circle = find_circle(import_graph(ROOT, package))
    assert circle is None, " -> ".join(circle)


def test_a_circle_is_caught(tmp_path):
    """The check fails on a synthetic circle, even one closed by an import inside a function."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("from . import c\ndef f():\n    pass\n")
    (pkg / "c.py").write_text("def g():\n    from pkg import a\n")
    assert find_circle(import_graph(tmp_path, "pkg")) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("def g():\n    pass\n")
    assert find_circle(import_graph(tmp_path, "pkg")) is None
