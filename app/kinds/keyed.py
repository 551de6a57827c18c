"""The keyed family's query kinds, from the ECM-sketch (Papapetrou, Garofalakis and
Deligiannakis 2012, §4.1) and the key dictionary (parts in ``tidemark/families/keyed.py``):
``frequency`` (``key=``), ``heavy-hitters`` (``phi=``; it reads the windowed family's
``count`` too), ``self-join``, and the ``inner-product`` of two streams (a kind over two
streams: ``GET /v1/inner-product?streams=A,B``). A rule may watch all but heavy hitters;
the Prometheus API serves all four as series (heavy hitters one per listed key, the inner
product with ``streams="A,B"``).

Each is monotone in the range, so ``window_estimate`` brackets the window's time grain:
the lower bound from the ticks inside the window, the upper from those touching it.

Tested by: tests/app/test_answers_windows.py (against an exact oracle),
tests/app/test_query_path.py (keyed fast path).
"""

from __future__ import annotations

import bisect

import numpy as np

from app.kinds.kind import QueryError, QueryKind, ServedFamily, Window, window_estimate, window_estimates
from sketches.base import Estimate, SketchError
from tidemark.events import MAX_KEY_BYTES
from tidemark.families import keyed as core
from tidemark.streams import StreamConfig

METHOD = "ecm-sketch/dyadic-exponential-histogram"


def _zero(config: StreamConfig) -> Estimate:
    return Estimate(0.0, 0.0, 0.0, "additive", config.epsilon, 1.0, METHOD)


def _check_key(config: StreamConfig, params: dict) -> dict:
    key = params.get("key")
    if key is None or not 1 <= len(key.encode()) <= MAX_KEY_BYTES:
        raise QueryError(f"frequency needs key=… (1-{MAX_KEY_BYTES} UTF-8 bytes)")
    return {"key": key}


def _frequency(summary, config, window, params):
    ecm = summary["keys"]
    key_id = summary.key_id(params["key"])  # under the deployment's secret
    return window_estimate(lambda lo, hi: ecm.frequency(key_id, lo, hi), window, METHOD)


def _frequency_many(summary, config, windows: list, params) -> list:
    """``_frequency`` of each window (or the SketchError its reads raise): one range per
    set of time buckets its windows read (``range_key``), all of them read in one compiled
    call (``frequency_arrays_many``, the same numbers read by read), each made into the
    Estimate ``frequency`` gives, then bracketed per window as ``window_estimate`` does."""
    ecm = summary["keys"]
    keys = np.array([summary.key_id(params["key"])], np.uint64)
    by_key: dict = {}  # a read per set of buckets (``range_key``: ranges with one key read the same numbers)
    of_range: dict = {}
    for r in dict.fromkeys(r for w in windows for r in (w.outer, w.inner) if r[0] <= r[1]):
        try:
            of_range[r] = by_key.setdefault(ecm.range_key(*r), r)
        except SketchError as e:
            of_range[r] = e
    first = list(by_key.values())
    read = {r: got if isinstance(got, SketchError) else ecm.estimates_of(got, 1)[0]
            for r, got in zip(first, ecm.frequency_arrays_many([(keys, *r) for r in first]))}

    def reading(lo, hi):
        got = of_range[(lo, hi)]
        got = got if isinstance(got, SketchError) else read[got]
        if isinstance(got, SketchError):
            raise got
        return got

    out = []
    for window in windows:
        try:
            out.append(window_estimate(reading, window, METHOD))
        except SketchError as e:
            out.append(e)
    return out


def _self_join(summary, config, window, params):
    return window_estimate(summary["keys"].self_join, window, METHOD)


def _check_phi(config: StreamConfig, params: dict) -> dict:
    try:
        phi = float(params.get("phi", ""))
    except ValueError:
        raise QueryError("heavy-hitters needs phi in (0, 1)") from None
    if not 0 < phi < 1:
        raise QueryError("heavy-hitters needs phi in (0, 1)")
    return {"phi": phi}


class HeavyHitters(list):
    """The list answer, with what it knows of the keys it does not list and the bracket of
    the window's count N (``events``): an unlisted key could reach φ·N only if
    ``unlisted_max ≥ φ·events.lower``."""

    def __init__(self, items, unlisted_max: float, complete: bool, events: tuple[float, float] = (0.0, 0.0)):
        super().__init__(items)
        self.extra = {"unlisted_max": unlisted_max, "complete": bool(complete),
                      "events": {"lower": events[0], "upper": events[1]}}


def _window_uppers(ids, readings: tuple) -> np.ndarray:
    """Each id's window upper bound, as ``window_estimate`` brackets it (the ticks touching
    the window), from its ``readings``."""
    inner, outer = readings
    zeros = np.zeros(len(ids))
    upper_outer = zeros if outer is None else outer[2]
    lower_inner = zeros if inner is None else inner[1]
    # ``bracket``: the upper of the touching ticks, never below the lower of those inside
    return np.maximum(upper_outer, lower_inner)


def _items(keys, readings: list, listed: np.ndarray, window: Window) -> list[dict]:
    """The answer items of the ``listed`` candidates: each key's ``window_estimate`` (its
    inner and outer readings bracketed, as ``bracket`` does) with ``bound_of``'s fields,
    computed for all keys at once with the same float operations."""
    inner, outer = readings

    def reading(r):
        if r is None:  # an exact 0 (``exact_zero``)
            z = np.zeros(listed.size)
            return z, z, z, "relative", 0.0, 1.0, METHOD
        return r[0][listed], r[1][listed], r[2][listed], "additive", r[3], r[4], r[5]

    est, lower, upper, guarantee, eps, conf, method = reading(outer)
    if window.inner != window.outer:
        low = reading(inner)
        lower, upper = low[1], np.maximum(upper, low[1])
        conf = max(0.0, low[5] + conf - 1.0)
        if guarantee == "relative":
            mid = np.where((lower >= 0) & (upper > 0), 2 * lower * upper / (lower + upper), (lower + upper) / 2)
        else:
            mid = (lower + upper) / 2
        est = np.minimum(np.maximum(mid, lower), upper)
    half = (upper - lower) / 2
    items = []
    for key, e, lo, up, h in zip([keys[i] for i in listed.tolist()], est.tolist(), lower.tolist(),
                                 upper.tolist(), half.tolist()):
        items.append({"key": key, "estimate": e, "bound": {
            "lower": lo, "upper": up, "kind": guarantee, "epsilon": eps, "confidence": conf, "method": method,
            "half_width": h, "half_width_relative": 0.0 if h == 0 else (h / abs(e) if e else None)}})
    return items


def _heavy_hitters(summary, config, window, params):
    """Every key with f ≥ φ·N is listed; what is not listed weighs at most ``unlisted_max``.

    Candidates (with their strings) come from the key dictionary over the ticks touching
    the window: a key that is not a candidate weighs at most the dictionary's Misra–Gries
    ``threshold`` there, hence in the window (deterministic). A candidate is listed when
    its ECM upper bound (deterministic: count-min never undercounts) reaches φ·N_low,
    N_low ≤ N the count's lower bound; so a dropped candidate weighs less than φ·N_low.

    * ``unlisted_max`` = max(threshold, the largest ECM upper bound of a dropped
      candidate): every unlisted key weighs at most that.
    * ``complete``: no key with f ≥ φ·N (f > 0) is missing. A missing key is a
      non-candidate, f ≤ threshold; so complete when ``threshold < φ·N_low`` (≤ φ·N), or
      when ``threshold == 0`` (non-candidates are absent from the window).
    """
    got = _heavy_hitters_many(summary, config, [window], params)[0]
    if isinstance(got, SketchError):
        raise got
    return got


class _Listing:
    """What the windows that cover the same time buckets share (neighbouring instants of
    a range, whose windows cover the same wide old buckets): their candidates, the ECM
    readings of those, their upper bounds sorted, and the items of those the lowest of
    the windows' levels lists, made once, in answer order. Each window lists those its own
    level reaches. The items are shared between the answers: read them, never change them
    (``app.answers`` copies an item before it marks it)."""

    def __init__(self, window: Window):
        self.window, self.lowest, self.error = window, np.inf, None

    def reads(self) -> list:
        """The ECM reads its items need, ``(ids, lo, hi)``: the ticks touching the window,
        and those inside it when they differ and are not empty (their reading is then the
        touching one's, or an exact 0)."""
        ids, window = self.found.ids, self.window
        if not len(ids):
            return []
        if window.inner == window.outer or window.inner[0] > window.inner[1]:
            return [(ids, *window.outer)]
        return [(ids, *window.outer), (ids, *window.inner)]

    def settle(self, got: list) -> None:
        """Its items, from the readings of its ``reads`` (or the SketchError of one)."""
        found, window = self.found, self.window
        self.sorted_uppers, self.items, self.listed = [], [], {}
        if not len(found.ids):
            return
        for reading in got:
            if isinstance(reading, SketchError):
                raise reading
        outer = got[0]
        readings = (outer, outer) if window.inner == window.outer else (got[1] if len(got) > 1 else None, outer)
        uppers = _window_uppers(found.ids, readings)
        self.sorted_uppers = np.sort(uppers).tolist()
        shown = np.flatnonzero((uppers >= self.lowest) & (uppers > 0))
        items = _items(found.keys, readings, shown, window)
        # answer order: estimate descending, ties in candidate order (a stable sort)
        order = sorted(range(len(items)), key=lambda i: -items[i]["estimate"])
        self.items = [(items[i], float(uppers[shown[i]])) for i in order]

    def answer(self, level: float, count) -> HeavyHitters:
        # what no listed key reaches: the largest upper bound below the level (a dropped
        # candidate's; uppers are ≥ 0, so a level of 0 drops only zeros)
        below = bisect.bisect_left(self.sorted_uppers, level)
        # Levels with as many uppers below them list the same items: made once (answers
        # listing the same item objects are then shown once, ``app.promql.evaluate``).
        listed = self.listed.get(below)
        if listed is None:
            listed = self.listed[below] = [item for item, upper in self.items if upper >= level]
        dropped_max = self.sorted_uppers[below - 1] if below else 0.0
        threshold = self.found.threshold
        return HeavyHitters(listed, max(threshold, dropped_max), threshold == 0 or threshold < level,
                            (count.lower, count.upper))


def _heavy_hitters_many(summary, config, windows: list, params) -> list:
    """``_heavy_hitters`` of each window (its answer, or the SketchError its reads raise).
    Windows whose reads depend on the same time buckets (each part's ``range_key``: the
    candidates' of the touching ticks, the ECM's of the touching and of the inner ones)
    read the same numbers, so they share one :class:`_Listing`; a range classifies its
    windows' ranges at once (``app.ranges``)."""
    phi = params["phi"]
    candidates, ecm = summary["key_candidates"], summary["keys"]
    todo: list = []
    listings: dict = {}
    for window in windows:
        if window.outer[0] > window.outer[1]:
            todo.append(HeavyHitters([], 0.0, True))
            continue
        try:
            covered = candidates.range_key(*window.outer)
            count = window_estimate(summary["count"].query, window, "splittable-histogram")
            same = window.inner == window.outer
            inner = None if same or window.inner[0] > window.inner[1] else ecm.range_key(*window.inner)
            key = (covered, ecm.range_key(*window.outer), inner, same)
            listing = listings.get(key)
            if listing is None:
                listing = listings[key] = _Listing(window)
            level = phi * count.lower
            listing.lowest = min(listing.lowest, level)
            todo.append((listing, level, count))
        except SketchError as e:
            todo.append(e)
    # every listing's candidates in one call, then every ECM reading of them in one call
    found = candidates.candidates_many([listing.window.outer for listing in listings.values()])
    live = []
    for listing, got in zip(listings.values(), found):
        if isinstance(got, SketchError):
            listing.error = got
        else:
            listing.found = got
            live.append(listing)
    reads = [listing.reads() for listing in live]
    readings = iter(ecm.frequency_arrays_many([r for asked in reads for r in asked]))
    for listing, asked in zip(live, reads):
        try:
            listing.settle([next(readings) for _ in asked])
        except SketchError as e:
            listing.error = e
    return [(got[0].error or got[0].answer(got[1], got[2])) if isinstance(got, tuple) else got for got in todo]


def _same_shape(configs: tuple[StreamConfig, StreamConfig], params: dict) -> dict:
    a, b = configs
    if (a.epsilon, a.delta, a.max_window, a.resolution) != (b.epsilon, b.delta, b.max_window, b.resolution):
        raise QueryError("inner-product needs two streams with the same epsilon, delta, "
                         "max_window and resolution (their sketches must have one shape)")
    return params


def _inner_product(summaries, configs, window, params) -> Estimate:
    """Σ f_A·f_B over the window; 0 exactly while either stream has published nothing."""
    a, b = summaries
    if a is None or b is None:
        return _zero(configs[0])
    return window_estimate(lambda lo, hi: a["keys"].inner_product(b["keys"], lo, hi), window, METHOD)


FAMILY = ServedFamily(core.FAMILY, (
    QueryKind("frequency", _frequency, lambda c, p: _zero(c), _check_key, alert=True, monotone=True,
              run_many=_frequency_many, read_ahead=(("keys", "buckets"),)),
    QueryKind("heavy-hitters", _heavy_hitters, lambda c, p: HeavyHitters([], 0.0, True), _check_phi,
              run_many=_heavy_hitters_many, monotone=True,  # each listed key's count
              read_ahead=(("count", "ranges"), ("keys", "buckets"), ("key_candidates", "buckets"))),
    QueryKind("self-join", _self_join, lambda c, p: _zero(c), alert=True, monotone=True,
              read_ahead=(("keys", "buckets"),),
              run_columns=lambda summary, config, windows, p: window_estimates(summary["keys"].self_join_columns,
                                                                               windows)),
    QueryKind("inner-product", _inner_product, check=_same_shape, streams=2, alert=True, monotone=True),
))
