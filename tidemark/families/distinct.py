"""The distinct family's part: ``distinct``, a randomized wave over the keys.

Gibbons, P. B. and Tirthapura, S. (2004). *Distributed streams algorithms for sliding
windows.* Theory of Computing Systems 37. §4.1 (the randomized wave), §4.2 (Theorem 5:
the median of independent instances), §5 (the number of distinct values, Theorem 6)
(``sketches/randomized_wave.py``). Fed the ids of the keyed events only.

Worst-case size: the sketch's own ``max_nbytes()`` (every level of an instance holds at
most ``capacity`` entries, §4.2; a blob holding more is refused).

Query kind: ``distinct`` (``app/kinds/distinct.py``).

Tested by: tests/sketches/test_randomized_wave.py, tests/tidemark/test_capacity.py,
tests/app/test_distinct_before_clock.py, tests/app/test_answers_windows.py.
"""

from __future__ import annotations

from sketches.randomized_wave import RandomizedWave
from tidemark.families.parts import PartSpec, QueryFamily, any_keyed

__all__ = ["FAMILY"]


FAMILY = QueryFamily("distinct", (
    PartSpec("distinct", RandomizedWave,
             lambda c, seed, name: RandomizedWave(c.epsilon, c.delta, c.window_ticks + 1, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids), fed_by=any_keyed),
))
