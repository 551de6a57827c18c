"""The windowed family's query kinds: ``count`` and ``sum`` over a window, from the
splittable histograms (Busch and Tirthapura 2007, §2 and §3; parts in
``tidemark/families/windowed.py``). Both are monotone in the range, so ``window_estimate``
brackets the window's time grain; a rule may watch either; the Prometheus API serves both
as series (``tidemark_count``, ``tidemark_sum``).

Tested by: tests/app/test_answers_windows.py (against an exact oracle),
tests/app/test_query_path.py, tests/tidemark/test_limits.py.
"""

from __future__ import annotations

from app.kinds.kind import QueryKind, ServedFamily, exact_zero, window_estimate, window_estimates
from tidemark.families import windowed as core

__all__ = ["FAMILY"]


def _windowed(part: str, method: str) -> QueryKind:
    return QueryKind(
        part,
        run=lambda summary, config, window, p: window_estimate(summary[part].query, window, method),
        run_columns=lambda summary, config, windows, p: window_estimates(summary[part].query_columns, windows),
        empty=lambda config, p: exact_zero(method),
        alert=True,
        monotone=True,
        read_ahead=((part, "ranges"),),
    )


FAMILY = ServedFamily(core.FAMILY, (
    _windowed("count", "splittable-histogram"),
    _windowed("sum", "splittable-histogram"),
))
