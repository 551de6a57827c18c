"""The compiled writers and readers of the sketch blobs against the Python code they
replaced: the same bytes, the same round trips, the same refusals, never a crash.

The published segments are compared by digest, so the compiled encoders must write
exactly the bytes of a plain Python writer of the same layout. Those are kept here as the
reference (``_ref_*``): float columns, splittable histogram intervals, time buckets, ECM
cells, the key dictionary's and the randomized wave's payloads (the ECM's and the wave's in
their content-defined pages since format 3, ``sketches._pages``).
"""

from __future__ import annotations

import struct
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketches._codec import Writer, get_floats, varints, zigzag
from sketches._ecm_kernels import read_bucket_columns, read_cells
from sketches._pages import page_starts
from sketches._randomized_wave_kernels import read_pair_pages
from sketches._splittable_kernels import read_interval
from sketches.base import CorruptSketchError
from sketches.ecm import ECMSketch
from sketches.key_dictionary import KeyDictionary
from sketches.randomized_wave import RandomizedWave
from sketches.splittable_histogram import SplittableHistogram
from tests.sketches.test_compact_bytes import _build, events, floats
from tidemark.hash_secret import HashSecret
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the former Python encoders (the reference) ---------------------------------------------------
_POW10 = [10.0**d for d in range(7)]


def _same_bits(a, b):
    return bool(np.array_equal(a.view(np.uint64), b.view(np.uint64)))


def _ref_floats(v) -> bytes:
    v = np.ascontiguousarray(v, np.float64)
    if v.size == 0:
        return bytes([0])
    if _same_bits(v, np.full(v.size, v[0])):
        return bytes([1]) + struct.pack("<d", v[0])
    if np.all(np.isfinite(v)):
        for d in range(7):
            scaled = np.round(v * _POW10[d])
            if np.abs(scaled).max() >= 2.0**53:
                break
            ints = scaled.astype(np.int64)
            if _same_bits(ints.astype(np.float64) / _POW10[d], v):
                base = int(ints.min())
                return bytes([2, d]) + varints(np.array([zigzag(np.array([base]))[0]])) \
                    + varints((ints - base).view(np.uint64))
    return bytes([0]) + v.astype("<f8").tobytes()


class _RefWriter(Writer):
    def floats(self, v):
        return self.raw(_ref_floats(v))


def _ref_interval(sk: SplittableHistogram, d) -> bytes:
    wr = _RefWriter()
    wr.ints(np.array([d.k])).raw(bytes([d.exact, d.levels]))
    for i in range(d.levels):
        cnt = int(d.n[i])
        first = max(0, cnt - sk.alpha)
        if first == 0:
            t_mark = int(d.T[i])
        elif i == 0:
            t_mark = int(d.L[0, first - 1])
        else:
            t_mark = int(d.L[i, first] - 1)
        wr.uints(np.array([t_mark + 1, int(d.F[i]), cnt - first], np.uint64))
        left = d.L[i, first:cnt]
        if i == 0:
            wr.sorted_ints(left)
        else:
            right = np.append(left[1:], sk.wp)
            wr.array(np.log2(right - left), "u1")
        wr.floats(d.M[i, first:cnt])
    return wr.bytes()


def _ref_splittable(sk: SplittableHistogram) -> bytes:
    """The payload with every interval written by :func:`_ref_interval`: only the intervals
    are compiled, the parts' framing around them is ``_payload``'s own Python."""
    with mock.patch.object(sk, "_write_interval", lambda d, wr: wr.raw(_ref_interval(sk, d))):
        return sk._payload()


def _ref_buckets(wr, tb) -> None:
    lvl = tb.lvl.astype(np.int64)
    start = tb.idx << lvl
    wr.array(lvl, "u1").ints(start[:1]).uints(np.diff(start).view(np.uint64))
    wr.uints((tb.s - start).view(np.uint64)).uints((tb.e - tb.s).view(np.uint64)).floats(tb.m)


def _ref_ecm(sk: ECMSketch) -> bytes:
    """Format 3: the buckets in content-defined pages (``sketches._pages``), each page its
    bucket count, its buckets' columns and its rows' non-zero cells."""
    tb = sk._tb
    starts = sk._page_starts(tb).tolist() if len(tb) else []
    wr = _RefWriter().pack(sk._STATE, tb.clock, sk._events, sk._depth, sk._leaves, int(sk._fractional),
                           len(tb), sk.n_cells).uint(len(starts))
    for a, b in zip(starts, starts[1:] + [len(tb)]):
        page = type(tb)(tb.window, tb.ratio)
        page.lvl, page.idx, page.s, page.e, page.m = (getattr(tb, c)[a:b] for c in ("lvl", "idx", "s", "e", "m"))
        wr.uint(b - a)
        _ref_buckets(wr, page)
        rows = sk._counts[a:b]
        flat = np.flatnonzero(rows)
        wr.uint(flat.size)
        wr.uints((np.diff(flat, prepend=-1) - 1).view(np.uint64)).floats(rows.ravel()[flat])
    return wr.bytes()


def _ref_key_dictionary(kd: KeyDictionary) -> bytes:
    tb = kd._tb
    mask = kd._cnt > 0
    per = mask.sum(axis=1)
    ids = np.fromiter(sorted(kd._keys), np.uint64, len(kd._keys))
    encoded = [kd._keys[x].encode() for x in ids.tolist()]
    wr = _RefWriter().pack(kd._PARAMS, kd.capacity, kd.window, kd.epsilon)
    wr.pack(kd._STATE, tb.clock, kd._depth, kd._leaves, len(tb), int(per.sum()), ids.size)
    if len(tb):
        _ref_buckets(wr, tb)
        wr.uints(per.astype(np.uint64)).uints(np.searchsorted(ids, kd._ids[mask]).astype(np.uint64))
        wr.floats(kd._cnt[mask])
    wr.array(ids, "<u8").uints(np.fromiter(map(len, encoded), np.uint64, len(encoded))).raw(b"".join(encoded))
    return wr.bytes()


def _ref_wave(sk: RandomizedWave) -> bytes:
    sk._canonicalize()
    clock = sk._clock if sk._clock is not None else 0
    wr = Writer().pack(sk._HEAD, sk.epsilon, sk.delta, sk.window, sk.seed, sk.max_distinct,
                       sk._clock is not None, clock)
    entries = [w.entries() for w in sk._waves]
    keys = np.concatenate([e[0] for e in entries])
    ticks = np.concatenate([e[1] for e in entries])
    order = np.argsort(keys, kind="stable")
    k_s, t_s = keys[order], ticks[order]
    same = k_s[1:] == k_s[:-1]
    if np.any(same & (t_s[1:] != t_s[:-1])):
        order = np.lexsort((ticks, keys))
        k_s, t_s = keys[order], ticks[order]
        same = (k_s[1:] == k_s[:-1]) & (t_s[1:] == t_s[:-1])
    new = np.concatenate([[True], ~same]) if k_s.size else np.zeros(0, bool)
    index = np.empty(k_s.size, np.int64)
    index[order] = np.cumsum(new) - 1
    uk, ut = k_s[new], t_s[new]
    may_cut = np.concatenate([[True], uk[1:] != uk[:-1]]) if uk.size else np.zeros(0, bool)
    starts = page_starts(uk, may_cut).tolist() if uk.size else []
    wr.uint(uk.size).uint(len(starts))
    start = 0
    members = []
    for w, (k, _, _) in zip(sk._waves, entries):
        f = int(np.count_nonzero(w.fhas))
        wr.uint(f).uints((clock - w.fT[:f]).view(np.uint64)).array(w.fK[:f], "<u8")
        idx = index[start : start + k.size]
        start += k.size
        wr.uint(idx.size)
        members.append(set(idx.tolist()))
    for a, b in zip(starts, starts[1:] + [uk.size]):
        top = int(ut[a:b].max())
        wr.uint(b - a).uint(int(uk[a])).uints(np.diff(uk[a:b]))
        wr.uints(zigzag(np.array([top]))).uints((top - ut[a:b]).view(np.uint64))
        for held in members:
            bits = np.zeros(8 * ((b - a + 7) // 8), bool)
            bits[: b - a] = [i in held for i in range(a, b)]
            wr.raw(np.packbits(bits, bitorder="little").tobytes())
    return wr.bytes()


# -- same bytes -------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(floats, max_size=40), st.sampled_from([1, 10, 1000]))
def test_float_columns_are_the_former_bytes(xs, scale):
    v = np.array(xs, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        cols = (v, v * scale, np.round(v, 3))
    for col in cols:
        blob = Writer().floats(col).bytes()
        assert blob == _ref_floats(col)
        back, end = get_floats(np.frombuffer(blob, np.uint8), 0, col.size)
        assert end == len(blob) and _same_bits(back, col)


@pytest.mark.parametrize("name", ["splittable-histogram", "ecm", "key-dictionary", "randomized-wave"])
@SETTINGS
@given(p=events)
def test_family_payloads_are_the_former_bytes(name, p):
    sk = _build(name, p)
    payload = sk._payload()
    if name == "splittable-histogram":
        assert payload == _ref_splittable(sk)
    elif name == "ecm":
        assert payload[sk._PARAMS.size:] == _ref_ecm(sk)
    elif name == "randomized-wave":
        assert payload == _ref_wave(sk)
    else:
        assert payload == _ref_key_dictionary(sk)
    assert type(sk).from_bytes(sk.to_bytes()).to_bytes() == sk.to_bytes()


def _typical(seed: int, batches: int, shards: int = 1) -> StreamSummary:
    """A small stream as the worker sees it: string keys, integral or decimal weights, some late
    events, optionally shards merged (the API's case)."""
    cfg = StreamConfig(max_window=600, epsilon=0.1, delta=0.1)
    secret = HashSecret(b"compiled-codec-test-secret")
    rng = np.random.default_rng(seed)
    built = []
    for _ in range(shards):
        s = StreamSummary.create(cfg, secret)
        for b in range(batches):
            n = int(rng.integers(1, 300))
            ts = 1.7e9 + 20 * b + np.sort(rng.random(n) * 30) - (rng.random(n) < 0.2) * rng.uniform(0, 300, n)
            keys = [None if rng.random() < 0.1 else f"k{k}" + ("é" if k % 5 == 0 else "")
                    for k in rng.integers(0, int(rng.integers(1, 500)), n)]
            w = [np.ones(n), rng.integers(1, 9, n).astype(float), np.round(rng.exponential(3, n), 2)][b % 3]
            s.update_table(pa.table({"ts": pa.array(ts), "key": pa.array(keys, pa.string()),
                                     "value": pa.array(np.full(n, np.nan)), "weight": pa.array(w)}))
        built.append(s)
    for other in built[1:]:
        built[0].merge(other)
    return built[0]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**16), st.integers(1, 25), st.sampled_from([1, 2]))
def test_summaries_read_back_to_the_same_bytes(seed, batches, shards):
    s = _typical(seed, batches, shards)
    blob = s.to_bytes()
    back = StreamSummary.from_bytes(blob, s.secret)
    assert back.to_bytes() == blob
    for name, part in s.parts.items():
        if name in ("count", "sum"):
            assert part._payload() == _ref_splittable(part)
        elif name == "keys":
            assert part._payload()[part._PARAMS.size:] == _ref_ecm(part)
        elif name == "key_candidates":
            assert part._payload() == _ref_key_dictionary(part)
        elif name == "distinct":
            assert part._payload() == _ref_wave(part)


def test_a_pickled_summary_is_the_same_summary():
    """The API's decoder process hands summaries over by pickle (app/decoder.py): the wave's
    level buffers travel flattened and are rebuilt in compiled code, the state unchanged."""
    import pickle

    s = _typical(3, 12, 2)
    back = pickle.loads(pickle.dumps(s, protocol=5))
    assert back.to_bytes() == s.to_bytes()
    wave, copy = s.parts["distinct"], back.parts["distinct"]
    assert [list(b) for b in copy._waves[0].bufs] == [list(b) for b in wave._waves[0].bufs]
    assert repr(copy.query(copy.clock - 300, copy.clock)) == repr(wave.query(wave.clock - 300, wave.clock))
    more = pa.table({"ts": pa.array([1.7e9 + 500.0] * 3), "key": pa.array(["a", "b", "zz"]),
                     "value": pa.array([np.nan] * 3), "weight": pa.array([1.0] * 3)})
    s.update_table(more)
    back.update_table(more)
    assert back.to_bytes() == s.to_bytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(codec="utf-8"), max_size=5), max_size=8),
       st.lists(st.integers(0, 12), max_size=4))
def test_key_strings_split_as_the_former_slices(strings, cuts):
    """The key dictionary's string table decodes to the strings, and a table whose pieces
    are not each UTF-8 (a character cut in two) is refused, as the Python slices refused it."""
    from sketches.key_dictionary import _split_strings

    enc = [x.encode() for x in strings]
    assert _split_strings(b"".join(enc), np.array([len(e) for e in enc], np.uint64)) == strings
    text = b"".join(enc)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    lengths = np.diff(bounds).astype(np.uint64)
    try:
        want = [text[a:b].decode("utf-8") for a, b in zip(bounds, bounds[1:])]
    except UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            _split_strings(text, lengths)
    else:
        assert _split_strings(text, lengths) == want


def test_key_strings_that_hold_every_ascii_byte_still_split():
    from sketches.key_dictionary import _split_strings

    strings = [chr(i) * 2 for i in range(128)] + ["é", ""]
    enc = [x.encode() for x in strings]
    assert _split_strings(b"".join(enc), np.array([len(e) for e in enc], np.uint64)) == strings


# -- refusals ---------------------------------------------------------------------------------------
def test_a_corrupt_summary_is_refused_whole():
    s = _typical(7, 15, 2)
    blob = s.to_bytes()
    rng = np.random.default_rng(1)
    for cut in list(range(0, len(blob), max(1, len(blob) // 150))) + [len(blob) - 1]:
        with pytest.raises(CorruptSketchError):
            StreamSummary.from_bytes(blob[:cut], s.secret)
    for _ in range(300):
        bad = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(16, len(bad)))
            bad[i] ^= 1 << int(rng.integers(0, 8))
        try:
            back = StreamSummary.from_bytes(bytes(bad), s.secret)
        except (CorruptSketchError, ValueError):  # also an IncompatibleSketchError (a SketchError)
            continue
        again = back.to_bytes()  # whatever loads is whole: it writes and reads back the same
        assert StreamSummary.from_bytes(again, s.secret).to_bytes() == again


def _garbage(rng, blob: bytes) -> list[np.ndarray]:
    """Truncations, bit flips and random bytes around a valid piece."""
    raw = np.frombuffer(blob, np.uint8)
    out = [raw[:c].copy() for c in range(0, raw.size, max(1, raw.size // 60))]
    for _ in range(120):
        bad = raw.copy()
        bad[rng.integers(0, bad.size, int(rng.integers(1, 4)))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        out.append(bad)
    out += [rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8) for _ in range(60)]
    return out


def test_compiled_readers_never_crash_on_garbage():
    """Every compiled reader answers a code for any bytes: no crash, no endless loop, no read
    past the buffer (the caller then refuses the blob whole)."""
    rng = np.random.default_rng(3)
    s = _typical(11, 12)
    sh = s.parts["count"]
    d = sh._substreams[0].new
    seen = set()
    for buf in _garbage(rng, _ref_interval(sh, d)):
        code, end, *_ = read_interval(buf, 0, d.k, sh.max_level + 1, sh.wp, sh.alpha, sh.log_w, sh.unit, True)
        assert code != 0 or 0 < end <= buf.size
        seen.add(code != 0)
    # a hostile header: the largest alpha and 255 levels in a few bytes allocate by the blob
    for levels in (2, 40, 255):
        buf = np.array([0, 0, levels] + [1, 0, 1] * 3, np.uint8)
        code, *_ = read_interval(buf, 0, 0, 601, 1 << 40, 1 << 20, 40, 1.0, True)
        assert code != 0
    ecm = s.parts["keys"]
    tail = _ref_ecm(ecm)[ecm._STATE.size:]
    b = len(ecm._tb)
    for buf in _garbage(rng, tail):
        code, end, *_ = read_bucket_columns(buf, 0, b)
        assert code != 0 or 0 < end <= buf.size
        assert read_bucket_columns(buf, 0, 2**40)[0] != 0  # refused before allocating
        if buf.size and buf[0] != 1:  # (a constant column may be any length: callers bound n)
            assert get_floats(buf, 0, 2**40)[1] < 0
        code, end, _ = read_cells(buf, 0, b * ecm.n_cells)
        assert code != 0 or 0 < end <= buf.size
    wave = s.parts["distinct"]
    pages = wave.pieces()[1:]
    for buf in _garbage(rng, b"".join(pages)[-200:]):
        code, end, *_ = read_pair_pages(buf, 0, 50, 3, wave.instances)
        assert code != 0 or 0 < end <= buf.size
    assert read_pair_pages(np.zeros(4, np.uint8), 0, 2**20, 2**10, 3)[0] != 0
    assert seen == {True, False}


def test_a_changed_codec_drops_the_cached_kernels_that_compile_it(tmp_path):
    """Numba keys a kernel's cache by its own file: a kernel module's cache index is dropped
    when the codec it compiles in has changed since (and kept while it has not)."""
    from sketches._codec import drop_stale_kernel_cache

    module = tmp_path / "_family_kernels.py"
    module.write_text("")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    index = cache / "_family_kernels.kernel-1.py311.nbi"
    other = cache / "_other_kernels.kernel-1.py311.nbi"
    for f in (index, other):
        f.write_text("index")
    drop_stale_kernel_cache(str(module))  # no stamp yet: built with an unknown codec
    assert not index.exists() and other.exists()
    index.write_text("index")
    drop_stale_kernel_cache(str(module))  # the stamp matches: kept
    assert index.exists()
    (cache / "_family_kernels.codec-stamp").write_text("another codec")
    drop_stale_kernel_cache(str(module))
    assert not index.exists() and other.exists()


_WARM_CHECK = """
import numpy as np
from sketches import _codec, _ecm_kernels, _randomized_wave_kernels, _splittable_kernels, key_dictionary
from sketches.decayed import _sample_kernels
from tests.sketches.test_compiled_codec import _typical
from tidemark.summary import StreamSummary, warm_up

warm_up()
kernels = [_codec.put_floats, _codec.get_floats, _splittable_kernels.write_interval,
           _splittable_kernels.read_interval, _randomized_wave_kernels.read_floors,
           _randomized_wave_kernels.check_members, _randomized_wave_kernels.read_pair_pages,
           _randomized_wave_kernels.write_pair_pages, _randomized_wave_kernels.write_floors,
           _randomized_wave_kernels.unique_pairs, _sample_kernels.write_pages,
           _randomized_wave_kernels.empty_buffers,
           _randomized_wave_kernels.flatten_buffers, _randomized_wave_kernels.buffers_from,
           _ecm_kernels.write_bucket_columns,
           _ecm_kernels.read_bucket_columns, _ecm_kernels.check_buckets,
           _ecm_kernels.write_state_pages, _ecm_kernels.read_state_pages, _sample_kernels.read_pages,
           _randomized_wave_kernels.export_entries, _randomized_wave_kernels.splice_pairs,
           _randomized_wave_kernels.ticks_of, _randomized_wave_kernels.reused_pages,
           key_dictionary._positions, key_dictionary._place_counters, key_dictionary._separated]
before = [len(k.signatures) for k in kernels]
assert all(before), [k.__name__ for k, n in zip(kernels, before) if not n]
s = _typical(5, 10, 2)
StreamSummary.from_bytes(s.to_bytes(), s.secret)
after = [len(k.signatures) for k in kernels]
assert after == before, [k.__name__ for k, a, b in zip(kernels, after, before) if a != b]
"""


def test_warm_up_compiles_every_codec_kernel():
    """The worker's executors load the kernels ``warm_up`` compiled: in a fresh process, a
    typical summary's encode and decode afterwards need no new specialisation."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    res = subprocess.run([sys.executable, "-c", _WARM_CHECK], cwd=root, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
