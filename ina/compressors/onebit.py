"""``onebit``: 1-bit SGD (Seide et al., Interspeech'14), one bit per value summed in the switch.

Each value is quantized to one bit, negative or not, and reconstructed as the mean of the
values on its side (GRACE: one pair of means per tensor; here per block, ``block=0``: the whole
tensor); what the bit loses is kept as error feedback (the ``residual`` memory, as in the
paper). Bits of different workers can only be added if all workers use the same two
reconstruction values, so they are the means over *all* workers: per block, the sum of the
negative values, the sum of the non-negative ones, and the count of negative values, all sums.
One MAX round agrees on the largest per-worker sums (float32 bits); one SUM round carries the
bits packed with headroom, the two sums as fixed-point fractions of those, and the count.
The aggregate at a position where ``k`` workers sent "negative" is ``k m0 + (N - k) m1``.
``log2(N + 1)`` bits per value plus 96 per block.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import (
    Aggregation,
    Context,
    Field,
    bits_float,
    block_reduce,
    blocks,
    fixed_field,
    float_bits,
    from_fixed,
    per_value,
    register,
)
from ina.compressors.summed import SummedQuantizer


@dataclass(frozen=True)
class MeansContext(Context):
    top_neg: np.ndarray  # agreed largest |sum of negatives| per block
    top_pos: np.ndarray  # agreed largest sum of non-negatives per block
    block: int


@register("onebit")
class OneBit(SummedQuantizer):
    """Sign bit per value, reconstructed by the means of each side over all workers."""

    aggregation = Aggregation.SUM
    memory = "residual"
    summary = "1 bit, two reconstruction means pooled over workers (sums)"

    def __init__(
        self, num_workers: int = 1, worker: int = 0, seed: int = 0, *, block: int = 0
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if block < 0:
            raise ValueError(f"onebit: block must be >= 0 (0: whole tensor), got {block}")
        self.block = block

    def _sides(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per block: sum of the negatives, sum of the rest, count of the negatives."""
        neg = np.minimum(flat, 0.0)
        return (
            block_reduce(neg, self.block, np.sum),
            block_reduce(flat - neg, self.block, np.sum),
            block_reduce((flat < 0).astype(np.float64), self.block, np.sum),
        )

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        s0, s1, _ = self._sides(flat)
        return float_bits(np.concatenate([-s0, s1]))

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        top = bits_float(agreed)
        nb = top.size // 2
        s0, s1, c0 = self._sides(flat)
        size, _ = blocks(flat.size, self.block)
        N = self.num_workers
        fields = [
            Field((flat < 0).astype(np.int64), 0, 1),
            fixed_field(s0, top[:nb], N),
            fixed_field(s1, top[nb:], N),
            Field(c0.astype(np.int64), 0, size),
        ]
        return fields, MeansContext((flat.size,), "<f8", top[:nb], top[nb:], self.block)

    def _means(self, ints, ctx: MeansContext, count: int) -> tuple[np.ndarray, np.ndarray]:
        n = int(np.prod(ctx.shape))
        size, nb = blocks(n, ctx.block)
        sizes = np.full(nb, size, np.int64)
        if nb:
            sizes[-1] = n - size * (nb - 1)
        s0 = from_fixed(ints[1], ctx.top_neg, self.num_workers)
        s1 = from_fixed(ints[2], ctx.top_pos, self.num_workers)
        c0 = np.asarray(ints[3], np.int64)
        c1 = count * sizes - c0
        m0 = np.where(c0 > 0, s0 / np.maximum(c0, 1), 0.0)
        m1 = np.where(c1 > 0, s1 / np.maximum(c1, 1), 0.0)
        return per_value(m0, n, ctx.block), per_value(m1, n, ctx.block)

    def decode(self, ints: Sequence[np.ndarray], ctx: MeansContext, count: int) -> np.ndarray:
        m0, m1 = self._means(ints, ctx, count)
        k = np.asarray(ints[0], np.float64)  # workers that sent "negative" here
        return k * m0 + (count - k) * m1

    def decode_own(self, own, sums, ctx: MeansContext) -> np.ndarray:
        m0, m1 = self._means(sums, ctx, self.num_workers)
        k = np.asarray(own[0], np.float64)
        return k * m0 + (1 - k) * m1
