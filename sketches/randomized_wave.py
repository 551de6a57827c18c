"""Randomized wave: (ε, δ) distinct counts over a sliding window of asynchronous,
distributed streams, with a lossless merge.

Gibbons, P. B. and Tirthapura, S. (2004). *Distributed streams algorithms for sliding
windows.* Theory of Computing Systems 37. §4.1 (the randomized wave, Fig. 6), §4.2
(Lemma 3, Theorem 5: median of independent instances), §5 (number of distinct values,
Theorem 6). Papapetrou, O., Garofalakis, M. and Deligiannakis, A. (2012). *Sketch-based
querying of distributed sliding-window data streams.* VLDB. §5.2 (one wave out of many:
concatenate each level, keep the most recent c/ε²).

Union counting (§4) is the special case where the key of an event is its position:
``update(ticks, ticks.astype(np.uint64))`` counts the positions holding a 1 in any stream.

Proofs
------
Hash (§4.1). Instance i draws a0, a1, b uniform in Z_p, p = 2^61 − 1, from the seed, and
maps key v to ``y = (a1·v_hi + a0·v_lo + b) mod p`` (v_hi, v_lo its 32-bit halves): the
Z_p analogue of the paper's GF(2^d) map, pairwise independent over 64-bit keys. Its level
is ``h(v) = min(L, max{l : y < 2^(61-l)})``, so ``q_l = Pr[h >= l] = 2^(61-l)/p`` for
1 <= l <= L, and μ_{l+1} = μ_l / 2 exactly for l >= 1.

Score and canonical state (§5). ``T(v)`` is the latest tick of key ``v``; its score is
``σ(v) = (T(v), v)`` (lexicographic, so scores are distinct). Level ``l`` of an instance
keeps the C keys of best score among ``{v : h(v) >= l}`` (§5: "the c/ε² elements with the
most recent positions") and its floor ``φ_l``, the (C+1)-th best score (the exact form of
the queue's "range" of §4.1).

Lemma A (merge). For scored key sets combined by per-key maximum (⊕)::

    top_C(A ⊕ B) = top_C(top_C(A) ⊕ top_C(B)),
    (C+1)th(A ⊕ B) = max(φ_A, φ_B, (C+1)th(top_C(A) ⊕ top_C(B))).

A key outside top_C(A) has C keys of A above its A-score, and ⊕ only raises scores, so it
can enter top_C(A ⊕ B) only through its B-score; symmetrically for B. For the floor: each
of the three terms is at most (C+1)th(A ⊕ B), since ⊕ only raises scores; and the (C+1)-th
key w of A ⊕ B takes its score from A or B: outside that side's top C the score is at most
that side's floor, inside it w is in the right-hand union with its true score below the C
keys of top_C(A ⊕ B), so the union's (C+1)-th score is at least w's.
So a compacted state is a function of the multiset of events alone: arrival order,
batching, lateness and the merge tree cannot change it, an old tick arriving late is kept
or dropped exactly as in order, and ``A.merge(B)`` equals the wave fed both streams, byte
for byte. Expiry (§4.1 step 2) is left out on purpose: it would make the state depend on
arrival order, and expired keys cost no space beyond the C per level held anyway and are
never counted (their tick is below any query's ``lo``).

Lazy buffers (``_randomized_wave_kernels``): an arrival is appended to level ``l`` when it
beats ``φ_l`` and a level is trimmed to its best C only at 2C, before queries and before
serialising. Invariants, kept by every insertion and by merge (floors folded by max, then
the other side's entries inserted as events): (I1) a buffered key's recorded tick is at
most its true T(v), and equal when σ(v) beats the floor; (I2) a key with ``h(v) >= l`` not
in buffer ``l`` has true score <= φ_l; (I3) φ_l <= the true (C+1)-th score. Then every key
of the true top C is buffered with its true score and beats everything else buffered, so
trimming yields exactly top_C and raises φ_l exactly to the true (C+1)-th score.

Query (Fig. 6, Lemma 3). For ``[lo, clock]`` let ``n = |{v : T(v) >= lo}|`` and
``X_l = |{v : h(v) >= l, T(v) >= lo}|``. Level ``l`` covers ``lo`` iff the tick of φ_l is
< lo, iff ``X_l <= C``, and then X_l is read exactly. An instance answers
``Y = X_{l*} / q_{l*}``, ``l*`` its lowest covering level, ``q_l = Pr[h(v) >= l]``.

Bounds
------
Probabilities are over the seed (the hash functions), for streams chosen independently of
it.

* Exact: level 0 holds every key whatever the hash, so when it covers (n <= C) the answer
  is n with ``[n, n]``, confidence 1.
* One instance (pairwise independence, Var X_l <= μ_l = n q_l, Chebyshev). For levels
  b <= t with μ_t = yC < C and μ_{b-1} = zC > C (so l* is in [b, t] unless X_{b-1} <= C or
  X_t > C)::

      Pr[covered and |Y - n| >= εn]
          <= Pr[X_{b-1} <= C] + Σ_{l=b..t} Pr[|X_l - μ_l| >= εμ_l] + Pr[X_t > C]
          <= (1/C) [z/(z-1)² + (2 - 2^(b-t))/(ε² y) + y/(1-y)²]  =: the (b, t) bound.

  n > C here (else the answer is exact), so l* >= 1. If t would exceed the top level L,
  "covered and wrong" still needs some bad level in [b, L], and the same sum bounds it.
  The supremum over n of the best (b, t) bound is ``g(ε)/C`` (``per_instance_failure``;
  g(ε) ≈ 3/ε²). This replaces the constant c = 36 of [18]'s Lemma 2 with a proved one.
* Median of k odd independent instances (Theorem 5): with p = g(ε)/C, ``m`` the median::

      Pr[n ∉ (m/(1+ε), m/(1-ε))] <= Pr[Bin(k, p) >= (k+1)/2] <= δ.

  Returned: ``lower = max(C + 1, X_{l*}, ⌈m/(1+ε)⌉)``, ``upper = ⌊m/(1-ε)⌋`` (n is an
  integer, and n > C is certain once level 0 does not cover), confidence 1 − δ.
* If the top level of some instance does not cover ``lo`` (n beyond ``max_distinct``, or
  with probability <= 4/(9C) per instance below it) the answer is ``[C + 1, ∞]``, which
  is certain. Otherwise a failure needs a majority of failed instances, as above.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import NamedTuple

import numpy as np

from sketches._randomized_wave_kernels import (
    INSTANCE_ERRORS,
    buffers_from,
    compact_level,
    count_at_least,
    empty_buffers,
    export_entries,
    flatten_buffers,
    grown_pool,
    insert_events,
    latest_ticks,
    loaded_buffers,
    check_members,
    read_floors,
    read_pair_pages,
    rebuild_table,
    reused_pages,
    splice_pairs,
    ticks_of,
    trim_level,
    unique_pairs,
    write_floors,
    write_pair_pages,
)
from sketches._bytes import HEADER_SIZE, Reader, Writer
from sketches._codec import varint_size
from sketches._pages import PAGE_MIN, cut_candidates, page_bytes, page_stops, starts_at
from sketches.base import (CorruptSketchError, Estimate, EstimateColumns, Family, Sketch, SketchError, int_ranges,
                           seed_value, tick_bounds, window_size, window_ticks)

__all__ = ["RandomizedWave", "suggest_sizes", "per_instance_failure"]

METHOD = "randomized-wave"
_P = (1 << 61) - 1
_MAX_TICK = 1 << 62
_CHUNK = 1 << 16
_MIN_C = 16


def _tail(k: int, p: float) -> float:
    """Pr[Bin(k, p) >= (k+1)/2]."""
    return sum(math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in range((k + 1) // 2, k + 1))


@functools.lru_cache(maxsize=256)
def per_instance_failure(epsilon: float) -> float:
    """g(ε) with Pr[one instance is covered and off by >= εn] <= g(ε)/C, for every n.

    Let t0 be the lowest level >= 1 with μ < C and x = μ_{t0}/C in [1/2, 1). For each cell
    [x1, x2] of a grid of x, and each choice t = t0 + s (y = x/2^s), b = t - j, the (b, t)
    bound of the module docstring is bounded over the whole cell by taking the decreasing
    terms at x1 and the increasing one at x2; g is the max over cells of the best choice.
    """
    cells = 4000
    xs = np.linspace(0.5, 1.0, cells + 1)
    x1, x2 = xs[:-1], xs[1:]
    best = np.full(cells, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in range(4):
            y1, y2 = x1 / 2**s, x2 / 2**s
            last = np.where(y2 < 1, y2 / (1 - y2) ** 2, np.inf)
            for j in range(8):
                z1 = 2 ** (j + 1) * y1
                first = np.where(z1 > 1, z1 / (z1 - 1) ** 2, np.inf)
                mid = (2 - 2.0**-j) / (epsilon**2 * y1)
                best = np.minimum(best, first + mid + last)
    return float(best.max()) * (1 + 1e-9)


@functools.lru_cache(maxsize=256)
def suggest_sizes(epsilon: float, delta: float) -> tuple[int, int]:
    """(instances k, capacity C per level) with Pr[Bin(k, g(ε)/C) >= (k+1)/2] <= δ.

    k is odd and at least 3 (the median of §4.2); among those, k·C is smallest.
    """
    g = per_instance_failure(epsilon)
    best: tuple[int, int] | None = None
    for k in range(3, 1001, 2):
        if best is not None and 2 * g * k > best[0] * best[1]:
            break  # p <= 1/2 forces C >= 2g, so k·C only grows from here
        lo, hi = 0.0, 0.5
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _tail(k, mid) <= delta else (lo, mid)
        if lo <= 0:
            continue
        c = max(_MIN_C, math.ceil(g / lo))
        while _tail(k, g / c) > delta:
            c += 1
        if best is None or k * c < best[0] * best[1]:
            best = (k, c)
    if best is None:
        raise SketchError("delta is too small to size a randomized wave")
    return best


def _top_level(max_distinct: int, capacity: int) -> int:
    """Lowest L in [1, 60] with max_distinct · q_L <= C/4 (else 60)."""
    for lev in range(1, 61):
        if 4 * max_distinct * (1 << (61 - lev)) <= capacity * _P:
            return lev
    return 60


class _Instance:
    """One independent wave: its hash, pool of entries and per-level state."""

    __slots__ = ("a0", "a1", "b", "ekey", "eT", "emask", "eh", "free", "meta", "table",
                 "s", "fT", "fK", "fhas", "bufs", "okeys", "oslots", "presorted", "srt", "stamp", "echg",
                 "dlog", "dmeta")

    def __init__(self, params: np.ndarray, levels: int):
        self.a0, self.a1, self.b = (np.uint64(x) for x in params)
        self.ekey = np.zeros(0, np.uint64)
        self.eT = np.zeros(0, np.int64)
        self.emask = np.zeros(0, np.uint64)
        self.eh = np.zeros(0, np.int64)
        self.free = np.zeros(0, np.int64)
        self.meta = np.zeros(3, np.int64)  # high-water mark, free count, live count
        self.table = np.full(2, -1, np.int64)
        self.s = np.zeros(levels, np.int64)
        self.fT = np.zeros(levels, np.int64)
        self.fK = np.zeros(levels, np.uint64)
        self.fhas = np.zeros(levels, np.uint8)
        self.bufs = empty_buffers(levels)
        self.okeys, self.oslots = _NO_KEYS, _NO_SLOTS  # the last export's order (``entries``)
        self.presorted = 0  # leading slots in key order as read (``export_entries``)
        # How much of each level is sorted by score, and since when (``trim_level``).
        self.srt, self.stamp = np.zeros(levels, np.int64), np.zeros(levels + 1, np.int64)
        self.echg = np.zeros(0, np.int64)
        self._no_log()

    @classmethod
    def loaded(cls, params: np.ndarray, keys, ticks, h, emask, counts, fhas, fT, fK) -> "_Instance":
        """An instance from entries ``read_instance`` has checked whole (fresh arrays, held
        as they are). Its pool is exactly full and its key table is left unbuilt: the
        next insertion grows the pool and builds the table once (``reserve``), and a
        summary only read (the API's) never builds one. Slots keep the numbering the bytes
        were written with, so the state, its bytes and its answers are the writer's."""
        w = object.__new__(cls)
        w.a0, w.a1, w.b = (np.uint64(x) for x in params)
        n = keys.size
        w.ekey, w.eT, w.eh, w.emask = keys, ticks, h, emask
        w.free = np.zeros(n, np.int64)
        w.meta = np.array([n, 0, n], np.int64)
        w.table = None
        w.s, w.fhas, w.fT, w.fK = counts, fhas, fT, fK
        w.bufs = loaded_buffers(emask, counts)
        w.okeys, w.oslots = _NO_KEYS, _NO_SLOTS
        w.presorted = n  # the bytes hold a pool's entries by key
        w.srt, w.stamp = np.zeros(counts.size, np.int64), np.zeros(counts.size + 1, np.int64)
        w.echg = np.zeros(n, np.int64)
        w._no_log()
        return w

    def _no_log(self) -> None:
        """An empty change log (module notes of the kernels), marked full: with no encode
        of this state to build on, the next encode writes every pair."""
        self.dlog, self.dmeta = np.zeros(0, np.uint64), np.array([0, 1], np.int64)

    def log_room(self, events: int) -> None:
        """Room in the change log for a batch of ``events`` (a key logged once per change,
        and about once more per level a trim takes it from), up to a quarter of the pool:
        a batch that changes more is encoded whole."""
        need = int(self.dmeta[0]) + 4 * events + 256
        if self.dlog.size < need <= max(4096, int(self.meta[2]) // 4) and not self.dmeta[1]:
            grown = np.zeros(max(need, 2 * self.dlog.size), np.uint64)
            grown[: self.dmeta[0]] = self.dlog[: self.dmeta[0]]
            self.dlog = grown

    def changed_keys(self) -> np.ndarray | None:
        """The keys whose entries changed since the log was cleared; None once it is full."""
        return None if self.dmeta[1] else self.dlog[: self.dmeta[0]]

    def clear_log(self) -> None:
        self.dmeta[:] = 0

    def _build_table(self) -> None:
        self.table = np.full(1 << (2 * self.ekey.size - 1).bit_length(), -1, np.int64)
        rebuild_table(self.table, self.ekey, self.emask, int(self.meta[0]))

    def reserve(self, extra: int) -> None:
        need = int(self.meta[2]) + extra
        cap = self.ekey.size
        if need <= cap:
            if self.table is None:
                self._build_table()
            return
        new = max(need, 2 * cap, 16)
        (self.ekey, self.eT, self.emask, self.eh, self.echg, self.free, self.table) = grown_pool(
            self.ekey, self.eT, self.emask, self.eh, self.echg, self.free, int(self.meta[0]),
            int(self.meta[1]), new)

    def insert(self, ticks: np.ndarray, keys: np.ndarray, cap: int, top: int) -> None:
        for i in range(0, ticks.size, _CHUNK):
            t, k = ticks[i : i + _CHUNK], keys[i : i + _CHUNK]
            self.reserve(t.size)
            self.log_room(t.size)
            insert_events(t, k, self.a0, self.a1, self.b, cap, top, self.ekey, self.eT,
                          self.emask, self.eh, self.free, self.meta, self.table, self.s,
                          self.fT, self.fK, self.fhas, self.bufs, self.srt, self.stamp, self.echg,
                          self.dlog, self.dmeta)

    def compact(self, cap: int, everything: bool) -> None:
        if not everything and not (self.s > cap).any():
            return  # (every query canonicalizes: most find nothing to do)
        for lev in range(self.s.size):
            if self.s[lev] > cap or (everything and self.s[lev] > 0):
                if self.table is None:
                    self._build_table()
                # After a merge every entry is checked against its floor; a level never
                # trimmed in this object (just read) is trimmed without sorting it, as a
                # summary read for one batch is common (a Spark worker process finds the
                # shard it decoded last only about half the time); the next trim sorts it.
                if everything or (self.srt[lev] == 0 and self.stamp[lev] == 0):
                    compact_level(lev, cap, self.ekey, self.eT, self.emask, self.free, self.meta,
                                  self.table, self.s, self.fT, self.fK, self.fhas, self.bufs,
                                  self.dlog, self.dmeta)
                    self.srt[lev] = 0
                    self.stamp[lev] = -1  # trimmed once: the next trim sorts it
                else:
                    trim_level(lev, cap, self.ekey, self.eT, self.emask, self.free, self.meta,
                               self.table, self.s, self.fT, self.fK, self.fhas, self.bufs,
                               self.srt, self.stamp, self.echg, self.dlog, self.dmeta)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, ticks, lowest levels)`` of the live entries, sorted by key. The order is
        kept for the next call, which sorts only the entries filled since (the worker
        encodes a shard every batch: sorting the whole pool was most of its encode)."""
        keys, ticks, lows, self.oslots = export_entries(
            self.ekey, self.eT, self.emask, self.eh, int(self.meta[0]), self.okeys, self.oslots,
            self.presorted)
        self.okeys, self.presorted = keys, 0
        return keys, ticks, lows

    def covering_level(self, lo: int) -> int:
        """Lowest level whose floor tick is < lo (it holds every key with T >= lo), or -1."""
        ok = (self.fhas == 0) | (self.fT < lo)
        return int(np.argmax(ok)) if ok.any() else -1

    def __getstate__(self) -> dict:
        # Numba's typed List does not pickle: its arrays travel as one flat array and their
        # sizes (the API's decoder process hands decoded summaries over by pickle,
        # app/decoder.py), flattened and rebuilt in compiled code.
        state = {name: getattr(self, name) for name in self.__slots__}
        state["bufs"] = flatten_buffers(self.bufs)
        return state

    def __setstate__(self, state: dict) -> None:
        for name in self.__slots__:
            setattr(self, name, state[name])
        self.bufs = buffers_from(*state["bufs"])

    def copy(self) -> "_Instance":
        new = object.__new__(_Instance)
        for name in self.__slots__:
            val = getattr(self, name)
            setattr(new, name, val.copy() if isinstance(val, np.ndarray) else val)
        new.bufs = buffers_from(*flatten_buffers(self.bufs))
        return new


_NO_KEYS, _NO_SLOTS = np.zeros(0, np.uint64), np.zeros(0, np.int64)


class _Encoded(NamedTuple):
    """What a wave's last encode wrote (``RandomizedWave._payload_pieces``): its sorted
    pairs (keys, ticks, which instance holds which), whether each pair's key is a page cut
    candidate, the pages' pair ranges and the pages' bytes."""

    uk: np.ndarray
    ut: np.ndarray
    held: np.ndarray
    hit: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    pages: list


@functools.lru_cache(maxsize=1024)
def _hash_params(seed: int, instances: int) -> np.ndarray:
    """(a0, a1, b) uniform in Z_p for each instance, a function of the seed only (cached,
    read-only: every decode of a stream's wave rebuilds the same ones)."""
    out = np.empty((instances, 3), np.uint64)
    for i in range(instances):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, i])))
        out[i] = rng.integers(0, _P, size=3, dtype=np.uint64)
    out.flags.writeable = False
    return out


class RandomizedWave(Sketch):
    """Distinct keys in a sliding window of out-of-order, distributed streams.

    For a window ``[lo, clock]`` of at most ``window`` ticks holding n distinct keys, the
    median m of k independent waves satisfies (§4.2 Theorem 5, §5 Theorem 6, with the
    constant re-derived in the module docstring)::

        Pr[ |m − n| < ε·n ] >= 1 − δ,

    and the returned interval ``[⌈m/(1+ε)⌉, ⌊m/(1−ε)⌋]`` (raised to C + 1, which is
    certain once it is not exact) holds with probability >= 1 − δ. When the window holds at
    most C distinct keys, level 0 has all of them and the answer is exact (confidence 1).
    Merging waves built with the same parameters and seed is lossless (ECM-sketch §5.2,
    Lemma A): the merged wave is the wave of the union of the streams, so the bound holds
    unchanged at any depth of merge tree. A range ending before the clock is refused: a
    wave keeps each key's latest tick only (§5), so it cannot tell whether a key also
    occurred earlier.

    Parameters
    ----------
    epsilon : float
        Relative error target in [1e-4, 1).
    delta : float
        Failure probability in [1e-12, 1).
    window : int
        Longest window in ticks.
    seed : int
        Chooses the hash functions; only waves with the same seed merge.
    max_distinct : int
        Sets the number of levels L: up to this many distinct keys in a window, the top
        level covers it except with probability <= 4/(9C) per instance; beyond, the answer
        may be the certain but open ``[C + 1, ∞]``. The bound holds either way.

    Examples
    --------
    >>> import numpy as np
    >>> rw = RandomizedWave(0.1, 0.05, window=100)
    >>> rw.update(np.array([5, 3, 9, 9, 1]), np.array([7, 7, 8, 9, 7], dtype=np.uint64))
    >>> e = rw.query(2, rw.clock_tick)   # keys 7, 8, 9 have a tick in [2, 9]
    >>> (e.estimate, e.lower, e.upper, e.confidence)
    (3.0, 3.0, 3.0, 1.0)
    """

    _OWNED = ("_waves",)
    FAMILY, FORMAT = Family.RANDOMIZED_WAVE, 3  # format 3: pairs in content-defined pages
    WHAT, NOUN = "randomized wave", "randomized waves"
    PARAMS = "epsilon, delta, window, seed or max_distinct"
    BATCH = ("ticks", "keys")
    SHOWN = ("epsilon", "delta", "window", "seed", "instances", "capacity", "entries", "clock_tick")

    def __init__(self, epsilon: float, delta: float, window: int, seed: int = 0,
                 max_distinct: int = 2**40, *, _reading: bool = False):
        # Below these, C = O(1/(ε² p)) no longer fits any machine (and k·C sizing is slow).
        if not 1e-4 <= epsilon < 1:
            raise SketchError("epsilon of a randomized wave must be in [1e-4, 1)")
        if not 1e-12 <= delta < 1:
            raise SketchError("delta of a randomized wave must be in [1e-12, 1)")
        window, seed = window_ticks(window, _MAX_TICK), seed_value(seed)
        if not 1 <= int(max_distinct) < 2**64:
            raise SketchError("max_distinct must be in [1, 2^64)")
        self.epsilon, self.delta = float(epsilon), float(delta)
        self.window, self.seed, self.max_distinct = int(window), int(seed), int(max_distinct)
        self.instances, self.capacity = suggest_sizes(self.epsilon, self.delta)
        self.top = _top_level(self.max_distinct, self.capacity)
        self._clock: int | None = None
        self._dirty = False  # a merge raised floors: every level needs trimming
        self._encoded = None  # the pairs and pages of the last encode (``_payload_pieces``)
        # (A wave being read gets its instances from the blob: ``_read``.)
        self._waves = [] if _reading else [_Instance(p, self.top + 1) for p in self._params_of()]

    def _params_of(self) -> np.ndarray:
        return _hash_params(self.seed, self.instances)

    # -- updates -----------------------------------------------------------------------
    def update(self, ticks: np.ndarray, keys: np.ndarray) -> None:
        """Insert a batch of (tick, key) events, in any order, duplicates allowed."""
        ticks, keys = np.asarray(ticks), np.asarray(keys)
        if ticks.shape != keys.shape or ticks.ndim != 1:
            raise SketchError("ticks and keys must be 1-D arrays of the same length")
        if ticks.size == 0:
            return
        if ticks.dtype.kind not in "iu" or keys.dtype.kind not in "iu":
            raise SketchError("ticks and keys must be integer arrays")
        if ticks.min() < 0 or ticks.max() >= _MAX_TICK:
            raise SketchError("ticks must be in [0, 2^62)")
        ticks = np.ascontiguousarray(ticks, dtype=np.int64)
        keys = np.ascontiguousarray(keys.astype(np.uint64, copy=False))
        for w in self._waves:
            w.insert(ticks, keys, self.capacity, self.top)
        latest = int(ticks.max())
        self._clock = latest if self._clock is None else max(self._clock, latest)

    @property
    def clock_tick(self) -> int:
        return self._clock if self._clock is not None else -(2**62)

    def _canonicalize(self) -> None:
        for w in self._waves:
            w.compact(self.capacity, self._dirty)
        self._dirty = False

    # -- queries -------------------------------------------------------------------------
    def query(self, lo: int, hi: int) -> Estimate:
        """Distinct keys with a tick in ``[lo, hi]``; ``hi`` must be >= the clock."""
        lo, hi = self._checked(lo, hi)
        if self.is_empty:
            return Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
        self._canonicalize()
        readings = []
        for w in self._waves:
            lev = w.covering_level(lo)
            readings.append((lev, count_at_least(self.top if lev < 0 else lev, lo, w.eT, w.s, w.bufs)))
            if lev == 0 and len(readings) == 1:
                break  # level 0 of the first instance holds every key: exact
        return self._estimate(readings)

    def query_many(self, ranges) -> list:
        """:meth:`query` of every ``(lo, hi)`` of ``ranges`` (each the same Estimate, or the
        :class:`SketchError` it raises), each instance's covering levels found for all
        ranges at once and each level's latest ticks sorted once and searched."""
        ranges = list(ranges)
        out: list = [None] * len(ranges)
        todo, los = self._checked_many(ranges, out)
        if todo and self.is_empty:
            for i in todo:
                out[i] = Estimate(0.0, 0.0, 0.0, "relative", self.epsilon, 1.0, METHOD)
            return out
        if not todo:
            return out
        columns = [(levs.tolist(), xs.tolist()) for levs, xs in zip(*self._readings(los))]
        for j, i in enumerate(todo):
            readings = []
            for levs, xs in columns:
                readings.append((levs[j], xs[j]))
                if levs[j] == 0 and len(readings) == 1:
                    break
            out[i] = self._estimate(readings)
        return out

    def _readings(self, los: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(levels, xs)``, each ``(instances, len(los))``: every instance's covering level
        of each ``lo`` (−1: none covers) and X, the entries of that level (the top one where
        none covers) whose latest tick is at or after ``lo``; each level's latest ticks
        sorted once and searched."""
        self._canonicalize()
        levels = np.zeros((len(self._waves), los.size), np.int64)
        xs = np.zeros((len(self._waves), los.size), np.int64)
        for r, w in enumerate(self._waves):
            ok = (w.fhas[None, :] == 0) | (w.fT[None, :] < los[:, None])
            levels[r] = np.where(ok.any(axis=1), np.argmax(ok, axis=1), -1)
            read = np.where(levels[r] < 0, self.top, levels[r])
            for lev in np.unique(read).tolist():
                at = read == lev
                latest = latest_ticks(lev, w.eT, w.s, w.bufs)
                xs[r, at] = latest.size - np.searchsorted(latest, los[at], "left")
        return levels, xs

    def query_columns(self, ranges) -> EstimateColumns:
        """:meth:`query_many`'s estimates as columns (refusals in ``refused``), each
        :meth:`_estimate` taken for all ranges at once: the same floats, from the same
        operations on the same operands (``tests/sketches/test_randomized_wave.py``)."""
        ranges = list(ranges)
        n = len(ranges)
        cols = EstimateColumns.zeros(n, METHOD, relative=True, epsilon=self.epsilon)
        todo, los = self._checked_many(ranges, cols.refused)
        if not todo or self.is_empty:
            return cols
        levels, xs = self._readings(los)
        at = np.asarray(todo, np.int64)
        miss = levels < 0
        # Y = X / q_l with q_l = 2^(61-l) / (2^61 - 1); an uncovered level has X > C
        values = (xs + miss).astype(np.float64) * (float(_P) / np.ldexp(1.0, 61 - np.where(miss, self.top, levels)))
        med = np.sort(values, axis=0)[len(self._waves) // 2]
        sure = np.maximum(self.capacity + 1.0, xs.max(axis=0).astype(np.float64))  # X keys are held: certain
        lower = np.maximum(sure, np.ceil(med / (1 + self.epsilon) * (1 - 1e-12)))
        upper = np.maximum(lower, np.floor(med / (1 - self.epsilon) * (1 + 1e-12)))
        est = np.minimum(np.maximum(med, lower), upper)
        confidence = np.full(at.size, 1.0 - self.delta)
        uncovered = miss.any(axis=0)
        est, lower = np.where(uncovered, np.maximum(med, sure), est), np.where(uncovered, sure, lower)
        upper, confidence = np.where(uncovered, np.inf, upper), np.where(uncovered, 1.0, confidence)
        exact = levels[0] == 0  # level 0 of the first instance holds every key
        n0 = xs[0].astype(np.float64)
        cols.estimate[at], cols.lower[at], cols.upper[at] = (np.where(exact, n0, c) for c in (est, lower, upper))
        cols.confidence[at] = np.where(exact, 1.0, confidence)
        return cols

    def _checked_many(self, ranges: list, out) -> tuple[list[int], "np.ndarray"]:
        """The indices of the ranges :meth:`_checked` takes and their ``lo`` as an int64
        array (a refused range's :class:`SketchError` goes to ``out[i]``): ranges of Python
        ints at once, any other (or any refused) one at a time, for its message."""
        ends = int_ranges(ranges)
        if ends is not None:
            lo, hi = ends
            good = (hi >= lo) & (hi - lo + 1 <= self.window)
            if not self.is_empty:
                good &= hi >= self._clock
            if good.all():
                return list(range(len(ranges))), lo
        todo, los = [], []
        for i, (lo, hi) in enumerate(ranges):
            try:
                los.append(self._checked(lo, hi)[0])
            except SketchError as e:
                out[i] = e
                continue
            todo.append(i)
        return todo, np.array(los, np.int64)

    def _checked(self, lo, hi) -> tuple[int, int]:
        lo, hi = tick_bounds(lo, hi)
        window_size(lo, hi, self.window)
        if not self.is_empty and hi < self._clock:
            raise SketchError("a randomized wave answers ranges ending at the clock: hi must be >= clock")
        return lo, hi

    def _estimate(self, readings: list) -> Estimate:
        """The answer from each instance's ``(covering level or -1, X)``: X the entries of
        that level (the top one where none covers) whose latest tick is in the range;
        one reading when the first instance's level 0 covers it (exact)."""
        if readings[0][0] == 0:  # level 0 holds every key: exact
            n = float(readings[0][1])
            return Estimate(n, n, n, "relative", self.epsilon, 1.0, METHOD)
        sure, values, uncovered = self.capacity + 1.0, [], False  # level 0 does not cover: n > C
        for lev, x in readings:
            miss = lev < 0
            if miss:
                uncovered, lev = True, self.top
            sure = max(sure, float(x))  # X keys of the window are held: a certain bound
            # Y = X / q_l with q_l = 2^(61-l) / (2^61 - 1); an uncovered level has X > C.
            values.append((x + miss) * (_P / 2.0 ** (61 - lev)))
        med = sorted(values)[len(values) // 2]
        if uncovered:
            return Estimate(max(med, sure), sure, math.inf, "relative", self.epsilon, 1.0, METHOD)
        lower = max(sure, float(math.ceil(med / (1 + self.epsilon) * (1 - 1e-12))))
        upper = max(lower, float(math.floor(med / (1 - self.epsilon) * (1 + 1e-12))))
        est = min(max(med, lower), upper)
        return Estimate(est, lower, upper, "relative", self.epsilon, 1.0 - self.delta, METHOD)

    def _instance_values(self, lo: int) -> list[tuple[int, int]]:
        """(covering level, X at that level) per instance, for tests of the analysis."""
        self._canonicalize()
        out = []
        for w in self._waves:
            lev = w.covering_level(lo)
            x = count_at_least(max(lev, 0), lo, w.eT, w.s, w.bufs)
            out.append((lev, int(x)))
        return out

    # -- merging ---------------------------------------------------------------------------
    def _merge(self, other: "RandomizedWave") -> "RandomizedWave":
        """Fold ``other`` in: afterwards self is the wave of both streams (Lemma A)."""
        if other.is_empty:
            return self
        other._canonicalize()  # changes its representation only, not its state
        for mine, theirs in zip(self._waves, other._waves):
            raise_floor = (theirs.fhas == 1) & (
                (mine.fhas == 0) | (theirs.fT > mine.fT) | ((theirs.fT == mine.fT) & (theirs.fK > mine.fK)))
            mine.fT[raise_floor], mine.fK[raise_floor] = theirs.fT[raise_floor], theirs.fK[raise_floor]
            mine.fhas |= theirs.fhas
            mine.srt[:] = 0  # raised floors: no level's order is trusted (``trim_level``)
            keys, ticks, _ = theirs.entries()
            mine.insert(ticks, keys, self.capacity, self.top)
        self._dirty = True
        self._encoded = None  # (the next encode writes every pair)
        self._clock = other._clock if self._clock is None else max(self._clock, other._clock)
        return self

    def _params(self) -> tuple:
        return (self.epsilon, self.delta, self.window, self.seed, self.max_distinct)


    @property
    def is_empty(self) -> bool:
        return self._clock is None

    @property
    def entries(self) -> int:
        """Keys held, over every instance and level."""
        return sum(int(w.meta[2]) for w in self._waves)

    # -- bytes ---------------------------------------------------------------------------------
    # payload (format 3; varints are LEB128, see sketches._codec):
    #   f64 epsilon | f64 delta | i64 window | u64 seed | u64 max_distinct | u8 has_clock | i64 clock
    #   varint U (the distinct (key, tick) pairs held by any instance) | varint P (pages)
    #   per instance (k = suggest_sizes(epsilon, delta)[0] of them):
    #     varint F (levels with a floor: always 0..F−1, floors fall as levels rise)
    #     | F × varint (clock − floor tick) | F × u64 floor key | varint n (its members)
    #   the U pairs, sorted, in P content-defined pages (sketches._pages: a page begins at a
    #   key that hashes to a cut point, never between two pairs of one key), each page:
    #     varint m | varint first key, m−1 varint key gaps | varint zig-zag newest tick,
    #     m × varint (newest − tick) | per instance ⌈m/8⌉ bytes, bit i = the page's pair i
    #     is one of its members
    # A key's tick is its latest, the same in every instance that holds it, so the pairs are
    # stored once. An entry's lowest level is not stored: it is the first level whose floor
    # it beats (or that has no floor), which a valid wave satisfies by definition. A batch
    # changes the pairs of the keys it saw and of those a level let go: their pages are
    # rewritten, the others keep their bytes (Sketch.pieces).
    _HEAD = struct.Struct("<ddqQQBq")

    def max_nbytes(self) -> int:
        """Every level of an instance holds at most ``capacity`` entries (§4.2: a blob that
        holds more is refused), so an instance holds at most ``capacity·(top + 1)`` keys and
        the wave at most ``instances`` times that (U); each pair takes a key gap and a tick
        distance of at most 10 varint bytes, each floor 10 + 8, each instance's members a
        bit a pair; each page (at most ``U // PAGE_MIN + 1``) its count, its newest tick
        (10) and at most a byte of each instance's bitmap beyond those bits."""
        per = self.capacity * (self.top + 1)
        u = self.instances * per
        levels = self.top + 1
        inst = varint_size(levels) + levels * (10 + 8) + varint_size(per)
        pages = u // PAGE_MIN + 1
        return (HEADER_SIZE + self._HEAD.size + 2 * varint_size(u) + u * 20 + self.instances * (inst + -(-u // 8))
                + pages * (varint_size(u) + 10 + self.instances))

    def _pairs(self):
        """``(uk, ut, held, sizes)``: the sorted distinct pairs, which instance holds which,
        and each instance's member count."""
        entries = [w.entries() for w in self._waves]
        for _, _, low in entries:
            if np.any(low < 0):
                raise SketchError("randomized wave invariant broken: non-contiguous levels")
        keys = np.concatenate([e[0] for e in entries])
        ticks = np.concatenate([e[1] for e in entries])
        sizes = np.array([e[0].size for e in entries], np.int64)
        uk, ut, held = unique_pairs(keys, ticks, sizes)
        return uk, ut, held, sizes

    @staticmethod
    def _may_cut(uk: np.ndarray) -> np.ndarray:
        may_cut = np.ones(uk.size, bool)
        may_cut[1:] = uk[1:] != uk[:-1]  # a key's pairs stay in one page
        return may_cut

    @classmethod
    def _page_starts(cls, uk: np.ndarray, hit: np.ndarray | None = None) -> np.ndarray:
        """Where the pages of the pairs ``uk`` begin (``hit``: their keys' cut candidacy,
        ``cut_candidates(uk)``, given when an encode carries it over from the last)."""
        return starts_at((cut_candidates(uk) if hit is None else hit) & cls._may_cut(uk))

    def _spliced(self):
        """The last encode's pairs with the pairs of every key changed since rebuilt
        (``splice_pairs``): ``(uk, ut, held, hit, origin)``, or None when there is no
        last encode or some instance changed too many keys to log."""
        logs = [w.changed_keys() for w in self._waves]
        if self._encoded is None or any(log is None for log in logs):
            return None
        last = self._encoded
        changed = np.unique(np.concatenate(logs))
        ticks = np.empty((len(self._waves), changed.size), np.int64)
        for i, w in enumerate(self._waves):
            if w.table is None:
                w._build_table()
            ticks[i], ok = ticks_of(changed, w.table, w.ekey, w.eT, w.emask, w.eh)
            if not ok:
                raise SketchError("randomized wave invariant broken: non-contiguous levels")
        return splice_pairs(last.uk, last.ut, last.held, last.hit, changed, ticks,
                            cut_candidates(changed))

    def _payload_pieces(self) -> list[bytes]:
        """Head and floors, then the pairs' pages. The pairs of keys no entry changed since
        the last encode are carried over, and a page holding exactly the pairs of a page
        of that encode is that page's bytes (pages depend only on their pairs): an encode
        builds what changed, not the whole wave (tested against a fresh encode)."""
        self._canonicalize()
        spliced = self._spliced()
        if spliced is None:
            uk, ut, held, _ = self._pairs()
            hit = cut_candidates(uk)
            origin = None
        else:
            uk, ut, held, hit, origin = spliced
        starts = self._page_starts(uk, hit)
        stops = page_stops(starts, uk.size)
        sizes = np.array([int(w.meta[2]) for w in self._waves], np.int64)
        fT = np.stack([w.fT for w in self._waves])
        fK = np.stack([w.fK for w in self._waves])
        fhas = np.stack([w.fhas for w in self._waves])
        clock = self._clock if self._clock is not None else 0
        head = Writer().pack(self._HEAD, self.epsilon, self.delta, self.window, self.seed,
                             self.max_distinct, self._clock is not None, clock)
        head.uint(uk.size).uint(starts.size).raw(write_floors(fT, fK, fhas, sizes, clock).tobytes())
        if origin is None:
            reuse = np.full(starts.size, -1, np.int64)
        else:
            reuse = reused_pages(origin, starts, stops, self._encoded.starts, self._encoded.stops)
        fresh = reuse < 0
        buf, ends = write_pair_pages(uk, ut, held, starts[fresh], stops[fresh])
        written = iter(page_bytes(buf, ends))
        old_pages = self._encoded.pages if origin is not None else []
        pages = [old_pages[k] if k >= 0 else next(written) for k in reuse.tolist()]
        self._encoded = _Encoded(uk, ut, held, hit, starts, stops, pages)
        for w in self._waves:
            w.clear_log()
        return [head.bytes()] + pages

    def _payload(self) -> bytes:
        return b"".join(self._payload_pieces())

    RESUMES = True  # ``_read(rd, resume=True)``: see there

    @classmethod
    def _read(cls, rd: Reader, resume: bool = False) -> "RandomizedWave":
        """The wave the bytes hold, checked whole. With ``resume`` (a worker reading a
        shard's state to update it) it also keeps the pairs and pages it read as the last
        encode, so the encode after the update builds on them (``_payload_pieces``) as it
        would on a wave kept in memory."""
        eps, delta, window, seed, maxd, has_clock, clock = rd.unpack(cls._HEAD)
        if not (1e-4 <= eps < 1 and 1e-12 <= delta < 1 and 1 <= window <= _MAX_TICK and maxd >= 1
                and has_clock in (0, 1) and (0 <= clock < _MAX_TICK if has_clock else clock == 0)):
            raise CorruptSketchError("randomized wave parameters out of range")
        try:
            sk = cls(eps, delta, window, seed, maxd, _reading=True)
        except SketchError as exc:
            raise CorruptSketchError(f"randomized wave parameters rejected: {exc}") from None
        levels = sk.top + 1
        u = rd.uint(rd.left())
        pages = rd.uint(u)
        if (pages == 0) != (u == 0):
            raise CorruptSketchError("randomized wave page count does not match its pairs")
        floors = []
        for _ in sk._params_of():
            code, end, nf, fhas, fT, fK = read_floors(rd.buf, rd.pos, levels, clock)
            if code:
                raise rd.fail_code(code) if code < 0 else CorruptSketchError(INSTANCE_ERRORS[code])
            rd.pos = end
            floors.append((nf, fhas, fT, fK, rd.uint(u)))
        at = rd.pos
        code, end, uk, ut, held, starts, ends = read_pair_pages(rd.buf, rd.pos, u, pages, len(floors))
        if code:
            raise rd.fail_code(code) if code < 0 else CorruptSketchError(INSTANCE_ERRORS[code])
        rd.pos = end
        rd.done()
        if u and (ut.min() < 0 or ut.max() > clock):
            raise CorruptSketchError("randomized wave entries or floors are not valid")
        hit = cut_candidates(uk)
        if u and not np.array_equal(starts, cls._page_starts(uk, hit)):
            raise CorruptSketchError("randomized wave has pages cut where its keys do not cut them")
        if not held.any(axis=0).all():
            raise CorruptSketchError("randomized wave stores a pair no instance holds")
        for params, (nf, fhas, fT, fK, n), members in zip(sk._params_of(), floors, held):
            a0, a1, b = (np.uint64(x) for x in params)
            idx = np.flatnonzero(members)
            if idx.size != n:
                raise CorruptSketchError(INSTANCE_ERRORS[5])
            counts = np.zeros(levels, np.int64)
            code, h, emask = check_members(uk, ut, idx, n, nf, fhas, fT, fK, counts, sk.capacity,
                                           bool(has_clock), clock, a0, a1, b, sk.top)
            if code:
                raise CorruptSketchError(INSTANCE_ERRORS[code])
            sk._waves.append(_Instance.loaded(params, uk[idx], ut[idx], h, emask, counts, fhas, fT, fK))
        sk._clock = int(clock) if has_clock else None
        if resume:
            sk._encoded = _Encoded(uk, ut, held, hit, starts, page_stops(starts, u),
                                   page_bytes(rd.buf[at:end], ends - at))
            for w in sk._waves:
                w.clear_log()  # the log starts empty, not full: the encode above is the last
        return sk
