"""Query families, serving half: the registry of every family's query kinds.

Each family's module here (``app/kinds/<family>.py``) declares its query kinds
(:class:`~app.kinds.kind.QueryKind`: their parameters, answers, empty answers, whether a
rule may watch them and whether and how the Prometheus API serves them) beside the
family's core half in ``tidemark/families/`` (its parts and their worst-case size).

:data:`FAMILIES` is the registry, one entry per family of ``tidemark.families.FAMILIES``
and in its order; :data:`QUERY_KINDS` (kind name → kind) is built from it, and the
answers (``app.answers``), the routes, the alert rules, the Prometheus API
(``app.promql``) and the warm-up read it. Nothing registers a kind by being imported.

Tested by: tests/app/test_kinds.py (the table, the registry against the core's),
tests/app/promql/test_parser.py (metric names).
"""

from __future__ import annotations

from app.kinds import decayed, distinct, keyed, values, windowed
from app.kinds.kind import QueryKind, ServedFamily

__all__ = ["FAMILIES", "QUERY_KINDS"]

FAMILIES: tuple[ServedFamily, ...] = (
    windowed.FAMILY,
    distinct.FAMILY,
    keyed.FAMILY,
    values.FAMILY,
    decayed.FAMILY,
)

QUERY_KINDS: dict[str, QueryKind] = {kind.name: kind for family in FAMILIES for kind in family.kinds}

