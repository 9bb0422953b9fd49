"""Count sketch over a known support, and its exact peeling decoder.

Round 2 of a compressed allreduce (after Li et al., ICML'24, arXiv 2402.07529) sends, instead
of one lane per position of the union support, a sketch of ``cells ~= 1.23 x nnz`` int32 lanes:
each union position adds its value into one cell of each of ``num_hashes`` (3) partitions of
the sketch. The switch adds the workers' sketches lane by lane, and since the sketch is linear
over int32 with wrap-around (every cell is a sum of values mod 2**32), the sum of the sketches
is the sketch of the sum. No sign hash: signs help a count sketch *estimate* a value, but here
every value is recovered exactly, and signs would add work without changing the arithmetic.

Decoding needs, per cell, how many union positions hash there (``cell_counts``) and which one
is left once all but one are decoded. Both follow from the union bitmap that every worker
already has, so neither is ever sent: counts by counting, the remaining position through a
per-cell sum of position indices (the "id sum" of an invertible Bloom lookup table).

Peeling: a cell whose count is 1 ("pure") holds exactly the sum at its one position; decode it,
subtract its value, count and index from its other cells, which may turn pure in turn; repeat.
Each pass handles every pure cell at once with array operations, and only the cells touched by
the previous pass are looked at again, so the total work is linear in ``nnz``. With 3 hashes
peeling succeeds with high probability when cells >= ~1.222 x nnz (the 2-core threshold of a
random 3-uniform hypergraph, 1 / 0.818); below it peeling stalls. A stalled decode is always
*detected* (some positions stay undecoded) and never guessed: the caller repairs the undecoded
positions exactly (``ina.host.compression.homomorphic.repair``).

Hashing is partitioned: hash ``k`` maps a position into partition ``k`` (cells
``[k*m, (k+1)*m)``), so a position never hits the same cell twice. Each hash is a seeded
64-bit mixer (multiply-add, then the splitmix64 finalizer) in vectorized uint64 arithmetic,
reduced to ``[0, m)`` by a multiply-shift; the seeds are shared by all workers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

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

_U64 = np.uint64
_MIX1 = _U64(0xBF58476D1CE4E5B9)  # splitmix64 finalizer constants (Steele et al., 2014)
_MIX2 = _U64(0x94D049BB133111EB)
_ONE = np.int32(1)


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
def _hash_keys(seed: int, num_hashes: int) -> tuple[tuple[np.uint64, np.uint64], ...]:
    """Per-hash (odd multiplier, offset) pairs derived from the shared seed."""
    state = np.random.SeedSequence(seed).generate_state(2 * num_hashes, dtype=np.uint64)
    return tuple((state[2 * k] | _U64(1), state[2 * k + 1]) for k in range(num_hashes))


def hash_cells(positions: np.ndarray, spec: SketchSpec) -> np.ndarray:
    """Cell of each position in each partition: int64 array of shape (num_hashes, len(positions)).

    Row ``k`` holds global cell indices in ``[k*m, (k+1)*m)``, ``m = spec.cells_per_partition``.
    """
    pos = np.asarray(positions).astype(np.uint64)
    m = _U64(spec.cells_per_partition)
    out = np.empty((spec.num_hashes, pos.size), np.int64)
    x = np.empty_like(pos)
    t = np.empty_like(pos)
    for k, (mul, add) in enumerate(_hash_keys(spec.seed, spec.num_hashes)):
        np.multiply(pos, mul, out=x)
        x += add
        # splitmix64 finalizer: every output bit depends on every input bit
        np.right_shift(x, _U64(30), out=t)
        x ^= t
        x *= _MIX1
        np.right_shift(x, _U64(27), out=t)
        x ^= t
        x *= _MIX2
        np.right_shift(x, _U64(31), out=t)
        x ^= t
        # multiply-shift range reduction of the top 32 bits into [0, m)
        x >>= _U64(32)
        x *= m
        x >>= _U64(32)
        out[k] = x.view(np.int64)
        out[k] += k * spec.cells_per_partition
    return out


def encode(values: np.ndarray, cells: np.ndarray, spec: SketchSpec) -> np.ndarray:
    """Sketch (int32, ``spec.cells`` lanes) of ``values`` (int32, one per support position).

    ``cells`` is ``hash_cells(support, spec)``. Sums wrap around in int32 like the switch's.
    """
    values = np.asarray(values)
    if values.dtype != np.int32:
        raise ValueError(f"sketch values must be int32, got {values.dtype}")
    if cells.shape != (spec.num_hashes, values.size):
        raise ValueError(
            f"cells has shape {cells.shape}, expected {(spec.num_hashes, values.size)}"
        )
    sketch = np.zeros(spec.cells, np.int32)
    for row in cells:
        np.add.at(sketch, row, values)  # unbuffered: repeated cells add up, wrapping in int32
    return sketch


def cell_counts(cells: np.ndarray, spec: SketchSpec) -> np.ndarray:
    """How many support positions hash into each cell (int32, ``spec.cells``); never sent."""
    return np.bincount(cells.ravel(), minlength=spec.cells).astype(np.int32)


@dataclass(frozen=True)
class PeelResult:
    """Outcome of peeling: ``values[i]`` is exact where ``decoded[i]``, else 0 and unknown."""

    values: np.ndarray  # int32, one per support position
    decoded: np.ndarray  # bool, one per support position
    passes: int  # array passes the peeler made
    consistent: bool  # every emptied cell came out exactly zero (see peel)

    @property
    def complete(self) -> bool:
        return bool(self.decoded.all())

    @property
    def undecoded(self) -> np.ndarray:
        """Indices (into the support) of the positions peeling could not decode."""
        return np.flatnonzero(~self.decoded)


def peel(sketch: np.ndarray, cells: np.ndarray, counts: np.ndarray | None = None) -> PeelResult:
    """Decode a (summed) sketch whose support hashes to ``cells`` (shape (hashes, nnz)).

    Returns exact int32 values for every position peeling reaches; the others are reported in
    ``decoded`` (False) and must be repaired by the caller. ``consistent`` is False if a cell
    whose positions were all decoded is not zero afterwards: then the sketch was not the sketch
    of any values on this support (a worker sent values outside the union, or the sketches
    were built with different seeds or sizes), and nothing decoded may be trusted.
    The inputs are not modified.
    """
    num_hashes, nnz = cells.shape
    ncells = sketch.size
    if sketch.dtype != np.int32:
        raise ValueError(f"sketch must be int32, got {sketch.dtype}")
    residual = sketch.copy()
    count = (
        np.bincount(cells.ravel(), minlength=ncells).astype(np.int32)
        if counts is None
        else np.array(counts, dtype=np.int32)
    )
    if count.size != ncells:
        raise ValueError(f"counts has {count.size} cells, the sketch {ncells}")
    # id sum: per cell, the sum of the (support) indices of its positions; exact in int64
    idsum = np.zeros(ncells, np.int64)
    index = np.arange(nnz, dtype=np.int64)
    for row in cells:
        np.add.at(idsum, row, index)

    values = np.zeros(nnz, np.int32)
    decoded = np.zeros(nnz, np.bool_)
    slot = np.empty(nnz, np.int64)  # scratch for de-duplication
    frontier = np.flatnonzero(count == 1)
    passes = 0
    while frontier.size:
        pure = frontier[count[frontier] == 1]
        if not pure.size:
            break
        pos = idsum[pure]
        # one position may be pure in several cells, and a cell may repeat in the frontier:
        # keep one (cell, position) pair per position (the last write to ``slot`` wins)
        order = np.arange(pos.size)
        slot[pos] = order
        keep = slot[pos] == order
        pos, pure = pos[keep], pure[keep]
        val = residual[pure]
        values[pos] = val
        decoded[pos] = True
        touched = np.take(cells, pos, axis=1).ravel()  # faster than cells[:, pos]
        np.subtract.at(count, touched, _ONE)  # a Python int here is 30x slower
        np.subtract.at(idsum, touched, np.tile(pos, num_hashes))
        np.subtract.at(residual, touched, np.tile(val, num_hashes))  # int32: wraps
        frontier = touched
        passes += 1
    consistent = not residual[count == 0].any()
    return PeelResult(values, decoded, passes, consistent)
