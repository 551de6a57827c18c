"""The values family's part: ``values``, the windowed quantile sketch of the events' values.

Busch, C. and Tirthapura, S. (2007). *A deterministic algorithm for summarizing
asynchronous streams over a sliding window.* STACS. §2.1 (dyadic time ranges), §2.2
(Lemma 1, Proposition 1, Lemma 3 and Theorem 1: the rank error), §3 (a batch as one
insertion, Theorem 3); values in logarithmic buckets as in DDSketch (Masson, Rim and Lee,
VLDB 2019, §2) (``sketches/windowed_quantiles.py``). Fed the events that have a value.

Worst-case size: none proven from the declaration. The nodes follow the ticks (at worst
one per dyadic range meeting the window, each with a count per value key met:
``WindowedQuantiles.max_nbytes``), a bound no declared setting sets; the capacity check
counts the part at its size when built (empty), and tests/tidemark/test_capacity.py
leaves it out of the worst-case check.

Query kinds: ``quantiles``, ``distribution`` and ``decayed-quantile``
(``app/kinds/values.py``).

Tested by: tests/sketches/test_windowed_quantiles.py, tests/sketches/test_quantile_brackets.py,
tests/app/test_kinds.py, tests/app/test_history.py.
"""

from __future__ import annotations

from sketches.windowed_quantiles import WindowedQuantiles
from tidemark.families.parts import PartSpec, QueryFamily, any_valued

__all__ = ["FAMILY"]


FAMILY = QueryFamily("values", (
    PartSpec("values", WindowedQuantiles,
             lambda c, seed, name: WindowedQuantiles(c.epsilon, c.window_ticks + 1, c.value_accuracy),
             lambda sk, cols: sk.update(cols.ticks[cols.valued], cols.values), fed_by=any_valued),
))
