"""ECM-sketch: a Count-Min array of sliding-window counters for asynchronous streams.

Papapetrou, Garofalakis & Deligiannakis, *Sketch-based Querying of Distributed
Sliding-Window Data Streams*, VLDB 2012 (§4 structure and queries, §5 aggregation).
The sliding-window counters are dyadic time buckets shared by all cells (see
:mod:`sketches._ecm_kernels`), which keep honest bounds when events arrive out of order.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from sketches._bytes import Reader, Writer
from sketches._pages import page_bytes, page_starts
from sketches._ecm_kernels import (
    BUCKET_ERRORS,
    NO_CLOCK,
    TICK_LIMIT,
    TimeBuckets,
    cell_index,
    cells_of,
    hash_tables,
    key_readings_many,
    materialize,
    summed_rows,
    read_bucket_columns,
    read_state_pages,
    write_bucket_columns,
    write_state_pages,
)
from sketches.base import (CorruptSketchError, Estimate, EstimateColumns, Family, IncompatibleSketchError, Sketch,
                           SketchError)
from sketches.base import int_ranges, not_expired, seed_value, tick_bounds, unit_interval, window_ticks

# TICK_LIMIT and cell_index: the tick range and the cell hashing of CellSketch, which
# sketches_extra's dyadic ECM shares.
__all__ = ["ECMSketch", "TICK_LIMIT", "cell_index", "split_epsilon", "suggest_dimensions"]

METHOD = "ecm-sketch/dyadic-exponential-histogram"
_PAGE_ERRORS = {1: "ECM blob has an empty page", 2: "ECM blob has a count out of range",
                3: "ECM blob length does not match its bucket count"}
_PURPOSES = ("point", "inner")
_TWO_52 = 2.0**-52
FORMAT = 3  # byte format version of the ECM family (every class that shares its family byte)
_EXACT_LIMIT = 2.0**53


def split_epsilon(epsilon: float, purpose: str = "point") -> tuple[float, float]:
    """``(eps_sw, eps_cm)`` minimising memory for a total error ``epsilon`` (§4.1).

    Point queries (Thm 1): ``eps_sw = eps_cm = sqrt(1 + eps) - 1``. Inner products (Thm 2):
    the root of the paper's cubic, and ``eps_cm = (eps - eps_sw^2 - 2 eps_sw) / (1 + eps_sw)^2``.
    """
    if purpose == "point":
        sw = math.sqrt(1.0 + epsilon) - 1.0
        return sw, sw
    if purpose == "inner":
        a = 9 + 9 * epsilon + math.sqrt(3) * math.sqrt(28 + 57 * epsilon + 30 * epsilon**2 + epsilon**3)
        sw = -1 - (3 + 3 * epsilon) / (3 ** (4 / 3) * a ** (1 / 3)) + a ** (1 / 3) / 3 ** (2 / 3)
        return sw, (epsilon - sw * sw - 2 * sw) / (1 + sw) ** 2
    raise SketchError(f"purpose must be one of {_PURPOSES}, got {purpose!r}")


def suggest_dimensions(epsilon: float, delta: float, purpose: str = "point") -> tuple[int, int, float]:
    """``(depth d, width w, bucket ratio R)`` of an ECM sketch: ``d = ceil(ln 1/delta)``,
    ``w = ceil(e / eps_cm)`` (Count-Min, §3) and ``R = 2 eps_sw`` (the EH invariant of §3)."""
    sw, cm = split_epsilon(epsilon, purpose)
    return max(1, math.ceil(math.log(1.0 / delta))), math.ceil(math.e / cm), 2.0 * sw


def as_batch(ticks, keys, weights):
    """Validate one update batch; return ``(int64 ticks, uint64 keys, float64 weights)``."""
    t = np.asarray(ticks)
    k = np.asarray(keys)
    if t.ndim != 1 or k.ndim != 1 or t.shape != k.shape:
        raise SketchError("ticks and keys must be 1-D arrays of the same length")
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise SketchError("ticks must be an integer array")
    if k.dtype == bool or not np.issubdtype(k.dtype, np.integer):
        raise SketchError("keys must be an integer (uint64) array")
    if t.size and (int(t.min()) <= -TICK_LIMIT or int(t.max()) >= TICK_LIMIT):
        raise SketchError("ticks must be within (-2^61, 2^61)")
    if k.dtype.kind == "i" and k.size and int(k.min()) < 0:
        raise SketchError("keys must be non-negative")
    if weights is None:
        w = np.ones(t.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != t.shape:
            raise SketchError("weights must have the same length as ticks")
        if w.size and not (np.all(np.isfinite(w)) and w.min() >= 0):
            raise SketchError("weights must be finite and >= 0")
    return t.astype(np.int64, copy=False), k.astype(np.uint64, copy=False), w


class TimeBucketed(Sketch):
    """A sketch whose state is cut by one set of dyadic time buckets ``_tb`` (the ECM
    family): its window, clock and emptiness are the buckets'."""

    _tb: TimeBuckets

    @property
    def window(self) -> int:
        return self._tb.window

    @property
    def clock_tick(self) -> int:
        """Largest tick seen (``-2**63`` before the first event)."""
        return int(self._tb.clock)

    @property
    def is_empty(self) -> bool:
        """True when no event with a positive weight is kept in the window."""
        return len(self._tb) == 0

    @property
    def n_buckets(self) -> int:
        return len(self._tb)

    def max_nbytes(self) -> None:
        """None: the time buckets follow the data (an out-of-order event is an exact
        single-tick bucket until invariant (C) lets it fold), with no bound below the
        number of distinct ticks in the window (:class:`ECMSketch`, Space)."""
        return None

    def _not_expired(self, lo: int) -> None:
        not_expired(lo, None if self._tb.clock == NO_CLOCK else int(self._tb.clock), self.window)

    def _classified(self, lo, hi):
        """``(hi, inside, straddling)`` bucket masks of ``[lo, hi]`` (ticks), or None when
        the range or the sketch is empty; a ``lo`` the window has passed is refused."""
        lo, hi = tick_bounds(lo, hi)
        if hi < lo:
            return None
        self._not_expired(lo)
        if self.is_empty:
            return None
        return (hi, *self._tb.classify(lo, hi))

    @staticmethod
    def _each(items, read, default=None) -> tuple[list, list]:
        """``read`` of every item (a batched query's ranges): ``(out, live)``, ``out``
        holding ``default`` or the SketchError an item's read raised, ``live`` the
        ``(index, reading)`` of the items whose reading is not None."""
        out, live = [default] * len(items), []
        for i, item in enumerate(items):
            try:
                got = read(item)
            except SketchError as e:
                out[i] = e
                continue
            if got is not None:
                live.append((i, got))
        return out, live

    def range_key(self, lo: int, hi: int):
        """What every read of ``[lo, hi]`` depends on, hashable: the buckets inside and
        straddling it and whether it reaches the clock (``_range``'s factor ``k``); None
        when the range or the sketch is empty. Two ranges with one key read the same
        numbers, so a caller asking many ranges (``app.ranges``) reads each key once.
        Raises what a read raises (a ``lo`` the window has passed)."""
        key = self.range_keys([(lo, hi)])[0]
        if isinstance(key, SketchError):
            raise key
        return key

    def range_keys(self, ranges) -> list:
        """``range_key`` of every ``(lo, hi)`` of ``ranges`` (or the :class:`SketchError` it
        raises), the buckets classified for all of them at once."""
        out: list = [None] * len(ranges)
        clock = None if self._tb.clock == NO_CLOCK else int(self._tb.clock)
        checked = int_ranges(ranges)
        if checked is not None:  # whole ticks all: the expired ones found at once
            los, his = checked
            kept = his >= los
            if clock is not None:
                for i in np.flatnonzero(kept & (los < clock - self.window + 1)).tolist():
                    try:
                        self._not_expired(int(los[i]))  # (its message)
                    except SketchError as e:
                        out[i] = e
                        kept[i] = False
            at = np.flatnonzero(kept) if not self.is_empty else np.zeros(0, np.int64)
            los, his = los[at], his[at]
        else:
            live = []
            for i, (lo, hi) in enumerate(ranges):
                try:
                    lo, hi = tick_bounds(lo, hi)
                    if hi >= lo:
                        self._not_expired(lo)
                except SketchError as e:
                    out[i] = e
                    continue
                if hi >= lo and not self.is_empty:
                    live.append((i, lo, hi))
            at, los, his = (np.array(col, np.int64) for col in zip(*live)) if live else (np.zeros(0, np.int64),) * 3
        if at.size == 0:
            return out
        tb = self._tb
        inside = (tb.s >= los[:, None]) & (tb.e <= his[:, None])
        strad = (tb.e >= los[:, None]) & (tb.s <= his[:, None]) & ~inside
        reaches = (his >= clock).tolist() if clock is not None else [True] * at.size
        rows = _row_bytes(inside), _row_bytes(strad)  # each row as range_key's bytes, in one call
        for j, i in enumerate(at.tolist()):
            out[i] = (rows[0][j], rows[1][j], reaches[j])
        return out


def _row_bytes(masks: np.ndarray) -> list[bytes]:
    """``[row.tobytes() for row in masks]``, made in one call."""
    n = masks.shape[1]
    if n == 0:
        return [b""] * masks.shape[0]
    return np.ascontiguousarray(masks).view(np.dtype((np.void, n))).ravel().tolist()


def write_buckets(wr: Writer, tb: TimeBuckets) -> None:
    """The (non-empty) buckets of ``tb``, column by column, as drawn in :class:`CellSketch`."""
    wr.raw(write_bucket_columns(tb.lvl.astype(np.int64), tb.idx, tb.s, tb.e, tb.m).tobytes())


def read_buckets(rd: Reader, tb: TimeBuckets, b: int, what: str) -> None:
    """Fill ``tb`` with the ``b`` buckets :func:`write_buckets` wrote, refusing any that is
    out of range or off its dyadic position (``tb.validate()`` then checks the rest)."""
    code, end, lvl, idx, s, e, m = read_bucket_columns(rd.buf, rd.pos, b)
    if code:
        raise rd.fail_code(code) if code < 0 else CorruptSketchError(f"{what} blob {BUCKET_ERRORS[code]}")
    rd.pos = end
    tb.lvl, tb.idx, tb.s, tb.e, tb.m = lvl, idx, s, e, m


class CellSketch(TimeBucketed):
    """The machinery of a sketch of cells over shared time buckets (:class:`ECMSketch`):
    the shared time buckets, the ``counts[bucket, cell]`` array, the slot layout (which
    cells an id touches), updates, merges, copies and the byte format of the state.

    A *slot* is a group of cells that every event hits exactly once: a Count-Min row
    (``table >= 0``: cell ``offset + h(id >> shift) mod width``) or an exact table
    (``table < 0``: cell ``offset + (id >> shift)``).
    """

    FAMILY, FORMAT = Family.ECM, FORMAT
    BATCH = ("ticks", "keys", "weights")
    _SALT = 0xEC3  # hash-table salt of the class
    # What a copy (Sketch.copy) duplicates: the slot layout and hash tables are set once by
    # _setup and never written, so a copy shares them.
    _OWNED = ("_tb", "_counts")

    def _setup(self, window: int, ratio: float, seed: int, slots: list[tuple[int, int, int, int]]):
        self._tb = TimeBuckets(window, ratio)
        self.seed = seed
        shift, table, offset, width = (np.array(col, dtype=dt) for col, dt in zip(
            zip(*slots), (np.uint64, np.int64, np.int64, np.uint64)))
        self._shift, self._table, self._offset, self._width = shift, table, offset, width
        self._tables = hash_tables(seed, self._SALT, max(1, int((table >= 0).sum())))
        self.n_cells = int(offset[-1] + width[-1]) if len(slots) else 0
        self._counts = np.zeros((0, self.n_cells))
        self._events = 0  # events absorbed (bounds float rounding when sums are inexact)
        self._fractional = False  # a non-integral weight was seen
        self._depth = 0  # height of the merge tree
        self._leaves = 1  # leaf sketches merged in (the merge tree's leaves)

    # -- shared properties ------------------------------------------------------------
    @property
    def merge_depth(self) -> int:
        """Height of the tree of merges that built this sketch (0: never merged)."""
        return self._depth

    # -- updates ------------------------------------------------------------------------
    def _ingest(self, ticks: np.ndarray, ids: np.ndarray, w: np.ndarray) -> None:
        if ticks.shape[0] == 0:
            return
        sel, ev_dest, old_dest, n_out = self._tb.plan_update(ticks, w)
        ws = w[sel]
        self._counts = materialize(n_out, self._counts, old_dest, ev_dest, ids[sel], ws,
                                   self._tables, self._shift, self._table, self._offset, self._width)
        self._events += int(sel.shape[0])
        if not self._fractional and ws.size and np.any(ws != np.floor(ws)):
            self._fractional = True

    def _merge(self, other: "CellSketch") -> None:
        d_self, d_other, n_out = self._tb.plan_union(other._tb)
        empty = np.zeros(0, np.uint64)
        counts = materialize(n_out, self._counts, d_self, np.zeros(0, np.int64), empty, np.zeros(0),
                             self._tables, self._shift, self._table, self._offset, self._width)
        self._counts = materialize(n_out, other._counts, d_other, np.zeros(0, np.int64), empty, np.zeros(0),
                                   self._tables, self._shift, self._table, self._offset, self._width)
        self._counts += counts
        self._events += other._events
        self._fractional = self._fractional or other._fractional
        self._depth = max(self._depth, other._depth) + 1
        self._leaves += other._leaves

    # -- queries ------------------------------------------------------------------------
    def _range(self, lo, hi):
        """Masks of buckets inside / straddling ``[lo, hi]``, their total weights and the
        factor ``k`` (1 when ``hi >= clock``: only the lower end can be straddled)."""
        classified = self._classified(lo, hi)
        if classified is None:
            return None
        hi, inside, strad = classified
        low = float(self._tb.m[inside].sum())
        high = low + float(self._tb.m[strad].sum())
        if high == 0:
            return None
        return inside, strad, low, high, (1 if hi >= self._tb.clock else 2)

    def _vectors(self, inside, strad):
        lo_vec = self._counts[inside].sum(axis=0)
        return lo_vec, lo_vec + self._counts[strad].sum(axis=0)

    def _rounding(self) -> float:
        """Relative error of the float sums behind a bound: 0 when every sum is exact
        (integral weights, totals below 2^53), else ``(#terms) * 2^-52`` (Higham, Thm 4.1
        for sums of non-negative terms)."""
        if not self._fractional and float(self._tb.m.sum()) < _EXACT_LIMIT:
            return 0.0
        return (self._events + len(self._tb) + 2) * _TWO_52

    def _bracket(self, est, lower, upper, kind_eps, conf) -> Estimate:
        """One reading widened by the float rounding of its sums (``_rounding``)."""
        g = self._rounding()
        lower, upper = max(0.0, lower * (1 - g)), upper * (1 + g)
        est = min(max(est, lower), upper)
        return Estimate(float(est), float(lower), float(upper), "additive", float(kind_eps), conf, self._method)

    @staticmethod
    def _zero(method: str) -> Estimate:
        return Estimate(0.0, 0.0, 0.0, "additive", 0.0, 1.0, method)

    # -- bytes --------------------------------------------------------------------------
    # state block (format 3, little endian; varints are LEB128, see sketches._codec), after
    # the class's parameter block:
    #   i64 clock | u64 events | u32 merge depth | u32 leaves | u8 flags | 3 x u8 zero |
    #   u32 B (buckets) | u32 K (cells) | varint pages
    #   the buckets, in their canonical order (start, then level descending), in
    #   content-defined pages (sketches._pages: a page begins at a bucket whose dyadic
    #   position hashes to a cut point), each page:
    #     varint b | its buckets column by column:
    #       u8[b] level | varint zig-zag first start, b−1 varint start steps
    #       (start = idx·2^level) | varint[b] s − start | varint[b] e − s | float column m
    #     | their counts, only the non-zero cells of the row-major b × K array:
    #       varint nnz | varint first flat index, nnz−1 varint (gap − 1) | float column values
    # flags: bit 0 = a non-integral weight was seen. A batch fills the newest bucket and
    # folds a few old ones: those pages are rewritten, the others keep their bytes.
    _STATE = struct.Struct("<qQIIB3xII")
    _CELL_ERRORS = {1: "has a cell index out of range", 2: "has negative or non-finite counts",
                    3: "has a count out of range"}

    def _page_starts(self, tb: TimeBuckets) -> np.ndarray:
        """Where the bucket list's pages begin: a bucket's identity is its dyadic position.
        A bucket row is hundreds of cells, so pages are a few buckets."""
        ident = tb.idx.astype(np.int64).view(np.uint64) ^ (tb.lvl.astype(np.uint64) << np.uint64(58))
        return page_starts(ident, every=4, least=2)

    def _state_pieces(self) -> list[bytes]:
        tb = self._tb
        starts = self._page_starts(tb) if len(tb) else np.zeros(0, np.int64)
        head = Writer().pack(self._STATE, tb.clock, self._events, self._depth, self._leaves,
                             int(self._fractional), len(tb), self.n_cells).uint(starts.size).bytes()
        if not len(tb):
            return [head]
        buf, ends = write_state_pages(tb.lvl.astype(np.int64), tb.idx, tb.s, tb.e, tb.m, self._counts, starts)
        return [head] + page_bytes(buf, ends)

    def _state_bytes(self) -> bytes:
        return b"".join(self._state_pieces())

    def _load_state(self, rd: Reader) -> None:
        """Read the state block (the parameters are already set)."""
        clock, events, depth, leaves, flags, b, k = rd.unpack(self._STATE)
        if k != self.n_cells:
            raise CorruptSketchError("ECM blob cell count does not match its parameters")
        if flags & ~1:
            raise CorruptSketchError("ECM blob has unknown flags")
        if b > rd.left():  # every bucket takes at least one byte per column
            raise CorruptSketchError("ECM blob length does not match its bucket count")
        if leaves < 1 or (depth == 0 and leaves != 1) or leaves < depth + 1:
            raise CorruptSketchError("ECM blob has an inconsistent merge history")
        counts = np.zeros((0, k))  # (the pages' rows; nothing allocated on the header's word)
        tb = TimeBuckets(self._tb.window, self._tb.ratio)
        pages = rd.uint(b)
        if (pages == 0) != (b == 0):
            raise CorruptSketchError("ECM blob page count does not match its bucket count")
        code, which, end, lvl, idx, s, e, m, rows, sizes = read_state_pages(rd.buf, rd.pos, b, pages, k)
        if code:
            if which == 1:
                raise CorruptSketchError(f"ECM blob {BUCKET_ERRORS[code]}")
            if which == 2 or code < 0:
                raise rd.fail_code(code, self._CELL_ERRORS)
            raise CorruptSketchError(_PAGE_ERRORS[code])
        rd.pos = end
        rd.done()
        if b:
            tb.lvl, tb.idx, tb.s, tb.e, tb.m = lvl, idx, s, e, m
            counts = rows
        tb.clock = clock
        if b == 0 and clock != NO_CLOCK and abs(clock) >= TICK_LIMIT:
            raise CorruptSketchError("ECM blob clock out of range")
        why = tb.validate()
        if why:
            raise CorruptSketchError(f"ECM blob invalid: {why}")
        if b and not np.array_equal(np.cumsum(np.concatenate(([0], sizes[:-1]))), self._page_starts(tb)):
            raise CorruptSketchError("ECM blob has pages cut where its buckets do not cut them")
        for c in range(self._shift.shape[0]):  # every slot of a bucket sums to its mass
            o, w = int(self._offset[c]), int(self._width[c])
            row = counts[:, o:o + w].sum(axis=1)
            if np.any(np.abs(row - tb.m) > 1e-9 * np.maximum(tb.m, 1.0)):
                raise CorruptSketchError("ECM blob counts do not add up to their bucket masses")
        if events < b:
            raise CorruptSketchError("ECM blob has fewer events than buckets")
        if not flags & 1 and b and (np.any(counts != np.floor(counts)) or np.any(tb.m != np.floor(tb.m))):
            raise CorruptSketchError("ECM blob says its weights are integral but holds fractions")
        self._tb, self._counts = tb, counts
        self._events, self._fractional = int(events), bool(flags & 1)
        self._depth, self._leaves = int(depth), int(leaves)


class ECMSketch(CellSketch):
    """Sliding-window Count-Min sketch (ECM-sketch, §4) over asynchronous streams.

    A ``d x w`` Count-Min array (``d = ceil(ln 1/delta)``, ``w = ceil(e / eps_cm)``) whose
    cells are sliding-window counters kept in shared dyadic time buckets (see
    :mod:`sketches._ecm_kernels`: an exponential histogram on a dyadic time grid that
    stays exact for out-of-order events). ``epsilon`` is split between the counters
    (``eps_sw``) and the array (``eps_cm``) as in §4.1: ``purpose="point"`` uses the Thm 1
    split, ``purpose="inner"`` the Thm 2 split. Buckets obey invariant (C) with
    ``R = 2 eps_sw``, the EH invariant ``C_j <= 2 eps (1 + sum_{i<j} C_i)`` of §3.

    Range ``r = [lo, hi]`` (ticks, ``lo > clock - window``); ``N = ||a_[lo, clock]||_1``,
    the weight from ``lo`` to the clock (``= ||a_r||_1`` when ``hi >= clock``); ``k = 1``
    when ``hi >= clock`` else 2. Bounds:

    * Lemma A (time buckets, deterministic): the weight of buckets straddling ``lo`` is
      ``<= R * N``; so each cell's count over ``r`` lies in ``[L_c, U_c]`` (buckets inside /
      touching ``r``) with ``U_c - L_c <= k R N``.
    * Thm 1, point query ``f(x, r)`` (two-sided, w.p. >= 1 - delta):
      ``|f_hat - f| <= (k eps_sw + eps_cm) N``  where ``f_hat = min_j (L_j + U_j) / 2``.
      Proof: each row overestimates by its collisions, ``<= eps_cm ||a_r||_1`` in some row
      w.p. ``1 - e^-d`` (Markov, pairwise-independent rows), plus half the cell width.
      Bracket: ``f <= min_j U_j`` always; ``f >= min_j L_j - eps_cm U_tot`` w.p. 1 - delta.
    * Thm 2, inner product (w.p. >= 1 - delta), ``eta = k eps_sw``:
      ``|ab_hat - a.b| <= (2 eta + eta^2) N_a N_b + eps_cm ||a_r||_1 ||b_r||_1``.
      Proof: ``sum_i |E_a E_b - X_a X_b| <= max E_b sum Delta_a + max X_a sum Delta_b`` with
      ``sum_i Delta <= eta N``, then Count-Min collisions as in Thm 1. Bracket:
      ``a.b <= min_j sum_i U_a U_b`` always; ``>= min_j sum_i L_a L_b - eps_cm U_a U_b``.
    * Merge (§5.3): lossless for the time buckets (invariant (C) is linear in the
      masses, so the union of two valid sketches is valid): the bounds above hold for
      the merged stream with the **same** epsilon at any merge depth. ``merge_depth`` is
      tracked for information.

    Cell type. The paper's exponential-histogram cells assume arrivals in time order;
    here the EH runs on a dyadic time grid shared by all cells, where an out-of-order event
    becomes an exact single-tick bucket until invariant (C) lets it fold into a coarser one
    (never split, never guessed), so every bracket is computed from what the buckets
    certainly hold. ``Estimate.method`` is ``"ecm-sketch/dyadic-exponential-histogram"``.
    Wave cells (§4.2, Table 2) are not offered: deterministic waves order entries by
    arrival, which out-of-order events break, and randomized waves cost ``1/eps^2``.

    Space: ``33 + 4 d w`` bytes per bucket (``8 d w`` with fractional weights). For
    in-order streams the bucket count is about ``ln(N) / ln(1 + R)`` (the dyadic grid adds
    up to a factor 2); late events add leaves that are folded as soon as (C) allows
    (measured: random arrival order 1.2x, fully reversed order 2.4x the in-order count).
    No worst-case bound below the number of distinct ticks in the window is claimed.

    ``epsilon`` in each :class:`Estimate` is the proven ``(k eps_sw + eps_cm)`` (point) or
    ``(2 eta + eta^2 + eps_cm)`` (inner product), additive in ``N`` (resp. ``N_a N_b``);
    ``confidence`` is ``1 - delta``.

    Parameters
    ----------
    epsilon, delta : float
        Target additive error (fraction of the window weight) and failure probability.
    window : int
        Ticks kept: events with tick in ``[clock - window + 1, clock]``.
    seed : int
        Seed of the hash functions; sketches merge only with the same seed.
    purpose : {"point", "inner"}
        Which query the ``epsilon`` split is optimised for (§4.1).

    Examples
    --------
    >>> import numpy as np
    >>> sk = ECMSketch(0.1, 0.1, window=1000, seed=7)
    >>> ticks = np.arange(2000) // 2
    >>> keys = (np.arange(2000) % 10).astype(np.uint64)
    >>> sk.update(ticks, keys)
    >>> est = sk.frequency(3, 500, 999)   # key 3 occurs 100 times in ticks 500..999
    >>> est.lower <= 100 <= est.upper
    True
    >>> other = ECMSketch(0.1, 0.1, window=1000, seed=7)
    >>> other.update(ticks, keys)
    >>> sk.merge(other).frequency(3, 500, 999).upper >= 200
    True
    >>> ECMSketch.from_bytes(sk.to_bytes()).frequency(3, 500, 999) == sk.frequency(3, 500, 999)
    True
    """

    HEADER_FLAGS = 0  # header flags: which class of the ECM family the blob holds
    WHAT, NOUN = "ECM sketch", "ECM sketches"
    PARAMS = "epsilon, delta, window, purpose or seed"
    SHOWN = ("epsilon", "delta", "window", "purpose", "depth", "width", "n_buckets", "clock_tick", "merge_depth", "nbytes")

    _SALT = 0xEC3
    _method = METHOD
    # parameters (little endian): f64 epsilon | f64 delta | i64 window | u64 seed | u8 purpose | 7 x u8 zero
    _PARAMS = struct.Struct("<ddqQB7x")

    def __init__(self, epsilon: float, delta: float, window: int, seed: int = 0, purpose: str = "point"):
        self.epsilon = unit_interval("epsilon", epsilon)
        self.delta = unit_interval("delta", delta)
        if purpose not in _PURPOSES:
            raise SketchError(f"purpose must be one of {_PURPOSES}, got {purpose!r}")
        self.purpose = purpose
        self.eps_sw, self.eps_cm = split_epsilon(self.epsilon, purpose)
        self.depth, self.width, ratio = suggest_dimensions(self.epsilon, self.delta, purpose)
        if self.width * self.depth > 2**24:
            raise SketchError("epsilon or delta too small: the array would exceed 2^24 cells")
        # Markov needs E[collisions] / threshold <= 1/e: E <= (1/w + 2^-32) ||a||, so the
        # threshold used in bounds is e (1/w + 2^-32) (rounded up).
        self.eps_cm_eff = math.nextafter(math.e * (1.0 / self.width + 2.0**-32), math.inf)
        slots = [(0, j, j * self.width, self.width) for j in range(self.depth)]
        self._setup(window_ticks(window, TICK_LIMIT - 1), ratio, seed_value(seed), slots)

    # -- updates ------------------------------------------------------------------------
    def update(self, ticks, keys, weights=None) -> None:
        """Add a batch of events (any order, duplicates allowed; weight 0 is a no-op).

        Events older than ``clock - window + 1`` (after this batch moves the clock) are
        dropped: no query can include them."""
        self._ingest(*as_batch(ticks, keys, weights))

    # -- queries ------------------------------------------------------------------------
    def frequency(self, key: int, lo: int, hi: int) -> Estimate:
        """Weight of ``key`` among events with tick in ``[lo, hi]`` (Thm 1): the one key's
        reading of :meth:`frequency_arrays`."""
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not (0 <= int(key) < 2**64):
            raise SketchError("key must be an integer in [0, 2^64)")
        return self.frequencies(np.array([key], np.uint64), lo, hi)[0]

    def frequency_arrays(self, keys: np.ndarray, lo: int, hi: int):
        """``frequency`` of each of ``keys`` (uint64) in ``[lo, hi]`` as arrays
        ``(estimates, lowers, uppers, epsilon, confidence, method)``, the range classified once and
        every cell's sums taken once: the same numbers as ``frequency``, one call
        (:meth:`frequency_arrays_many` of one read). None when the range holds nothing
        (every answer is an exact 0)."""
        got = self.frequency_arrays_many([(keys, lo, hi)])[0]
        if isinstance(got, SketchError):
            raise got
        return got

    def frequency_arrays_many(self, reads) -> list:
        """:meth:`frequency_arrays` of every ``(keys, lo, hi)`` of ``reads`` (or the
        SketchError it raises), every key's cells found and every read's sums taken in one
        compiled call each: the same numbers, read by read."""
        out, ranged = self._each(reads, lambda read: self._range(read[1], read[2]))
        if not ranged:
            return out
        live = [(i, np.asarray(reads[i][0], np.uint64), r) for i, r in ranged]
        ids = np.concatenate([keys for _, keys, _ in live])
        cells = cells_of(ids, self._tables, self._shift, self._table, self._offset, self._width)
        cell_start = np.cumsum([0] + [keys.size for _, keys, _ in live])
        inside = [np.flatnonzero(r[0]) for _, _, r in live]
        strad = [np.flatnonzero(r[1]) for _, _, r in live]
        g = self._rounding()
        ests, lowers, uppers = key_readings_many(
            self._counts, np.cumsum([0] + [x.size for x in inside]), np.concatenate(inside),
            np.cumsum([0] + [x.size for x in strad]), np.concatenate(strad), cells, cell_start,
            np.array([self.eps_cm_eff * r[3] for _, _, r in live]), 1 - g, 1 + g)
        for q, (i, _, r) in enumerate(live):
            a, b = cell_start[q], cell_start[q + 1]
            out[i] = (ests[a:b], lowers[a:b], uppers[a:b], float(r[4] * self.eps_sw + self.eps_cm_eff),
                      1.0 - self.delta, self._method)
        return out

    def frequencies(self, keys: np.ndarray, lo: int, hi: int) -> list[Estimate]:
        """``frequency`` of each of ``keys``, computed together (``frequency_arrays``)."""
        return self.estimates_of(self.frequency_arrays(keys, lo, hi), len(keys))

    def estimates_of(self, found, n: int) -> list[Estimate]:
        """The Estimates of a reading of ``n`` keys by :meth:`frequency_arrays` (None: the
        range holds nothing, an exact 0 each)."""
        if found is None:
            return [self._zero(self._method) for _ in range(n)]
        ests, lowers, uppers, kind_eps, conf, method = found
        return [Estimate(e, lo_, up, "additive", kind_eps, conf, method)
                for e, lo_, up in zip(ests.tolist(), lowers.tolist(), uppers.tolist())]

    def _rows(self, vec: np.ndarray) -> np.ndarray:
        return vec.reshape(self.depth, self.width)

    def inner_product(self, other: "ECMSketch", lo: int, hi: int) -> Estimate:
        """``sum_x f_a(x, r) f_b(x, r)`` over ``r = [lo, hi]`` (Thm 2); ``other`` must have
        the same parameters and seed."""
        if type(other) is not ECMSketch or self._params() != other._params():
            raise IncompatibleSketchError(
                "inner products need ECM sketches with the same epsilon, delta, window, purpose and seed")
        ra, rb = self._range(lo, hi), other._range(lo, hi)
        if ra is None or rb is None:
            return self._zero(self._method)
        la, ua = (self._rows(v) for v in self._vectors(ra[0], ra[1]))
        lb, ub = (other._rows(v) for v in other._vectors(rb[0], rb[1]))
        return self._inner(la, ua, ra, lb, ub, rb, other._rounding())

    def _inner(self, la, ua, ra, lb, ub, rb, g_other) -> Estimate:
        upper = float((ua * ub).sum(axis=1).min())
        lower = max(0.0, float((la * lb).sum(axis=1).min()) - self.eps_cm_eff * ra[3] * rb[3])
        est = float(((la + ua) * (lb + ub)).sum(axis=1).min() / 4.0)
        eta = max(ra[4], rb[4]) * self.eps_sw
        # relative error of the float sums: each side's counts, then a w-term dot product
        g = 2 * (self._rounding() + g_other) + (self.width + 2) * _TWO_52
        lower, upper = max(0.0, lower * (1 - g)), upper * (1 + g)
        est = min(max(est, lower), upper)
        return Estimate(est, lower, upper, "additive", 2 * eta + eta * eta + self.eps_cm_eff,
                        1.0 - self.delta, self._method)

    def self_join(self, lo: int, hi: int) -> Estimate:
        """``sum_x f(x, r)^2`` (second frequency moment, Thm 2 with ``b = a``)."""
        r = self._range(lo, hi)
        if r is None:
            return self._zero(self._method)
        low, high = (self._rows(v) for v in self._vectors(r[0], r[1]))
        return self._inner(low, high, r, low, high, r, self._rounding())

    def self_join_columns(self, ranges) -> EstimateColumns:
        """:meth:`self_join` of every ``(lo, hi)`` of ``ranges``, as columns (a refused
        range in ``refused``): each set of buckets a range covers (``range_key``) read
        once, every set's count vectors added in one compiled call (``summed_rows``, in
        the order NumPy adds them) and the products of all sets taken at once (each row's
        sum is NumPy's over the same ``width`` terms), so the floats are those of
        :meth:`self_join` (``tests/sketches/test_ecm.py``)."""
        ranges = list(ranges)
        n = len(ranges)
        cols = EstimateColumns.zeros(n, self._method, relative=False)
        keys = self.range_keys(ranges)
        sets: dict = {}  # range key -> its row among the sets read
        rows = np.full(n, -1, np.int64)
        for i, key in enumerate(keys):
            if isinstance(key, SketchError):
                cols.refused[i] = key
            elif key is not None:
                rows[i] = sets.setdefault(key, len(sets))
        if not sets:
            return cols
        tb = self._tb
        inside = np.array([np.frombuffer(key[0], bool) for key in sets]).reshape(len(sets), len(tb))
        strad = np.array([np.frombuffer(key[1], bool) for key in sets]).reshape(len(sets), len(tb))
        low = np.array([float(tb.m[mask].sum()) for mask in inside])
        high = low + np.array([float(tb.m[mask].sum()) for mask in strad])
        k = np.array([1 if key[2] else 2 for key in sets])
        lo_vec = summed_rows(self._counts, inside)
        hi_vec = lo_vec + summed_rows(self._counts, strad)
        la = lo_vec.reshape(len(sets), self.depth, self.width)
        ua = hi_vec.reshape(len(sets), self.depth, self.width)
        # ``_inner`` of each set with itself
        upper = (ua * ua).sum(axis=2).min(axis=1)
        lower = np.maximum(0.0, (la * la).sum(axis=2).min(axis=1) - self.eps_cm_eff * high * high)
        est = ((la + ua) * (la + ua)).sum(axis=2).min(axis=1) / 4.0
        eta = k * self.eps_sw
        rounding = self._rounding()  # (``_inner``'s own sum of both sides' roundings)
        g = 2 * (rounding + rounding) + (self.width + 2) * _TWO_52
        lower, upper = np.maximum(0.0, lower * (1 - g)), upper * (1 + g)
        est = np.minimum(np.maximum(est, lower), upper)
        eps = 2 * eta + eta * eta + self.eps_cm_eff
        read = rows >= 0
        # a set with no weight reads an exact zero (``_range`` is None), as an empty range
        read[read] = high[rows[read]] != 0
        at = rows[read]
        cols.estimate[read], cols.lower[read], cols.upper[read] = est[at], lower[at], upper[at]
        cols.epsilon[read], cols.confidence[read] = eps[at], 1.0 - self.delta
        return cols

    # -- merging ------------------------------------------------------------------------
    def _params(self) -> tuple:
        return (self.epsilon, self.delta, self.window, self.purpose, self.seed)

    # ``merge`` (Sketch.merge, §5.3) summarises the order-preserving union of both streams
    # with the same guarantees (no error composition, see the class docstring).

    # -- bytes --------------------------------------------------------------------------
    # Blob: 16-byte header (family ECM, flags = 0) | parameters (_PARAMS) | state block
    # (CellSketch._STATE and arrays, drawn in CellSketch).
    def _payload_pieces(self) -> list[bytes]:
        params = self._PARAMS.pack(self.epsilon, self.delta, self.window, self.seed,
                                   _PURPOSES.index(self.purpose))
        pieces = self._state_pieces()
        return [params + pieces[0]] + pieces[1:]

    def _payload(self) -> bytes:
        return b"".join(self._payload_pieces())

    @classmethod
    def _read(cls, rd: Reader) -> "ECMSketch":
        raw = rd.take(cls._PARAMS.size)
        eps, delta, window, seed, purpose = cls._PARAMS.unpack(raw)
        if raw[-7:] != bytes(7) or purpose >= len(_PURPOSES):
            raise CorruptSketchError("ECM blob has an unknown purpose")
        sk = cls(eps, delta, window, seed, _PURPOSES[purpose])
        if sk.n_cells * 8 > 2**31:
            raise CorruptSketchError("ECM blob parameters are out of range")
        sk._load_state(rd)
        return sk

