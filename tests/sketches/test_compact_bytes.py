"""Compact byte formats: exact codecs, lossless round trips of every family, refusals.

Every family is fed generated streams (empty, one event, many keys, late events, integer,
decimal and full-precision values, unit and fractional weights), optionally built as two
shards and merged; its blob must read back to a sketch that writes the same bytes and
answers every query the same. Truncated blobs are refused.
"""

from __future__ import annotations

from tidemark.hash_secret import HashSecret

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches._codec import Reader, Writer
from sketches.base import CorruptSketchError
from sketches.decayed import DecayedAdditiveSketch, DecayedRelativeSketch
from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WINDOW = 400


# -- the codec ---------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_varints_round_trip(xs):
    a = np.array(xs, np.uint64)
    rd = Reader(Writer().uints(a).bytes(), "test")
    assert np.array_equal(rd.uints(a.size), a)
    rd.done()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40))
def test_signed_and_sorted_columns_round_trip(xs):
    a = np.array(xs, np.int64)
    rd = Reader(Writer().ints(a).bytes(), "test")
    assert np.array_equal(rd.ints(a.size), a)
    s = np.sort(a // 4)  # gaps of a sorted column fit in 63 bits
    rd = Reader(Writer().sorted_ints(s).bytes(), "test")
    assert np.array_equal(rd.sorted_ints(s.size), s)
    rd.done()


floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**9), 10**9).map(float),
    st.integers(-(10**8), 10**8).map(lambda i: i / 100),
    st.sampled_from([0.0, -0.0, 0.1, 1e-300, 5e-324]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(floats, max_size=30))
def test_float_columns_are_bit_exact(xs):
    v = np.array(xs, np.float64)
    blob = Writer().floats(v).bytes()
    rd = Reader(blob, "test")
    back = rd.floats(v.size)
    rd.done()
    assert np.array_equal(back.view(np.uint64), v.view(np.uint64))
    for cut in range(len(blob)):
        try:
            Reader(blob[:cut], "test").floats(v.size)
        except CorruptSketchError:
            continue
        raise AssertionError("a truncated float column was read")


def test_float_columns_are_small_when_values_are():
    ints = np.arange(10_000, dtype=np.float64)
    cents = np.round(np.linspace(0, 9_999, 10_000), 2)
    assert len(Writer().floats(np.ones(10_000)).bytes()) == 9
    assert len(Writer().floats(ints).bytes()) < 2.1 * ints.size
    assert len(Writer().floats(cents).bytes()) < 3.1 * cents.size


@pytest.mark.parametrize("bad", [b"\x80", b"\x80\x00", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x02"])
def test_malformed_varints_are_refused(bad):
    with pytest.raises(CorruptSketchError):
        Reader(bad, "test").uints(1)


# -- every family ------------------------------------------------------------------------------
events = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16),
    "n": st.sampled_from([0, 1, 2, 50, 600]),
    "keys": st.sampled_from([1, 5, 300, 5000]),
    "late": st.sampled_from([0.0, 0.3]),
    "values": st.sampled_from(["int", "cents", "raw"]),
    "weights": st.sampled_from(["unit", "int", "raw"]),
    "shards": st.sampled_from([1, 2, 3]),
})


def _stream(p):
    rng = np.random.default_rng(p["seed"])
    n = p["n"]
    ticks = np.sort(rng.integers(1000, 1000 + 3 * WINDOW, n))
    late = rng.random(n) < p["late"]
    ticks[late] -= rng.integers(0, WINDOW // 2, int(late.sum()))
    keys = (rng.zipf(1.2, n) % p["keys"]).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    raw = rng.uniform(0, 100, n)
    values = {"int": np.floor(raw), "cents": np.round(raw, 2), "raw": raw}[p["values"]]
    weights = {"unit": np.ones(n), "int": rng.integers(1, 9, n).astype(float),
               "raw": rng.exponential(1.0, n)}[p["weights"]]
    shard = rng.integers(0, p["shards"], n)
    return ticks, keys, values, weights, shard


def _ranges(clock, window):
    return [(max(0, clock - w + 1), clock) for w in (1, 7, window // 2, window)]


FAMILIES = {
    "splittable-histogram": (
        lambda: SplittableHistogram(0.1, WINDOW),
        lambda s, t, k, v, w: s.update(t, w),
        lambda s: [s.query(lo, hi) for lo, hi in _ranges(s.clock, s.window)] if not s.is_empty else [],
    ),
    "ecm": (
        lambda: ECMSketch(0.1, 0.1, WINDOW, seed=3),
        lambda s, t, k, v, w: s.update(t, k, w),
        lambda s: [s.frequency(int(x), lo, hi) for lo, hi in _ranges(s.clock, s.window)
                   for x in (0, 0x9E3779B97F4A7C15)] + [s.self_join(*_ranges(s.clock, s.window)[-1])]
        if not s.is_empty else [],
    ),
    "key-dictionary": (
        lambda: KeyDictionary(8, WINDOW),
        lambda s, t, k, v, w: s.update(t, [f"k{x % 977}é" if x % 3 == 0 else f"k{x}" for x in k.tolist()],
                                       k, w),
        lambda s: [s.candidates(lo, hi) for lo, hi in _ranges(s.clock, s.window)] if not s.is_empty else [],
    ),
    "randomized-wave": (
        lambda: RandomizedWave(0.3, 0.2, WINDOW, seed=5),
        lambda s, t, k, v, w: s.update(t, k),
        lambda s: [s.query(lo, hi) for lo, hi in _ranges(s.clock, s.window)] if not s.is_empty else [],
    ),
    "decayed-additive": (
        lambda: DecayedAdditiveSketch(0.3, 0.2, 0, 100, seed=7),
        lambda s, t, k, v, w: s.update(t, v, w),
        lambda s: [s.query({"kind": "polynomial", "alpha": 1.5}, tau, 2000) for tau in (0, 50)]
        + [s.range_sum({"kind": "exponential", "half_life": 50}, 10, 60, 1800)],
    ),
    "decayed-relative": (
        lambda: DecayedRelativeSketch(0.2, {"kind": "polynomial", "alpha": 1.5}, 0, 100),
        lambda s, t, k, v, w: s.update(t, v, w),
        lambda s: [s.query(tau, 2000) for tau in (0, 50)] if not s.is_empty else [],
    ),
}


def _build(name, p):
    make, feed, _ = FAMILIES[name]
    ticks, keys, values, weights, shard = _stream(p)
    parts = []
    for i in range(p["shards"]):
        sk = make()
        m = shard == i
        for lo in range(0, int(m.sum()), 200):  # a few batches, as a worker would
            sl = slice(lo, lo + 200)
            feed(sk, ticks[m][sl], keys[m][sl], values[m][sl], weights[m][sl])
        parts.append(sk)
    out = parts[0]
    for other in parts[1:]:
        out.merge(other)
    return out


@pytest.mark.parametrize("name", sorted(FAMILIES))
@SETTINGS
@given(p=events)
def test_round_trip_keeps_state_and_answers(name, p):
    sk = _build(name, p)
    blob = sk.to_bytes()
    back = type(sk).from_bytes(blob)
    assert back.to_bytes() == blob
    assert len(blob) == sk.nbytes
    ask = FAMILIES[name][2]
    assert repr(ask(back)) == repr(ask(sk))
    # the copy read back takes the same next batch to the same state
    again = type(sk).from_bytes(blob)
    rng = np.random.default_rng(p["seed"] + 1)
    t = np.full(3, max(int(getattr(sk, "clock", 2000)), 1000) if not sk.is_empty else 1000)
    k = rng.integers(0, 5, 3).astype(np.uint64)
    v, w = rng.uniform(0, 100, 3), np.ones(3)
    if name != "decayed-additive":  # its fresh draws are random by design
        FAMILIES[name][1](back, t, k, v, w)
        FAMILIES[name][1](again, t, k, v, w)
        assert back.to_bytes() == again.to_bytes()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_truncations_are_refused(name):
    p = {"seed": 3, "n": 300, "keys": 40, "late": 0.3, "values": "cents", "weights": "int", "shards": 2}
    blob = _build(name, p).to_bytes()
    cls = type(_build(name, p))
    step = max(1, len(blob) // 300)
    for cut in list(range(0, len(blob), step)) + [len(blob) - 1]:
        with pytest.raises(CorruptSketchError):
            cls.from_bytes(blob[:cut])
    with pytest.raises(CorruptSketchError):
        cls.from_bytes(blob + b"\x00")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_random_corruptions_are_refused_or_harmless(name):
    p = {"seed": 4, "n": 200, "keys": 30, "late": 0.3, "values": "int", "weights": "unit", "shards": 2}
    sk = _build(name, p)
    blob = sk.to_bytes()
    rng = np.random.default_rng(9)
    ask = FAMILIES[name][2]
    for _ in range(150):
        bad = bytearray(blob)
        i = int(rng.integers(16, len(bad)))
        bad[i] ^= 1 << int(rng.integers(0, 8))
        try:
            back = type(sk).from_bytes(bytes(bad))
        except CorruptSketchError:
            continue
        back.to_bytes()  # whatever loads is a whole sketch: it writes and answers
        try:
            ask(back)
        except ValueError:  # a query refused for the state it now holds (a SketchError) is fine
            pass


# -- the sizes issue #11 asks for --------------------------------------------------------------
def _typical_summary():
    from tidemark.streams import StreamConfig
    from tidemark.summary import StreamSummary

    config = StreamConfig(max_window="7d", epsilon=0.05, delta=0.05, value_min=0, value_max=10_000,
                          decays=[{"kind": "polynomial", "alpha": 1.5}], resolution=1.0)
    return StreamSummary.create(config, HashSecret(b"compact-bytes-test-secret"))


def _bytes_without_values(summary) -> int:
    # "values" (the quantile histogram) is being replaced under issue #14
    return sum(len(part.to_bytes()) for name, part in summary.parts.items() if name != "values")


def test_an_empty_typical_stream_is_small():
    assert _bytes_without_values(_typical_summary()) <= 16 * 1024


def test_ten_thousand_events_of_one_key_are_small():
    import pyarrow as pa

    s = _typical_summary()
    n = 10_000
    ts = 1_700_000_000.0 + np.sort(np.random.default_rng(0).uniform(0, 10_000, n))
    s.update_table(pa.table({"ts": ts, "key": pa.array(["k"] * n), "value": np.full(n, np.nan),
                             "weight": np.ones(n)}))
    assert _bytes_without_values(s) <= 64 * 1024
