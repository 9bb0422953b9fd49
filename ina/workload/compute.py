"""How long a worker's computation takes in simulated time.

Two costs, each a small model with its parameters in its name:

**Compute per training step** (forward and backward of one worker's batch), `--compute`:

- ``measured[:SCALE]``: the wall time this host took for that worker's step, times SCALE
  (default 1). Honest about this host; use SCALE to stand in for a faster machine.
- ``fixed:TIME``: every step takes TIME (``5ms``), e.g. a GPU step time you measured.
- ``flops:DEVICE[:EFFICIENCY]``: the model's floating-point operations for the batch
  (counted once, by torch's FLOP counter, forward and backward) over the device's peak
  FP32 rate times EFFICIENCY (default 0.4). Peak rates are the vendors' data-sheet numbers
  for dense FP32 without tensor cores (`DEVICES`).

**Codec** (quantizing, sparsifying, sketching, peeling: the worker's own code between two
switch rounds), `--codec`:

- ``device:DEVICE[:PASSES]`` (default ``device:a100``): a memory-bound codec on that GPU,
  PASSES (default 4: read the gradient, write the code; read the sum, write the gradient)
  trips of the float32 gradient through the device's memory at its data-sheet bandwidth
  (`ina.workload.devices`). A floor: methods that sort or select (top-k, DGC) or factor
  (PowerSGD) cost more; give their measured throughput instead;
- ``measured[:SCALE]``: the wall time that code took on this host, times SCALE. Host
  dependent: two runs differ, and the run's summary says so;
- ``none``: free;
- ``RATE`` (``30GB/s``): bytes of float32 gradient per second, encode and decode together,
  charged once per allreduce call (e.g. a GPU codec's measured throughput).

The defaults (``--compute flops:a100``, ``--codec device:a100``) are models, so that a run
gives the same simulated times on every host; ``measured`` is there to ask for this host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ina import units
from ina.workload.devices import DEVICES as PROFILES

# Peak dense FP32 (no tensor cores), FLOP/s: the device profiles' data-sheet figures
# (`ina.workload.devices`), and a many-core server CPU with AVX-512, roughly.
DEVICES = {name: d.peak("fp32") for name, d in PROFILES.items()} | {"cpu": 1e12}

DEFAULT_COMPUTE = "flops:a100"
DEFAULT_CODEC = "device:a100"
CODEC_PASSES = 4  # memory trips of the gradient per allreduce call (see the docstring)


@dataclass(frozen=True)
class ComputeModel:
    """Seconds of one training step on one worker (see the module docstring)."""

    kind: str  # measured, fixed, flops
    scale: float = 1.0  # measured: factor; flops: efficiency
    seconds: float = 0.0  # fixed
    device: str = ""  # flops

    def step_time(self, wall: float, flops: float = 0.0) -> float:
        if self.kind == "measured":
            return wall * self.scale
        if self.kind == "fixed":
            return self.seconds
        return flops / (DEVICES[self.device] * self.scale)

    @property
    def needs_flops(self) -> bool:
        return self.kind == "flops"

    @property
    def host_dependent(self) -> bool:
        return self.kind == "measured"


def parse_compute(text: str) -> ComputeModel:
    """``measured[:SCALE]``, ``fixed:TIME`` or ``flops:DEVICE[:EFFICIENCY]``."""
    name, _, rest = text.partition(":")
    try:
        if name == "measured":
            scale = float(rest) if rest else 1.0
            if not scale >= 0:
                raise ValueError
            return ComputeModel("measured", scale=scale)
        if name == "fixed":
            return ComputeModel("fixed", seconds=units.seconds(rest, "fixed compute time"))
        if name == "flops":
            device, _, eff = rest.partition(":")
            if device not in DEVICES:
                raise ValueError(f"unknown device {device!r}; known: {sorted(DEVICES)}")
            efficiency = float(eff) if eff else 0.4
            if not 0 < efficiency <= 1:
                raise ValueError("the efficiency must be in (0, 1]")
            return ComputeModel("flops", scale=efficiency, device=device)
    except ValueError as e:
        raise ValueError(f"--compute {text!r}: {e or 'bad number'}") from None
    raise ValueError(
        f"--compute {text!r}: use measured[:SCALE], fixed:TIME or flops:DEVICE[:EFFICIENCY]"
    )


@dataclass(frozen=True)
class CodecModel:
    """Simulated seconds of the codec: from its measured wall time, or from a throughput."""

    scale: float = 1.0  # measured: factor on the wall time (0: none)
    bytes_per_second: float = 0.0  # > 0: a throughput instead
    call_s: float = 0.0  # with a throughput: a fixed cost per call (the codec's launches)

    def from_wall(self) -> Callable[[float], float]:
        """What `ina.sim.nodes.WorkerNode` charges for the program's own wall time."""
        scale = 0.0 if self.bytes_per_second else self.scale
        return lambda wall: wall * scale

    @property
    def host_dependent(self) -> bool:
        return not self.bytes_per_second and self.scale > 0

    def per_call(self, values: int) -> float:
        """Extra seconds charged per allreduce of ``values`` float32 (throughput model), and
        the fixed cost of each call (its kernel launches) where one is stated."""
        if not self.bytes_per_second:
            return 0.0
        return 4 * values / self.bytes_per_second + self.call_s


def parse_codec(text: str) -> CodecModel:
    """``device:DEVICE[:PASSES]``, ``measured[:SCALE]``, ``none`` or a throughput such as
    ``30GB/s``; a throughput or a device may add a fixed time per call, ``30GB/s+25us`` (the
    codec's kernel launches: what a per-tensor path pays per tensor and MergeComp's groups
    save)."""
    text, plus, call = text.partition("+")
    if plus:
        if text.split(":")[0] in ("none", "measured"):
            raise ValueError(f"--codec {text}+{call}: a time per call goes with a throughput")
        model = parse_codec(text)
        return replace(model, call_s=units.seconds(call, "--codec's time per call"))
    name, _, rest = text.partition(":")
    if name == "none":
        return CodecModel(scale=0.0)
    if name == "device":
        device, _, passes = rest.partition(":")
        if device not in PROFILES:
            raise ValueError(
                f"--codec {text!r}: unknown device {device!r}; known: {sorted(PROFILES)}"
            )
        try:
            n = float(passes) if passes else CODEC_PASSES
            if not n > 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"--codec {text!r}: the passes must be a number > 0") from None
        return CodecModel(bytes_per_second=PROFILES[device].memory_bps / n)
    if name == "measured":
        try:
            scale = float(rest) if rest else 1.0
            if not scale >= 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"--codec {text!r}: the scale must be a number >= 0") from None
        return CodecModel(scale=scale)
    try:
        rate = units.size(text.removesuffix("/s"), "codec throughput")
    except ValueError:
        raise ValueError(
            f"--codec {text!r}: use device:DEVICE[:PASSES], measured[:SCALE], none or a "
            "throughput like 30GB/s"
        ) from None
    if not rate > 0:
        raise ValueError(f"--codec {text!r}: the throughput must be > 0")
    return CodecModel(bytes_per_second=rate)


def step_flops(model, x, y, loss_fn) -> float:
    """Floating-point operations of one forward and backward pass on the batch ``x``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def calibrate_step(model, x, y, loss_fn, repeats: int = 7) -> float:
    """Median wall seconds of a forward and backward pass on one batch (after a warm-up)."""
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        loss_fn(model(x), y).backward()
        times.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    return float(np.median(times[1:]))
