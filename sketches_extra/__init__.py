"""Sketches built, tested and benchmarked but not served: no stream declares them, so
``app``, ``workers`` and ``tidemark`` never import this library (``tests/test_layers.py``).
It is a library of its own beside :mod:`sketches`, whose parts it uses; :mod:`sketches`
knows nothing of it.

* :class:`~sketches_extra.exponential_histogram.ExponentialHistogram` and
  :class:`~sketches_extra.deterministic_wave.DeterministicWave` — sliding-window counts
  and sums of *in-order* streams (Datar et al. 2002; Gibbons & Tirthapura 2002), with
  O(1) worst-case updates for the wave. The product's streams arrive out of order and
  from many shards, which the splittable histogram serves.
* :class:`~sketches_extra.dyadic.DyadicECM` — range queries over key ids from dyadic
  levels of ECM sketches (Papapetrou et al. §6); no query kind asks for it yet.

They obey the same :class:`~sketches.base.Sketch` contract and keep their tests
(``tests/sketches_extra``) and benchmarks (``bench/bench_synchronous_counters.py``,
``bench/bench_ecm.py``).
"""

from sketches_extra.deterministic_wave import DeterministicWave
from sketches_extra.dyadic import DyadicECM
from sketches_extra.exponential_histogram import ExponentialHistogram

__all__ = ["DeterministicWave", "DyadicECM", "ExponentialHistogram"]
