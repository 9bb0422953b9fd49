"""``randomk``: random-k sparsification (Stich et al., NeurIPS'18) with a seed shared by all
workers, so that the switch adds a dense vector of k values, no union round.

Positions are drawn without replacement from a generator seeded by the job's seed, the bucket
key and the step (the same on every worker), so all workers keep the *same* ``k = ceil(ratio *
n)`` positions: their values are summed as a dense int32 vector of k lanes with agreed block
exponents (`ina.compressors.summed.dense_steps`): ``32 k / n`` bits per value. What was not
sent is error feedback (``residual`` memory). GRACE reseeds from the tensor name and a step
counter too, but draws with replacement and aggregates through an allgather.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ina.compressors.base import Aggregation, Compressor, Outcome, context, float_input, register
from ina.compressors.sparse import Sparse, SparseContext, check_ratio, kept
from ina.compressors.summed import dense_steps
from ina.host.rounds import Steps


@register("randomk")
class RandomK(Compressor):
    """``ratio`` of the positions, the same on every worker, summed densely."""

    aggregation = Aggregation.SUM
    memory = "residual"
    summary = "shared-seed random positions, dense SUM of k lanes"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        ratio: float = 0.01,
        block: int = 256,
    ) -> None:
        super().__init__(num_workers, worker, seed)
        check_ratio(self.name, ratio)
        if block < 1:
            raise ValueError(f"randomk: block must be >= 1, got {block}")
        self.ratio = ratio
        self.block = block

    def select(self, n: int, key: Hashable, step: int) -> np.ndarray:
        """The positions every worker keeps at this step of this bucket."""
        k = kept(n, self.ratio)
        if k >= n:
            return np.arange(n, dtype=np.int64)
        idx = self.rng(key, step, shared=True).choice(n, size=k, replace=False, shuffle=False)
        idx.sort()
        return idx.astype(np.int64, copy=False)

    def compress(self, tensor, key: Hashable = "") -> tuple[Sparse, SparseContext]:
        _, flat = float_input(tensor)
        idx = self.select(flat.size, key, self._next_step(key))
        x = np.asarray(tensor).reshape(-1)
        return Sparse(idx, x[idx].copy()), SparseContext(**context(tensor), numel=flat.size)

    def decompress(self, payload: Sparse, ctx: SparseContext) -> np.ndarray:
        out = np.zeros(ctx.numel, np.dtype(ctx.dtype))
        out[payload.indices] = payload.values
        return out.reshape(ctx.shape)

    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        idx = self.select(flat.size, key, step)
        total_k, sent_k, q, sums = yield from dense_steps(flat[idx], self.block, self.num_workers)
        total = np.zeros(flat.size)
        sent = np.zeros(flat.size)
        total[idx] = total_k
        sent[idx] = sent_k
        return Outcome(total, sent, (q,), (sums,))
