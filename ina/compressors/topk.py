"""``topk``: top-k sparsification (Aji & Heafield 2017; Stich et al. 2018) with error feedback.

Keeps the ``k = ceil(ratio * n)`` values of largest magnitude (``argpartition``, linear time);
what is left goes into the residual (``residual`` memory). Supports differ per worker, so the
switch aggregates through the lossless union path (`ina.compressors.sparse`): OR of bitmaps,
then SUM of int32 values at the union's positions.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ina.compressors.base import register
from ina.compressors.sparse import UnionSparsifier, check_ratio, kept


@register("topk")
class TopK(UnionSparsifier):
    """The ``ratio`` share of values of largest magnitude."""

    summary = "largest |x|, union path (OR bitmap, SUM values)"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        ratio: float = 0.01,
        coding: str = "sketch",
    ) -> None:
        super().__init__(num_workers, worker, seed, coding)
        check_ratio(self.name, ratio)
        self.ratio = ratio

    def select(self, flat: np.ndarray, key: Hashable, step: int) -> np.ndarray:
        n = flat.size
        k = kept(n, self.ratio)
        if k >= n:
            return np.arange(n, dtype=np.int64)
        idx = np.argpartition(np.abs(flat), n - k)[n - k :]
        idx.sort()
        return idx.astype(np.int64, copy=False)
