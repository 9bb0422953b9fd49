"""Timing-only steps hold no gradients (issue 47): the memory of a timing-only step does not
grow with the model (`ina.host.repeated`: packets made as they go out, sums not kept)."""

from __future__ import annotations

import tracemalloc

from ina.sim.network import NetworkSpec
from ina.sim.step import StepShape, simulate


def step_peak(values: int) -> int:
    """Peak bytes that numpy and Python allocated in a timing-only step of 1,024 workers
    whose one bucket has ``values`` values."""
    shape = StepShape(1e-3, 2e-3, 1e-4, buckets=(values,), ready_s=(2e-3,))
    spec = NetworkSpec(workers=1024, timing_only=True, lanes=1024, pool_size=64)
    tracemalloc.start()
    try:
        r = simulate(shape, spec, steps=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r["simulated_workers"] == 1
    return peak


def test_a_timing_only_steps_memory_does_not_grow_with_the_model():
    small, large = 1 << 21, 1 << 24  # 8 MB and 64 MB of float32 gradient
    grown = step_peak(large) - step_peak(small)
    # the arrays would add 4 bytes of gradient per value, and as many again of lanes and
    # sums; what grows is the per-chunk state (about 60 bytes per packet of 4 KiB)
    assert grown < 0.1 * 4 * (large - small), f"{grown:,} bytes more"
