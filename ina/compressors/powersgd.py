"""``powersgd``: PowerSGD (Vogels et al., NeurIPS'19): rank-r power iteration, both factors
summed in the switch.

A gradient viewed as an ``n x m`` matrix ``M`` (a 2-D or higher tensor as ``(shape[0], -1)``;
a flat bucket as the most nearly square matrix, zero-padded) is approximated as ``P Q^T``:

1. ``P_w = M_w Q`` with ``Q`` shared by all workers (warm start: last step's aggregated ``Q``;
   at the first step random normal from the shared seed); the switch sums the ``P_w``;
2. every worker orthonormalizes the same sum to ``P^`` (Gram-Schmidt, deterministic);
3. ``Q_w = M_w^T P^``; the switch sums the ``Q_w``;
4. the mean is ``P^ (sum Q_w)^T / N``; this worker's contribution is ``P^ Q_w^T`` and its error
   feedback keeps ``M_w - P^ Q_w^T`` (``residual`` memory, as in the paper).

Both factors are linear in the gradient, so both rounds are switch sums, each as int32 fixed
point with block exponents agreed by MAX (`ina.compressors.summed.dense_steps`): four rounds,
``32 r (n + m)`` bits per ``n m`` values plus exponents. A matrix too small to gain (``r (n + m)
>= n m``) goes dense. All workers must compute the same floats (same platform), as
PowerSGD's shared ``P^`` assumes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ina.compressors.base import (
    Aggregation,
    Compressor,
    Context,
    Outcome,
    context,
    float_input,
    key_hash,
    register,
    restore,
)
from ina.compressors.summed import dense_steps
from ina.host.rounds import Steps


@dataclass(frozen=True)
class LowRankContext(Context):
    rows: int
    cols: int


@dataclass(frozen=True)
class LowRank:
    """The payload: orthonormal ``p`` (rows x r) and ``q`` (cols x r); the tensor is ``p q^T``."""

    p: np.ndarray
    q: np.ndarray


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The matrix a tensor is viewed as: ``(shape[0], rest)``, or nearly square if flat."""
    n = math.prod(shape)
    if len(shape) >= 2:
        return shape[0], n // shape[0] if shape[0] else 0
    rows = max(1, math.isqrt(max(n - 1, 0)) + 1) if n else 0
    return rows, -(-n // rows) if rows else 0


def orthonormalize(a: np.ndarray) -> np.ndarray:
    """Columns of ``a`` made orthonormal in order (Gram-Schmidt); a column with nothing left
    becomes zero."""
    a = np.array(a, np.float64, copy=True)
    for i in range(a.shape[1]):
        col = a[:, i]
        if i:
            col -= a[:, :i] @ (a[:, :i].T @ col)
        norm = float(np.linalg.norm(col))
        a[:, i] = col / norm if norm > 1e-30 else 0.0
    return a


@register("powersgd")
class PowerSGD(Compressor):
    """Rank-``rank`` power iteration with warm start; both factors summed in the switch."""

    aggregation = Aggregation.SUM
    memory = "residual"
    summary = "rank-r factors P then Q, each an int32 sum (4 rounds)"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        rank: int = 1,
        block: int = 256,
    ) -> None:
        super().__init__(num_workers, worker, seed)
        if rank < 1:
            raise ValueError(f"powersgd: rank must be >= 1, got {rank}")
        if block < 1:
            raise ValueError(f"powersgd: block must be >= 1, got {block}")
        self.rank = rank
        self.block = block
        # internal state: last aggregated Q per bucket (the warm start, same on every worker)
        self._q: dict[Hashable, np.ndarray] = {}

    def _matrix(self, flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        rows, cols = matrix_shape(shape)
        padded = np.zeros(rows * cols)
        padded[: flat.size] = flat
        return padded.reshape(rows, cols)

    def _start(self, key: Hashable, cols: int, r: int) -> np.ndarray:
        q = self._q.get(key)
        if q is None or q.shape != (cols, r):
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, key_hash(key), cols, r])
            q = rng.standard_normal((cols, r))
        return q

    def compress(self, tensor, key: Hashable = "") -> tuple[LowRank, LowRankContext]:
        """One worker's rank-r approximation (no switch): ``P^ = orth(M Q)``, ``Q = M^T P^``."""
        x, flat = float_input(tensor)
        self._next_step(key)
        m = self._matrix(flat, x.shape)
        r = min(self.rank, *m.shape) if m.size else 0
        p = orthonormalize(m @ self._start(key, m.shape[1], r))
        ctx = LowRankContext(**context(tensor), rows=m.shape[0], cols=m.shape[1])
        return LowRank(p, m.T @ p), ctx

    def decompress(self, payload: LowRank, ctx: LowRankContext) -> np.ndarray:
        n = math.prod(ctx.shape)
        return restore((payload.p @ payload.q.T).reshape(-1)[:n], ctx)

    def _reduce_steps(
        self, flat: np.ndarray, key: Hashable, step: int, shape: tuple[int, ...]
    ) -> Steps[Outcome]:
        N = self.num_workers
        m = self._matrix(flat, shape)
        rows, cols = m.shape
        r = min(self.rank, rows, cols)
        if r * (rows + cols) >= rows * cols:  # no gain: dense int32
            total, sent, q, sums = yield from dense_steps(flat, self.block, N)
            return Outcome(total, sent, (q,), (sums,))
        p_sum, _, p_ints, p_sums = yield from dense_steps(
            m @ self._start(key, cols, r), self.block, N
        )
        p_hat = orthonormalize(p_sum.reshape(rows, r))
        q_sum, q_own, q_ints, q_sums = yield from dense_steps(m.T @ p_hat, self.block, N)
        q_sum, q_own = q_sum.reshape(cols, r), q_own.reshape(cols, r)
        self._q[key] = q_sum / N
        n = flat.size
        total = (p_hat @ q_sum.T).reshape(-1)[:n]
        sent = (p_hat @ q_own.T).reshape(-1)[:n]
        return Outcome(total, sent, (p_ints, q_ints), (p_sums, q_sums))
