"""What a query family's core half declares: its summary parts (:class:`PartSpec`), each
with how it is built, fed and read back and its proven worst-case size, gathered in a
:class:`QueryFamily`; and :class:`Columns`, the event columns a part is fed.

A family's module (``tidemark/families/<family>.py``) declares one ``FAMILY``; the
registry (``tidemark/families/__init__.py``) lists them. The family's query kinds and
answers are its serving half, in ``app/kinds/<family>.py``: the worker needs the parts
and never imports ``app``.

Tested by: tests/tidemark/test_families.py, tests/tidemark/test_capacity.py
(``worst_bytes``), tests/tidemark/test_summary_columns.py (``fed_by``, ``feed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from tidemark.streams import StreamConfig

__all__ = ["Columns", "PartSpec", "QueryFamily", "log_window", "any_keyed", "any_valued"]


@dataclass
class Columns:
    """Event columns in the forms sketches take."""

    ticks: np.ndarray  # int64 ticks at the stream's resolution
    weight: np.ndarray  # float64 >= 0
    keyed: np.ndarray  # bool: the event has a key
    key_ids: np.ndarray  # uint64 ids of the keyed events
    keys: Sequence[str]  # the key strings of the keyed events (a list or an object array)
    valued: np.ndarray  # bool: the event has a value
    values: np.ndarray  # float64 values of the valued events


@dataclass(frozen=True)
class PartSpec:
    name: str  # the part's name; with ``instances``, the prefix of the names it gives
    cls: type  # the sketch class
    build: Callable[[StreamConfig, int, str], object]  # (config, seed, part name) -> sketch
    feed: Callable[[object, Columns], None]
    wanted: Callable[[StreamConfig], bool] = lambda config: True
    # Does this batch hold anything for the part? (An absent part is built on first use.)
    fed_by: Callable[[Columns], bool] = lambda cols: len(cols.ticks) > 0
    # One part per name this gives (each starting with ``name``), e.g. one per declared
    # decay; None: one part named ``name``.
    instances: Callable[[StreamConfig], Iterable[str]] | None = None
    # The worst-case bytes of a part whose space follows the data (``max_nbytes()`` None:
    # no bound set by its parameters), from what its paper lets it keep on an orderly
    # stream; read by ``tidemark.capacity`` when a stream is declared.
    data_bound: Callable[[object, StreamConfig], float] | None = None
    # Applied to a part read back from bytes (a blob written under an older, smaller cap
    # takes the present one); None: the part is used as read.
    after_read: Callable[[object], None] | None = None

    def worst_bytes(self, part, config: StreamConfig) -> float:
        """The part's worst-case bytes under ``config``: its own bound where its parameters
        set one, else ``data_bound``, else its present size."""
        bound = part.max_nbytes()
        if bound is not None:
            return float(bound)
        if self.data_bound is not None:
            return float(self.data_bound(part, config))
        return float(part.nbytes) if hasattr(part, "nbytes") else 0.0

    def names(self, config: StreamConfig) -> list[str]:
        if not self.wanted(config):
            return []
        return list(self.instances(config)) if self.instances is not None else [self.name]

    def serves(self, name: str) -> bool:
        return name.startswith(self.name) if self.instances is not None else name == self.name


@dataclass(frozen=True)
class QueryFamily:
    """The core half of a query family: its name and its summary parts, in the order a
    summary lists them (its module's docstring names the paper and sections they implement
    and the proof of each part's worst-case size)."""

    name: str
    parts: tuple[PartSpec, ...]


def any_keyed(cols: Columns) -> bool:
    """Does the batch hold a keyed event? (``fed_by`` of the parts fed keys.)"""
    return bool(cols.keyed.any())


def any_valued(cols: Columns) -> bool:
    """Does the batch hold an event with a value? (``fed_by`` of the parts fed values.)"""
    return bool(cols.valued.any())


def log_window(config: StreamConfig) -> int:
    """⌈log₂(window ticks + 2)⌉: the dyadic levels a window spans (the data bounds' factor)."""
    return max(1, math.ceil(math.log2(config.window_ticks + 2)))
