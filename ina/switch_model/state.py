"""Register and counter state of the switch, mirroring the P4 program's externs.

Register arrays are indexed by ``(pool_base + slot) * 2 + shadow`` like the P4 registers.
The scalar registers are Python lists (indexing a list is several times cheaper than a numpy
scalar on the per-packet path); the lane registers are one 2-D int32 array whose rows are
updated with whole-row numpy operations.
"""

from __future__ import annotations

import numpy as np

from ina.protocol import MAX_WORKERS, NUM_COUNTERS, Counter
from ina.switch_model.tables import MAX_JOBS


class SlotRegisters:
    """The per-slot registers: ``slot_seq``, ``slot_epoch``, ``slot_bitmap``, ``slot_count``,
    ``slot_exp``, ``slot_level``, ``slot_down`` (a leaf's copy holds its parent's result) and
    the lane registers ``slot_lanes`` (one P4 register per lane)."""

    SCALARS = ("seq", "epoch", "bitmap", "count", "exp", "level", "down")

    def __init__(self, pool_total: int, lanes: int) -> None:
        self.pool_total = pool_total
        self.lanes = lanes
        size = pool_total * 2
        for name in self.SCALARS:
            setattr(self, name, [0] * size)
        self.values = np.zeros((size, lanes), dtype=np.int32)

    def reset(self, first_slot: int = 0, num_slots: int | None = None) -> None:
        """Zero the registers of slots [first_slot, first_slot + num_slots)."""
        n = self.pool_total - first_slot if num_slots is None else num_slots
        lo, hi = first_slot * 2, (first_slot + n) * 2
        for name in self.SCALARS:
            getattr(self, name)[lo:hi] = [0] * (hi - lo)
        self.values[lo:hi] = 0

    def read(self, name: str, index: int) -> int | np.ndarray:
        """Value of one register cell, by its P4 name (``slot_lanes`` gives the row)."""
        if name == "slot_lanes":
            return self.values[index].copy()
        return getattr(self, name.removeprefix("slot_"))[index]


class RunRegisters:
    """The per-job registers of ``JoinRun``: ``job_epoch``, ``join_bitmap``, ``join_count``,
    on a leaf ``up_nonce`` and ``up_joined`` (indexed by job_index) and ``join_nonce`` (by
    ``job_index * MAX_WORKERS + worker_id``)."""

    NAMES = ("job_epoch", "join_bitmap", "join_count", "join_nonce", "up_nonce", "up_joined")

    def __init__(self) -> None:
        self.job_epoch = [0] * MAX_JOBS
        self.join_bitmap = [0] * MAX_JOBS
        self.join_count = [0] * MAX_JOBS
        self.join_nonce = [0] * (MAX_JOBS * MAX_WORKERS)
        self.up_nonce = [0] * MAX_JOBS
        self.up_joined = [0] * MAX_JOBS

    def reset_all(self) -> None:
        for name in self.NAMES:
            cells = getattr(self, name)
            cells[:] = [0] * len(cells)

    def reset(self, job_index: int) -> None:
        """A freshly installed job: no run yet (epoch 0), no join in progress."""
        self.job_epoch[job_index] = 0
        self.join_bitmap[job_index] = 0
        self.join_count[job_index] = 0
        self.up_nonce[job_index] = 0
        self.up_joined[job_index] = 0
        lo = job_index * MAX_WORKERS
        self.join_nonce[lo : lo + MAX_WORKERS] = [0] * MAX_WORKERS


class Counters:
    """``ina_stats`` (indexed by `Counter`) and ``worker_contributions``
    (indexed by ``job_index * MAX_WORKERS + worker_id``), packets and bytes each."""

    def __init__(self) -> None:
        self.stats = np.zeros((NUM_COUNTERS, 2), dtype=np.int64)
        self.workers = np.zeros((MAX_JOBS * MAX_WORKERS, 2), dtype=np.int64)

    def reset(self) -> None:
        self.stats[:] = 0
        self.workers[:] = 0

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Counter name -> (packets, bytes)."""
        return {c.name.lower(): (int(self.stats[c, 0]), int(self.stats[c, 1])) for c in Counter}
