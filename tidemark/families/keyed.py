"""The keyed family's parts: ``keys``, an ECM-sketch of the keys' frequencies, and
``key_candidates``, a key dictionary naming the keys that may be heavy.

Papapetrou, O., Garofalakis, M. and Deligiannakis, A. (2012). *Sketch-based querying of
distributed sliding-window data streams.* VLDB. §4 (the ECM-sketch: a Count-Min array of
sliding-window counters), §4.1 (point, inner-product and self-join queries), §5.3 (its
merge) (``sketches/ecm.py``). Heavy hitters (§6.1 finds them with dyadic sketches) are
found here from candidates: per dyadic time bucket a Misra-Gries summary (Agarwal et al.,
*Mergeable Summaries*, PODS 2012, §2) with the keys' strings
(``sketches/key_dictionary.py``). Both are fed the keyed events only.

Worst-case size: both follow the data (``max_nbytes()`` None), bounded here for an orderly
stream: the ECM-sketch keeps one window counter of O(log W / ε_sw) buckets per cell
(§3's exponential histogram, ``_ecm_bound``); the dictionary keeps, per time bucket,
``capacity`` keys of up to 256 bytes (``_candidates_bound``).

Query kinds: ``frequency``, ``heavy-hitters``, ``self-join`` and ``inner-product`` over
two streams (``app/kinds/keyed.py``).

Tested by: tests/sketches/test_ecm.py, tests/sketches/test_key_dictionary.py,
tests/tidemark/test_capacity.py, tests/app/test_answers_windows.py,
tests/app/test_query_path.py, tests/app/test_kinds.py.
"""

from __future__ import annotations

import math

from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary
from tidemark.families.parts import PartSpec, QueryFamily, any_keyed, log_window
from tidemark.streams import StreamConfig

__all__ = ["FAMILY", "candidate_k"]


def candidate_k(epsilon: float) -> int:
    """Keys kept per time bucket: a key left out has ≤ (1+R)·N/(k+1) events, below φ·N
    for every φ ≥ ε/2 or so."""
    return min(65535, max(16, math.ceil(4 / epsilon)))


def _ecm_bound(part, config: StreamConfig) -> float:
    """ECM: one window counter of O(log W / ε_sw) buckets per cell."""
    return 16.0 * part.n_cells * (math.ceil(1 / part.eps_sw) + 1) * log_window(config)


def _candidates_bound(part, config: StreamConfig) -> float:
    """Key dictionary: per time bucket, ``capacity`` keys of up to 256 bytes."""
    return (256.0 + 16) * part.capacity * log_window(config) * 2


FAMILY = QueryFamily("keyed", (
    PartSpec("keys", ECMSketch,
             lambda c, seed, name: ECMSketch(c.epsilon, c.delta, c.window_ticks + 1, seed),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.key_ids), fed_by=any_keyed,
             data_bound=_ecm_bound),
    PartSpec("key_candidates", KeyDictionary,
             lambda c, seed, name: KeyDictionary(candidate_k(c.epsilon), c.window_ticks + 1, c.epsilon),
             lambda sk, cols: sk.update(cols.ticks[cols.keyed], cols.keys, cols.key_ids), fed_by=any_keyed,
             data_bound=_candidates_bound),
))
