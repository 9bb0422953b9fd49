"""Register and counter state of the switch, mirroring the P4 program's externs.

Register arrays are indexed by ``(pool_base + slot) * 2 + shadow`` like the P4 registers.
The scalar registers are Python lists (indexing a list is several times cheaper than a numpy
scalar on the per-packet path); the lane registers are one 2-D int32 array whose rows are
updated with whole-row numpy operations.

A sharded switch (`ina.switch_model.shards`) keeps the same registers in memory shared by its
shard processes: ``storage`` then hands out the cells, as int64 ``memoryview`` s for the
scalars (indexing gives Python ints, like a list) and numpy arrays over the shared buffer for
the lanes and counters. The pipeline uses either kind the same way.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, MutableSequence
from typing import ClassVar

import numpy as np

from ina.protocol import MAX_WORKERS, NUM_COUNTERS, Counter
from ina.switch_model.tables import MAX_JOBS

# Hands out register storage: ("cells", n) -> n zeroed int64 cells (indexable, sliceable),
# ("array", shape, dtype) -> a zeroed numpy array. None: private lists and arrays.
Storage = Callable[..., object]


def _cells(storage: Storage | None, n: int) -> MutableSequence[int]:
    return [0] * n if storage is None else storage("cells", n)


def _array(storage: Storage | None, shape: tuple[int, ...], dtype) -> np.ndarray:
    return np.zeros(shape, dtype) if storage is None else storage("array", shape, dtype)


def zero(cells: MutableSequence[int], lo: int, hi: int) -> None:
    """Zero ``cells[lo:hi]`` of a list or an int64 memoryview alike."""
    if hi > lo:
        cells[lo:hi] = (
            array("q", bytes(8 * (hi - lo))) if isinstance(cells, memoryview) else [0] * (hi - lo)
        )


class SlotRegisters:
    """The per-slot registers: ``slot_seq``, ``slot_epoch``, ``slot_bitmap``, ``slot_count``,
    ``slot_exp``, ``slot_level``, ``slot_down`` (a leaf's copy holds its parent's result) and
    the lane registers ``slot_lanes`` (one P4 register per lane)."""

    SCALARS = ("seq", "epoch", "bitmap", "count", "exp", "level", "down")

    def __init__(self, pool_total: int, lanes: int, storage: Storage | None = None) -> None:
        self.pool_total = pool_total
        self.lanes = lanes
        size = pool_total * 2
        for name in self.SCALARS:
            setattr(self, name, _cells(storage, size))
        self.values = _array(storage, (size, lanes), np.int32)

    def reset(self, first_slot: int = 0, num_slots: int | None = None) -> None:
        """Zero the registers of slots [first_slot, first_slot + num_slots)."""
        n = self.pool_total - first_slot if num_slots is None else num_slots
        lo, hi = first_slot * 2, (first_slot + n) * 2
        for name in self.SCALARS:
            zero(getattr(self, name), lo, hi)
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

    def __init__(self, storage: Storage | None = None) -> None:
        self.job_epoch = _cells(storage, MAX_JOBS)
        self.join_bitmap = _cells(storage, MAX_JOBS)
        self.join_count = _cells(storage, MAX_JOBS)
        self.join_nonce = _cells(storage, MAX_JOBS * MAX_WORKERS)
        self.up_nonce = _cells(storage, MAX_JOBS)
        self.up_joined = _cells(storage, MAX_JOBS)

    def reset_all(self) -> None:
        for name in self.NAMES:
            cells = getattr(self, name)
            zero(cells, 0, len(cells))

    def reset(self, job_index: int) -> None:
        """A freshly installed job: no run yet (epoch 0), no join in progress."""
        self.job_epoch[job_index] = 0
        self.join_bitmap[job_index] = 0
        self.join_count[job_index] = 0
        self.up_nonce[job_index] = 0
        self.up_joined[job_index] = 0
        lo = job_index * MAX_WORKERS
        zero(self.join_nonce, lo, lo + MAX_WORKERS)


class Counters:
    """``ina_stats`` (indexed by `Counter`) and ``worker_contributions``
    (indexed by ``job_index * MAX_WORKERS + worker_id``), packets and bytes each."""

    P4_NAMES: ClassVar[dict[str, str]] = {"ina_stats": "stats", "worker_contributions": "workers"}

    def __init__(self, storage: Storage | None = None) -> None:
        self.stats = _array(storage, (NUM_COUNTERS, 2), np.int64)
        self.workers = _array(storage, (MAX_JOBS * MAX_WORKERS, 2), np.int64)

    def reset(self) -> None:
        self.stats[:] = 0
        self.workers[:] = 0

    # The P4Runtime service reads and writes counters through these (a sharded switch sums
    # its shards' counters behind the same three methods).

    def size(self, p4_name: str) -> int:
        return getattr(self, self.P4_NAMES[p4_name]).shape[0]

    def read(self, p4_name: str, lo: int, hi: int) -> np.ndarray:
        """A copy of cells [lo, hi) of a P4 counter: rows of (packets, bytes)."""
        return getattr(self, self.P4_NAMES[p4_name])[lo:hi].copy()

    def write(self, p4_name: str, lo: int, hi: int, packets: int, nbytes: int) -> None:
        cells = getattr(self, self.P4_NAMES[p4_name])
        cells[lo:hi, 0] = packets
        cells[lo:hi, 1] = nbytes

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Counter name -> (packets, bytes)."""
        return {c.name.lower(): (int(self.stats[c, 0]), int(self.stats[c, 1])) for c in Counter}
