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


# -- private names ------------------------------------------------------------------------
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _owner(module: str) -> str:
    """Who may use ``module``'s names: a private module (``sketches._codec``) belongs to its
    package, so its package's modules share it; any other module to itself."""
    head, _, last = module.rpartition(".")
    return head if _private(last) else module


def _may_use(user: str, module: str) -> bool:
    owner = _owner(module)
    return user == owner or user.startswith(owner + ".")


def private_reaches(root: Path, package: str, ours: tuple[str, ...] = tuple(PACKAGES)) -> list[str]:
    """Where a module of ``package`` uses another module's private name: ``from m import
    _x``, ``import m._x``, or ``alias._x`` with ``alias`` bound to a module by an import
    (relative imports resolved), among the packages ``ours``. A private module is private to
    its package (the package's own modules may import it); ``__dunder__`` names are not
    private."""
    files = {_module_name(root, p): p for p in (root / package).rglob("*.py")}
    found = []
    for name, path in sorted(files.items()):
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # local name -> the module it is bound to

        def reach(node, module: str, attr: str) -> None:
            target = f"{module}.{attr}"
            if _private(attr) and not _may_use(name, target):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {target}")

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] not in ours:
                        continue
                    bits = a.name.split(".")
                    for i in range(1, len(bits)):
                        reach(node, ".".join(bits[:i]), bits[i])
                    aliases[a.asname or bits[0]] = a.name if a.asname else bits[0]
            elif isinstance(node, ast.ImportFrom):
                parent = base
                for _ in range(max(0, node.level - 1)):
                    parent = parent.rpartition(".")[0]
                mod = ".".join(filter(None, [parent if node.level else "", node.module or ""]))
                if mod.split(".")[0] not in ours:
                    continue
                bits = mod.split(".")
                for i in range(1, len(bits)):
                    reach(node, ".".join(bits[:i]), bits[i])
                for a in node.names:
                    if a.name != "*":
                        reach(node, mod, a.name)
                        if f"{mod}.{a.name}" in files:
                            aliases[a.asname or a.name] = f"{mod}.{a.name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases:
                reach(node, aliases[node.value.id], node.attr)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_reached_across_modules(package):
    """A leading underscore means "this module's own" (a private module: "this package's
    own"); the packages keep to it, so renaming a private name never breaks another module.
    Tests may reach in; the packages may not."""
    assert private_reaches(ROOT, package) == []


def test_a_private_reach_is_caught(tmp_path):
    """The check fails on each way in, and lets a private module's package share it."""
    for d in ("pkg/sub", "other"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("pkg/__init__.py", "pkg/sub/__init__.py", "other/__init__.py"):
        (tmp_path / f).write_text("")
    pkg = tmp_path / "pkg"
    (pkg / "a.py").write_text("_x = 1\n__all__ = []\n")
    (pkg / "_kern.py").write_text("def f():\n    pass\n")
    (pkg / "b.py").write_text("from pkg import _kern\nfrom . import a\nimport pkg.a as m\n"
                              "from pkg.a import __all__\ny = a.__all__ + m.__all__\n")
    (pkg / "sub" / "d.py").write_text("from pkg import _kern\nfrom .._kern import f\n")
    assert private_reaches(tmp_path, "pkg", ("pkg", "other")) == []
    (pkg / "c.py").write_text("from pkg.a import _x\nfrom . import a\nimport pkg.a as m\n"
                              "y = a._x + m._y\n")
    (tmp_path / "other" / "e.py").write_text("import pkg._kern\nfrom pkg._kern import f\n")
    assert private_reaches(tmp_path, "pkg", ("pkg", "other")) == [
        "pkg/c.py:1: pkg.a._x", "pkg/c.py:4: pkg.a._x", "pkg/c.py:4: pkg.a._y"]
    assert private_reaches(tmp_path, "other", ("pkg", "other")) == [
        "other/e.py:1: pkg._kern", "other/e.py:2: pkg._kern"]
