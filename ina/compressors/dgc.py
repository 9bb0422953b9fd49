"""``dgc``: Deep Gradient Compression (Lin et al., ICLR'18), aggregated on the union path.

Selection: the threshold for the top ``ratio`` share is estimated on a random sample of
``sample`` of the values (the top ``ratio`` of the sample), then moved by factors 1.3 / 0.7 (at
most 10 times) until between 0.7 and 1.3 times the target count pass (as DGC's and GRACE's
implementations do): cheaper than an exact top-k on large tensors. Error feedback is DGC's own
(the ``dgc`` memory): momentum correction (the momentum, not the gradient, is accumulated) and
momentum factor masking (momentum and accumulation cleared where a value was sent). Supports
differ per worker: the lossless union path (`ina.compressors.sparse`). Not here: DGC's local
gradient clipping and its warm-up schedule of sparsity (a training-loop concern).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from ina.compressors.base import register
from ina.compressors.sparse import UnionSparsifier, check_ratio, kept


@register("dgc")
class DGC(UnionSparsifier):
    """Sampled-threshold top ``ratio`` of the momentum-corrected accumulation."""

    memory = "dgc"
    summary = "sampled threshold of momentum-corrected accumulation, union path"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        ratio: float = 0.001,
        sample: float = 0.01,
        coding: str = "sketch",
    ) -> None:
        super().__init__(num_workers, worker, seed, coding)
        check_ratio(self.name, ratio)
        if not 0.0 < sample <= 1.0:
            raise ValueError(f"dgc: sample must be in (0, 1], got {sample}")
        self.ratio = ratio
        self.sample = sample

    def select(self, flat: np.ndarray, key: Hashable, step: int) -> np.ndarray:
        n = flat.size
        target = kept(n, self.ratio)
        if target >= n:
            return np.arange(n, dtype=np.int64)
        mag = np.abs(flat)
        m = min(n, max(1, math.ceil(self.sample * n)))
        sample = mag[self.rng(key, step).integers(0, n, m)]
        k = kept(m, self.ratio)
        thr = float(np.partition(sample, m - k)[m - k])
        mask = mag >= thr
        for _ in range(10):
            count = int(np.count_nonzero(mask))
            if count > 1.3 * target:
                thr *= 1.3
            elif count < 0.7 * target and thr > 0:
                thr *= 0.7
            else:
                break
            mask = mag >= thr
        return np.flatnonzero(mask).astype(np.int64)
