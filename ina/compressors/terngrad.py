"""``terngrad``: TernGrad (Wen et al., NeurIPS'17) with its shared scaler, summed in the switch.

Each worker clips its gradient at ``clip`` standard deviations (the paper's 2.5; 0: no
clipping), takes ``s_w = max |g|`` per block (``block=0``: the whole tensor, the paper's per
layer), and sends ternary ``b`` in ``{-1, 0, 1}`` with ``P(b = sign g) = |g| / s``: unbiased for
the clipped gradient. The paper's *scaler sharing* makes every worker use ``s = max_w s_w``,
so that the aggregate is an integer sum times ``s``: here the MAX round of the switch agrees
on ``s`` (float32 bit patterns), then the ternary integers are summed packed
(`ina.compressors.packing`): ``log2(2N + 1)`` bits per value (3.2 bits for 4 workers, 5.3 for
16). Memory: none (unbiased).
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
class ScaleContext(Context):
    scales: np.ndarray  # agreed scale per block
    block: int


@register("terngrad")
class TernGrad(SummedQuantizer):
    """Ternary stochastic rounding with a scale shared by all workers (MAX)."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "ternary {-1,0,1} of a scaler shared by MAX"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        clip: float = 2.5,
        block: int = 0,
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if clip < 0:
            raise ValueError(f"terngrad: clip must be >= 0 (0: off), got {clip}")
        if block < 0:
            raise ValueError(f"terngrad: block must be >= 0 (0: whole tensor), got {block}")
        self.clip = clip
        self.block = block

    def _clipped(self, flat: np.ndarray) -> np.ndarray:
        if not self.clip or not flat.size:
            return flat
        c = self.clip * float(np.std(flat))
        return np.clip(flat, -c, c) if c > 0 else flat

    def statistics(self, flat: np.ndarray) -> np.ndarray:
        return float_bits(block_reduce(np.abs(self._clipped(flat)), self.block, np.max))

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        g = self._clipped(flat)
        scales = bits_float(agreed)
        inv = per_value(1.0 / np.where(scales > 0, scales, 1.0), g.size, self.block)
        p = np.abs(g) * inv  # P(|b| = 1), at most 1: |g| <= own max <= agreed scale
        q = np.copysign(self.rng(key, step).random(g.size) < p, g).astype(np.int64)
        return [Field(q, -1, 1)], ScaleContext((g.size,), "<f8", scales, self.block)

    def decode(self, ints: Sequence[np.ndarray], ctx: ScaleContext, count: int) -> np.ndarray:
        v = np.asarray(ints[0], np.float64)
        return v * per_value(ctx.scales, v.size, ctx.block)
