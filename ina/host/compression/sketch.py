"""Count sketch over a known support, and its exact peeling decoder.

Round 2 of a compressed allreduce (after Li et al., ICML'24, arXiv 2402.07529) sends, instead
of one lane per position of the union support, a sketch of ``cells ~= 1.23 x nnz`` int32 lanes:
each union position adds its value into one cell of each of ``num_hashes`` (3) partitions of
the sketch. The switch adds the workers' sketches lane by lane, and since the sketch is linear
over int32 with wrap-around (every cell is a sum of values mod 2**32), the sum of the sketches
is the sketch of the sum. No sign hash: signs help a count sketch *estimate* a value, but here
every value is recovered exactly, and signs would add work without changing the arithmetic.

Decoding needs, per cell, how many union positions hash there (the count) and which one is
left once all but one are decoded. Both follow from the union bitmap that every worker
already has, so neither is ever sent: counts by counting, the remaining position through a
per-cell sum of support indices (the "id sum" of an invertible Bloom lookup table).

Peeling: a cell whose count is 1 ("pure") holds exactly the sum at its one position; decode it,
subtract its value, count and index from its other cells, which may turn pure in turn; repeat.
Each pass handles every pure cell at once with array operations, and only the cells touched by
the previous pass are looked at again, so the total work is linear in ``nnz``. With 3 hashes
peeling succeeds with high probability when cells >= ~1.222 x nnz (the 2-core threshold of a
random 3-uniform hypergraph, 1 / 0.818); below it peeling stalls. A stalled decode is always
*detected* (some positions stay undecoded) and never guessed: the caller repairs the undecoded
positions exactly (``ina.host.compression.homomorphic.repair``). Which positions peel depends
on the support and the seed only (they are the positions outside the hypergraph's 2-core,
whatever the order of peeling), so every worker agrees on them.

One int64 per cell carries all three quantities, so each peeling step is one gather and one
scatter-add instead of three::

    bit 63 ........ 32 | 31 ........ 5 | 4 .... 0
      value sum mod 2**32 |   id sum    |  count

Subtracting a decoded position's word ``value << 32 | index << 5 | 1`` from a cell that holds
it never borrows across fields: the count and the id sum of such a cell are at least 1 and
the index, and the value field wraps off the top of the int64 just as int32 wraps. The word
of a pure cell *is* the word to subtract. The fields must not overflow when the sketch is
built (a count of 32, or an id sum of 2**27, about 4 million positions times the largest
count); `Table.fits` checks that exactly and the caller then sends plain lanes instead.

Hashing is partitioned: hash ``k`` maps a position into partition ``k`` (cells
``[k*m, (k+1)*m)``), so a position never hits the same cell twice. Each hash is a seeded
64-bit mixer (multiply-add, then the splitmix64 finalizer) in int64 arithmetic that wraps
like uint64 (right shifts masked to be logical), reduced to ``[0, m)`` by a multiply-shift;
the seeds are shared by all workers.

Every function takes numpy arrays or torch tensors (CPU or CUDA) and answers in the same
library on the same device (`ina.host.arrays`); the results are bit-identical.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ina.host.arrays import Array, ops

DEFAULT_NUM_HASHES = 3
# Cells per union non-zero. 3-hash peeling has its threshold at 1.222; 1.23 sits just above it.
# (Li et al.'s public code, github.com/lihy0529/lossless_homomorphic_compression benchmark.py,
# sizes its sketch at n/10 cells whatever the density.) docs/compression.md: failures vs this.
DEFAULT_CELLS_PER_NNZ = 1.23
# Extra cells, times sqrt(nnz). The threshold is asymptotic: a finite hypergraph near it peels
# only with some probability (the transition window shrinks like 1/sqrt(nnz)). Measured with
# 1.23 x nnz alone: 3 of 40 unions of 20,000 stall, 12 of 40 of 10,000, 22 of 40 of 1,000, and
# a stall leaves 10-30 % of the positions for the repair round. 2 sqrt(nnz) more cells (0.4 %
# at nnz = 200,000) make stalls rare at every size; small ones are cheap to repair anyway.
DEFAULT_CELLS_SLACK = 2.0

# Fields of a cell's decoding word (module docstring). A cell holds Poisson(~0.8) positions
# at the default sizing: a count of 32 has probability ~1e-40 per cell.
COUNT_BITS = 5
ID_BITS = 32 - COUNT_BITS
_COUNT_MASK = (1 << COUNT_BITS) - 1
_ID_MASK = (1 << ID_BITS) - 1
_LOW32 = (1 << 32) - 1


def _int64(u: int) -> int:
    """The int64 with the bits of the uint64 ``u`` (array libraries refuse ints >= 2**63)."""
    return u - (1 << 64) if u >= 1 << 63 else u


_MIX1 = _int64(0xBF58476D1CE4E5B9)  # splitmix64 finalizer constants (Steele et al., 2014)
_MIX2 = _int64(0x94D049BB133111EB)


@dataclass(frozen=True)
class SketchSpec:
    """Shape and hash seeds of a count sketch; every worker derives the same one locally.

    ``cells_per_partition`` cells in each of ``num_hashes`` partitions, hashed with ``seed``.
    """

    cells_per_partition: int
    num_hashes: int = DEFAULT_NUM_HASHES
    seed: int = 0

    def __post_init__(self) -> None:
        if self.cells_per_partition < 1:
            raise ValueError(f"cells_per_partition must be >= 1, got {self.cells_per_partition}")
        if not 1 <= self.num_hashes <= 8:
            raise ValueError(f"num_hashes must be in 1..8, got {self.num_hashes}")

    @property
    def cells(self) -> int:
        """Total number of cells (int32 lanes on the wire)."""
        return self.cells_per_partition * self.num_hashes

    @classmethod
    def for_nnz(
        cls,
        nnz: int,
        cells_per_nnz: float = DEFAULT_CELLS_PER_NNZ,
        num_hashes: int = DEFAULT_NUM_HASHES,
        seed: int = 0,
        slack: float = DEFAULT_CELLS_SLACK,
    ) -> SketchSpec:
        """The sketch for a union of ``nnz`` positions: ``ceil(cells_per_nnz * nnz + slack *
        sqrt(nnz))`` cells, rounded up to a multiple of ``num_hashes`` (at least one per
        partition). ``slack=0`` gives the plain ``ceil(cells_per_nnz * nnz)``."""
        if nnz < 0:
            raise ValueError(f"nnz must be >= 0, got {nnz}")
        if not cells_per_nnz > 0:
            raise ValueError(f"cells_per_nnz must be > 0, got {cells_per_nnz}")
        if not slack >= 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        cells = math.ceil(cells_per_nnz * nnz + slack * math.sqrt(nnz))
        return cls(max(1, -(-cells // num_hashes)), num_hashes, seed)


@functools.lru_cache(maxsize=64)
def _hash_keys(seed: int, num_hashes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per-hash odd multipliers and offsets (as int64 values) derived from the shared seed."""
    state = np.random.SeedSequence(seed).generate_state(2 * num_hashes, dtype=np.uint64)
    mul = tuple(_int64(int(state[2 * k]) | 1) for k in range(num_hashes))
    add = tuple(_int64(int(state[2 * k + 1])) for k in range(num_hashes))
    return mul, add


def _xorshift(x: Array, s: int) -> None:
    """``x ^= x >>> s`` in place, a logical shift on int64 (``>>`` is arithmetic)."""
    x ^= (x >> s) & ((1 << (64 - s)) - 1)


def hash_cells(positions: Array, spec: SketchSpec) -> Array:
    """Cell of each position in each partition: int32 array of shape (len(positions),
    num_hashes).

    Column ``k`` holds global cell indices in ``[k*m, (k+1)*m)``, ``m = spec.cells_per_partition``.
    Positions are rows so that a position's cells are one contiguous read when peeling; int32
    halves what peeling reads at random (cells < 2**31: buckets hold < 2**31 positions).
    """
    xp = ops(positions)
    nnz = xp.size(positions)
    out = xp.zeros((nnz, spec.num_hashes), xp.int32)
    # pieces that stay in the cache through the dozen passes of the mixer (on a CPU: 1.6x
    # faster at 200,000 positions than one pass over all of them; a GPU takes them whole)
    step = xp.chunk or max(nnz, 1)
    for start in range(0, nnz, step):
        out[start : start + step] = _hash_rows(positions[start : start + step], spec).T
    return out


def _hash_rows(positions: Array, spec: SketchSpec) -> Array:
    """`hash_cells` as int64, one row per hash (long rows vectorize)."""
    xp = ops(positions)
    mul, add = _hash_keys(spec.seed, spec.num_hashes)
    m = spec.cells_per_partition
    x = xp.astype(positions, xp.int64).reshape(1, -1) * xp.asarray(mul, xp.int64).reshape(-1, 1)
    x += xp.asarray(add, xp.int64).reshape(-1, 1)
    # splitmix64 finalizer: every output bit depends on every input bit, so runs of
    # consecutive positions (the common case) hash like the random hypergraph the peeling
    # threshold assumes; a bare multiply-shift maps them to an arithmetic progression
    _xorshift(x, 30)
    x *= _MIX1
    _xorshift(x, 27)
    x *= _MIX2
    _xorshift(x, 31)
    # multiply-shift range reduction of the top 32 bits into [0, m): < 2**63, no overflow
    x = (((x >> 32) & _LOW32) * m) >> 32
    x += xp.arange(spec.num_hashes, xp.int64).reshape(-1, 1) * m
    return x


@dataclass(frozen=True)
class PeelResult:
    """Outcome of peeling: ``values[i]`` is exact where ``decoded[i]``, else 0 and unknown.

    Arrays are of the sketch's library and device."""

    values: Array  # int32, one per support position
    decoded: Array  # bool, one per support position
    passes: int  # array passes the peeler made
    consistent: bool  # every emptied cell came out exactly zero (see Table.peel)

    @property
    def complete(self) -> bool:
        return ops(self.decoded).all(self.decoded)

    @property
    def undecoded(self) -> Array:
        """Indices (into the support) of the positions peeling could not decode."""
        return ops(self.decoded).nonzero(~self.decoded)


class Table:
    """A support hashed into a sketch: what encoding and decoding on it share.

    ``cells`` (nnz x num_hashes) says where each support position goes; per cell, the count
    and id sum of its positions (the low half of the decoding word, module docstring) are
    computed along with the first `encode`, or on the first `peel`.

    Example::

        table = Table(support_positions, spec)
        lanes = table.encode(my_values)          # int32, spec.cells lanes: send, SUM
        result = table.peel(summed_lanes)        # exact sums where result.decoded
    """

    def __init__(self, positions: Array, spec: SketchSpec) -> None:
        self.spec = spec
        self.xp = ops(positions)
        self.nnz = self.xp.size(positions)
        self.cells = hash_cells(positions, spec)
        self._structure: Array | None = None  # int64 per cell: count | id sum << COUNT_BITS
        self._fits: bool | None = None

    def _words(self, values: Array | None) -> Array:
        """Per cell, the sum of the decoding words of its positions (values 0 if None)."""
        xp = self.xp
        word = (xp.arange(self.nnz, xp.int64) << COUNT_BITS) + 1
        if values is not None:
            word += xp.astype(values, xp.int64) << 32
        summed = xp.zeros(self.spec.cells, xp.int64)
        xp.scatter_add(summed, self.cells.reshape(-1), xp.repeat(word, self.spec.num_hashes))
        if self._structure is None:
            self._set_structure(summed & _LOW32)
        return summed

    def _set_structure(self, low: Array) -> None:
        """Keep the count | id sum words; check that no field overflowed into the next one.

        A field's value never depends on the values above it, so comparing field totals with
        the exact totals detects any overflow (a short total is a field that wrapped)."""
        xp = self.xp
        h, nnz = self.spec.num_hashes, self.nnz
        counts_ok = xp.sum(low & _COUNT_MASK) == h * nnz
        ids_ok = xp.sum(low >> COUNT_BITS) == h * nnz * (nnz - 1) // 2
        self._fits = bool(counts_ok and ids_ok)
        self._structure = low

    @property
    def fits(self) -> bool:
        """Whether the decoding words hold this support (module docstring); if not, neither
        ``encode``'s lanes nor ``peel`` may be used. Always True below ~4 million positions
        unless a cell gets 32 of them."""
        if self._fits is None:
            self._words(None)
        return bool(self._fits)

    def counts(self) -> Array:
        """How many support positions hash into each cell (int32, ``spec.cells``)."""
        if self._structure is None:
            self._words(None)
        return self.xp.astype(self._structure & _COUNT_MASK, self.xp.int32)

    def encode(self, values: Array) -> Array:
        """Sketch (int32, ``spec.cells`` lanes) of ``values`` (int32, one per support
        position, same library and device). Sums wrap around in int32 like the switch's."""
        xp = self.xp
        if values.dtype != xp.int32:
            raise ValueError(f"sketch values must be int32, got {values.dtype}")
        if tuple(values.shape) != (self.nnz,):
            raise ValueError(f"values has shape {tuple(values.shape)}, expected ({self.nnz},)")
        # the value field of the summed words is the wrap-around sum of the values, as long
        # as the low fields did not carry into it (checked: `fits`)
        return xp.astype(self._words(values) >> 32, xp.int32)

    def peel(self, sketch: Array) -> PeelResult:
        """Decode a (summed) sketch of values on this support.

        Returns exact int32 values for every position peeling reaches; the others are
        reported in ``decoded`` (False) and must be repaired by the caller. ``consistent`` is
        False if a cell whose positions were all decoded is not zero afterwards: then the
        sketch was not the sketch of any values on this support (a worker sent values outside
        the union, or the sketches were built with different seeds or sizes), and nothing
        decoded may be trusted. The input is not modified.
        """
        xp = self.xp
        if sketch.dtype != xp.int32:
            raise ValueError(f"sketch must be int32, got {sketch.dtype}")
        if tuple(sketch.shape) != (self.spec.cells,):
            raise ValueError(
                f"sketch has shape {tuple(sketch.shape)}, expected ({self.spec.cells},)"
            )
        if not self.fits:
            raise ValueError("the support does not fit the decoding words (Table.fits)")
        state = (xp.astype(sketch, xp.int64) << 32) | self._structure
        found = xp.zeros(self.nnz, xp.int64)  # decoded positions' words; 0: not decoded
        stamp = xp.empty(self.nnz, xp.int64)  # scratch for de-duplication (written, then read)
        frontier = xp.nonzero((state & _COUNT_MASK) == 1)
        passes = 0
        while xp.size(frontier):
            word = xp.gather(state, frontier)
            word = xp.select(word, (word & _COUNT_MASK) == 1)  # the pure cells' words
            if not xp.size(word):
                break
            pos = (word >> COUNT_BITS) & _ID_MASK
            # one position may be pure in several cells, and a cell may repeat in the
            # frontier: keep one word per position (whichever write to ``stamp`` won)
            mine = xp.arange(xp.size(pos), xp.int64)
            xp.scatter(stamp, pos, mine)
            keep = xp.gather(stamp, pos) == mine
            if not xp.all(keep):
                pos, word = xp.select(pos, keep), xp.select(word, keep)
            xp.scatter(found, pos, word)
            touched = xp.take_rows(self.cells, pos).reshape(-1)
            # subtract count, index and value from all its cells (its pure cell becomes 0)
            xp.scatter_add(state, touched, xp.repeat(-word, self.spec.num_hashes))
            frontier = touched
            passes += 1
        emptied = (state & _COUNT_MASK) == 0
        consistent = not xp.any(emptied & (state != 0))
        return PeelResult(xp.astype(found >> 32, xp.int32), found != 0, passes, consistent)
