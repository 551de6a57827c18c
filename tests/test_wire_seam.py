"""The API and the worker agree through Redis only as ``tidemark.wire`` says.

Nothing outside that package spells a Redis key (the ``tm:`` prefix, or the prefix
constant itself), an ingest log entry's field (``b"d"``, ``b"s"``, ...: redis-py hands the
fields back as bytes), a script that appends to or reads the log (``XADD``, ``XRANGE`` in
Lua), or a shard status's field by its literal name in a module of the API or the worker that reads Redis
keys (``status["events"]``, ``s.get("generation")``, a dict built with the status's fields):
a renamed field then fails here, at once, instead of at run time in a test that starts
Spark. The check reads the source (AST), so it also covers code no test runs."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from tidemark.wire.records import ShardStatus

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ["app", "workers", "tidemark", "tidemark_cli", "bench", "sketches", "frontend"]
WIRE = ROOT / "tidemark" / "wire"
ALIAS = ROOT / "tidemark" / "keys.py"  # kept for branches in flight: re-exports, spells nothing
ENTRY_FIELDS = {b"d", b"n", b"c", b"s", b"g", b"t", b"k"}
STATUS_FIELDS = {f.name for f in fields(ShardStatus)}
SIDES = {"app", "workers", "tidemark", "sample.py"}
KEY_MODULES = {"tidemark.keys", "tidemark.wire", "tidemark.wire.keys"}


def _modules():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if WIRE in path.parents or path == ALIAS:
                continue
            yield path


def _reads_keys(tree: ast.AST) -> bool:
    """Does the module import the key layout (so it reads or writes Redis keys)?"""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in KEY_MODULES:
            if node.module != "tidemark.wire" or any(a.name == "keys" for a in node.names):
                return True
        if isinstance(node, ast.ImportFrom) and node.module == "tidemark":
            if any(a.name == "keys" for a in node.names):
                return True
    return False


def _literal(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def violations(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    # The status field names are the API's status (contract §4) too, which the benches
    # read; the shard status is the seam's two sides' business.
    keyed = _reads_keys(tree) and path.relative_to(root).parts[0] in SIDES
    out = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        value = _literal(node)
        if isinstance(value, str) and "tm:" in value:
            out.append(f"{where} spells a Redis key: {value!r}")
        if isinstance(value, str) and ("'XADD'" in value or "'XRANGE'" in value):
            out.append(f"{where} has a script reading or writing the ingest log")
        if isinstance(value, bytes) and value in ENTRY_FIELDS:
            out.append(f"{where} reads an ingest entry field: {value!r}")
        if isinstance(node, ast.ImportFrom) and node.module in KEY_MODULES:
            if any(a.name == "PREFIX" for a in node.names):
                out.append(f"{where} imports the key prefix")
        if isinstance(node, ast.Attribute) and node.attr == "PREFIX" and \
                isinstance(node.value, ast.Name) and node.value.id == "keys":
            out.append(f"{where} uses the key prefix")
        if not keyed:
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                _literal(node.slice) in STATUS_FIELDS:
            out.append(f"{where} reads a shard status field: [{_literal(node.slice)!r}]")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "get" and node.args and _literal(node.args[0]) in STATUS_FIELDS:
            out.append(f"{where} reads a shard status field: .get({_literal(node.args[0])!r})")
        if isinstance(node, ast.Dict):
            named = {_literal(k) for k in node.keys if k is not None} & STATUS_FIELDS
            if len(named) >= 3:
                out.append(f"{where} builds a shard status by hand: {sorted(named)}")
    return out


@pytest.mark.parametrize("package", PRODUCT)
def test_nothing_outside_the_wire_spells_the_seam(package):
    found = [v for path in _modules() if path.parts[len(ROOT.parts)] == package
             for v in violations(path)]
    assert not found, "\n".join(found)


def test_the_check_sees_each_kind_of_spelling(tmp_path):
    """The grep is not blind: each spelling it forbids, written in a module, is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from tidemark.wire import keys\n"
        "A = 'tm:streams'\n"
        "B = keys.PREFIX + 'x'\n"
        "S = \"redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])\"\n"
        "def f(fields, status):\n"
        "    return fields[b's'], status['events'], status.get('generation'), \\\n"
        "        {'version': 1, 'events': 2, 'late_dropped': 0}\n")
    found = violations(sample, tmp_path)
    kinds = ["spells a Redis key", "uses the key prefix", "script reading or writing",
             "entry field", "[\'events\']", ".get('generation')", "builds a shard status"]
    for kind in kinds:
        assert any(kind in v for v in found), (kind, found)
