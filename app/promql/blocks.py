"""A range's samples rendered as JSON text, and kept per block of steps for the next refresh.

A Grafana panel asks the same range again every few seconds, moved by a step or two on
the step's grid. Its points are kept (``app.ranges.RangeCache``), but a range of heavy
hitters still made 37,000 samples, each a Python pair, and wrote them out as JSON, on
every refresh. Here a range's samples are written as JSON text per run of instants, and a
step-aligned range keeps the text of each whole block of ``BLOCK_STEPS`` steps on the
absolute grid (``t // (BLOCK_STEPS · step)``): a refresh writes only its partial edge
blocks and the blocks a publish reached, and joins the rest as text.

A block is kept with the stream's points and goes as they go: it holds the answers of
its instants, so it is dropped when a publish adds an event at or before its last
instant (its key's instant is that one, ``RangeCache.points_of``), or when the version it
was read from is not known to lead to the one served. A block none of whose instants the
clock refuses now is the text its instants' answers render to, so the samples are those
the points give.

Tested by: tests/app/promql/test_evaluate.py (every sample of cached and refreshed ranges,
across a publish, against the instant answer).
"""

from __future__ import annotations

import orjson

from app.answers import QueryError
from app.promql.times import seconds

__all__ = ["BLOCK_STEPS", "Blocks", "by_item", "render", "runs"]

BLOCK_STEPS = 16  # steps a kept block holds: a refresh renders at most two partial ones


def by_item(times_ms: list[int], shown: list, at_of) -> dict:
    """``{item label: ([time], [texts])}`` of a run of instants (``shown``: each instant's
    rows, ``(item label, (estimate, lower, upper) texts)``, or the ``QueryError`` it raised:
    no sample), each time ``at_of(t)``, in time order. Neighbouring instants whose answers
    share one rows tuple (``app.promql.evaluate._prometheus_samples``) are taken at once."""
    per: dict = {}
    rows, run = None, []

    def take():
        for item, texts in rows:
            acc = per.get(item)
            if acc is None:
                acc = per[item] = ([], [])
            acc[0].extend(run)
            acc[1].extend([texts] * len(run))

    for t, got in zip(times_ms, shown):
        if isinstance(got, QueryError):
            continue
        if got[1] is not rows:
            if run:
                take()
            rows, run = got[1], []
        run.append(at_of(t))
    if run:
        take()
    return per


def render(times_ms: list[int], shown: list) -> tuple:
    """The samples of a run of instants (``shown``, as :func:`by_item` takes it), as
    ``((item label, (estimate, lower, upper) JSON text)), …)``, each text the series'
    samples of the run, ``[t,"v"]`` joined by commas ("" where none). Tuples of strings:
    the collector stops tracking them once kept."""
    # (each time as the list form writes it, followed by the opening of its value)
    per = by_item(times_ms, shown, lambda t: orjson.dumps(seconds(t)).decode() + ',"')
    return tuple((item, tuple(_joined(ats, side) for side in zip(*texts))) for item, (ats, texts) in per.items())


def _joined(ats: list[str], side: tuple) -> str:
    """``[t,"v"],[t,"v"]…`` of the times and one side's texts (a None: no sample), each
    sample's text made in one C call (``str.__add__`` mapped) and the separators by the
    join: a range of 11,000 heavy-hitter answers has 825,000 samples."""
    if None in side:
        pairs = [(a, v) for a, v in zip(ats, side) if v is not None]
        if not pairs:
            return ""
        ats, side = zip(*pairs)
    return "[" + '"],['.join(map(str.__add__, ats, side)) + '"]'


def runs(times_ms: list[int], step_ms: int | None, usable) -> list[tuple[int, int, int | None]]:
    """The range cut into runs ``(first, end, block)``: the whole blocks of a step-aligned
    range with their number (``usable(first, end)``: may its instants be kept), the rest
    (edges, blocks the clock refuses in part, unaligned ranges) with None."""
    n = len(times_ms)
    if not n or not step_ms or times_ms[0] % step_ms:
        return [(0, n, None)]
    span = BLOCK_STEPS * step_ms
    out, first = [], 0
    while first < n:
        block = times_ms[first] // span
        end = min(n, first + BLOCK_STEPS - (times_ms[first] % span) // step_ms)
        whole = end - first == BLOCK_STEPS and usable(first, end)
        out.append((first, end, block if whole else None))
        first = end
    return out


class Blocks:
    """The blocks kept for one stream, query and step, in the stream's kept points
    (``points``, of ``RangeCache.points_of``) under ``(kind, parameters, last instant,
    "rendered", step, block)``."""

    def __init__(self, cache, name: str, points: dict, kind: str, params_key: tuple, step_ms: int):
        self.cache, self.name, self.points = cache, name, points
        self.kind, self.params_key, self.step_ms = kind, params_key, step_ms

    def _key(self, block: int) -> tuple:
        last = seconds((block + 1) * BLOCK_STEPS * self.step_ms - self.step_ms)
        return (self.kind, self.params_key, last, "rendered", self.step_ms, block)

    def get(self, block: int) -> tuple | None:
        got = self.points.get(self._key(block))
        return None if got is None else got[2]

    def put(self, block: int, rendered: tuple) -> None:
        # what it weighs among the points (``RangeCache``: 0.27-0.84 KB a unit): a unit per
        # 512 bytes of text (a block of heavy hitters holds 16 answers' samples, some 30 KB,
        # where their 16 points weigh some 400 units)
        size = sum(len(text) for _, texts in rendered for text in texts)
        self.cache.put(self.name, self.points, self._key(block), (None, "rendered", rendered, 1 + size // 512))
