"""Compiled kernels of the randomized wave (Gibbons & Tirthapura 2004, §4-5).

One *instance* of the wave is a pool of entries plus per-level bookkeeping:

* entry ``e``: ``ekey[e]`` (the item id), ``eT[e]`` (its latest tick as far as this entry
  knows), ``eh[e]`` (its level h(key) in [0, L]) and ``emask[e]`` (bit ``l`` set when the
  entry is in the buffer of level ``l``). ``table`` is an open-addressing map key -> entry
  (linear probing, backward-shift deletion, -1 = empty); ``free`` is a stack of reusable
  entry slots; ``meta = [high-water mark, free count, live count]``.
* level ``l``: ``s[l]`` entries in its buffer ``bufs[l][:s[l]]`` (entry indices; a numba
  typed list of arrays grown on demand up to 2C) and its floor ``(fT[l], fK[l])``, present
  when ``fhas[l]``: the best score pushed out of the level so far (the (C+1)-th best score
  once the level is compacted).

A score is the pair ``(tick, key)`` compared lexicographically, so scores are distinct.
Buffers are lazy: an arrival is appended to level ``l`` when it beats the floor, and a
level is trimmed back to its ``C`` best scores (:func:`compact_level`) only when it reaches
``2C`` entries, or before a query or a serialisation. Why this is exact is proved in
``sketches/randomized_wave.py``.

A trim keeps its result sorted by score (:func:`trim_level`), so the next one sorts only
what arrived since and merges: ``srt[l]`` leading entries of level ``l`` are sorted as of
stamp ``stamp[l]``; ``stamp[-1]`` counts trims, and ``echg[e]`` is the stamp after which
entry ``e``'s tick last rose (a sorted entry whose tick rose since is out of place, and is
taken out and sorted again with the new ones). A merge leaves no level sorted.

Every key whose entry changes (a tick rises, a level is added or taken away) is logged in
``dlog[:dmeta[0]]`` (``dmeta[1]`` set once the log is full), so an encode can rewrite only
the pairs of those keys (:func:`splice_pairs`).

Tested by: tests/sketches/test_randomized_wave.py (levels_of, hashes_of),
tests/sketches/test_compiled_codec.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.typed import List

from sketches._codec import (
    drop_stale_kernel_cache, get_varint, put_varint, unzigzag1, zigzag1,
)

drop_stale_kernel_cache(__file__)  # its kernels compile the codec's pieces in

P61 = np.uint64((1 << 61) - 1)  # the Mersenne prime 2^61 - 1: the hash field Z_p
_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_GOLD = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing for the slot of a key
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U29 = np.uint64(29)
_U32 = np.uint64(32)
_U61 = np.uint64(61)
_TOP = np.uint64(1 << 60)


@njit(cache=True, inline="always")
def _mulmod_small(a, x):
    """A value ≡ a·x (mod 2^61 − 1), below 2^62 + 2^33, for a < 2^61 and x < 2^32."""
    lo = (a & _M32) * x  # < 2^64
    z = (a >> _U32) * x  # < 2^61; z·2^32 = (z >> 29)·2^61 + (z mod 2^29)·2^32
    return (lo & P61) + (lo >> _U61) + (z >> _U29) + ((z & _M29) << _U32)


@njit(cache=True, inline="always")
def field_hash(key, a0, a1, b):
    """``(a1·key_hi + a0·key_lo + b) mod (2^61 − 1)``: pairwise independent over keys.

    The two 32-bit halves of a key are a vector of Z_p^2 (distinct keys give distinct
    vectors), and ``x -> <a, x> + b`` with ``a, b`` uniform is strongly universal there.
    """
    r = _mulmod_small(a1, key >> _U32) + _mulmod_small(a0, key & _M32) + b  # < 2^64
    r = (r & P61) + (r >> _U61)
    if r >= P61:
        r -= P61
    return r


@njit(cache=True, inline="always")
def level_of(y, L):
    """h = the largest l <= L with y < 2^(61 - l) (h = 0 when y >= 2^60)."""
    lev = 0
    thr = _TOP
    while lev < L and y < thr:
        lev += 1
        thr >>= _U1
    return lev


@njit(cache=True)
def levels_of(keys, a0, a1, b, L):
    out = np.empty(keys.size, np.int64)
    for i in range(keys.size):
        out[i] = level_of(field_hash(keys[i], a0, a1, b), L)
    return out


@njit(cache=True)
def hashes_of(keys, a0, a1, b):
    out = np.empty(keys.size, np.uint64)
    for i in range(keys.size):
        out[i] = field_hash(keys[i], a0, a1, b)
    return out


@njit(cache=True, inline="always")
def _home(key, shift):
    return np.int64((key * _GOLD) >> shift)


@njit(cache=True, inline="always")
def _find(table, shift, tmask, ekey, key):
    """Slot holding ``key``, or the empty slot where it would go."""
    i = _home(key, shift)
    while True:
        e = table[i]
        if e < 0 or ekey[e] == key:
            return i
        i = (i + 1) & tmask


@njit(cache=True)
def _delete_slot(table, shift, tmask, ekey, i):
    # Backward-shift deletion keeps every probe chain unbroken without tombstones.
    j = i
    while True:
        j = (j + 1) & tmask
        e = table[j]
        if e < 0:
            break
        k = _home(ekey[e], shift)
        if i <= j:
            if i < k and k <= j:
                continue
        elif k > i or k <= j:
            continue
        table[i] = e
        i = j
    table[i] = -1


@njit(cache=True)
def _shift_for(size):
    bits = 0
    while (1 << bits) < size:
        bits += 1
    return np.uint64(64 - bits)


@njit(cache=True)
def rebuild_table(table, ekey, emask, hwm):
    """Fill an all-empty ``table`` (size a power of two >= 2) with the live entries."""
    shift = _shift_for(table.size)
    tmask = table.size - 1
    for e in range(hwm):
        if emask[e] != _U0:
            table[_find(table, shift, tmask, ekey, ekey[e])] = e


@njit(cache=True)
def grown_pool(ekey, eT, emask, eh, echg, free, hwm, nfree, size):
    """The pool's arrays widened to ``size`` slots (the first ``hwm`` entries and ``nfree``
    free slots kept, the rest zero) and a key table built for them, in one call: a pool is
    grown at the first insertion after every read."""
    ekey2 = np.zeros(size, np.uint64)
    eT2 = np.zeros(size, np.int64)
    emask2 = np.zeros(size, np.uint64)
    eh2 = np.zeros(size, np.int64)
    echg2 = np.zeros(size, np.int64)
    free2 = np.zeros(size, np.int64)
    ekey2[:hwm] = ekey[:hwm]
    eT2[:hwm] = eT[:hwm]
    emask2[:hwm] = emask[:hwm]
    eh2[:hwm] = eh[:hwm]
    echg2[:hwm] = echg[:hwm]
    free2[:nfree] = free[:nfree]
    slots = 2
    while slots < 2 * size:  # 1 << (2·size − 1).bit_length(): load factor <= 1/2
        slots *= 2
    table = np.full(slots, -1, np.int64)
    rebuild_table(table, ekey2, emask2, hwm)
    return ekey2, eT2, emask2, eh2, echg2, free2, table


@njit(cache=True, inline="always")
def _beats(t, key, l, fT, fK, fhas):
    return fhas[l] == 0 or t > fT[l] or (t == fT[l] and key > fK[l])


@njit(cache=True, inline="always")
def _log(key, dlog, dmeta):
    c = dmeta[0]
    if c < dlog.size:
        dlog[c] = key
        dmeta[0] = c + 1
    else:
        dmeta[1] = 1  # full: the next encode rewrites every pair


@njit(cache=True)
def _drop_entry(e, ekey, free, meta, table, shift, tmask):
    _delete_slot(table, shift, tmask, ekey, _find(table, shift, tmask, ekey, ekey[e]))
    free[meta[1]] = e
    meta[1] += 1
    meta[2] -= 1


@njit(cache=True, inline="always")
def _leave_level(e, bit, ekey, emask, free, meta, table, shift, tmask, dlog, dmeta):
    """Entry ``e`` leaves the level of ``bit`` (logged); in no level any more, it goes."""
    emask[e] &= ~bit
    _log(ekey[e], dlog, dmeta)
    if emask[e] == _U0:
        _drop_entry(e, ekey, free, meta, table, shift, tmask)


@njit(cache=True, inline="always")
def _lowest_level(bits, h):
    """The lowest level of an entry in the levels ``bits`` (a key of hash level ``h``), or
    -1 when they are not one run from it up to ``h`` (the wave's invariant)."""
    low = 0
    while (bits >> np.uint64(low)) & _U1 == _U0:
        low += 1
    full = ((_U1 << np.uint64(h + 1)) - _U1) if h < 63 else ~_U0
    return low if bits == full & ~((_U1 << np.uint64(low)) - _U1) else -1


@njit(cache=True)
def compact_level(l, C, ekey, eT, emask, free, meta, table, s, fT, fK, fhas, bufs, dlog, dmeta):
    """Trim level ``l`` to its canonical content: the C best scores above the floor.

    Entries at or below the floor are dropped without touching the floor (they can only
    be left over from a merge that raised it); of the rest, the C best are kept and the
    floor rises to the best score pushed out.
    """
    shift = _shift_for(table.size)
    tmask = table.size - 1
    bit = _U1 << np.uint64(l)
    n = s[l]
    idx = bufs[l][:n].copy()
    keep = np.empty(n, np.bool_)
    cnt = 0
    for j in range(n):
        e = idx[j]
        keep[j] = _beats(eT[e], ekey[e], l, fT, fK, fhas)
        if keep[j]:
            cnt += 1
    if cnt > C:
        ts = np.empty(cnt, np.int64)
        c = 0
        for j in range(n):
            if keep[j]:
                ts[c] = eT[idx[j]]
                c += 1
        tcut = np.partition(ts, cnt - C)[cnt - C]  # the C-th largest tick
        greater = 0
        ties = 0
        for j in range(cnt):
            if ts[j] > tcut:
                greater += 1
            elif ts[j] == tcut:
                ties += 1
        need = C - greater  # 1 <= need <= ties: ties at tcut are broken by key
        tk = np.empty(ties, np.uint64)
        c = 0
        for j in range(n):
            if keep[j] and eT[idx[j]] == tcut:
                tk[c] = ekey[idx[j]]
                c += 1
        tk = np.sort(tk)
        kcut = tk[ties - need]
        best_t, best_k, found = np.int64(0), _U0, False
        if ties > need:
            best_t, best_k, found = tcut, tk[ties - need - 1], True
        for j in range(n):
            if not keep[j]:
                continue
            e = idx[j]
            t = eT[e]
            if t > tcut or (t == tcut and ekey[e] >= kcut):
                continue
            keep[j] = False
            if t < tcut and not (ties > need):
                if (not found) or t > best_t or (t == best_t and ekey[e] > best_k):
                    best_t, best_k, found = t, ekey[e], True
        if found and _beats(best_t, best_k, l, fT, fK, fhas):
            fT[l], fK[l], fhas[l] = best_t, best_k, 1
    buf = bufs[l]
    c = 0
    for j in range(n):
        e = idx[j]
        if keep[j]:
            buf[c] = e
            c += 1
        else:
            _leave_level(e, bit, ekey, emask, free, meta, table, shift, tmask, dlog, dmeta)
    s[l] = c


@njit(cache=True)
def _by_score(idx, eT, ekey):
    """``idx`` sorted by score (tick, then key: keys of a level are distinct)."""
    idx = idx[np.argsort(ekey[idx], kind="mergesort")]
    return idx[np.argsort(eT[idx], kind="mergesort")]


@njit(cache=True, inline="always")
def _below(a, b, eT, ekey):
    return eT[a] < eT[b] or (eT[a] == eT[b] and ekey[a] < ekey[b])


@njit(cache=True)
def trim_level(l, C, ekey, eT, emask, free, meta, table, s, fT, fK, fhas, bufs, srt, stamp, echg,
               dlog, dmeta):
    """:func:`compact_level`'s result, paying for what changed since the level's last trim.

    The level's sorted prefix (``srt[l]`` entries, module notes) less the entries whose
    tick rose since is still in score order; the rest (entries appended since, and those)
    are checked against the floor (only a merge puts entries at or below it there: it
    leaves nothing sorted), sorted, and merged with it from the bottom: the lowest scores
    go until C are left, and the floor rises to the best score pushed out, exactly as a
    full trim decides. The C kept are left sorted for the next trim."""
    shift = _shift_for(table.size)
    tmask = table.size - 1
    bit = _U1 << np.uint64(l)
    buf = bufs[l]
    n, p, at = s[l], srt[l], stamp[l]
    kept = np.empty(p, np.int64)
    moved = np.empty(n, np.int64)
    nk, nm = 0, 0
    for j in range(p):
        e = buf[j]
        if echg[e] > at:
            moved[nm] = e
            nm += 1
        else:
            kept[nk] = e
            nk += 1
    for j in range(p, n):
        e = buf[j]
        if _beats(eT[e], ekey[e], l, fT, fK, fhas):
            moved[nm] = e
            nm += 1
        else:  # left from a merge that raised the floor: goes, the floor stays
            _leave_level(e, bit, ekey, emask, free, meta, table, shift, tmask, dlog, dmeta)
    moved = _by_score(moved[:nm], eT, ekey)
    drop = nk + nm - C
    a, b = 0, 0
    if drop > 0:
        last = -1
        for _ in range(drop):
            if b >= nm or (a < nk and _below(kept[a], moved[b], eT, ekey)):
                last = kept[a]
                a += 1
            else:
                last = moved[b]
                b += 1
            _leave_level(last, bit, ekey, emask, free, meta, table, shift, tmask, dlog, dmeta)
        if _beats(eT[last], ekey[last], l, fT, fK, fhas):
            fT[l], fK[l], fhas[l] = eT[last], ekey[last], 1
    c = 0
    while a < nk or b < nm:
        if b >= nm or (a < nk and _below(kept[a], moved[b], eT, ekey)):
            buf[c] = kept[a]
            a += 1
        else:
            buf[c] = moved[b]
            b += 1
        c += 1
    s[l] = c
    srt[l] = c
    stamp[-1] += 1
    stamp[l] = stamp[-1]


@njit(cache=True)
def _append(bufs, s, l, e, C):
    buf = bufs[l]
    if s[l] == buf.size:  # grow lazily: a level never holds more than 2C
        new = np.empty(min(2 * C, max(16, 2 * buf.size)), np.int64)
        new[: s[l]] = buf[: s[l]]
        bufs[l] = new
        buf = new
    buf[s[l]] = e
    s[l] += 1


@njit(cache=True)
def insert_events(ticks, keys, a0, a1, b, C, L, ekey, eT, emask, eh, free, meta, table,
                  s, fT, fK, fhas, bufs, srt, stamp, echg, dlog, dmeta):
    """Insert (tick, key) events in any order; the pool must have room for ``keys.size``."""
    shift = _shift_for(table.size)
    tmask = table.size - 1
    over = 2 * C
    for i in range(ticks.size):
        t = ticks[i]
        v = keys[i]
        slot = _find(table, shift, tmask, ekey, v)
        e = table[slot]
        if e >= 0:
            if t <= eT[e]:
                continue  # the key's latest tick is unchanged: so is every level
            eT[e] = t
            echg[e] = stamp[-1] + 1  # out of place in the levels sorted before now
            h = eh[e]
            m = emask[e]
        else:
            h = level_of(field_hash(v, a0, a1, b), L)
            m = _U0
        add = _U0
        for l in range(h + 1):
            bit = _U1 << np.uint64(l)
            if (m & bit) == _U0 and _beats(t, v, l, fT, fK, fhas):
                add |= bit
        if e >= 0 or add != _U0:
            _log(v, dlog, dmeta)  # its tick rose, or it joins a level
        if add == _U0:
            continue
        if e < 0:
            if meta[1] > 0:
                meta[1] -= 1
                e = free[meta[1]]
            else:
                e = meta[0]
                meta[0] += 1
            ekey[e], eT[e], eh[e] = v, t, h
            table[slot] = e
            meta[2] += 1
        emask[e] = m | add
        full = False
        for l in range(h + 1):
            if (add >> np.uint64(l)) & _U1:
                _append(bufs, s, l, e, C)
                full |= s[l] >= over
        if full:
            for l in range(h + 1):
                if s[l] >= over:
                    trim_level(l, C, ekey, eT, emask, free, meta, table, s, fT, fK, fhas, bufs,
                               srt, stamp, echg, dlog, dmeta)


@njit(cache=True)
def count_at_least(l, lo, eT, s, bufs):
    """Entries of level ``l`` whose latest tick is >= lo."""
    buf = bufs[l]
    c = 0
    for j in range(s[l]):
        if eT[buf[j]] >= lo:
            c += 1
    return c


@njit(cache=True)
def latest_ticks(l, eT, s, bufs):
    """The latest ticks of level ``l``'s entries, sorted (what ``count_at_least`` reads,
    for many ``lo`` at once by a search; the level's buffer read here, compiled: indexing
    the typed list from Python costs a call, and its first use a compilation)."""
    buf = bufs[l]
    out = np.empty(s[l], np.int64)
    for j in range(s[l]):
        out[j] = eT[buf[j]]
    return out[np.argsort(out, kind="mergesort")]  # nearly sorted: see export_entries


@njit(cache=True)
def loaded_buffers(emask, s):
    """Level buffers of a freshly loaded pool, as a new typed list: each level lists the
    entries whose bit is set (one compiled call per instance read)."""
    start = np.zeros(s.size + 1, np.int64)
    for l in range(s.size):
        start[l + 1] = start[l] + s[l]
    flat = np.empty(start[-1], np.int64)
    fill = start[:-1].copy()
    for e in range(emask.size):  # one pass: an entry's levels are a run of bits
        bits = emask[e]
        l = 0
        while bits != _U0:
            if bits & _U1:
                flat[fill[l]] = e
                fill[l] += 1
            bits >>= _U1
            l += 1
    bufs = List()
    for l in range(s.size):
        buf = np.empty(max(s[l], 1), np.int64)
        buf[: s[l]] = flat[start[l] : start[l + 1]]
        bufs.append(buf)
    return bufs


@njit(cache=True)
def export_entries(ekey, eT, emask, eh, hwm, okeys, oslots, presorted):
    """Live entries sorted by key, with the lowest level each is in (-1 if not contiguous),
    and their slots: ``(keys, ticks, lows, slots)``.

    ``okeys``/``oslots`` are a previous export's keys and slots (empty for none). A slot
    that still holds the key it held then keeps its place in that order (keys are distinct
    in a pool, so the kept ones stay sorted); only the slots filled since are sorted and
    merged in, so an export costs the pool plus what changed, not a sort of the pool.
    With no previous export, the first ``presorted`` slots (a pool read from bytes holds its
    entries in key order) are taken in slot order while their keys rise, a key out of line
    with both neighbours (a slot filled again since) going to the sort instead."""
    mark = np.zeros(hwm, np.bool_)
    kept = np.empty(oslots.size if oslots.size else min(presorted, hwm), np.int64)
    c = 0
    for j in range(oslots.size):
        e = oslots[j]
        if e < hwm and emask[e] != _U0 and ekey[e] == okeys[j] and not mark[e]:
            mark[e] = True
            kept[c] = e
            c += 1
    if oslots.size == 0:
        top = min(presorted, hwm)
        nxt = 0
        for e in range(top):
            if emask[e] == _U0:
                continue
            while nxt <= e or (nxt < top and emask[nxt] == _U0):
                nxt += 1  # the next live slot of the run
            if (c == 0 or ekey[e] > ekey[kept[c - 1]]) and (nxt >= top or ekey[e] < ekey[nxt]):
                mark[e] = True
                kept[c] = e
                c += 1
    m = 0
    for e in range(hwm):
        if emask[e] != _U0 and not mark[e]:
            m += 1
    fresh = np.empty(m, np.int64)
    m = 0
    for e in range(hwm):
        if emask[e] != _U0 and not mark[e]:
            fresh[m] = e
            m += 1
    # (Numba's quicksort took 7 ms, not 1, on a pool just read and then updated: a sorted
    # run with a short tail.)
    fresh = fresh[np.argsort(ekey[fresh], kind="mergesort")]
    n = c + m
    idx = np.empty(n, np.int64)
    a, b = 0, 0
    for j in range(n):
        if b >= m or (a < c and ekey[kept[a]] < ekey[fresh[b]]):
            idx[j] = kept[a]
            a += 1
        else:
            idx[j] = fresh[b]
            b += 1
    keys = np.empty(n, np.uint64)
    out_t = np.empty(n, np.int64)
    out_l = np.empty(n, np.int64)
    for j in range(n):
        e = idx[j]
        out_l[j] = _lowest_level(emask[e], eh[e])
        out_t[j] = eT[e]
        keys[j] = ekey[e]
    return keys, out_t, out_l, idx


# -- bytes -----------------------------------------------------------------------------------
@njit(cache=True)
def empty_buffers(levels):
    """A typed list of ``levels`` empty level buffers, built in compiled code (appending
    to a typed list from Python costs a dispatch per level, per instance, per decode)."""
    bufs = List()
    for _ in range(levels):
        bufs.append(np.zeros(0, np.int64))
    return bufs


# Why a stored instance is refused (keys of the readers' codes; negative codes are
# ``sketches._codec``'s).
INSTANCE_ERRORS = {
    1: "randomized wave entries or floors are not valid",
    2: "randomized wave blob has a count out of range",
    3: "randomized wave member index out of range",
    4: "randomized wave member bitmap has stray bits",
    5: "randomized wave member count does not match",
    7: "randomized wave floors are not nested",
    8: "randomized wave entry stored above its hash level",
    9: "randomized wave level has a bad entry count",
    12: "randomized wave clock does not match its entries",
}


@njit(cache=True, inline="always")
def _above(t, key, ft, fk):
    return t > ft or (t == ft and key > fk)


@njit(cache=True)
def read_floors(buf, p, levels, clock):
    """``(code, end, nf, fhas, fT, fK)``: the ``nf`` floors stored at ``buf[p]`` (a count,
    each floor's tick back from the clock, then their keys), levels ``0..nf-1``."""
    fhas = np.zeros(levels, np.uint8)
    fT = np.zeros(levels, np.int64)
    fK = np.zeros(levels, np.uint64)
    f, p = get_varint(buf, p)
    if p < 0:
        return p, p, 0, fhas, fT, fK
    if f > np.uint64(levels):
        return 2, p, 0, fhas, fT, fK
    nf = np.int64(f)
    if nf > buf.shape[0] - p:
        return -1, p, nf, fhas, fT, fK
    for l in range(nf):
        back, p = get_varint(buf, p)
        if p < 0:
            return p, p, nf, fhas, fT, fK
        if back > np.uint64(clock):
            return 1, p, nf, fhas, fT, fK
        fhas[l] = 1
        fT[l] = clock - np.int64(back)
    if 8 * nf > buf.shape[0] - p:
        return -1, p, nf, fhas, fT, fK
    fK[:nf] = buf[p : p + 8 * nf].copy().view(np.uint64)
    return 0, p + 8 * nf, nf, fhas, fT, fK


@njit(cache=True)
def check_members(uk, ut, idx, n, nf, fhas, fT, fK, counts, C, has_clock, clock, a0, a1, b, L):
    """``(code, h, emask)``: the members ``idx`` checked against the floors by
    the rules of a compacted wave (module notes of ``randomized_wave``), each level's members counted into ``counts``; ``h`` their
    hash levels, ``emask`` the levels each is in."""
    h = np.empty(n, np.int64)
    emask = np.empty(n, np.uint64)
    if not has_clock and (n or nf):
        return 1, h, emask
    for j in range(1, n):  # the instance's keys are distinct (and increasing)
        if uk[idx[j]] <= uk[idx[j - 1]]:
            return 1, h, emask
    for l in range(1, nf):  # floors fall (weakly) as levels rise
        if _above(fT[l], fK[l], fT[l - 1], fK[l - 1]):
            return 7, h, emask
    latest0 = np.int64(-1)
    for j in range(n):
        key, t = uk[idx[j]], ut[idx[j]]
        # The floors fall as levels rise (checked above), so the floors it does not beat are
        # those of levels 0..low-1 and it beats every one above: it is a member of levels
        # low..h, beats the floor of each, and is missing from none below ``low`` it
        # hashes to (each has a floor it does not beat).
        low = 0
        while low < nf and not _above(t, key, fT[low], fK[low]):
            low += 1
        hj = level_of(field_hash(key, a0, a1, b), L)
        if low > hj:
            return 8, h, emask
        for l in range(low, hj + 1):
            counts[l] += 1
        if low == 0:
            latest0 = max(latest0, t)
        h[j] = hj
        emask[j] = ((_U1 << np.uint64(hj + 1)) - _U1) & ~((_U1 << np.uint64(low)) - _U1)
    for l in range(counts.shape[0]):
        if counts[l] > C or (fhas[l] and counts[l] != C):
            return 9, h, emask
    if has_clock and (counts[0] == 0 or latest0 != clock):
        return 12, h, emask
    return 0, h, emask


@njit(cache=True)
def _merge_runs(keys, ticks, sizes):
    """The entries' order by (key, tick): the instances' runs are each sorted by key (their
    keys distinct), so they merge in linear time."""
    total = keys.shape[0]
    order = np.empty(total, np.int64)
    tmp = np.empty(total, np.int64)
    have = 0  # order[:have] is the merge of the runs so far
    for r in range(sizes.shape[0]):
        a, b, q = 0, have, 0
        end = have + sizes[r]
        while a < have or b < end:
            if b >= end:
                take_a = True
            elif a >= have:
                take_a = False
            else:
                x, y = order[a], b  # entry b of the concatenation is the run's next
                take_a = keys[x] < keys[y] or (keys[x] == keys[y] and ticks[x] <= ticks[y])
            if take_a:
                tmp[q] = order[a]
                a += 1
            else:
                tmp[q] = b
                b += 1
            q += 1
        order[:end] = tmp[:end]
        have = end
    return order


@njit(cache=True)
def flatten_buffers(bufs):
    """``(flat, sizes)``: the level buffers one after the other (for pickling: iterating a
    typed list from Python costs a dispatch per level)."""
    sizes = np.empty(len(bufs), np.int64)
    total = 0
    for l in range(len(bufs)):
        sizes[l] = bufs[l].size
        total += sizes[l]
    flat = np.empty(total, np.int64)
    p = 0
    for l in range(len(bufs)):
        flat[p : p + sizes[l]] = bufs[l]
        p += sizes[l]
    return flat, sizes


@njit(cache=True)
def buffers_from(flat, sizes):
    """The typed list of level buffers :func:`flatten_buffers` flattened."""
    bufs = List()
    p = 0
    for l in range(sizes.size):
        bufs.append(flat[p : p + sizes[l]].copy())
        p += sizes[l]
    return bufs


# -- the paged form (format 3: randomized_wave's byte notes) ----------------------------------
@njit(cache=True)
def unique_pairs(keys, ticks, sizes):
    """``(uk, ut, held)``: the distinct (key, tick) pairs of all instances, sorted, and
    which instance holds which (entries one instance after another, keys increasing)."""
    total = keys.shape[0]
    order = _merge_runs(keys, ticks, sizes)
    index = np.empty(total, np.int64)
    uk = np.empty(total, np.uint64)
    ut = np.empty(total, np.int64)
    u = 0
    for a in range(total):
        e = order[a]
        if u == 0 or keys[e] != uk[u - 1] or ticks[e] != ut[u - 1]:
            uk[u], ut[u] = keys[e], ticks[e]
            u += 1
        index[e] = u - 1
    held = np.zeros((sizes.shape[0], u), np.bool_)
    start = 0
    for i in range(sizes.shape[0]):
        for e in range(start, start + sizes[i]):
            held[i, index[e]] = True
        start += sizes[i]
    return uk[:u], ut[:u], held


@njit(cache=True)
def write_floors(fT, fK, fhas, sizes, clock):
    """Per instance: varint F, F × varint (clock − floor tick), F × u64 floor key, varint n."""
    inst, levels = fT.shape[0], fT.shape[1]
    out = np.empty(inst * (20 + 18 * levels), np.uint8)
    p = 0
    for i in range(inst):
        f = 0
        for l in range(levels):
            if fhas[i, l]:
                f += 1
        p = put_varint(out, p, np.uint64(f))
        for l in range(f):
            p = put_varint(out, p, np.uint64(clock - fT[i, l]))
        for l in range(f):
            x = fK[i, l]
            for q in range(8):
                out[p] = np.uint8((x >> np.uint64(8 * q)) & np.uint64(0xFF))
                p += 1
        p = put_varint(out, p, np.uint64(sizes[i]))
    return out[:p]


@njit(cache=True)
def write_pair_pages(uk, ut, held, starts, stops):
    """Pages ``[starts[j], stops[j])`` of the pairs in one buffer: ``(bytes, end of each
    page)``. Per page: varint m, first key and key gaps, the newest tick (zig-zag) and each
    tick's distance below it, then per instance a bitmap of the page's pairs it holds
    (``held[instance, pair]``)."""
    inst = held.shape[0]
    pages = starts.shape[0]
    u = 0
    for j in range(pages):
        u += stops[j] - starts[j]
    out = np.empty(pages * 20 + u * 30 + pages * inst * 2 + inst * (u + 7) // 8 + 8, np.uint8)
    ends = np.empty(pages, np.int64)
    p = 0
    for j in range(pages):
        a = starts[j]
        b = stops[j]
        p = put_varint(out, p, np.uint64(b - a))
        p = put_varint(out, p, uk[a])
        for x in range(a + 1, b):
            p = put_varint(out, p, uk[x] - uk[x - 1])
        top = ut[a]
        for x in range(a, b):
            top = max(top, ut[x])
        p = put_varint(out, p, zigzag1(top))
        for x in range(a, b):
            p = put_varint(out, p, np.uint64(top - ut[x]))
        nb = (b - a + 7) // 8
        for i in range(inst):
            out[p : p + nb] = 0
            for x in range(a, b):
                if held[i, x]:
                    out[p + ((x - a) >> 3)] |= np.uint8(1 << ((x - a) & 7))
            p += nb
        ends[j] = p
    return out[:p], ends


@njit(cache=True)
def ticks_of(keys, table, ekey, eT, emask, eh):
    """Per key, its live entry's tick (-1: none), and whether every entry found is in a
    contiguous run of levels from its lowest up to h(key) (the invariant ``export_entries``
    checks)."""
    shift = _shift_for(table.size)
    tmask = table.size - 1
    out = np.full(keys.size, -1, np.int64)
    ok = True
    for j in range(keys.size):
        e = table[_find(table, shift, tmask, ekey, keys[j])]
        if e < 0 or emask[e] == _U0:
            continue
        out[j] = eT[e]
        ok &= _lowest_level(emask[e], eh[e]) >= 0
    return out, ok


@njit(cache=True)
def splice_pairs(uk, ut, held, hit, keys, ticks, key_hit):
    """The sorted pairs after the pairs of ``keys`` (sorted, distinct) are replaced by
    what the instances hold now (``ticks[instance, j]``: key j's tick there, -1 for none):
    ``(uk, ut, held, hit, origin)``, where ``hit`` says a pair's key is a page cut candidate
    (``sketches._pages.cut_candidates``; ``key_hit`` the changed keys') and ``origin`` is
    the old index of each pair kept (-1: new). One pass over the pairs; only the changed
    keys' pairs are built."""
    inst = held.shape[0]
    u = uk.shape[0]
    nd = keys.shape[0]
    n = u
    x = 0
    for j in range(nd):  # the count first: old pairs of changed keys out, their new ones in
        while x < u and uk[x] < keys[j]:
            x += 1
        while x < u and uk[x] == keys[j]:
            n -= 1
            x += 1
        for i in range(inst):
            t = ticks[i, j]
            if t >= 0:
                first = True
                for i2 in range(i):
                    if ticks[i2, j] == t:
                        first = False
                if first:
                    n += 1
    uk2 = np.empty(n, np.uint64)
    ut2 = np.empty(n, np.int64)
    held2 = np.zeros((inst, n), np.bool_)
    hit2 = np.empty(n, np.bool_)
    origin = np.empty(n, np.int64)
    x, q = 0, 0
    for j in range(nd + 1):
        while x < u and (j == nd or uk[x] < keys[j]):
            uk2[q], ut2[q], hit2[q], origin[q] = uk[x], ut[x], hit[x], x
            for i in range(inst):
                held2[i, q] = held[i, x]
            x += 1
            q += 1
        if j == nd:
            break
        d = keys[j]
        while x < u and uk[x] == d:
            x += 1
        h = key_hit[j]
        last = np.int64(-1)
        while True:  # the key's distinct ticks, ascending
            t = np.int64(-1)
            for i in range(inst):
                if ticks[i, j] > last and (t < 0 or ticks[i, j] < t):
                    t = ticks[i, j]
            if t < 0:
                break
            uk2[q], ut2[q], hit2[q], origin[q] = d, t, h, -1
            for i in range(inst):
                held2[i, q] = ticks[i, j] == t
            q += 1
            last = t
    return uk2, ut2, held2, hit2, origin


@njit(cache=True)
def reused_pages(origin, starts, stops, old_starts, old_stops):
    """Per page ``[starts[j], stops[j])``, the old page holding exactly its pairs (every
    pair kept, in one run from that page's first to its last), else -1: such a page's
    bytes are the old page's (a page's bytes depend only on its pairs)."""
    out = np.full(starts.size, -1, np.int64)
    for j in range(starts.size):
        a, b = starts[j], stops[j]
        o = origin[a]
        if o < 0:
            continue
        k = np.searchsorted(old_starts, o)
        if k >= old_starts.size or old_starts[k] != o or old_stops[k] - o != b - a:
            continue
        same = True
        for x in range(a, b):
            if origin[x] != o + (x - a):
                same = False
                break
        if same:
            out[j] = k
    return out


@njit(cache=True)
def read_pair_pages(buf, p, u, pages, inst):
    """``(code, end, uk, ut, held, starts, ends)`` of what :func:`write_pair_pages` wrote
    (``ends``: where each page's bytes end in ``buf``): code 0,
    1 when a page or count is out of range or the pairs are out of order, 4 for stray
    bitmap bits, negative for a short or malformed buffer."""
    uk = np.empty(u, np.uint64)
    ut = np.empty(u, np.int64)
    held = np.zeros((inst, u), np.bool_)
    starts = np.empty(pages, np.int64)
    ends = np.empty(pages, np.int64)
    x = 0
    for j in range(pages):
        m, p = get_varint(buf, p)
        if p < 0:
            return p, p, uk, ut, held, starts, ends
        if m < np.uint64(1) or m > np.uint64(u - x):
            return 1, p, uk, ut, held, starts, ends
        a, b = x, x + np.int64(m)
        starts[j] = a
        for y in range(a, b):
            g, p = get_varint(buf, p)
            if p < 0:
                return p, p, uk, ut, held, starts, ends
            if y == a:
                uk[y] = g
            else:
                if g > ~uk[y - 1]:
                    return 1, p, uk, ut, held, starts, ends
                uk[y] = uk[y - 1] + g
        z, p = get_varint(buf, p)
        if p < 0:
            return p, p, uk, ut, held, starts, ends
        top = unzigzag1(z)
        for y in range(a, b):
            back, p = get_varint(buf, p)
            if p < 0:
                return p, p, uk, ut, held, starts, ends
            if back > np.uint64(1 << 62) or top - np.int64(back) < -(1 << 62):
                return 1, p, uk, ut, held, starts, ends
            ut[y] = top - np.int64(back)
        nb = (b - a + 7) // 8
        if inst * nb > buf.shape[0] - p:
            return -1, p, uk, ut, held, starts, ends
        for i in range(inst):
            for bit in range(8 * nb):
                if (buf[p + (bit >> 3)] >> (bit & 7)) & 1:
                    if bit >= b - a:
                        return 4, p, uk, ut, held, starts, ends
                    held[i, a + bit] = True
            p += nb
        ends[j] = p
        x = b
    if x != u:
        return 1, p, uk, ut, held, starts, ends
    for y in range(1, u):
        if uk[y] < uk[y - 1] or (uk[y] == uk[y - 1] and ut[y] <= ut[y - 1]):
            return 1, p, uk, ut, held, starts, ends
    return 0, p, uk, ut, held, starts, ends
