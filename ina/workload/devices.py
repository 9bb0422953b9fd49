"""Device profiles: the peak rates a layer's time is computed from, from the vendors' data
sheets, with the sheet named beside each number.

A layer's time on a device is a roofline: its FLOPs over the peak rate of the step's
precision, or its bytes over the memory bandwidth, whichever is larger, divided by an
efficiency the user sets (the share of peak that real kernels reach; 1 is the roofline
itself). Peaks are dense (the sheets' "with sparsity" figures halved); 16-bit and TF32
precisions run on tensor cores, FP32 on the CUDA cores without them.

| device | FP32 | TF32 (tensor) | BF16/FP16 (tensor) | memory | sheet |
|---|---|---|---|---|---|
| V100 SXM2 | 15.7 | - | 125 (FP16 only) | 900 GB/s | NVIDIA Tesla V100 data sheet |
| A100 SXM 80GB | 19.5 | 156 | 312 | 2,039 GB/s | NVIDIA A100 data sheet |
| H100 SXM | 67 | 494.5 | 989.5 | 3,350 GB/s | NVIDIA H100 data sheet |
| H200 SXM | 67 | 494.5 | 989.5 | 4,800 GB/s | NVIDIA H200 data sheet |
| B200 (HGX, per GPU) | 75 | 1,100 | 2,250 | 8,000 GB/s | NVIDIA HGX B200 data sheet, 8-GPU figures / 8 |

(TFLOP/s unless noted.) The V100 has no BF16 and no TF32: asking for them is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.workload.layers import PRECISIONS, Layer, Workload

DEFAULT_EFFICIENCY = 0.5  # a stated setting, not a fit: half of peak, the user's to change


@dataclass(frozen=True)
class Device:
    """A device's dense peak FLOP/s per precision and its memory bandwidth (bytes/s)."""

    name: str
    peaks: dict[str, float]
    memory_bps: float
    sheet: str

    def peak(self, precision: str) -> float:
        if precision not in self.peaks:
            have = ", ".join(self.peaks)
            raise ValueError(f"{self.name} has no {precision} peak (its sheet lists: {have})")
        return self.peaks[precision]


T = 1e12
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("v100", {"fp32": 15.7 * T, "fp16": 125 * T}, 900e9,
               "NVIDIA Tesla V100 data sheet (SXM2)"),
        Device("a100", {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
               2039e9, "NVIDIA A100 data sheet (SXM 80GB)"),
        Device("h100", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T,
                        "fp16": 989.5 * T}, 3350e9, "NVIDIA H100 data sheet (SXM)"),
        Device("h200", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T,
                        "fp16": 989.5 * T}, 4800e9, "NVIDIA H200 data sheet (SXM)"),
        Device("b200", {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T},
               8000e9, "NVIDIA HGX B200 data sheet (8-GPU figures / 8)"),
    )
}  # fmt: skip


def device(name: str) -> Device:
    try:
        return DEVICES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(DEVICES)}") from None


def check_efficiency(efficiency: float) -> float:
    if not 0 < efficiency <= 1:
        raise ValueError(f"the efficiency must be in (0, 1], got {efficiency:g}")
    return efficiency


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of each layer's forward and backward pass and of the optimizer step."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    optimizer: float

    @property
    def compute(self) -> float:
        return sum(self.fwd) + sum(self.bwd)


def roofline(flops: float, moved: float, dev: Device, precision: str, efficiency: float) -> float:
    """Seconds of work of ``flops`` FLOPs and ``moved`` bytes: the larger of the two bounds,
    over the efficiency."""
    return max(flops / dev.peak(precision), moved / dev.memory_bps) / efficiency


# Adam keeps two moments per parameter; a step reads the parameter, its gradient and both
# moments and writes three of them back: 7 values a parameter, in FP32 (mixed precision keeps
# FP32 master weights and moments).
OPTIMIZER_BYTES_PER_PARAM = 7 * 4


def layer_times(
    w: Workload, dev: Device | None, efficiency: float = DEFAULT_EFFICIENCY
) -> LayerTimes:
    """Each layer's seconds on ``dev`` at the workload's precision: measured times where the
    workload has them, the roofline otherwise (``dev`` None: measured times only)."""
    check_efficiency(efficiency)
    if dev is not None:
        dev.peak(w.precision)  # a precision the device lacks is an error even if measured

    def one(layer: Layer, flops: float, moved: float, measured: float | None) -> float:
        if measured is not None:
            return measured
        if dev is None:
            raise ValueError(f"layer {layer.name!r} has no measured time: name a --device")
        return roofline(flops, moved, dev, w.precision, efficiency)

    fwd = tuple(one(x, x.fwd_flops, x.fwd_bytes, x.fwd_s) for x in w.layers)
    bwd = tuple(one(x, x.bwd_flops, x.bwd_bytes, x.bwd_s) for x in w.layers)
    if w.optimizer_s is not None:
        opt = w.optimizer_s
    elif dev is None:
        opt = 0.0
    else:
        opt = w.params * OPTIMIZER_BYTES_PER_PARAM / dev.memory_bps / efficiency
    return LayerTimes(fwd, bwd, opt)


def gradient_bytes(w: Workload) -> int:
    """Bytes of one step's gradients at the workload's precision (what a ring moves)."""
    return w.params * PRECISIONS[w.precision]
