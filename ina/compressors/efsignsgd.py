"""``efsignsgd``: EF-signSGD (Karimireddy et al., ICML'19), scaled signs summed in the switch.

The worker compresses ``p = g + e`` (error feedback, the ``residual`` memory) to the scaled
sign ``(|p|_1 / d) sign(p)`` and keeps ``e = p - that``. Scaled by each worker's own ``|p|_1 /
d``, the signs of different workers cannot be added as integers; so every worker uses the same
scale, the mean magnitude over all workers, ``sum_w |p_w|_1 / (N d)`` per block (``block=0``: the
whole tensor, the paper's per layer). The scale is itself a sum: one MAX round agrees on the
largest ``|p_w|_1`` (float32 bits), then one SUM round carries the 1-bit signs packed with
headroom *and* each worker's ``|p_w|_1`` as a fixed-point fraction of that largest one. Every
worker decodes the same mean scale; its own contribution (for its error feedback) is that
scale times its signs. ``log2(N + 1)`` bits per value plus 32 per block.

Departures: GRACE and the paper fold the learning rate into the memory (``p = lr g + e``, the
aggregate divided by ``lr``); the scaled sign is positively homogeneous, so for a constant
learning rate that is the same as residuals in gradient units, which need no ``lr`` here. With
the mean scale a worker whose ``|p|_1`` is below half the mean is not contracted by its
compressor; error feedback still accounts for every difference.
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
class MeanScaleContext(Context):
    top: np.ndarray  # agreed largest per-worker sum per block (fixed-point unit)
    block: int


def _block_sizes(n: int, block: int) -> np.ndarray:
    size, nb = blocks(n, block)
    sizes = np.full(nb, size, np.float64)
    if nb:
        sizes[-1] = n - size * (nb - 1)
    return sizes


@register("efsignsgd")
class EFSignSGD(SummedQuantizer):
    """Signs scaled by the mean magnitude over all workers; error feedback."""

    aggregation = Aggregation.SUM
    memory = "residual"
    summary = "1-bit signs x mean |p| over workers (summed in the same round)"

    def __init__(
        self, num_workers: int = 1, worker: int = 0, seed: int = 0, *, block: int = 0
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if block < 0:
            raise ValueError(f"efsignsgd: block must be >= 0 (0: whole tensor), got {block}")
        self.block = block

    def _l1(self, flat: np.ndarray) -> np.ndarray:
        return block_reduce(np.abs(flat), self.block, np.sum)

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        return float_bits(self._l1(flat))

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        top = bits_float(agreed)
        signs = Field((flat >= 0).astype(np.int64), 0, 1)
        ctx = MeanScaleContext((flat.size,), "<f8", top, self.block)
        return [signs, fixed_field(self._l1(flat), top, self.num_workers)], ctx

    def _scale(self, l1_ints: np.ndarray, ctx: MeanScaleContext, count: int) -> np.ndarray:
        n = int(np.prod(ctx.shape))
        l1 = from_fixed(l1_ints, ctx.top, self.num_workers)
        mean = l1 / (count * np.maximum(_block_sizes(n, ctx.block), 1))
        return per_value(mean, n, ctx.block)

    def decode(self, ints: Sequence[np.ndarray], ctx: MeanScaleContext, count: int) -> np.ndarray:
        votes = 2.0 * np.asarray(ints[0], np.float64) - count  # sum of +-1 signs
        return self._scale(ints[1], ctx, count) * votes

    def decode_own(self, own, sums, ctx: MeanScaleContext) -> np.ndarray:
        sign = 2.0 * np.asarray(own[0], np.float64) - 1
        return self._scale(sums[1], ctx, self.num_workers) * sign
