"""All-reduce without in-network aggregation, over the same simulated links: the baselines
INA is compared with.

- **ring** (reduce-scatter then all-gather, as in NCCL/gloo): 2(N-1) steps; in each, every
  worker sends one N-th of the tensor to its neighbour and waits for its other neighbour's
  before the next step. Each worker sends 2(N-1)/N of the tensor; INA sends it once.
- **halving-doubling** (recursive halving reduce-scatter, recursive doubling all-gather,
  Rabenseifner): 2 log2(N) steps of n/2, n/4, ... values: the same bytes as the ring, far
  fewer latencies; N must be a power of two.

Both run on the network of a `NetworkSpec`: packets of the same size as INA's (the same
header and lanes), through the worker's uplink, the switch (as a forwarder: its processing
queue and latency, every worker's packets through it) and the receiver's downlink, each a
`ina.netem.LinkEmulator`. Every worker does the same at the same time (the links must be
alike and deterministic, as for timing-only INA), so one worker's packets give every
worker's times. The baselines are idealized: no loss, no transport windows (a step's
packets all leave at once), no reduction cost: a lower bound on a real ring's time.
"""

from __future__ import annotations

import math

import numpy as np

from ina.netem import LinkEmulator
from ina.protocol import FRAME_OVERHEAD, packet_bytes
from ina.sim.network import NetworkSpec, link_emulator


def _steps(algorithm: str, workers: int, n: int) -> list[int]:
    """Values each worker sends in each step."""
    if workers < 2:
        return []
    if algorithm == "ring":
        segment = -(-n // workers)
        return [segment] * (2 * (workers - 1))
    if algorithm == "halving-doubling":
        if workers & (workers - 1):
            raise ValueError(f"halving-doubling needs a power-of-two worker count, got {workers}")
        halves = [-(-n // 2**k) for k in range(1, int(math.log2(workers)) + 1)]
        return halves + halves[::-1]
    raise ValueError(f"unknown all-reduce {algorithm!r}: ring or halving-doubling")


def allreduce_time(spec: NetworkSpec, n: int, algorithm: str = "ring") -> dict:
    """Simulated seconds of one all-reduce of ``n`` float32 values per worker."""
    lanes = spec.lanes
    frame = packet_bytes(lanes) + FRAME_OVERHEAD
    seed = np.random.SeedSequence(spec.seed)
    up = link_emulator(spec.up, seed, spec.seed)
    down = link_emulator(spec.down, seed, spec.seed)
    # every worker's packets cross the switch's processing queue: each of this worker's
    # counts N times (as in timing-only INA, ina.sim.network.build)
    switch = LinkEmulator(rate_bps=spec.switch.rate_bps)
    now = 0.0
    sent = 0
    for values in _steps(algorithm, spec.workers, n):
        packets = -(-values // lanes)
        sizes = np.full(packets, frame, np.int64)
        at_switch = up.admit_batch(np.full(packets, now), sizes)
        forwarded = switch.admit_batch(at_switch, sizes * spec.workers) + spec.switch.latency_s
        arrived = down.admit_batch(forwarded, sizes)
        now = float(arrived[-1])
        sent += packets * frame
    return {"algorithm": algorithm, "seconds": now, "bytes_sent_per_worker": sent}


def bound(algorithm: str, workers: int) -> float:
    """The bandwidth-bound speed-up of INA over ``algorithm``: the ratio of the bytes each
    worker sends (2(N-1)/N of the tensor against once)."""
    _steps(algorithm, workers, 1)  # checks the algorithm and the worker count
    return 2 * (workers - 1) / workers
