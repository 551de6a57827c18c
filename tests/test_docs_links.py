"""Every relative link of the front page, the benchmark reports and the docs resolves.

README.md, bench/README.md and docs/*.md link to each other and to the code by relative
paths and ``#anchors``; a moved file or a renamed heading would otherwise leave a dead link
that nobody notices until a reader follows it. Anchors are GitHub's: a heading's text in
lower case, without punctuation other than ``-`` and ``_``, spaces made ``-``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """The text outside fenced and indented code blocks and inline code spans."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        lines.append(re.sub(r"`[^`]*`(?!\])", "", line) if "](" not in line else line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return [m.group(1) for m in _LINK.finditer(_prose(path.read_text()))]


def test_the_documents_exist():
    assert (ROOT / "bench" / "README.md").is_file()
    assert (ROOT / "docs" / "operations.md").is_file()
    assert (ROOT / "docs" / "design.md").is_file()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path):
    dead = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            dead.append(f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not dead, f"dead links in {doc.relative_to(ROOT)}:\n" + "\n".join(dead)


def test_the_checker_sees_links_and_anchors(tmp_path):
    """The checker itself: a dead file, a dead anchor and a live one are told apart."""
    (tmp_path / "a.md").write_text("# Title `x`: one, two\n\n[ok](#title-x-one-two) [no](#nope)\n"
                                   "[f](b.md) `[not](a link)`\n\n    [code](ignored)\n")
    assert links(tmp_path / "a.md") == ["#title-x-one-two", "#nope", "b.md"]
    assert anchors(tmp_path / "a.md") == {"title-x-one-two"}
