"""``threshold``: send every value with ``|x| >= threshold`` (Strom, Interspeech'15; GRACE's
threshold-v), with error feedback (``residual`` memory).

How many values pass depends on the gradient, so supports (and sizes) differ per worker: the
switch aggregates through the lossless union path (`ina.compressors.sparse`). An empty
selection on every worker costs the OR round only. GRACE lowers the threshold to the tensor's
max so that something is always sent; here nothing is sent and the residual grows until it
passes.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ina.compressors.base import register
from ina.compressors.sparse import UnionSparsifier


@register("threshold")
class Threshold(UnionSparsifier):
    """Values of magnitude at least ``threshold``."""

    summary = "|x| >= threshold, union path"

    def __init__(
        self,
        num_workers: int = 1,
        worker: int = 0,
        seed: int = 0,
        *,
        threshold: float = 0.01,
        coding: str = "sketch",
    ) -> None:
        super().__init__(num_workers, worker, seed, coding)
        if not threshold > 0:
            raise ValueError(f"threshold: threshold must be > 0, got {threshold}")
        self.threshold = threshold

    def select(self, flat: np.ndarray, key: Hashable, step: int) -> np.ndarray:
        return np.flatnonzero(np.abs(flat) >= self.threshold).astype(np.int64)
