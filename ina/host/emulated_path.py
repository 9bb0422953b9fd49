"""A worker's emulated network path: delay, bandwidth and loss on both directions.

This kernel has no `tc netem`, so the worker transport itself holds packets back: every
packet it sends goes through the uplink emulator (`ina.netem.LinkEmulator`) and leaves the
socket at its release time; every packet it receives goes through the downlink emulator
and is seen by the transport only at its release time. Emulating at the worker keeps each
worker's link independent (one seed per direction per worker) and needs nothing on the
switch, so it works the same with the switch model and with BMv2.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from ina.netem import LinkEmulator, make_link


class EmulatedPath:
    """Uplink + downlink of one worker; the transport calls it around its socket."""

    def __init__(self, up: LinkEmulator, down: LinkEmulator) -> None:
        self.up = up
        self.down = down
        self._tie = itertools.count()  # keeps heap order FIFO among equal release times
        self._up: list[tuple[float, int, np.ndarray]] = []
        self._down: list[tuple[float, int, np.ndarray]] = []

    @classmethod
    def from_profile(cls, profile: str, seed: int, worker_id: int, **params) -> EmulatedPath:
        """Both directions of worker ``worker_id`` with independent seeded streams."""
        base = (seed * 1_000_003 + worker_id) * 2
        return cls(
            make_link(profile, seed=base, **params), make_link(profile, seed=base + 1, **params)
        )

    def next_event(self, now: float) -> float:
        """When something held back is due (inf if nothing is)."""
        t = np.inf
        if self._up:
            t = self._up[0][0]
        if self._down:
            t = min(t, self._down[0][0])
        return t

    def enqueue(self, now: float, tx: np.ndarray, rows: np.ndarray, transport) -> None:
        """Packets ``tx[rows]`` enter the uplink now."""
        release = self.up.admit_batch(np.full(rows.size, now), tx.shape[1])
        for r, t in zip(rows.tolist(), release.tolist(), strict=True):
            if t == t:  # NaN: lost on the link
                heapq.heappush(self._up, (t, next(self._tie), tx[r].copy()))
        self.flush(now, transport)

    def flush(self, now: float, transport) -> None:
        """Put on the wire every uplink packet whose release time has come."""
        ready = []
        while self._up and self._up[0][0] <= now:
            ready.append(heapq.heappop(self._up)[2])
        if ready:
            transport.send_now(np.stack(ready))

    def receive(
        self, now: float, rx: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Packets just received enter the downlink; returns those due now (rows, lengths)."""
        if lengths.size:
            release = self.down.admit_batch(np.full(lengths.size, now), lengths)
            for i, t in enumerate(release.tolist()):
                if t == t:
                    heapq.heappush(self._down, (t, next(self._tie), rx[i, : lengths[i]].copy()))
        ready = []
        while self._down and self._down[0][0] <= now:
            ready.append(heapq.heappop(self._down)[2])
        if not ready:
            return rx[:0], lengths[:0]
        width = max(r.size for r in ready)
        out = np.zeros((len(ready), max(width, rx.shape[1])), np.uint8)
        for i, r in enumerate(ready):
            out[i, : r.size] = r
        return out, np.array([r.size for r in ready], np.int64)
