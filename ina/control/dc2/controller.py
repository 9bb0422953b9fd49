"""`DC2Controller`: the DC2 state of one worker (monitor + control law + decision log).

Shaped like a PyTorch DDP comm-hook state: a small object with its fields grouped as
hyperparameters, internal state and stats, driven by the worker transport and the training
loop, and testable without a network.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ina.control.dc2.laws import ControlLaw, index_to_density, level_to_index, make_law
from ina.control.dc2.monitor import DelayMonitor

NO_AGREED_INDEX = -1  # Decision.agreed_index when the caller did not report the agreed level


@dataclass(frozen=True)
class Decision:
    """One row of the decision log: what the controller saw and chose at one step."""

    time: float
    samples: int
    base_rtt: float
    srtt: float
    rttvar: float
    p95: float
    trend: float
    queueing_delay: float
    round_min: float  # the step's chunks: min and 95th percentile RTT (own queue: the spread)
    round_p95: float
    round_stream: float  # the time the step's results streamed in back to back
    density: float  # the law's density (continuous)
    index: int  # its ladder rung: what this worker puts in the ``level`` field
    agreed_index: int  # the MAX over workers the switch returned, or NO_AGREED_INDEX


class DC2Controller:
    """Delay-aware compression control on one worker.

    Each training step:

    1. The transport calls `observe` with the RTTs of the chunks completed since the last call
       (never-retransmitted chunks only; flagged ones are ignored anyway).
    2. The training loop calls `step`, which snapshots the monitor (its round: the samples
       since the previous step), asks the law for a density
       (during warm-up, the law's initial density: 1.0, dense, by default) and returns its
       ladder index; the decision is logged.
    3. The worker puts the index in the header's ``level`` field; the switch MAX-combines it and
       every worker sparsifies with ``index_to_density(agreed)``. Passing ``agreed_index`` to
       `step` logs it and tells the law which level the next round runs at (without it, the
       worker's own proposal of one decision back: the levels agree when the workers do);
       each law steers on its own worker's delays.

    Args:
        law: a `ControlLaw`, or a registry name (``fixed``, ``aimd``, ``target``).
        monitor: the delay monitor (default: `DelayMonitor()` with its defaults).
        warmup_samples: accepted RTT samples needed before the law is consulted (the base RTT
            and srtt of a handful of samples are not worth acting on).
        **law_params: parameters of the law when ``law`` is a name.

    Example::

        dc2 = DC2Controller("target", target_ratio=1.0)
        dc2.observe(rtts, now=t)                 # per batch of completed chunks
        level = dc2.step(now=t)                  # -> header.level
        density = index_to_density(agreed_level) # what to sparsify with
        dc2.write_csv("dc2_worker0.csv")
    """

    def __init__(
        self,
        law: ControlLaw | str = "aimd",
        monitor: DelayMonitor | None = None,
        warmup_samples: int = 16,
        **law_params: float,
    ) -> None:
        if isinstance(law, str):
            law = make_law(law, **law_params)
        elif law_params:
            raise ValueError("law parameters are only accepted with a law name")
        if warmup_samples < 0:
            raise ValueError(f"warmup_samples must be >= 0, got {warmup_samples}")
        # Hyperparameters.
        self.law = law
        self.monitor = monitor if monitor is not None else DelayMonitor()
        self.warmup_samples = warmup_samples
        # Internal state.
        self.density = law.density
        self.index = level_to_index(self.density)
        self._round_start = 0  # monitor samples at the last decision: a round is one step
        # The ladder index the next round runs at, and this worker's previous proposal (the
        # next round's level when the caller does not report the agreed one: a proposal
        # travels with the next call and the switch's MAX applies to the one after).
        self._round_index = self._proposed = self.index
        # Stats.
        self.log: list[Decision] = []

    def observe(
        self,
        rtt: float | np.ndarray,
        now: float | np.ndarray,
        retransmitted: bool | np.ndarray = False,
    ) -> int:
        """Feed chunk RTTs (seconds) to the monitor; returns how many were accepted."""
        return self.monitor.add(rtt, now, retransmitted)

    def step(self, now: float | None = None, agreed_index: int | None = None) -> int:
        """Decide the level for the next step; returns this worker's ladder index."""
        stats = self.monitor.snapshot(now, since=self._round_start)
        self._round_start = stats.samples
        if stats.samples >= self.warmup_samples:
            self.density = self.law.next_level(stats, index_to_density(self._round_index))
        self.index = level_to_index(self.density)
        self._round_index = self._proposed if agreed_index is None else agreed_index
        self._proposed = self.index
        self.log.append(
            Decision(
                time=stats.time,
                samples=stats.samples,
                base_rtt=stats.base_rtt,
                srtt=stats.srtt,
                rttvar=stats.rttvar,
                p95=stats.p95,
                trend=stats.trend,
                queueing_delay=stats.queueing_delay,
                round_min=stats.round_min,
                round_p95=stats.round_p95,
                round_stream=stats.round_stream,
                density=self.density,
                index=self.index,
                agreed_index=NO_AGREED_INDEX if agreed_index is None else agreed_index,
            )
        )
        return self.index

    @property
    def ladder_density(self) -> float:
        """The density of this worker's current ladder index (what it asks the others for)."""
        return index_to_density(self.index)

    def write_csv(self, path: str | Path) -> None:
        """Write the decision log as CSV, one row per step, header from `Decision`'s fields."""
        names = [f.name for f in dataclasses.fields(Decision)]
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(names)
            writer.writerows(dataclasses.astuple(d) for d in self.log)  # NaN -> "nan"
