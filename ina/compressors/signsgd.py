"""``signsgd``: signSGD with majority vote (Bernstein et al., ICML'18), the vote in the switch.

Each worker sends one bit per value, ``1`` for ``x >= 0`` (GRACE's convention), and the
aggregate is the sign of the sum of the workers' signs, the majority vote. The switch adds the
bits packed with headroom (`ina.compressors.packing`): the sum ``P`` counts the workers that
voted ``+1``, so the sum of signs is ``2P - N`` and the vote is its sign (a tie gives 0, where
GRACE gives +1). ``log2(N + 1)`` bits per value: 13 fields per lane for 4 workers (2.5 bits),
7 for 16 (4.6 bits). One SUM round, nothing to agree first. Memory: none.

The gradient this returns is the vote itself (in ``{-1, 0, 1}``); the learning rate scales it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import Aggregation, Context, Field, register
from ina.compressors.summed import SummedQuantizer


@dataclass(frozen=True)
class SignContext(Context):
    pass


@register("signsgd")
class SignSGD(SummedQuantizer):
    """One vote per value; the aggregate is the majority."""

    aggregation = Aggregation.SUM
    memory = "none"
    summary = "1-bit signs, majority vote = sign of the switch's count"

    def encode(self, flat, agreed, key: Hashable, step: int) -> tuple[list[Field], Context]:
        return [Field((flat >= 0).astype(np.int64), 0, 1)], SignContext((flat.size,), "<f8")

    def decode(self, ints: Sequence[np.ndarray], ctx: Context, count: int) -> np.ndarray:
        return 2.0 * np.asarray(ints[0], np.float64) - count  # sum of the +-1 signs

    def finish(self, total: np.ndarray) -> np.ndarray:
        return np.sign(total)  # the majority vote
