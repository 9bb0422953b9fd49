"""Template for sparsifiers whose supports differ per worker: the lossless union path.

Top-k, threshold and DGC keep different positions on different workers; adding their values
needs the union of the supports first. `UnionSparsifier` runs the two-round protocol of
`ina.host.compression.homomorphic` (Li et al., ICML'24):

1. OR round of the workers' 1-bit position bitmaps; the header's MAX-combined ``exp`` agrees
   on one exponent for the bucket in the same round (each worker offers the exponent of its
   largest kept value);
2. SUM round of the int32 fixed-point values (``30 - ceil(log2 N)`` mantissa bits, the
   agreed exponent) at the union's positions, as a count sketch (``coding="sketch"``) or as
   plain lanes (``coding="support"``), with a repair round if peeling stalls.

The sum is exact with respect to the int32 encoding; ``n / 32`` lanes for the bitmap plus
about ``1.23`` (sketch) or ``1`` (support) lane per union position.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import (
    Aggregation,
    Compressor,
    Context,
    Outcome,
    context,
    float_input,
    restore,
)
from ina.host import quantize
from ina.host.compression.homomorphic import CODINGS, HomomorphicAllreduce, HomomorphicConfig
from ina.host.rounds import Steps
from ina.protocol import EXP_ZERO


@dataclass(frozen=True)
class Sparse:
    """A sparse payload: positions of the flat tensor and the values there."""

    indices: np.ndarray  # int64, sorted
    values: np.ndarray


@dataclass(frozen=True)
class SparseContext(Context):
    numel: int


def kept(n: int, ratio: float) -> int:
    """Entries a ratio keeps of ``n``: at least one, at most all."""
    return min(n, max(1, math.ceil(ratio * n))) if n else 0


def check_ratio(owner: str, ratio: float) -> None:
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"{owner}: ratio must be in (0, 1], got {ratio}")


class UnionSparsifier(Compressor):
    """A sparsifier aggregated through the OR-then-SUM union path."""

    aggregation = Aggregation.UNION
    memory = "residual"

    def __init__(self, num_workers: int, worker: int, seed: int, coding: str) -> None:
        super().__init__(num_workers, worker, seed)
        if coding not in CODINGS:
            raise ValueError(
                f"{self.name}: coding must be one of {', '.join(sorted(CODINGS))}, got {coding!r}"
            )
        self.coding = coding
        # stats: the union path's traffic and peeling counters
        self.homomorphic = HomomorphicAllreduce(HomomorphicConfig(seed=seed, coding=coding))

    @abc.abstractmethod
    def select(self, flat: np.ndarray, key: Hashable, step: int) -> np.ndarray:
        """Sorted int64 positions of ``flat`` to send."""

    def compress(self, tensor, key: Hashable = "") -> tuple[Sparse, SparseContext]:
        _, flat = float_input(tensor)
        idx = self.select(flat, key, self._next_step(key))
        x = np.asarray(tensor).reshape(-1)
        return Sparse(idx, x[idx].copy()), SparseContext(**context(tensor), numel=flat.size)

    def decompress(self, payload: Sparse, ctx: SparseContext) -> np.ndarray:
        out = np.zeros(ctx.numel, np.float64)
        out[payload.indices] = payload.values
        return restore(out, ctx)

    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        n = flat.size
        N = self.num_workers
        sparse = np.zeros(n, np.float64)
        idx = self.select(flat, key, step)
        sparse[idx] = flat[idx]
        mine = int(quantize.block_exponents(sparse, max(n, 1))[0]) if n else EXP_ZERO
        support = yield from self.homomorphic.agree_support_steps(sparse != 0, exp=mine)
        exps = np.array([support.exp], np.int32)
        q = quantize.encode(sparse, exps, max(n, 1), N)
        res = yield from self.homomorphic.reduce_values_steps(q, support, salt=step & 0xFFFFFFFF)
        total = quantize.decode(res.values, exps, max(n, 1), N)
        sent = quantize.decode(q, exps, max(n, 1), N)
        return Outcome(total, sent, (q.astype(np.int64),), (res.values.astype(np.int64),))
