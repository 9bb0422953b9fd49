"""Low-bit fixed point with an exponent per block agreed by MAX: `fp16` and `u8bit`.

Every worker finds, per block of ``block`` values, the exponent ``E`` with every ``|x| <
2^E`` (`ina.host.quantize.block_exponents`); a MAX round makes it the block's exponent on every
worker. With ``s = 2^(b-1) - 1`` levels a side, a value travels as ``rint(x * s / 2^E)``, an
integer in ``[-s, s]``, and the switch adds them: the sum decodes as ``sum * 2^E / s``. The
rounding error is at most ``2^E / (2 s)`` per worker and value.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import Context, Field, per_value
from ina.compressors.summed import SummedQuantizer, exponent_scale
from ina.host import quantize


@dataclass(frozen=True)
class BlockContext(Context):
    exps: np.ndarray  # agreed biased exponent per block
    block: int
    levels: int  # s: integers in [-s, s]


class BlockFixedPoint(SummedQuantizer):
    """``bits``-bit signed fixed point (sign included) relative to agreed block exponents."""

    def __init__(self, num_workers: int, worker: int, seed: int, bits: int, block: int) -> None:
        super().__init__(num_workers, worker, seed)
        if not 2 <= bits <= 24:
            raise ValueError(f"{self.name}: bits must be in 2..24, got {bits}")
        if block < 1:
            raise ValueError(f"{self.name}: block must be >= 1, got {block}")
        self.value_bits = bits
        self.block = block

    @property
    def levels(self) -> int:
        return (1 << (self.value_bits - 1)) - 1

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        return quantize.block_exponents(flat, self.block)

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        s = self.levels
        factor = per_value(s / exponent_scale(np.asarray(agreed)), flat.size, self.block)
        q = np.rint(flat * factor)  # s / 2^E is exact: a multiply, not a divide
        np.clip(q, -s, s, out=q)
        q = q.astype(np.int64)
        ctx = BlockContext((flat.size,), "<f8", np.asarray(agreed), self.block, s)
        return [Field(q, -s, s)], ctx

    def decode(self, ints: Sequence[np.ndarray], ctx: BlockContext, count: int) -> np.ndarray:
        v = np.asarray(ints[0], np.float64)
        return v * per_value(exponent_scale(ctx.exps) / ctx.levels, v.size, ctx.block)

    def error_bound(self, ctx: BlockContext, count: int = 1) -> np.ndarray:
        """Largest |decoded - exact| per value for ``count`` workers' sum."""
        n = int(np.prod(ctx.shape))
        return count * per_value(exponent_scale(ctx.exps), n, ctx.block) / (2 * ctx.levels)
