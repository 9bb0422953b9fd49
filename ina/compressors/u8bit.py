"""``u8bit``: 8-bit values (Dettmers, *8-Bit Approximations for Parallelism in Deep
Learning*, ICLR'16), as integers the switch can add.

Dettmers' 8-bit type (GRACE's ``u8bit``: a sign and a 7-bit index into a table of 128
non-linear levels, scaled by the tensor's max) gives integers whose sum means nothing. Here
the 8 bits are linear: ``rint(x * 127 / 2^E)`` in ``[-127, 127]`` with an exponent per block
agreed by MAX (`ina.compressors.fixedpoint`). The sum of N of them needs ``8 + log2 N`` bits, so
a lane holds 3 (N <= 4) or 2 (N <= 32) values: 10.7 or 16 bits per value on the wire, not 8.
"""

from __future__ import annotations

from ina.compressors.base import Aggregation, register
from ina.compressors.fixedpoint import BlockFixedPoint


@register("u8bit")
class U8Bit(BlockFixedPoint):
    """``bits``-bit (default 8) linear fixed point with agreed block exponents."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "8-bit linear fixed point, block exponents agreed by MAX"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        bits: int = 8,
        block: int = 256,
    ) -> None:
        super().__init__(num_workers, worker, seed, bits, block)
        self.bits = bits
