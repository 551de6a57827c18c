"""Query families, core half: the registry of every family's summary parts.

A query family is one unit: its module here (``tidemark/families/<family>.py``) declares
its parts (how each is built, fed and read back), their proven worst-case size and the
paper sections they implement; its module in ``app/kinds/`` declares its query kinds,
their parameters and answers and how the Prometheus API serves them. The worker reads
the parts (it never imports ``app``); the API reads both.

:data:`FAMILIES` is the registry, in the order a summary lists its parts; a summary's
parts (``tidemark.summary.PARTS``), the capacity check (``tidemark.capacity``) and the
app's registry (``app.kinds``) all read it. Adding a family: its module here, its module
in ``app/kinds/``, and one line in each registry.

Tested by: tests/tidemark/test_families.py, tests/tidemark/test_summary.py,
tests/tidemark/test_capacity.py.
"""

from __future__ import annotations

from tidemark.families import decayed, distinct, keyed, values, windowed
from tidemark.families.parts import Columns, PartSpec, QueryFamily
from tidemark.streams import StreamConfig

__all__ = ["FAMILIES", "PARTS", "Columns", "PartSpec", "QueryFamily", "spec_of", "part_names", "family_of"]

FAMILIES: tuple[QueryFamily, ...] = (
    windowed.FAMILY,
    distinct.FAMILY,
    keyed.FAMILY,
    values.FAMILY,
    decayed.FAMILY,
)

PARTS: tuple[PartSpec, ...] = tuple(spec for family in FAMILIES for spec in family.parts)


def spec_of(name: str) -> PartSpec | None:
    """The spec of a part name (one of ``PARTS``), None for a name no spec serves."""
    return next((p for p in PARTS if p.serves(name)), None)


def family_of(name: str) -> QueryFamily | None:
    """The family whose parts include the part ``name``, None for a name none serves."""
    return next((f for f in FAMILIES if any(p.serves(name) for p in f.parts)), None)


def part_names(config: StreamConfig) -> list[str]:
    """The parts a stream of these settings has (each built when first needed)."""
    return [name for p in PARTS for name in p.names(config)]
