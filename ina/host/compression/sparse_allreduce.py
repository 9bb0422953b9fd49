"""Compressed allreduce of a float bucket, on the device where the bucket lives.

The worker side of compressed mode in one place (docs/compression.md), for numpy arrays and
torch tensors on any device (`ina.host.arrays`). One call per bucket and worker:

1. add the bucket's residual (error feedback, `Memory`), keep the top-k (or random-k)
   entries (`SparsifyCompressor`);
2. round 1 (OR): the bitmap of the kept positions, built from their indices, with the
   exponent of the kept values in the header's MAX-combined ``exp`` and the proposed level in
   ``level``: every worker gets the union support, one agreed scale, the agreed level;
3. quantize the kept values with the agreed scale (`ina.host.quantize`, one block);
4. round 2 (SUM): the int32 values on the union, count-sketched (or plain lanes), peeled,
   undecoded positions repaired (`HomomorphicAllreduce`);
5. decode the exact int32 sums to float64; the residual keeps what this worker's encoding
   did not carry (the rounding included).

Where the arrays live: a CUDA tensor stays on its GPU throughout; only the lanes of each
round (bitmap words, sketch cells, repair values: int32, a few percent of the bucket) go to
the host for the transport, and the switch's answers come back. A torch CPU tensor is
processed as a numpy view of its memory (`ina.host.arrays.host_or_device`: numpy is the
faster of the two on a CPU), and the results are handed back as torch tensors.

Written as a generator of rounds (`ina.host.rounds`), so any driver runs it::

    codec = SparseAllreduce(num_workers=N, worker_id=w)
    result = run_blocking(codec.allreduce_steps(grad, density=0.05, key="b0"), round_fn)
    mean = result.sums / N            # float64, grad's library and device
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ina.host import quantize
from ina.host.arrays import Array, as_array, host_or_device, is_torch, ops
from ina.host.compression.homomorphic import (
    AllreduceResult,
    HomomorphicAllreduce,
    HomomorphicConfig,
)
from ina.host.compression.sparsify import Memory, SparsifyCompressor, num_kept
from ina.host.rounds import Steps


@dataclass(frozen=True)
class SparseAllreduceResult:
    """What one worker gets from one compressed allreduce of a bucket."""

    sums: Array  # float64 sum over workers, the input's shape, library and device
    ints: Array  # this worker's int32 contribution (flat, zero off its kept entries)
    exp: int  # agreed biased exponent: the bucket's one scale (MAX over workers)
    level: int  # agreed level (MAX over the workers' proposals)
    reduced: AllreduceResult  # the int32 sums on the union, rounds, traffic, repairs

    @property
    def exponents(self) -> np.ndarray:
        """The agreed exponents as the dense path reports them: one block, the bucket."""
        return np.array([self.exp], np.int32)


@dataclass
class SparseAllreduce:
    """One worker's compressed allreduce of float buckets (module docstring).

    Every worker of a job must use the same ``sparsifier``, ``homomorphic`` config and
    densities, and call with the same keys in the same order.
    """

    # hyperparameters
    num_workers: int
    worker_id: int = 0
    sparsifier: str = "topk"
    homomorphic_config: HomomorphicConfig = field(default_factory=HomomorphicConfig)
    # internal state: residuals per bucket, one compressor per density (its step counters)
    memory: Memory = field(default_factory=Memory, init=False, repr=False)
    _compressors: dict[float, SparsifyCompressor] = field(
        default_factory=dict, init=False, repr=False
    )
    # stats: traffic, peeling failures, fallbacks (HomomorphicAllreduce.stats)
    homomorphic: HomomorphicAllreduce = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")
        self.homomorphic = HomomorphicAllreduce(self.homomorphic_config)

    def compressor(self, density: float) -> SparsifyCompressor:
        """The sparsifier at ``density`` (one per density: each counts its own steps)."""
        comp = self._compressors.get(density)
        if comp is None:
            comp = SparsifyCompressor(self.sparsifier, density, self.worker_id)
            self._compressors[density] = comp
        return comp

    def allreduce_steps(
        self, x: Array, density: float, key: object = None, level: int = 0
    ) -> Steps[SparseAllreduceResult]:
        """Rounds of the compressed allreduce of float ``x`` (any shape, not empty) keeping
        ``num_kept(x.size, density)`` entries plus the residual of bucket ``key``; ``level``
        is this worker's proposal for the header's MAX-combined level field."""
        x = as_array(x)
        flat = host_or_device(x.reshape(-1))
        xp = ops(flat)
        n = xp.size(flat)
        if not n:
            raise ValueError("an empty bucket has nothing to compress (send it dense)")
        num_kept(n, density)  # validates the density
        N = self.num_workers
        k = f"{key!r}:{n}"  # a bucket whose size changes starts a fresh residual
        compensated = self.memory.compensate(xp.astype(flat, xp.float64), k)
        sparse, _ = self.compressor(density).compress(compensated, k)
        kept = xp.size(sparse.values)
        # one scale for the whole bucket: the sketch mixes positions in its cells
        exp = int(quantize.block_exponents(sparse.values, kept)[0])
        support = yield from self.homomorphic.agree_indices_steps(sparse.indices, n, exp, level)
        agreed = np.array([support.exp], np.int32)
        ints = xp.zeros(n, xp.int32)
        xp.scatter(ints, sparse.indices, quantize.encode(sparse.values, agreed, kept, N))
        reduced = yield from self.homomorphic.reduce_values_steps(ints, support)
        sent = quantize.decode(ints, agreed, n, N)  # what this worker's encoding carried
        self.memory.update(k, compensated, sent)
        sums = quantize.decode(reduced.values, agreed, n, N)
        return SparseAllreduceResult(
            sums=_like(sums, x).reshape(x.shape),
            ints=_like(ints, x),
            exp=support.exp,
            level=support.level,
            reduced=reduced,
        )


def _like(a: Array, x: Array) -> Array:
    """``a`` in the library of ``x``: numpy results of a torch CPU input as tensors (views)."""
    if is_torch(x) and not is_torch(a):
        import torch

        return torch.from_numpy(a)
    return a
