"""Every limit of what Tidemark accepts, and the capacities sized from them: one place.

Ingest validation (``tidemark/events.py``), stream declarations (``tidemark/streams.py``)
and the sketches a summary builds (``tidemark/summary.py``) all read these numbers, so an
event ingest accepts always fits the structures that will count it (contract §5: no
accepted event is dropped later for a reason ingest could see).

**Time.** Event times are float64 Unix seconds in ``[0, TIME_HORIZON]``, the horizon being
9999-12-31T23:59:59Z (< 2^38 s; ingest also refuses anything more than
``TIDEMARK_MAX_FUTURE`` seconds ahead of the wall clock, which is far earlier). A stream's
``resolution`` must be at least ``FINEST_RESOLUTION = 2^-23`` s (≈ 119 ns): then every tick
``floor(ts / res) <= TIME_HORIZON / res < 2^38 · 2^23 = 2^61``, inside the sketches' tick
range ``(-2^61, 2^61)``, and ``tidemark.ticks.ticks_of`` computes it exactly. Finer grains
could not mean anything anyway: float64 seconds at present-day times are 2^-22 s
(≈ 238 ns) apart. ``max_window`` is at most ``TIME_HORIZON`` and at most
``MAX_WINDOW_TICKS`` ticks.

**Weights.** ``weight`` is in ``[0, MAX_WEIGHT]``. Redis counts a stream's accepted events
in a signed 64-bit integer (``HINCRBY`` refuses to pass 2^63 − 1, so the ingest request
that would fails whole and nothing of it is stored), hence no stream — let alone one shard
or one interval of a sketch — ever takes more than ``MAX_EVENTS`` events, and no interval
of the sum sketch more than ``MAX_EVENTS · MAX_WEIGHT`` (< 2^113) weight. The splittable
histograms of ``count`` and ``sum`` are built with exactly those totals as their
``max_total`` (``COUNT_MAX_TOTAL``, ``SUM_MAX_TOTAL``): the structure adds a level only when
an interval's weight needs it (Lemma 2), so the bound costs nothing until it is used, and
no accepted weight can make an update refuse. Every weight sum stays far below float64's
2^1024, so the decayed sketches' ``total weight overflows float64`` cannot happen either.
The additive decayed sketch keeps its own ``max_total`` (2^48): it sets the finest weight
its sampling levels resolve, and a stream that outgrows ``2·max_total`` is not refused —
the events its top level cannot cover widen its interval by their weight (its
"uncovered events" rule), an honest bound rather than a failure.
"""

from __future__ import annotations

__all__ = ["TIME_HORIZON", "FINEST_RESOLUTION", "TICK_LIMIT", "MAX_WINDOW_TICKS", "MAX_WEIGHT",
           "MAX_KEY_BYTES", "MAX_EVENTS", "COUNT_MAX_TOTAL", "SUM_MAX_TOTAL", "MAX_SHARDS"]

TIME_HORIZON = 253402300799.0  # 9999-12-31T23:59:59Z, < 2^38
FINEST_RESOLUTION = 2.0**-23  # TIME_HORIZON / FINEST_RESOLUTION < 2^61
TICK_LIMIT = 2**61  # the sketches take ticks in (-TICK_LIMIT, TICK_LIMIT)
MAX_WINDOW_TICKS = 2**40 - 1  # the longest window in ticks; its sketches take one tick more (≤ 2^40)
MAX_WEIGHT = 1e15
MAX_KEY_BYTES = 256
MAX_EVENTS = 2**63 - 1  # Redis' int64 counter of a stream's accepted events
COUNT_MAX_TOTAL = float(2**63)  # events in one interval of the count sketch, at most
SUM_MAX_TOTAL = COUNT_MAX_TOTAL * MAX_WEIGHT  # weight in one interval of the sum sketch
MAX_SHARDS = 64

assert TIME_HORIZON < 2.0**38 and TIME_HORIZON / FINEST_RESOLUTION < TICK_LIMIT
