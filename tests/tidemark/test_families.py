"""``tidemark.families``: the registry of query families, core half. A summary's parts are
the families' parts in the registry's order, each part name is served by one spec of one
family, every part's worst-case size is declared (or named as unbounded), and each
family's module says which paper it implements and which tests cover it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tidemark import families, summary
from tidemark.families import FAMILIES, PARTS, family_of, part_names, spec_of
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig

ROOT = Path(__file__).resolve().parents[2]
CONFIG = StreamConfig(max_window=60.0, epsilon=0.1, delta=0.1, value_min=0.0, value_max=10.0,
                      decays=[{"kind": "polynomial", "alpha": 1.5}, {"kind": "none"}])


def test_the_summary_parts_are_the_families_parts_in_the_registrys_order():
    assert [f.name for f in FAMILIES] == ["windowed", "distinct", "keyed", "values", "decayed"]
    assert PARTS == tuple(p for f in FAMILIES for p in f.parts)
    # The stored layout lists parts in this order: it must not move.
    assert [p.name for p in PARTS] == ["count", "sum", "distinct", "keys", "key_candidates", "values",
                                       "decayed", "decayed-relative/"]
    assert summary.PARTS is PARTS and summary.spec_of is spec_of and summary.part_names is part_names
    assert summary.PartSpec is families.PartSpec and summary.Columns is families.Columns


def test_each_part_name_is_served_by_one_spec_of_one_family():
    names = part_names(CONFIG)
    assert names == ["count", "sum", "distinct", "keys", "key_candidates", "values", "decayed",
                     "decayed-relative/polynomial/1.5", "decayed-relative/none"]
    for name in names:
        assert sum(p.serves(name) for p in PARTS) == 1, name
        assert spec_of(name) in family_of(name).parts
    assert family_of("decayed-relative/none").name == "decayed"
    assert spec_of("decayed-relative/none").instances is not None and spec_of("count").instances is None
    assert spec_of("nope") is None and family_of("nope") is None
    # No value range declared: no decayed parts.
    assert part_names(StreamConfig(max_window=60.0)) == ["count", "sum", "distinct", "keys", "key_candidates",
                                                         "values"]


def test_every_part_declares_its_worst_case_size_but_the_values_sketch():
    """A part's worst-case size is its sketch's ``max_nbytes()`` or its spec's
    ``data_bound``; the windowed quantile sketch has neither (its family's module says why,
    and tests/tidemark/test_capacity.py leaves it out)."""
    built = summary.StreamSummary.create(CONFIG, HashSecret(b"families-test-secret")).build_all()
    unbounded = {name for name, part in built.parts.items()
                 if part.max_nbytes() is None and spec_of(name).data_bound is None}
    assert unbounded == {"values"}
    for name, part in built.parts.items():
        assert spec_of(name).worst_bytes(part, CONFIG) > 0


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_each_family_module_names_its_paper_its_kinds_and_its_tests(family):
    module = importlib.import_module(f"tidemark.families.{family}")
    doc = module.__doc__
    assert module.FAMILY.name == family and module.FAMILY in FAMILIES
    assert re.search(r"\(20\d\d\)", doc) and "§" in doc, "the paper and its sections"
    assert "Worst-case size" in doc
    assert f"app/kinds/{family}.py" in doc, "where its query kinds are"
    tested = doc.strip().rsplit("Tested by:", 1)
    assert len(tested) == 2, "the docstring ends with Tested by: <test files>"
    for path in re.findall(r"tests/[\w/]+\.py", tested[1]):
        assert (ROOT / path).is_file(), path
