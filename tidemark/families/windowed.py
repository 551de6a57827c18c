"""The windowed family's parts: ``count`` and ``sum``, each a splittable histogram.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2 (basic counting: Algorithms 1-3,
Theorems 1-2) for ``count``, §3 (sum of positive integers: Algorithm 4, Theorems 3-4) for
``sum`` (``sketches/splittable_histogram.py``).

Worst-case size: the sketch's own ``max_nbytes()`` (its parameters bound it: at most two
intervals of ``max_level + 1`` levels of ``alpha`` buckets, Lemma 2). Sketch windows are
one tick longer than max_window: a window [at - max_window, at] whose ends fall inside
ticks touches window_ticks + 1 of them. The histograms take every total ingest can send
them (``tidemark/limits.py``): no accepted weight can make an update refuse, and a blob
written under an older, smaller cap takes the present one when read back.

Query kinds: ``count``, ``sum`` (``app/kinds/windowed.py``); heavy hitters read ``count``
too (``app/kinds/keyed.py``).

Tested by: tests/sketches/test_splittable_histogram.py, tests/tidemark/test_limits.py,
tests/tidemark/test_capacity.py, tests/app/test_answers_windows.py.
"""

from __future__ import annotations

from tidemark import limits
from sketches.splittable_histogram import SplittableHistogram
from tidemark.families.parts import PartSpec, QueryFamily

__all__ = ["FAMILY", "MAX_TOTAL"]


MAX_TOTAL = {"count": limits.COUNT_MAX_TOTAL, "sum": limits.SUM_MAX_TOTAL}


def _raise_cap(name: str):
    return lambda part: part.raise_max_total(MAX_TOTAL[name])


FAMILY = QueryFamily("windowed", (
    PartSpec("count", SplittableHistogram,
             lambda c, seed, name: SplittableHistogram(c.epsilon, c.window_ticks + 1, MAX_TOTAL["count"]),
             lambda sk, cols: sk.update(cols.ticks), after_read=_raise_cap("count")),
    PartSpec("sum", SplittableHistogram,
             lambda c, seed, name: SplittableHistogram(c.epsilon, c.window_ticks + 1, MAX_TOTAL["sum"]),
             lambda sk, cols: sk.update(cols.ticks, cols.weight), after_read=_raise_cap("sum")),
))
