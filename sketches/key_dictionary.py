"""Bounded, windowed dictionary from hashed key ids back to key strings.

Sketches count ``uint64`` ids (:func:`sketches.hashing.hash_keys`); heavy-hitter answers
must name the original strings. :class:`KeyDictionary` keeps, for each dyadic time bucket
of the window (the buckets of :mod:`sketches._ecm_kernels`), a Misra-Gries summary of
``capacity`` counters over ids, plus the strings of the ids those summaries hold. It is
mergeable (Agarwal et al., *Mergeable Summaries*, PODS 2012, §2: Misra-Gries summaries
merge by adding counters and subtracting the (k+1)-th largest) and serializable, and it
answers *which keys can be heavy in ``[lo, hi]``* with a deterministic guarantee.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence

import numba as nb
import numpy as np

from sketches._bytes import Reader, Writer
from sketches._ecm_kernels import TICK_LIMIT, TimeBuckets
from sketches.base import CorruptSketchError, Family, SketchError, unit_interval, window_ticks
from sketches.ecm import FORMAT, TimeBucketed, as_batch, read_buckets, write_buckets
from sketches.hashing import hash_keys

__all__ = ["KeyDictionary", "Candidates"]


class Candidates(NamedTuple):
    """Ids that may be heavy in a range, with their keys and weight brackets.

    Every id whose weight in the range exceeds ``threshold`` is listed (always).
    ``lower`` counts only buckets inside the range; ``upper`` adds every touching bucket's
    Misra-Gries error, so ``lower <= weight(id) <= upper`` always."""

    ids: np.ndarray
    keys: list
    lower: np.ndarray
    upper: np.ndarray
    threshold: float


@nb.njit(cache=True)
def _separated(text, lengths):
    """``text`` with a byte between its strings (``lengths`` bytes each), and that byte: the
    lowest ASCII byte the text does not hold (-1: it holds them all)."""
    seen = np.zeros(128, np.bool_)
    for c in text:
        if c < 128:
            seen[c] = True
    sep = -1
    for c in range(128):
        if not seen[c]:
            sep = c
            break
    n = lengths.shape[0]
    out = np.empty(text.shape[0] + max(n - 1, 0), np.uint8)
    if sep < 0:
        return out, sep
    p = q = 0
    for i in range(n):
        if i:
            out[q] = sep
            q += 1
        for _ in range(lengths[i]):
            out[q] = text[p]
            p += 1
            q += 1
    return out, sep


def _split_strings(text: bytes, lengths: np.ndarray) -> list[str]:
    """The UTF-8 strings of ``lengths`` bytes each that ``text`` holds one after the other,
    decoded and split at C speed: the strings joined by an ASCII byte none of them holds
    (no UTF-8 sequence can span it, so the whole decodes iff every string does), one
    decode, one split. Raises UnicodeDecodeError."""
    n = lengths.shape[0]
    if n == 0:
        return []
    joined, sep = _separated(np.frombuffer(text, np.uint8), lengths)
    if sep >= 0:
        return joined.tobytes().decode("utf-8").split(chr(sep))
    ends = np.cumsum(lengths.astype(np.int64)).tolist()
    return [text[e - k : e].decode("utf-8") for e, k in zip(ends, lengths.tolist())]


@nb.njit(cache=True)
def _positions(table, ids):
    """Index of each of ``ids`` in ``table`` (distinct, every id present), through an
    open-addressing hash: a binary search per counter cost a third of an encode."""
    size, bits = 2, 1
    while size < 2 * table.shape[0]:
        size, bits = 2 * size, bits + 1
    slots = np.full(size, -1, np.int64)
    shift = np.uint64(64 - bits)
    gold = np.uint64(0x9E3779B97F4A7C15)
    for j in range(table.shape[0]):
        i = np.int64((table[j] * gold) >> shift) & (size - 1)
        while slots[i] >= 0:
            i = (i + 1) & (size - 1)
        slots[i] = j
    out = np.empty(ids.shape[0], np.uint64)
    for j in range(ids.shape[0]):
        i = np.int64((ids[j] * gold) >> shift) & (size - 1)
        while slots[i] < 0 or table[slots[i]] != ids[j]:
            if slots[i] < 0:
                raise ValueError("key dictionary invariant broken: a counter's id has no string")
            i = (i + 1) & (size - 1)
        out[j] = slots[i]
    return out


@nb.njit(cache=True)
def _place_counters(per, index, ids_of, cnt, cap, n_s):
    """``(code, ids, counts)``: the counters read from a blob placed in their ``(bucket,
    slot)`` rows (``per`` of them in each bucket, in order), with code 1 when a bucket
    holds one id twice and 2 when some string of the table is used by no counter (one
    pass where two ``np.unique`` calls took a third of a decode)."""
    b = per.shape[0]
    ids = np.zeros((b, cap), np.uint64)
    out = np.zeros((b, cap))
    seen = np.full(n_s, -1, np.int64)  # the last bucket that used each string
    code = 0
    j = 0
    for r in range(b):
        for c in range(per[r]):
            x = index[j]
            if seen[x] == r and code == 0:
                code = 1
            seen[x] = r
            ids[r, c], out[r, c] = ids_of[x], cnt[j]
            j += 1
    if code == 0:
        for x in range(n_s):
            if seen[x] < 0:
                return 2, ids, out
    return code, ids, out


@nb.njit(cache=True)
def _mg_rebuild(n_out, k, old_ids, old_cnt, old_dest, ev_dest, ev_ids, ev_w):
    """Misra-Gries summaries of the new buckets: every old summary and event is added to
    its destination bucket, then each bucket keeps at most ``k`` counters by subtracting
    its (k+1)-th largest counter from all (the mergeable Misra-Gries step).

    A new bucket fed by exactly one old bucket and no event is that bucket unchanged (its
    at most ``k`` counters, ids ascending, as this kernel wrote them): it is copied, and
    only the buckets a batch or a merge touched are sorted and aggregated (a batch touches
    a few of the window's ~150 buckets)."""
    n_src = np.zeros(n_out, np.int64)
    fed = np.zeros(n_out, np.bool_)
    for i in range(old_dest.shape[0]):
        if old_dest[i] >= 0:
            n_src[old_dest[i]] += 1
    for i in range(ev_dest.shape[0]):
        fed[ev_dest[i]] = True
    out_ids = np.zeros((n_out, k), np.uint64)
    out_cnt = np.zeros((n_out, k))
    n_old = 0
    for i in range(old_ids.shape[0]):
        r = old_dest[i]
        if r < 0:
            continue
        if n_src[r] == 1 and not fed[r]:
            out_ids[r, :] = old_ids[i, :]
            out_cnt[r, :] = old_cnt[i, :]
            continue
        for j in range(old_ids.shape[1]):
            if old_cnt[i, j] > 0:
                n_old += 1
    tot = n_old + ev_ids.shape[0]
    d = np.empty(tot, np.int64)
    x = np.empty(tot, np.uint64)
    c = np.empty(tot)
    t = 0
    for i in range(old_ids.shape[0]):
        r = old_dest[i]
        if r >= 0 and (n_src[r] != 1 or fed[r]):
            for j in range(old_ids.shape[1]):
                if old_cnt[i, j] > 0:
                    d[t], x[t], c[t] = r, old_ids[i, j], old_cnt[i, j]
                    t += 1
    for i in range(ev_ids.shape[0]):
        d[t], x[t], c[t] = ev_dest[i], ev_ids[i], ev_w[i]
        t += 1
    o = np.argsort(x, kind="mergesort")
    o = o[np.argsort(d[o], kind="mergesort")]
    buf_x = np.empty(tot, np.uint64)
    buf_c = np.empty(tot)
    a = 0
    while a < tot:
        row = d[o[a]]
        nb_ = 0
        while a < tot and d[o[a]] == row:  # aggregate this bucket's (id, weight) runs
            xi = x[o[a]]
            s = 0.0
            while a < tot and d[o[a]] == row and x[o[a]] == xi:
                s += c[o[a]]
                a += 1
            buf_x[nb_] = xi
            buf_c[nb_] = s
            nb_ += 1
        cut = 0.0
        if nb_ > k:
            srt = np.sort(buf_c[:nb_])
            cut = srt[nb_ - k - 1]  # the (k+1)-th largest
        j = 0
        for q in range(nb_):
            v = buf_c[q] - cut
            if v > 0 and j < k:
                out_ids[row, j] = buf_x[q]
                out_cnt[row, j] = v
                j += 1
    return out_ids, out_cnt


@nb.njit(cache=True)
def _candidates_of(cnt, pos, n_held, touch, inside, thresholds):
    """The candidates of every range (row ``q`` of the bucket masks ``touch`` and
    ``inside``), as positions among the ids held (``pos``: each counter's; ids ascending
    with them): their weights inside and touching plus ``thresholds[q]``, heaviest upper
    bound first (ties: ids ascending), range ``q`` at ``[start[q], start[q + 1])``.

    Each range's counters are added into one slot per held id, bucket after bucket in
    order and each bucket's counters in order (an id's additions in bucket order, as
    ``np.bincount`` adds them), then the slots it reached read in id order: O(counters)
    a range, where a merge or a sort of its buckets' counters cost a log factor more."""
    nq, n_buckets = touch.shape
    k = cnt.shape[1]
    low_of, up_of = np.zeros(n_held), np.zeros(n_held)
    reached = np.zeros(n_held, np.bool_)
    slots = np.empty(n_buckets * k, np.int64)
    parts_pos, parts_low, parts_up = [], [], []
    start = np.zeros(nq + 1, np.int64)
    for q in range(nq):
        m = 0
        for b in range(n_buckets):
            if not touch[q, b]:
                continue
            ins = inside[q, b]
            for j in range(k):
                c = cnt[b, j]
                if c > 0:
                    p = pos[b, j]
                    if not reached[p]:
                        reached[p] = True
                        slots[m] = p
                        m += 1
                    up_of[p] += c
                    if ins:
                        low_of[p] += c
        held = np.sort(slots[:m])  # id order
        low, up = low_of[held], up_of[held] + thresholds[q]
        for p in held:
            low_of[p], up_of[p], reached[p] = 0.0, 0.0, False
        order = np.argsort(-up, kind="mergesort")  # stable: ids ascending among equals
        parts_pos.append(held[order])
        parts_low.append(low[order])
        parts_up.append(up[order])
        start[q + 1] = start[q] + m
    n = start[nq]
    pos_all, low_all, up_all = np.empty(n, np.int64), np.empty(n), np.empty(n)
    for q in range(nq):
        pos_all[start[q]:start[q + 1]] = parts_pos[q]
        low_all[start[q]:start[q + 1]] = parts_low[q]
        up_all[start[q]:start[q + 1]] = parts_up[q]
    return start, pos_all, low_all, up_all


class KeyDictionary(TimeBucketed):
    """Windowed Misra-Gries summaries over key ids, with the strings of the ids they hold.

    Per dyadic time bucket ``b`` of weight ``m_b`` (buckets obey Lemma A of
    :mod:`sketches._ecm_kernels` with ``R = epsilon``) a Misra-Gries summary of ``k =
    capacity`` counters gives, for every id ``x``, ``0 <= f_b(x) - c_b(x) <= err_b`` with
    ``err_b = (m_b - sum_x c_b(x)) / (k + 1)`` (Agarwal et al. 2012, Lemma 1 and §2.1: the
    bound survives merges, including the merges of buckets and of sketches done here).

    Bounds for a range ``[lo, hi]``, with ``U_tot`` the weight of touching buckets:

    * recall (deterministic): every id of weight ``> threshold = sum_{b touching} err_b``
      is among :meth:`candidates`, and ``threshold <= U_tot / (k + 1) <= (1 + R) N / (k + 1)``
      for ``hi >= clock`` (``N``: the range's weight); so with ``k + 1 > (1 + R) / phi``
      every ``phi``-heavy key is listed;
    * memory: at most ``k`` ids per bucket and one string per distinct id held, so at
      most ``k * n_buckets`` strings (keys are at most 65535 UTF-8 bytes).

    A hashed id maps back to every stored key with that id; keys whose 64-bit ids
    collide (probability about ``n^2 / 2^65`` for ``n`` keys) are merged into one counter,
    which only raises its count. :meth:`lookup` with ``bits < 64`` matches reduced ids
    ``id >> (64 - bits)``: several keys may share a reduced id, and all are returned.

    Examples
    --------
    >>> import numpy as np
    >>> kd = KeyDictionary(capacity=4, window=100)
    >>> keys = ["a"] * 50 + ["b"] * 30 + [f"k{i}" for i in range(20)]
    >>> kd.update(np.zeros(100, np.int64), keys)
    >>> c = kd.candidates(0, 0)
    >>> sorted(c.keys[:2]), c.threshold < 30
    (['a', 'b'], True)
    >>> kd2 = KeyDictionary.from_bytes(kd.to_bytes())
    >>> kd2.lookup(c.ids[:1]) == [[c.keys[0]]]
    True
    """

    FAMILY, FORMAT, HEADER_FLAGS = Family.ECM, FORMAT, 2  # header flags 2: the third class of the ECM family
    WHAT, NOUN = "key dictionary", "key dictionaries"
    PARAMS = "capacity, window or epsilon"
    BATCH = ("ticks", "names", "keys", "weights")
    SHOWN = ("capacity", "window", "epsilon", "n_buckets", "n_keys", "clock_tick", "nbytes")

    # parameters (little endian): u32 capacity | 4 x u8 zero | i64 window | f64 epsilon
    _PARAMS = struct.Struct("<I4xqd")
    # state: i64 clock | u32 merge depth | u32 leaves | u32 B | u32 E (counters) | u32 S (strings)
    _STATE = struct.Struct("<qIIIII")

    def __init__(self, capacity: int, window: int, epsilon: float = 0.1):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or not (1 <= capacity <= 65535):
            raise SketchError("capacity must be an integer in [1, 65535]")
        self.capacity = int(capacity)
        self.epsilon = unit_interval("epsilon", epsilon)
        self._tb = TimeBuckets(window_ticks(window, TICK_LIMIT - 1), self.epsilon)
        self._ids = np.zeros((0, self.capacity), np.uint64)
        self._cnt = np.zeros((0, self.capacity))
        # The strings of the ids the summaries hold: ids increasing, strings alongside (NumPy
        # arrays: a dict of a thousand keys cost a tenth of a small stream's update, built on
        # every read, searched, pruned and sorted on every update and write).
        self._kid = np.zeros(0, np.uint64)
        self._kstr = np.zeros(0, object)
        self._depth, self._leaves = 0, 1

    # -- properties (window, clock, is_empty: TimeBucketed) -----------------------------------
    def __len__(self) -> int:
        """Number of key strings held."""
        return int(self._kid.shape[0])

    @property
    def _keys(self) -> dict[int, str]:
        """id -> string of every string held (a copy, for tests)."""
        return dict(zip(self._kid.tolist(), self._kstr.tolist()))

    def _where(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pos, found)``: where each of ``ids`` is among the ids held, and whether it is."""
        pos = np.searchsorted(self._kid, ids)
        n = self._kid.shape[0]
        found = np.zeros(ids.shape[0], bool) if n == 0 else self._kid[np.minimum(pos, n - 1)] == ids
        return pos, found

    def _strings_of(self, ids: np.ndarray) -> list[str]:
        pos, found = self._where(ids)
        if not found.all():
            raise KeyError(int(ids[~found][0]))
        return self._kstr[pos].tolist()

    # -- updates ----------------------------------------------------------------------------
    def update(self, ticks, keys: Sequence[str], ids=None, weights=None) -> None:
        """Add events; ``ids`` defaults to ``hash_keys(keys)``."""
        keys = list(keys)
        if ids is None:
            ids = hash_keys(keys) if keys else np.zeros(0, np.uint64)
        t, x, w = as_batch(ticks, ids, weights)
        if len(keys) != t.shape[0]:
            raise SketchError("keys must have one string per event")
        if t.shape[0] == 0:
            return
        sel, ev_dest, old_dest, n_out = self._tb.plan_update(t, w)
        self._ids, self._cnt = _mg_rebuild(n_out, self.capacity, self._ids, self._cnt, old_dest,
                                           ev_dest, x[sel], w[sel])
        # Afterwards the strings are those of the ids held: the ones already known keep
        # their string, a new one takes its first event's key, the others are dropped.
        held = self._held()
        pos, found = self._where(held)
        strings = np.empty(held.shape[0], object)
        strings[found] = self._kstr[pos[found]]
        new = held[~found]
        if new.shape[0]:
            first = np.unique(x[sel], return_index=True)
            at = first[1][np.searchsorted(first[0], new)]
            fresh = [keys[p] for p in sel[at].tolist()]
            for key in fresh:
                if not isinstance(key, str) or len(key.encode()) > 65535:
                    raise SketchError("keys must be strings of at most 65535 UTF-8 bytes")
            column = np.empty(len(fresh), object)
            column[:] = fresh
            strings[~found] = column
        self._kid, self._kstr = held, strings

    def _held(self) -> np.ndarray:
        return np.unique(self._ids[self._cnt > 0])

    # -- queries ----------------------------------------------------------------------------
    def candidates(self, lo: int, hi: int) -> Candidates:
        """Ids (and keys) that may weigh more than ``threshold`` in ``[lo, hi]``, heaviest
        upper bound first."""
        got = self.candidates_many([(lo, hi)])[0]
        if isinstance(got, SketchError):
            raise got
        return got

    def candidates_many(self, ranges) -> list:
        """:meth:`candidates` of every ``(lo, hi)`` of ``ranges`` (or the SketchError it
        raises), the buckets classified for all at once and the counters of every range
        added up in one compiled call."""
        empty = Candidates(np.zeros(0, np.uint64), [], np.zeros(0), np.zeros(0), 0.0)
        out, classified = self._each(ranges, lambda r: self._classified(*r), empty)
        if not classified:
            return out
        live = [i for i, _ in classified]
        masks = [c[1:] for _, c in classified]
        inside = np.array([m[0] for m in masks])
        touch = inside | np.array([m[1] for m in masks])
        # each bucket's Misra-Gries error: an id absent from a touching bucket's summary may
        # still weigh err_b there (row sums as NumPy takes them, bucket by bucket)
        err = np.maximum((self._tb.m - self._cnt.sum(axis=1)) / (self.capacity + 1), 0.0)
        thresholds = np.array([float(err[row].sum()) for row in touch])
        pos, found = self._where(self._ids.ravel())
        live_counters = self._cnt.ravel() > 0
        if not found[live_counters].all():  # every counter's id has its string
            raise KeyError(int(self._ids.ravel()[live_counters & ~found][0]))
        start, held, low, up = _candidates_of(self._cnt, np.where(found, pos, 0).reshape(self._ids.shape),
                                              len(self._kid), touch, inside, thresholds)
        uid, keys = self._kid[held], self._kstr[held].tolist()
        for q, i in enumerate(live):
            a, b = int(start[q]), int(start[q + 1])
            out[i] = Candidates(uid[a:b], keys[a:b], low[a:b], up[a:b], float(thresholds[q]))
        return out

    def lookup(self, ids, bits: int = 64) -> list[list[str]]:
        """Keys held for each id; with ``bits < 64`` an id is a reduced id
        ``full_id >> (64 - bits)`` and every matching key is returned."""
        if not (1 <= bits <= 64):
            raise SketchError("bits must be in [1, 64]")
        q = np.asarray(ids, dtype=np.uint64).ravel()
        if not len(self):
            return [[] for _ in q.tolist()]
        full = self._kid
        red = full >> np.uint64(64 - bits) if bits < 64 else full
        order = np.argsort(red, kind="stable")
        red_s = red[order]
        out = []
        for v in q.tolist():
            a, b = np.searchsorted(red_s, v, "left"), np.searchsorted(red_s, v, "right")
            out.append(sorted(self._kstr[order[a:b]].tolist()))
        return out

    # -- merging ----------------------------------------------------------------------------
    def _merge(self, other: "KeyDictionary") -> "KeyDictionary":
        """Fold ``other`` in (same capacity, window and epsilon); returns self."""
        d_self, d_other, n_out = self._tb.plan_union(other._tb)
        none = np.zeros(0, np.int64)
        self._ids, self._cnt = _mg_rebuild(
            n_out, self.capacity, np.concatenate([self._ids, other._ids]), np.concatenate([self._cnt, other._cnt]),
            np.concatenate([d_self, d_other]), none, np.zeros(0, np.uint64), np.zeros(0))
        # The strings of the ids held after the merge; an id both know keeps this one's.
        held = self._held()
        mine, in_mine = self._where(held)
        theirs, in_theirs = other._where(held)
        strings = np.empty(held.shape[0], object)
        strings[in_theirs] = other._kstr[theirs[in_theirs]]
        strings[in_mine] = self._kstr[mine[in_mine]]
        known = in_mine | in_theirs
        self._kid, self._kstr = held[known], strings[known]
        self._depth = max(self._depth, other._depth) + 1
        self._leaves += other._leaves
        return self

    def copy(self) -> "KeyDictionary":
        other = KeyDictionary(self.capacity, self.window, self.epsilon)
        other._tb, other._ids, other._cnt = self._tb.copy(), self._ids.copy(), self._cnt.copy()
        other._kid, other._kstr = self._kid.copy(), self._kstr.copy()
        other._depth, other._leaves = self._depth, self._leaves
        return other

    # -- bytes ------------------------------------------------------------------------------
    # Blob (format 2; varints are LEB128, see sketches._codec): 16-byte header (family ECM,
    #   flags = 2) | _PARAMS | _STATE |
    #   buckets as in the ECM state block: u8[B] level | varint± first start, B−1 varint start
    #   steps | varint[B] s − start | varint[B] e − s | float column m |
    #   varint[B] counters per bucket | varint[E] index of each counter's id in the string
    #   table | float column counts (bucket by bucket) |
    #   string table: u64[S] ids (strictly increasing) | varint[S] UTF-8 lengths | the bytes

    def _params(self) -> tuple:
        return (self.capacity, self.window, self.epsilon)

    def _payload(self) -> bytes:
        tb = self._tb
        mask = self._cnt > 0
        per = mask.sum(axis=1)
        ids = self._kid
        strings = self._kstr.tolist()
        text = "".join(strings)
        data = text.encode()  # UTF-8 of a concatenation is the concatenation of the UTF-8s
        if len(data) == len(text):  # ASCII: one byte a character
            lengths = np.fromiter(map(len, strings), np.uint64, len(strings))
        else:
            lengths = np.array([len(x.encode()) for x in strings], np.uint64)
        wr = Writer().pack(self._PARAMS, self.capacity, self.window, self.epsilon)
        wr.pack(self._STATE, tb.clock, self._depth, self._leaves, len(tb), int(per.sum()), ids.size)
        if len(tb):
            write_buckets(wr, tb)
            wr.uints(per.astype(np.uint64)).uints(_positions(ids, self._ids[mask]))
            wr.floats(self._cnt[mask])
        wr.array(ids, "<u8").uints(lengths).raw(data)
        return wr.bytes()

    @classmethod
    def _read(cls, rd: Reader) -> "KeyDictionary":
        raw = rd.take(cls._PARAMS.size)
        cap, window, eps = cls._PARAMS.unpack(raw)
        if raw[4:8] != bytes(4):
            raise CorruptSketchError("key dictionary blob has non-zero padding")
        try:
            kd = cls(cap, window, eps)
        except (ValueError, ArithmeticError) as e:  # SketchError, or sizes that do not compute
            raise CorruptSketchError(f"key dictionary blob has invalid parameters: {e}") from None
        clock, depth, leaves, b, n_e, n_s = rd.unpack(cls._STATE)
        if b + n_e + 9 * n_s > rd.left():
            raise CorruptSketchError("key dictionary blob truncated")
        if leaves < depth + 1:
            raise CorruptSketchError("key dictionary blob has an inconsistent merge history")
        tb = TimeBuckets(kd.window, kd.epsilon)
        tb.clock = clock
        per, index, cnt = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        if b:
            read_buckets(rd, tb, b, "key dictionary")
            per_u = rd.uints(b)
            if per_u.max() > np.uint64(cap) or int(per_u.sum()) != n_e:
                raise CorruptSketchError("key dictionary blob has inconsistent counter counts")
            per = per_u.astype(np.int64)
            index_u = rd.uints(n_e)
            if n_e and index_u.max() >= np.uint64(n_s):
                raise CorruptSketchError("key dictionary blob counter refers to no string")
            index = index_u.astype(np.int64)
            cnt = rd.floats(n_e)
        elif n_e:
            raise CorruptSketchError("key dictionary blob has inconsistent counter counts")
        why = tb.validate()
        if why:
            raise CorruptSketchError(f"key dictionary blob invalid: {why}")
        table = rd.array("<u8", n_s)
        lengths = rd.uints(n_s)
        if n_s > 1 and np.any(table[1:] <= table[:-1]):
            raise CorruptSketchError("key dictionary blob has unordered or truncated strings")
        if n_s and lengths.max() > np.uint64(65535):
            raise CorruptSketchError("key dictionary blob has a string that is too long")
        text = rd.take(int(lengths.sum()))
        rd.done()
        if n_e and not (np.all(np.isfinite(cnt)) and cnt.min() > 0):
            raise CorruptSketchError("key dictionary blob has non-positive counters")
        code, kd._ids, kd._cnt = _place_counters(per, index, table, cnt, cap, n_s)
        if b and np.any(kd._cnt.sum(axis=1) > tb.m * (1 + 1e-9)):
            raise CorruptSketchError("key dictionary blob counters exceed their bucket masses")
        if code == 1:
            raise CorruptSketchError("key dictionary blob repeats an id within a bucket")
        if code == 2:
            raise CorruptSketchError("key dictionary blob strings do not match its counters")
        try:
            strings = _split_strings(text, lengths)
        except UnicodeDecodeError:
            raise CorruptSketchError("key dictionary blob has a string that is not UTF-8") from None
        kd._kstr = np.empty(len(strings), object)
        kd._kstr[:] = strings
        kd._tb, kd._kid, kd._depth, kd._leaves = tb, table.astype(np.uint64), int(depth), int(leaves)
        return kd

    @property
    def n_keys(self) -> int:
        """Number of key strings held (``len``)."""
        return len(self)
