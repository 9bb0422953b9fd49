"""Seeded packet loss, duplication and reordering on the switch model's ports.

A test (or a user studying robustness) attaches an `Impairment` to the `SwitchServer`; it
acts on every batch of datagrams received and sent, the way a lossy network between the
workers and the switch would. Delay and bandwidth are emulated elsewhere (`ina.netem`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Impairment:
    """Drop with probability ``loss``, send twice with ``dup``, shuffle a batch with
    ``reorder`` (probability per batch), each direction independently."""

    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    seed: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("loss", "dup", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1]")
        self.rng = np.random.default_rng(self.seed)

    @property
    def active(self) -> bool:
        return bool(self.loss or self.dup or self.reorder)

    def apply(self, rows: np.ndarray) -> np.ndarray:
        """The row indices that get through, in the order they arrive (may repeat)."""
        n = rows.size
        if n == 0:
            return rows
        keep = rows[self.rng.random(n) >= self.loss] if self.loss else rows
        self.dropped += n - keep.size
        if self.dup and keep.size:
            twice = keep[self.rng.random(keep.size) < self.dup]
            self.duplicated += twice.size
            keep = np.concatenate([keep, twice])
        if self.reorder and keep.size > 1 and self.rng.random() < self.reorder:
            keep = self.rng.permutation(keep)
            self.reordered += 1
        return keep
