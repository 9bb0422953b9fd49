"""A method's codec time, without the network: every worker's step is run once through an
in-process group (`ina.host.compression.LocalGroup`) with the switch's answers to worker 0
recorded, then worker 0's step alone is replayed against those answers and timed. What is
timed is the worker's own code (quantizing, packing, sketching, peeling), never the switch.
Used by `ina bench compressors` and by MergeComp's cost model (`ina.sim.mergecomp`)."""

from __future__ import annotations

import time

import numpy as np

from ina.compressors import COMPRESSORS, make_communicator, parse_args
from ina.host.compression import LocalGroup
from ina.host.rounds import Reduced, run_blocking


def parse_row(row: str) -> tuple[str, dict[str, str]]:
    """``NAME[:key=value...]`` -> name and arguments (ValueError in one line)."""
    name, *pairs = row.split(":")
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; known: {', '.join(sorted(COMPRESSORS))}")
    return name, parse_args(pairs)


def record(name: str, args: dict[str, str], xs: list[np.ndarray]):
    """All workers' step through `LocalGroup`: every worker's `Reduction`, the communicators,
    and the switch's answers to worker 0 (to replay in `replay_seconds`)."""
    workers = len(xs)
    comms = [make_communicator(name, workers, w, 1, args) for w in range(workers)]
    recorded: list[Reduced] = []

    def body(w, reduce):
        def recording(values, op, exp=0, level=0):
            out = reduce(values, op, exp, level)
            if w == 0:
                recorded.append(Reduced(np.asarray(out[0]).copy(), int(out[1]), int(out[2])))
            return out

        return comms[w].step(xs[w], "bucket", recording)

    reds = LocalGroup(workers, timeout=600).run(body)
    return reds, comms, recorded


def replay_seconds(
    name: str, args: dict[str, str], x: np.ndarray, workers: int, recorded, repeats: int
) -> tuple[list[float], list[float]]:
    """Worker 0's whole step on ``x`` against the switch's ``recorded`` answers, ``repeats``
    times: (CPU seconds, wall seconds) of each (the switch's own work is not timed)."""
    cpu, wall = [], []
    for _ in range(repeats):
        comm = make_communicator(name, workers, 0, 1, args)
        replay = iter(recorded)
        start, start_cpu = time.perf_counter(), time.process_time()
        run_blocking(comm.step_steps(x, "bucket"), lambda rnd, _it=replay: next(_it))
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return cpu, wall
