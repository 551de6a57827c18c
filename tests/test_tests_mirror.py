"""Every module with logic names its test: a newcomer reading a module finds what checks it.

A module ``<package>/…/<module>.py`` has its mirror ``tests/<package>/…/test_<module>.py``,
or its docstring ends with a paragraph ``Tested by: tests/….py (…), …`` naming test files
that exist. A package's ``__init__.py`` or ``__main__.py`` that is tiny or only gathers
names (no function or class of its own) has no logic to test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "tidemark", "tidemark_cli", "sketches", "workers", "frontend")
TINY = 400  # characters
NAMED = re.compile(r"tests/[\w/.-]+?\.py")


def _trivial(path: Path, tree: ast.Module, text: str) -> bool:
    if path.name not in ("__init__.py", "__main__.py"):
        return False
    defines = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in ast.walk(tree))
    return len(text) < TINY or not defines


def _unnamed(path: Path, root: Path = ROOT) -> str | None:
    """Why ``path`` breaks the rule, or None."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    rel = path.relative_to(root)
    if _trivial(path, tree, text) or (root / "tests" / rel.parent / f"test_{path.stem}.py").exists():
        return None
    doc = ast.get_docstring(tree) or ""
    last = re.split(r"\n\s*\n", doc.strip())[-1]
    if not last.startswith("Tested by:"):
        return f"no tests/{rel.parent}/test_{path.stem}.py and no closing 'Tested by:' paragraph"
    named = NAMED.findall(last)
    absent = [t for t in named if not (root / t).is_file()]
    if not named or absent:
        return f"'Tested by:' names {'no test file' if not named else ', '.join(absent) + ', which do not exist'}"
    return None


def test_every_module_names_a_test_that_exists():
    modules = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(modules) > 100  # the walk sees the packages
    broken = {str(p.relative_to(ROOT)): why for p in modules if (why := _unnamed(p))}
    assert not broken, "\n".join(f"{m}: {why}" for m, why in broken.items())


def test_the_rule_sees_a_missing_test(tmp_path):
    """The check itself: a closing paragraph naming an absent file, or none, breaks it;
    a mirror, or a gathering ``__init__.py``, needs none."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text("")
    module = tmp_path / "thing.py"
    module.write_text('"""Does things.\n\nTested by: tests/test_real.py (all of it)."""\ndef f(): pass\n')
    assert _unnamed(module, tmp_path) is None
    module.write_text('"""Does things.\n\nTested by: tests/test_gone.py."""\ndef f(): pass\n')
    assert "tests/test_gone.py" in _unnamed(module, tmp_path)
    module.write_text('"""Tested by: tests/test_real.py.\n\nThen more."""\ndef f(): pass\n')
    assert "no closing" in _unnamed(module, tmp_path)
    (tmp_path / "tests" / "test_thing.py").write_text("")
    assert _unnamed(module, tmp_path) is None  # its mirror
    init = tmp_path / "__init__.py"
    init.write_text('"""A package."""\n' + "from os import path\n" * 40)
    assert _unnamed(init, tmp_path) is None
    init.write_text(init.read_text() + "def f(): pass\n")
    assert "no closing" in _unnamed(init, tmp_path)
