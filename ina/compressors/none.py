"""``none``: no compression, the baseline: dense int32 fixed point summed in the switch.

SwitchML's scheme (`ina.host.quantize`): a MAX round agrees on one exponent per block of
``block`` values, then every value travels as an int32 with ``30 - ceil(log2 N)`` mantissa
bits, so that N of them cannot overflow. 32 bits per value plus 32 per block. GRACE's ``none``
sends float32 through an MPI allreduce; the switch cannot add floats.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import Aggregation, Context, Field, register
from ina.compressors.summed import SummedQuantizer
from ina.host import quantize


@dataclass(frozen=True)
class FixedContext(Context):
    exps: np.ndarray  # agreed biased exponent per block
    block: int


@register("none")
class NoCompression(SummedQuantizer):
    """Dense int32 with agreed block exponents."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "dense int32, block exponents agreed by MAX"

    def __init__(
        self, num_workers: int = 1, worker: int = 0, seed: int = 0, *, block: int = 256
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if block < 1:
            raise ValueError(f"none: block must be >= 1, got {block}")
        self.block = block

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        return quantize.block_exponents(flat, self.block)

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        one = 1 << quantize.mantissa_bits(self.num_workers)
        q = quantize.encode(flat, agreed, self.block, self.num_workers).astype(np.int64)
        ctx = FixedContext((flat.size,), "<f8", np.asarray(agreed), self.block)
        return [Field(q, -one, one)], ctx

    def decode(self, ints: Sequence[np.ndarray], ctx: FixedContext, count: int) -> np.ndarray:
        return quantize.decode(ints[0], ctx.exps, ctx.block, self.num_workers)
