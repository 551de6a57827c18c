"""Content-defined pages (``sketches._pages``) and the families that write their bytes in
them: a page's bytes follow only the records it holds, so an update rewrites the pages it
touched and no other; the pieces join to the blob; a blob cut elsewhere is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sketches._pages import PAGE_RECORDS, mix64, page_starts
from sketches.base import CorruptSketchError
from sketches.windowed_quantiles import WindowedQuantiles

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(st.lists(st.integers(0, 2**40), max_size=400, unique=True), st.integers(1, 64), st.integers(1, 12))
@SETTINGS
def test_a_page_begins_exactly_where_a_records_identity_says(ids, every, least):
    ids = np.array(sorted(ids), np.uint64)
    starts = page_starts(ids, every=every, least=least)
    if not ids.size:
        assert starts.size == 0
        return
    candidates = [i for i in range(ids.size) if int(mix64(ids[i : i + 1])[0]) % every == 0]
    expected = {0} | {c for c, before in zip(candidates, [0] + candidates) if c > 0 and c - before >= least}
    assert starts.tolist() == sorted(expected)
    # every page but the last holds at least ``least`` records, whatever the hashes
    assert all(b - a >= least for a, b in zip(starts.tolist(), starts[1:].tolist()))
    # a cut depends on its record and the candidate before it: dropping a record far from
    # both leaves it a cut
    drop = ids.size // 2
    rest = np.delete(ids, drop)
    kept = {int(ids[c]) for c, before in zip(candidates, [0] + candidates)
            if c in expected and c > 0 and not before <= drop <= c}
    assert kept <= {int(rest[i]) for i in page_starts(rest, every=every, least=least).tolist()}


def test_pages_hold_about_the_records_they_should():
    starts = page_starts(np.arange(100_000, dtype=np.uint64) * np.uint64(7919))
    # candidates every PAGE_RECORDS on average, those within PAGE_MIN of the one before
    # skipped (1 − (1 − 1/64)^31 ≈ 39 % of them): about 105 records a page
    assert PAGE_RECORDS < 100_000 / starts.size < 2 * PAGE_RECORDS


@st.composite
def quantile_streams(draw):
    """A sketch with many nodes, then a batch of out-of-order, bursty or late events."""
    window = draw(st.sampled_from([64, 500, 4096]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(200, 3000))
    ticks = np.sort(rng.integers(0, 3 * window, n))
    values = rng.lognormal(3, 2, n) * rng.choice([-1, 1], n)
    m = draw(st.integers(1, 200))
    top = int(ticks.max())
    late = draw(st.booleans())
    more = rng.integers(top - (window if late else 3), top + draw(st.integers(1, 40)), m)
    return window, ticks, values, more, rng.lognormal(3, 2, m)


def _pages(sk: WindowedQuantiles) -> dict:
    """page name -> (its bytes, the node rows it holds)."""
    pieces = sk.pieces()
    starts = sk._page_starts(sk._left, sk._lg).tolist() + [sk._left.size]
    out = {}
    for data, a, b in zip(pieces[1:], starts, starts[1:]):
        ea, eb = sk._off[a], sk._off[b]
        name = int(sk._left[a])  # a page is known by its first node
        rows = (sk._left[a:b].tobytes(), sk._lg[a:b].tobytes(), np.diff(sk._off[a : b + 1]).tobytes(),
                sk._keys[ea:eb].tobytes(), sk._cnts[ea:eb].tobytes())
        out[name] = (data, rows)
    return out


@given(quantile_streams())
@SETTINGS
def test_quantile_pages_change_only_where_their_nodes_do(case):
    window, ticks, values, more, more_values = case
    sk = WindowedQuantiles(0.05, window)
    sk.update(ticks, values)
    before = _pages(sk)
    blob = sk.to_bytes()
    assert b"".join(sk.pieces()) == blob
    assert WindowedQuantiles.from_bytes(blob).to_bytes() == blob
    sk.update(more, more_values)
    after = _pages(sk)
    for name, (data, rows) in after.items():
        if name in before and before[name][1] == rows:
            assert before[name][0] == data  # the same nodes: the very same bytes
    assert WindowedQuantiles.from_bytes(sk.to_bytes()).to_bytes() == sk.to_bytes()


def test_a_quantile_blob_paged_elsewhere_is_refused(monkeypatch):
    sk = WindowedQuantiles(0.05, 4096)
    rng = np.random.default_rng(3)
    sk.update(np.sort(rng.integers(0, 4000, 5000)), rng.random(5000))
    assert len(sk.pieces()) > 3
    right = sk.to_bytes()
    monkeypatch.setattr(WindowedQuantiles, "_page_starts", lambda self, left, lg: np.array([0], np.int64))
    one_page = sk.to_bytes()
    monkeypatch.undo()
    assert one_page != right
    with pytest.raises(CorruptSketchError, match="pages cut where"):
        WindowedQuantiles.from_bytes(one_page)


def _additive_pages(sk) -> dict:
    starts = sk._page_starts(sk._t, sk._r).tolist() + [sk._t.size] if sk.stored else [0]
    out = {}
    for data, a, b in zip(sk.pieces()[1:], starts, starts[1:]):
        out[(int(sk._t[a]), int(sk._r[a]))] = (data, tuple(c[a:b].tobytes() for c in (sk._t, sk._r, sk._v, sk._w, sk._lev)))
    return out


@given(st.integers(0, 2**32 - 1), st.integers(50, 4000), st.integers(1, 300), st.booleans())
@SETTINGS
def test_decayed_sample_pages_change_only_where_their_events_do(seed, n, m, late):
    """Newest events join the front, each level drops its oldest: the pages that hold
    neither keep their bytes; the pieces join to a blob that reads back to itself."""
    from sketches.decayed.additive import DecayedAdditiveSketch

    rng = np.random.default_rng(seed)
    sk = DecayedAdditiveSketch(0.2, 0.05, 0.0, 100.0, seed=5, stream=9)
    ticks = np.sort(rng.integers(0, 5000, n))
    sk.update(ticks, rng.uniform(0, 100, n), rng.exponential(1.0, n))
    before = _additive_pages(sk)
    top = int(ticks.max())
    sk.update(rng.integers(top - (3000 if late else 0), top + 50, m), rng.uniform(0, 100, m))
    after = _additive_pages(sk)
    for name, (data, rows) in after.items():
        if name in before and before[name][1] == rows:
            assert before[name][0] == data
    blob = sk.to_bytes()
    assert b"".join(sk.pieces()) == blob
    assert DecayedAdditiveSketch.from_bytes(blob).to_bytes() == blob
