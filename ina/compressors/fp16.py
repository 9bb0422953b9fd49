"""``fp16``: half the bits of float32, as two fields per int32 lane the switch can add.

GRACE casts to IEEE half precision; the switch cannot add halves. Here each value becomes a
signed fixed-point integer of ``b = 16 - ceil(log2 N)`` bits relative to an exponent per block
agreed by MAX (`ina.compressors.fixedpoint`), so that two fields with their headroom fill one
lane: 16 bits per value on the wire, whatever N. For N <= 32, ``b >= 11``: a block's largest
value keeps at least half precision's 11 significant bits; smaller values in the block have
fixed, not floating, precision (error at most ``2^E / (2 (2^(b-1) - 1))``).
"""

from __future__ import annotations

import math

from ina.compressors.base import Aggregation, register
from ina.compressors.fixedpoint import BlockFixedPoint


@register("fp16")
class FP16(BlockFixedPoint):
    """16 bits per value on the wire: ``16 - ceil(log2 N)``-bit fixed point, block exponents."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "16-bit fields: (16 - log2 N)-bit fixed point, block exponents agreed by MAX"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        bits: int = 0,
        block: int = 256,
    ) -> None:
        auto = 16 - math.ceil(math.log2(num_workers)) if num_workers > 1 else 16
        super().__init__(num_workers, worker, seed, bits or auto, block)
        self.bits = bits  # 0: 16 - ceil(log2 N)
