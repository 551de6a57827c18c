"""Answers over time: one query at many instants of one published summary, in one pass.

The history route, the Prometheus ``query_range`` and the dashboard's charts ask the same
query at hundreds of instants. Each point here is exactly the answer
``GET /v1/streams/{name}/{kind}?at=t`` gives from the same summary (``app.answers.answer``,
bound included: ``tests/app/test_ranges.py`` holds them equal at every step), but the work
is shared across the instants:

* **Windows in one pass.** The tick ranges of every instant's window come from one call of
  the exact batched tick rule (``tidemark.ticks.ticks_of``) instead of one exact rational
  computation per instant (``windows_at``; equal to ``app.answers.parse_window``).
* **Sketch reads in one pass.** Before any instant is answered, every tick range the
  instants will read from the count and sum histograms is read in one compiled pass
  (``SplittableHistogram.query_many``: the suffix terms of all ranges per interval, in
  integers), and the rank tables of the quantile and distribution kinds in one sweep over
  time (``WindowedQuantiles.rank_tables``); the instants' answers take their readings from
  them (``_RangeView``), so the answer code is the instant's own. Which parts a kind reads
  ahead, and how, its family declares beside the kind (``QueryKind.read_ahead``). (The
  additive decayed sum needs no read-ahead: its sketch keeps per-tick sums and evaluates a
  decay once per tick at any instant.)
* **Points kept across versions.** A point is the answer of the version it was read
  from; it stays the answer of every later version that added no event at or before its
  instant. Each publish says the smallest event time it added, so a refreshed panel
  (Grafana's, the dashboard's) computes only its new steps and the steps a publish
  reached (``RangeCache``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from fractions import Fraction

import numpy as np
import orjson

from app.answers import QUERY_KINDS, QueryError, answer, as_of, nothing_lost, parse_window, run, too_old
from sketches.base import Estimate, SketchError
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from tidemark.ticks import EMPTY_RANGE, Window, ticks_of

__all__ = ["windows_at", "answers_at", "as_json", "RangeCache", "kept_point", "params_key", "refused"]

# Which parts each kind reads ahead, and how: its family declares it (``QueryKind.read_ahead``).
_READ_AHEAD = {name: kind.read_ahead for name, kind in QUERY_KINDS.items() if kind.read_ahead}


def windows_at(params: dict, config: StreamConfig, clock: float | None,
               ats: list[float]) -> list[Window | QueryError]:
    """``parse_window({**params, "at": repr(at)}, config, clock)`` for every ``at`` (the
    ``window`` parameter read once), each a :class:`Window` or the :class:`QueryError` it
    raises. The ticks of the four floats each window is read from (module notes of
    ``tidemark.ticks``) are found for all instants at once."""
    # The window itself checked once (at the clock, where no window is too old to answer).
    seconds = parse_window({k: v for k, v in params.items() if k != "at"}, config, clock).seconds
    res = config.resolution
    at = np.asarray(ats, np.float64)
    # ``float_at_or_above(at − seconds)``: the rounded difference, one float up when the
    # rounding went down (TwoSum gives its exact error e: at − seconds = d + e).
    d = at - seconds
    bb = d - at
    e = (at - (d - bb)) + (-seconds - bb)
    start = np.where(e > 0, np.nextafter(d, np.inf), d)
    floats = np.concatenate([start, np.nextafter(start, -np.inf), at, np.nextafter(at, np.inf)])
    if not np.isfinite(floats).all():  # beyond what the batched rule covers: one at a time
        return [_one(params, config, clock, a) for a in ats]
    k = at.size
    ticks = ticks_of(floats, res)
    t_start, t_before, t_at, t_after = ticks[:k], ticks[k:2 * k], ticks[2 * k:3 * k], ticks[3 * k:]
    t_clock = None if clock is None else int(ticks_of(np.array([clock]), res)[0])
    late = _too_old(at, seconds, clock, config.max_window)
    offsets = _offsets(at, t_at, res)
    if offsets is None:
        res_q = Fraction(res)
        offsets = [float(Fraction(float(a)) - int(now) * res_q) for a, now in zip(ats, t_at)]
    # ``last``: at or past the clock, the clock's tick; else the last tick wholly at or
    # before ``at`` (one before the tick of the float above it) and the one ``at`` is in
    at_clock = np.zeros(k, bool) if clock is None else clock <= at
    last_top = np.where(at_clock, t_clock or 0, t_at)
    last_whole = np.where(at_clock, t_clock or 0, np.minimum(t_after - 1, t_at))
    # the window starts after ``at`` (a zero length rounded) or after the clock: no tick
    nothing = start > at if clock is None else (start > at) | (clock < start)
    outer_lo = t_start
    inner_lo = np.maximum(t_before + 1, outer_lo)
    outer_empty = nothing | (outer_lo > last_top)
    inner_empty = nothing | (inner_lo > last_whole)
    columns = (late.tolist(), outer_lo.tolist(), last_top.tolist(), inner_lo.tolist(), last_whole.tolist(),
               outer_empty.tolist(), inner_empty.tolist(), t_at.tolist(), np.asarray(offsets).tolist())
    out: list[Window | QueryError] = []
    for a, late_i, olo, ohi, ilo, ihi, o_empty, i_empty, now, offset in zip(map(float, ats), *columns):
        if late_i:
            out.append(too_old(a, seconds, clock, config.max_window))
            continue
        out.append(Window(seconds, a, EMPTY_RANGE if i_empty else (ilo, ihi), EMPTY_RANGE if o_empty else (olo, ohi),
                          (ihi, ohi), now, offset, clock, res))
    return out


def _too_old(at, seconds, clock, max_window) -> np.ndarray:
    """``at − seconds < clock − max_window`` exactly (``parse_window``'s refusal): decided
    on the rounded differences where they are far apart (each is within half an ulp of
    its exact value), in rationals where they are close."""
    if clock is None:
        return np.zeros(at.shape, bool)
    d = at - seconds
    oldest = clock - max_window
    gap = np.abs(d - oldest)
    near = gap <= 4 * np.spacing(np.maximum(np.abs(d), abs(oldest)))
    late = d < oldest
    if near.any():
        exact_oldest = Fraction(clock) - Fraction(max_window)
        for i in np.flatnonzero(near).tolist():
            late[i] = Fraction(float(at[i])) - Fraction(seconds) < exact_oldest
    return late


def _offsets(at, now, res: float):
    """``at − now·res`` exactly, where floats give it: ``res`` a power of two (``now·res``
    exact below 2^53 ticks) and ``at`` at least twice it (Sterbenz: the difference of two
    floats within a factor two is exact). None otherwise (rationals, one at a time)."""
    mantissa, _ = np.frexp(res)
    if mantissa != 0.5 or np.any(np.abs(now) >= 2**53) or np.any(at < 2 * res):
        return None
    return at - now.astype(np.float64) * res


def _one(params, config, clock, at) -> Window | QueryError:
    try:
        return parse_window({**params, "at": repr(float(at))}, config, clock)
    except QueryError as e:
        return e


class _Readings:
    """A histogram part whose ``query`` answers the ranges read ahead from the readings
    (and reads any other range itself)."""

    def __init__(self, part, readings: dict):
        self._part, self._readings = part, readings

    def query(self, lo: int, hi: int):
        got = self._readings.get((lo, hi))
        if got is None:
            return self._part.query(lo, hi)
        if isinstance(got, SketchError):
            raise got
        return got

    def __getattr__(self, name):
        return getattr(self._part, name)


class _Tables:
    """The value part, answering the ranges read ahead from their rank tables (one
    ``RankTables`` batch, ``rows``: each (range, inner) pair's row or its SketchError)."""

    def __init__(self, part, batch, rows: dict):
        self._part, self._batch, self._rows, self._brackets = part, batch, rows, {}

    def _row(self, lo, hi, inner):
        got = self._rows.get(((lo, hi), None if inner is None else tuple(inner)))
        if isinstance(got, SketchError):
            raise got
        return got

    def quantiles(self, qs, lo, hi, inner=None):
        """The part's ``quantiles``; the brackets of every table read ahead are found at
        the first call for these ``qs`` (each instant asks the same), all at once."""
        row = self._row(lo, hi, inner)
        if row is None:
            return self._part.quantiles(qs, lo, hi, inner)
        got = self._brackets.get(tuple(qs))
        if got is None:
            got = self._brackets[tuple(qs)] = self._part.brackets_of(qs, self._batch)
        return got[row]

    def rank_table(self, lo, hi, inner=None):
        row = self._row(lo, hi, inner)
        return self._part.rank_table(lo, hi, inner) if row is None else self._batch.table(row)

    def __getattr__(self, name):
        return getattr(self._part, name)


class _ByBuckets:
    """An ECM-family part (``keys``, ``key_candidates``) whose reads are made once per
    set of time buckets: a read of ``[lo, hi]`` depends on the range only through
    ``range_key`` (the buckets it covers), and the windows of neighbouring instants
    often cover the same ones (old buckets are wide). A read's other arguments (a key
    id, the candidate ids) are part of what is kept; the results are shared, never
    changed by their readers."""

    _READS = ("frequency", "self_join")  # (heavy hitters batch their own reads: app.kinds.keyed)

    def __init__(self, part, ranges):
        self._part, self._kept = part, {}
        self._keys = dict(zip(ranges, part.range_keys(ranges)))  # classified at once

    def range_key(self, lo, hi):
        """The part's ``range_key``, from the ranges classified at once."""
        got = self._keys.get((lo, hi), self)
        if got is self:
            return self._part.range_key(lo, hi)
        if isinstance(got, SketchError):
            raise got
        return got

    def __getattr__(self, name):
        read = getattr(self._part, name)
        if name not in self._READS:
            return read

        def shared(*args):
            *what, lo, hi = args
            key = (name, *(a.tobytes() if isinstance(a, np.ndarray) else a for a in what),
                   self.range_key(lo, hi))
            got = self._kept.get(key)
            if got is None:
                got = self._kept[key] = read(*args)
            return got

        return shared


class _RangeView:
    """The summary, with the batched parts answering from their readings."""

    def __init__(self, summary: StreamSummary, parts: dict):
        self._summary, self._parts = summary, parts

    def __getitem__(self, name: str):
        got = self._parts.get(name)
        return got if got is not None else self._summary[name]

    def __contains__(self, name: str) -> bool:
        return name in self._summary

    def __getattr__(self, name):
        return getattr(self._summary, name)


def _value_ranges(window: Window):
    """The (outer, inner) pair the value kinds read (``app.kinds.values._ranges``)."""
    return window.outer, window.inner if window.inner[0] <= window.inner[1] else (1, 0)


_READ_AHEAD_FROM = 16  # instants: below it, setting a sweep up costs more than it saves


def _read_ahead(kind: str, summary: StreamSummary, windows: list) -> StreamSummary | _RangeView:
    if len(windows) < _READ_AHEAD_FROM:  # (a refresh's few new steps)
        return summary
    parts = {}
    ranges = sorted({r for w in windows if isinstance(w, Window)
                     for r in (w.inner, w.outer) if r[0] <= r[1]})
    for part, how in _READ_AHEAD.get(kind, ()):
        if part not in summary.parts:
            continue
        if how == "rank-tables":
            pairs = sorted({_value_ranges(w) for w in windows
                            if isinstance(w, Window) and w.outer[0] <= w.outer[1]})
            batch, rows = summary[part].table_batch(pairs)
            parts[part] = _Tables(summary[part], batch, dict(zip(pairs, rows)))
        elif how == "buckets":
            parts[part] = _ByBuckets(summary[part], ranges)
        else:  # "ranges", "ranges-to-clock"
            read = ranges if how == "ranges" else _to_clock(ranges, summary[part].clock_tick)
            parts[part] = _Readings(summary[part], dict(zip(read, summary[part].query_many(read))))
    return _RangeView(summary, parts) if parts else summary


def _to_clock(ranges: list, clock: int) -> list:
    """The ranges, and from each one's edges (``lo`` and ``hi + 1``) to the clock: what the
    distinct kind reads of a window that ends before the clock."""
    return sorted(set(ranges) | {(t, clock) for lo, hi in ranges for t in (lo, hi + 1) if t <= clock})


def _run_many(kind: str, summary, config: StreamConfig, params: dict, windows: list) -> dict:
    """The kind's results of the windows computed together (``QueryKind.run_many``), by
    ``id`` of the window; empty when it has none, for a few windows or no summary, and
    when its parameters or the read are refused (each instant then says so)."""
    query = QUERY_KINDS.get(kind)
    if query is None or query.run_many is None or summary is None or len(windows) < _READ_AHEAD_FROM:
        return {}
    try:
        results = query.run_many(summary, config, windows, query.check(config, params))
    except (QueryError, SketchError):  # each instant then raises it as its own answer does
        return {}
    return {} if results is None else {id(w): r for w, r in zip(windows, results)}


def params_key(params: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in params.items() if k != "at"))


class _Kept:
    __slots__ = ("versions", "points", "units")

    def __init__(self, versions: tuple):
        # first kept, first dropped: an OrderedDict pops its oldest in O(1), where a dict's
        # first item is found past every slot its earlier pops emptied
        self.versions, self.points, self.units = versions, OrderedDict(), 0


def _weight(body) -> int:
    """What a kept point weighs: one, and one per item of a list answer (a heavy-hitter
    answer of 25 keys holds some 50 dicts, a count one 3)."""
    items = body.get("items") if isinstance(body, dict) else None
    return 1 + (len(items) if isinstance(items, list) else 0)


def kept_point(body, shown: str | None = None, rendering=None) -> tuple:
    """A kept point, ``(answer, how it was shown, the rendering, weight)``: the answer
    object itself, or only its rendering (the answer left out: None) when it was asked
    shown (``answers_at``'s ``show``). A rendering is bytes or a tuple of tuples of
    numbers and strings, which the cyclic garbage collector stops tracking, so thousands
    of kept points are not walked by every full collection (a 500-point range of answer
    dicts is some 5,000 containers: full collections took 20-30 ms a second under cold
    ranges)."""
    return (None if shown is not None else body), shown, rendering, _weight(body)


def _units(point: tuple) -> int:
    return point[3]


class RangeCache:
    """Points already computed, per stream, and what each publish since changed.

    A point — the answer at instant ``t`` — read from one version of a stream stays the
    answer of every later version that added no event at or before ``t``: the events its
    window (or a decayed kind's ``ts <= t``) counts are the same, so the bracket read from
    the older version holds for the same truth (it says which version it is, ``as_of``).
    Each publish announces ``touched``, the smallest event time it added
    (``tidemark.wire.records.ShardStatus``); the announcements heard (``heard``, from the
    process's one subscription, ``app.live_hub``) tell, for a stream served at newer
    versions, from which instant on its kept points are dropped. A version the ledger
    lacks (an announcement missed, a republish, a re-declaration) drops them all.

    Bounded by ``points`` units in all (``_units``: a point, and one per item of a list
    answer; measured at 0.27–0.84 KB a unit as kept, so 50,000 are 15–45 MB), at
    most half of them per stream (a stream's oldest points go first; past the total, those
    of the streams least recently asked). Every process keeps its own; a key's stream
    patterns are checked before any point is read, and one stream's points cannot take more
    than half from the others."""

    def __init__(self, points: int = 50_000, counter=None, ledger: int = 256):
        self.points, self.per_stream, self.ledger_size = points, max(1, points // 2), ledger
        self._counter = counter
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._held = 0
        self._ledger: dict[str, dict[int, OrderedDict]] = {}  # stream -> shard -> version -> (gen, touched)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    # -- what publishes changed ------------------------------------------------------------
    def heard(self, note: dict) -> None:
        """A publish announcement (on the event loop: quick, never blocks for long)."""
        name = note.get("stream")
        if name is None:
            return
        with self._lock:
            if note.get("deleted"):
                self._drop(name)
                self._ledger.pop(name, None)
                return
            if "version" not in note or "shard" not in note:
                return
            shards = self._ledger.setdefault(name, {})
            versions = shards.setdefault(int(note["shard"]), OrderedDict())
            generation = note.get("generation")
            versions[int(note["version"])] = (None if generation is None else int(generation), note.get("touched"))
            while len(versions) > self.ledger_size:
                versions.popitem(last=False)
            if len(self._ledger) > 4 * len(self._kept) + 1024:  # streams no one asks about
                for stale in [n for n in self._ledger if n not in self._kept][:len(self._ledger) // 2]:
                    del self._ledger[stale]

    def paused(self) -> None:
        """The subscription broke: announcements may be missing, so no gap is trusted."""
        with self._lock:
            self._ledger.clear()

    def _touched_since(self, name: str, old: tuple, new: tuple) -> float | None:
        """The smallest event time any publish between the versions ``old`` and ``new``
        added (inf: none added); None when the ledger cannot say."""
        before, after = dict(old), dict(new)
        if not set(before) <= set(after):
            return None
        shards = self._ledger.get(name, {})
        first = float("inf")
        for shard, (generation, version) in after.items():
            was = before.get(shard)
            if was is not None and was[0] != generation:
                return None
            heard = shards.get(shard, {})
            for v in range((was[1] if was else 0) + 1, version + 1):
                entry = heard.get(v)
                if entry is None or entry[0] != generation or entry[1] is None:
                    return None
                if entry[1] != "":
                    first = min(first, float(entry[1]))
        return first

    # -- points ------------------------------------------------------------------------------
    def points_of(self, name: str, versions: tuple | None) -> dict | None:
        """The points kept for the stream at ``versions`` (those of an earlier version that
        no publish since reached carried over), to read and add to under ``lock``; None
        when ``versions`` is unknown or older than what is kept (a request that read the
        stream before a newer version was swapped in)."""
        if not versions:
            return None
        with self._lock:
            kept = self._kept.get(name)
            if kept is None:
                kept = self._kept[name] = _Kept(versions)
            elif kept.versions != versions:
                if self._newer(kept.versions, versions):
                    return None
                since = self._touched_since(name, kept.versions, versions)
                if since is None:
                    self._held -= kept.units
                    kept.points, kept.units = OrderedDict(), 0
                elif since != float("inf"):
                    for key in [key for key in kept.points if key[2] >= since]:
                        units = _units(kept.points.pop(key))
                        kept.units -= units
                        self._held -= units
                kept.versions = versions
            self._kept.move_to_end(name)
            return kept.points

    @staticmethod
    def _newer(a: tuple, b: tuple) -> bool:
        """Does ``a`` hold a shard at a later version (of its generation) than ``b``?"""
        bd = dict(b)
        return any(s in bd and g == bd[s][0] and v > bd[s][1] for s, (g, v) in a)

    @staticmethod
    def get(points: dict, key, shown: str | None = None):
        """The point kept for ``key`` that can answer as asked: its rendering ``shown``, or
        its answer object (a point kept only as another rendering cannot)."""
        got = points.get(key)
        return None if got is not None and got[0] is None and got[1] != shown else got

    def counted(self, kept: int, computed: int) -> None:
        """A request's points, kept and computed (``tidemark_range_points_total``), told
        once per request: a counter's labelled increment per point cost more than the
        lookup it counts."""
        self.hits += kept
        self.misses += computed
        if self._counter is not None:
            if kept:
                self._counter.labels("kept").inc(kept)
            if computed:
                self._counter.labels("computed").inc(computed)

    def put(self, name: str, points: dict, key, point) -> None:
        with self._lock:
            kept = self._kept.get(name)
            if kept is None or kept.points is not points:
                return  # the stream's points were dropped meanwhile
            units = _units(point) - (_units(points[key]) if key in points else 0)
            points[key] = point
            kept.units += units
            self._held += units
            self._fit(kept)

    def put_many(self, name: str, points: dict, kept: list) -> None:
        """:meth:`put` of each ``(key, point)`` of ``kept``, under one hold of the lock."""
        with self._lock:
            got = self._kept.get(name)
            if got is None or got.points is not points:
                return  # the stream's points were dropped meanwhile
            for key, point in kept:
                units = _units(point) - (_units(points[key]) if key in points else 0)
                points[key] = point
                got.units += units
                self._held += units
            self._fit(got)

    def _fit(self, kept: _Kept) -> None:
        """The stream within its half, and all within the total (least recently asked
        streams trimmed first)."""
        self._trim(kept, self.per_stream)
        if self._held > self.points:
            for other in list(self._kept.values()):
                if self._held <= self.points:
                    break
                self._trim(other, max(0, other.units - (self._held - self.points)))

    def _trim(self, kept: _Kept, units: int) -> None:
        """Drop the stream's oldest points (first kept, first out: the steps a panel has
        moved past) until it holds at most ``units``."""
        while kept.units > units and kept.points:
            gone = _units(kept.points.popitem(last=False)[1])
            kept.units -= gone
            self._held -= gone

    def _drop(self, name: str) -> None:
        kept = self._kept.pop(name, None)
        if kept is not None:
            self._held -= kept.units
            kept.points, kept.units = OrderedDict(), 0

    def forget(self, name: str) -> None:
        with self._lock:
            self._drop(name)

    def __len__(self) -> int:
        return self._held


def answers_at(kind: str, name: str, config: StreamConfig, summary: StreamSummary | None,
               status: dict, params: dict, ats: list[float], cache: RangeCache | None = None,
               versions: tuple | None = None, show=None) -> list:
    """``answer(kind, name, config, summary, status, {**params, "at": repr(at)})`` for every
    ``at``: each the answer object (or ``show(answer)``: its JSON, ``as_json``, or another
    rendering of it, kept instead of the answer) or the :class:`QueryError` that instant
    raises.

    With ``cache`` and the shard ``versions`` the summary was merged from, points kept for
    them (or carried over from an earlier version no publish since reached: ``RangeCache``)
    are not computed again, nor rendered again; an instant the current clock refuses is
    refused whatever was kept. Kept answers are handed out as they are, to every caller:
    read them, never change them (the routes render them; ``app.promql`` reads their
    numbers)."""
    out: list = [None] * len(ats)
    points = None if cache is None or summary is None else cache.points_of(name, versions)
    base = params_key(params)
    keep = ~refused(params, config, status.get("clock"), ats) if points is not None else None
    shown = None if show is None else _name_of(show)
    todo = []
    for i, at in enumerate(ats):
        got = cache.get(points, (kind, base, float(at)), shown) if points is not None and keep[i] else None
        if got is None:
            todo.append(i)
        else:
            out[i] = got[2] if shown is not None and got[1] == shown else (
                got[0] if show is None else show(got[0]))
    if points is not None:  # (an instant the clock refuses is neither)
        computed = int(keep[todo].sum()) if todo else 0
        cache.counted(len(ats) - len(todo), computed)
    if not todo:
        return out
    windows = windows_at(params, config, status.get("clock"), [ats[i] for i in todo])
    live = [w for w in windows if isinstance(w, Window)]
    checked = _checked(kind, config, params)
    columns = _by_columns(kind, name, summary, config, status, checked, live, show)
    if columns is not None:
        kept = []
        for i, window in zip(todo, windows):
            out[i] = got = window if isinstance(window, QueryError) else columns[id(window)]
            if points is not None and not isinstance(got, QueryError):
                kept.append(((kind, base, float(ats[i])), (None, shown, got, 1)))
        if kept:
            cache.put_many(name, points, kept)
        return out
    view = summary if summary is None or not live else _read_ahead(kind, summary, live)
    results = _run_many(kind, view, config, params, live)
    scalar = getattr(show, "estimate", None) if _as_results(show, summary, status, checked) else None
    for i, window in zip(todo, windows):
        if isinstance(window, QueryError):
            out[i] = window
            continue
        try:
            result = results.get(id(window))
            if scalar is not None:
                result = _result(kind, view, config, window, checked, result)
                if isinstance(result, Estimate):  # shown from the estimate alone
                    out[i] = scalar(window.at, result)
                    if points is not None:
                        cache.put(name, points, (kind, base, float(ats[i])), (None, shown, out[i], 1))
                    continue
            # (each instant's ``at`` is its window's: ``params`` are read for the rest)
            body = answer(kind, name, config, view, status, params, window, result, checked)
        except QueryError as e:
            out[i] = e
            continue
        out[i] = body if show is None else show(body)
        if points is not None:
            cache.put(name, points, (kind, base, float(ats[i])), kept_point(body, shown, out[i]))
    return out


def _as_results(show, summary, status: dict, checked: dict | None) -> bool:
    """Is every instant's answer object what ``show`` makes of the kind's result alone
    (``show.estimate``, ``show.estimates``)? A published summary, parameters checked, no
    site missing (``mark_sites`` drops sides), and, for a show of the whole answer
    (``show.whole_answer``), no accepted event lost (``mark_incomplete`` marks it and
    drops the confidence; the Prometheus samples show neither)."""
    return (summary is not None and checked is not None and not status.get("incomplete_sites")
            and (not getattr(show, "whole_answer", False) or nothing_lost(summary, status)))


def _by_columns(kind: str, name: str, summary, config: StreamConfig, status: dict, checked: dict | None,
                windows: list, show) -> dict | None:
    """``{id(window): shown}`` of the windows (a refused one: its ``QueryError``), read by
    the kind as columns (``QueryKind.run_columns``) and shown all at once
    (``show.estimates(ats, columns, about)``, ``about`` what every answer says besides);
    None when the kind or ``show`` has no such form, for a few windows, when an answer
    object would say more (``_as_results``) or when the read is refused as a whole (each
    instant then says so)."""
    query = QUERY_KINDS.get(kind)
    many = None if query is None else getattr(show, query.columns_shown_by, None)
    if (many is None or query is None or query.run_columns is None or len(windows) < _READ_AHEAD_FROM
            or not _as_results(show, summary, status, checked)):
        return None
    try:
        columns = query.run_columns(summary, config, windows, checked)
    except (QueryError, SketchError):
        return None
    about = {"stream": name, "query": kind, "window": windows[0].seconds, "as_of": as_of(status)}
    out = {id(w): got for w, got in zip(windows, many([w.at for w in windows], columns, about))}
    for j, e in columns.refused.items():
        out[id(windows[j])] = QueryError(str(e))
    return out


def _result(kind: str, view, config: StreamConfig, window: Window, checked: dict, result):
    """The kind's result at the window, as ``answer`` takes it (``result``: its
    ``run_many``'s, when there is one)."""
    if result is None:
        return run(QUERY_KINDS[kind], view, config, window, checked)
    if isinstance(result, SketchError):
        raise QueryError(str(result))
    return result


def _checked(kind: str, config: StreamConfig, params: dict) -> dict | None:
    """The kind's parameters checked once for every instant; None when they are refused
    (each instant then raises the refusal as its own answer does) or the kind is not one
    ``answer`` takes."""
    query = QUERY_KINDS.get(kind)
    if query is None or query.streams != 1:
        return None
    try:
        return query.check(config, params)
    except QueryError:
        return None


def _name_of(show) -> str:
    return f"{show.__module__}.{show.__qualname__}"


def as_json(body: dict) -> bytes:
    """An answer's JSON, UTF-8 (orjson: a heavy-hitter answer of 25 keys took 0.1 ms in
    ``json.dumps``, a tenth of that here; numbers are the same floats, small ones written
    without an exponent)."""
    # copied to its own size: orjson's bytes keep the 4 KB buffer they were written in
    # (a kept count point would weigh 4 KB instead of 0.4)
    return bytes(memoryview(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)))


def _json_of_columns(ats: list[float], columns, about: dict) -> list[bytes]:
    """``as_json`` of the answer object of each instant whose result is the row of
    ``columns`` (``app.answers.shape`` and ``bound_of``: the same keys, in the same order,
    and the same floats)."""
    out = []
    stream, query, window, as_of_ = about["stream"], about["query"], about["window"], about["as_of"]
    method = columns.method
    rows = zip(ats, columns.estimate.tolist(), columns.lower.tolist(), columns.upper.tolist(),
               columns.relative.tolist(), columns.epsilon.tolist(), columns.confidence.tolist())
    for at, est, lower, upper, relative, eps, confidence in rows:
        half = (upper - lower) / 2
        bound = {"lower": lower, "upper": upper, "kind": "relative" if relative else "additive", "epsilon": eps,
                 "confidence": confidence, "method": method, "half_width": half,
                 "half_width_relative": 0.0 if half == 0 else (half / abs(est) if est else None)}
        out.append(as_json({"estimate": est, "bound": bound, "stream": stream, "query": query, "window": window,
                            "at": at, "as_of": as_of_}))
    return out


as_json.estimates = _json_of_columns  # many answers of one estimate each (``answers_at``)
as_json.quantiles = lambda ats, columns, about: [as_json(body) for body in columns.bodies(ats, about)]
as_json.whole_answer = True  # shows the confidence and what an incomplete answer misses


def refused(params: dict, config: StreamConfig, clock: float | None, ats: list[float]) -> np.ndarray:
    """Which instants the stream's clock refuses now (``parse_window``'s rule for a window
    that starts too long ago), without making their windows."""
    seconds = parse_window({k: v for k, v in params.items() if k != "at"}, config, clock).seconds
    return _too_old(np.asarray(ats, np.float64), seconds, clock, config.max_window)
