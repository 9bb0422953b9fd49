"""``qsgd``: QSGD (Alistarh et al., NeurIPS'17) with the norm agreed through the switch.

Per bucket of ``bucket`` values (GRACE's default 128), a value ``x`` becomes the integer
``sign(x) * l`` with ``l`` in ``[0, s]`` (``s = levels``) drawn by stochastic rounding of
``s |x| / norm``: unbiased, ``E[l] norm / s = |x|``. In QSGD every worker uses its own bucket
norm and sends it along; integers scaled by different norms cannot be added in the switch. So
the norm is agreed first: each worker offers its bucket norms (float32 bit patterns, whose
signed int32 MAX is the float MAX) in a MAX round, and all quantize with the largest. Still
unbiased (``|x| <= own norm <= agreed norm``); the variance grows by the ratio of the norms.
The integers in ``[-s, s]`` are summed packed (`ina.compressors.packing`): ``s = 7`` is a 4-bit
method (8 bits per value on the wire for 16 workers). Memory: none (QSGD is unbiased).
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
    float_bits,
    per_value,
    register,
)
from ina.compressors.summed import SummedQuantizer


@dataclass(frozen=True)
class NormContext(Context):
    norms: np.ndarray  # agreed norm per bucket
    block: int
    levels: int


def _l2(rows: np.ndarray, axis: int) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", rows, rows))


@register("qsgd")
class QSGD(SummedQuantizer):
    """Stochastic rounding to ``levels`` levels of the agreed bucket norm."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "stochastic levels of a bucket norm agreed by MAX"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        levels: int = 127,
        bucket: int = 128,
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if not 1 <= levels <= (1 << 20):
            raise ValueError(f"qsgd: levels must be in 1..{1 << 20}, got {levels}")
        if bucket < 1:
            raise ValueError(f"qsgd: bucket must be >= 1, got {bucket}")
        self.levels = levels
        self.bucket = bucket

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        return float_bits(block_reduce(flat, self.bucket, _l2))

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        norms = bits_float(agreed)
        s = self.levels
        inv = per_value(s / np.where(norms > 0, norms, 1.0), flat.size, self.bucket)
        ratio = np.abs(flat) * inv  # in [0, s]: |x| <= own norm <= agreed norm
        low = np.floor(ratio)
        ratio -= low
        low += self.rng(key, step).random(flat.size) < ratio  # stochastic rounding
        np.clip(low, 0, s, out=low)
        q = np.copysign(low, flat).astype(np.int64)
        return [Field(q, -s, s)], NormContext((flat.size,), "<f8", norms, self.bucket, s)

    def decode(self, ints: Sequence[np.ndarray], ctx: NormContext, count: int) -> np.ndarray:
        v = np.asarray(ints[0], np.float64)
        return v * per_value(ctx.norms, v.size, ctx.block) / ctx.levels
