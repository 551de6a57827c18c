"""Sketches that are part of the library but not of the product: no stream declares
them, so ``app``, ``workers`` and ``tidemark`` never import this package.

* :class:`~sketches.extra.exponential_histogram.ExponentialHistogram` and
  :class:`~sketches.extra.deterministic_wave.DeterministicWave` — sliding-window counts
  and sums of *in-order* streams (Datar et al. 2002; Gibbons & Tirthapura 2002), with
  O(1) worst-case updates for the wave. The product's streams arrive out of order and
  from many shards, which the splittable histogram serves.
* :class:`~sketches.extra.dyadic.DyadicECM` — range queries over key ids from dyadic
  levels of ECM sketches (Papapetrou et al. §6); no query kind asks for it yet.

They obey the same :class:`~sketches.base.Sketch` contract and keep their tests
(``tests/sketches/extra``) and benchmarks (``bench/bench_synchronous_counters.py``,
``bench/bench_ecm.py``).
"""

from sketches.extra.deterministic_wave import DeterministicWave
from sketches.extra.dyadic import DyadicECM
from sketches.extra.exponential_histogram import ExponentialHistogram

__all__ = ["DeterministicWave", "DyadicECM", "ExponentialHistogram"]
