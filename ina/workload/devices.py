"""Device profiles: the peak rates a layer's time is computed from, from the vendors' data
sheets, with the sheet named beside each number.

A layer's time on a device is a roofline: its FLOPs over the peak rate of the step's
precision, or its bytes over the memory bandwidth, whichever is larger, divided by an
efficiency the user sets (the share of peak that real kernels reach; 1 is the roofline
itself). Peaks are dense (the sheets' "with sparsity" figures halved); 16-bit and TF32
precisions run on tensor cores, FP32 on the CUDA cores without them.

| device | FP32 | TF32 (tensor) | BF16/FP16 (tensor) | bandwidth | capacity | sheet |
|---|---|---|---|---|---|---|
| P100 PCIe 16GB | 9.3 | - | 18.7 (FP16 only) | 732 GB/s | 16 GB | NVIDIA Tesla P100 data sheet |
| V100 SXM2 32GB | 15.7 | - | 125 (FP16 only) | 900 GB/s | 32 GB | NVIDIA Tesla V100 data sheet |
| A100 SXM 80GB | 19.5 | 156 | 312 | 2,039 GB/s | 80 GB | NVIDIA A100 data sheet |
| H100 SXM | 67 | 494.5 | 989.5 | 3,350 GB/s | 80 GB | NVIDIA H100 data sheet |
| H200 SXM | 67 | 494.5 | 989.5 | 4,800 GB/s | 141 GB | NVIDIA H200 data sheet |
| B200 (HGX, per GPU) | 75 | 1,100 | 2,250 | 8,000 GB/s | 180 GB | NVIDIA HGX B200 data sheet, 8-GPU figures / 8 |

(TFLOP/s unless noted.) The P100 and V100 have no BF16 and no TF32: asking for them is an
error.
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
    capacity: float = 0.0  # bytes of device memory

    def peak(self, precision: str) -> float:
        if precision not in self.peaks:
            have = ", ".join(self.peaks)
            raise ValueError(f"{self.name} has no {precision} peak (its sheet lists: {have})")
        return self.peaks[precision]


T = 1e12
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("p100", {"fp32": 9.3 * T, "fp16": 18.7 * T}, 732e9,
               "NVIDIA Tesla P100 data sheet (PCIe 16GB)", 16e9),
        Device("v100", {"fp32": 15.7 * T, "fp16": 125 * T}, 900e9,
               "NVIDIA Tesla V100 data sheet (SXM2 32GB)", 32e9),
        Device("a100", {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
               2039e9, "NVIDIA A100 data sheet (SXM 80GB)", 80e9),
        Device("h100", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T,
                        "fp16": 989.5 * T}, 3350e9, "NVIDIA H100 data sheet (SXM)", 80e9),
        Device("h200", {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T,
                        "fp16": 989.5 * T}, 4800e9, "NVIDIA H200 data sheet (SXM)", 141e9),
        Device("b200", {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T},
               8000e9, "NVIDIA HGX B200 data sheet (8-GPU figures / 8)", 180e9),
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


# Winograd's F(2x2, 3x3) does a 3x3 convolution's output tile with 16 multiplies where the
# direct form does 36: 2.25x fewer (Lavin and Gray, CVPR 2016). cuDNN picks it for 3x3
# stride-1 convolutions in FP32; on tensor cores (TF32, 16-bit) it runs implicit GEMM,
# which does the direct form's arithmetic.
WINOGRAD = 36 / 16


def layer_flops(kind: str, flops: float, precision: str) -> float:
    """The FLOPs a layer's kernels do: its counted (direct) FLOPs, less by Winograd's factor
    for a 3x3 stride-1 convolution in FP32."""
    return flops / WINOGRAD if kind == "conv3x3" and precision == "fp32" else flops


def roofline(flops: float, moved: float, dev: Device, precision: str, efficiency: float) -> float:
    """Seconds of work of ``flops`` FLOPs and ``moved`` bytes: the larger of the two bounds,
    over the efficiency."""
    return max(flops / dev.peak(precision), moved / dev.memory_bps) / efficiency


# Adam's step (the default where no optimizer is named): it reads the parameter, its gradient
# and both moments and writes three of them back: 7 FP32 values a parameter
# (`ina.workload.memory.OPTIMIZERS` has the others).
OPTIMIZER_BYTES_PER_PARAM = 7 * 4


CALIBRATED = "calibrated"  # an efficiency per kind of layer (`ina.workload.calibration`)


def layer_times(
    w: Workload,
    dev: Device | None,
    efficiency: float | str = DEFAULT_EFFICIENCY,
    optimizer_bytes: float = OPTIMIZER_BYTES_PER_PARAM,
    overrides: dict[str, float] | None = None,
) -> LayerTimes:
    """Each layer's seconds on ``dev`` at the workload's precision: measured times where the
    workload has them, the roofline otherwise (``dev`` None: measured times only), at one
    ``efficiency`` or at the calibrated one of each layer's kind (``"calibrated"``), with a
    user's calibration file's ``overrides`` per kind over it; ``optimizer_bytes``: what the
    optimizer's step moves per parameter."""
    from ina.workload.calibration import efficiency as calibrated

    if efficiency != CALIBRATED:
        check_efficiency(efficiency)
    overrides = overrides or {}
    if dev is not None:
        dev.peak(w.precision)  # a precision the device lacks is an error even if measured

    def eff(kind: str) -> float:
        mine = overrides.get(kind, overrides.get("conv") if kind == "conv3x3" else None)
        if mine is not None:
            return mine
        if efficiency == CALIBRATED:
            return calibrated(dev.name, w.precision, kind)[0]
        return efficiency

    def one(layer: Layer, flops: float, moved: float, measured: float | None) -> float:
        if measured is not None:
            return measured
        if dev is None:
            raise ValueError(f"layer {layer.name!r} has no measured time: name a --device")
        done = layer_flops(layer.kind, flops, w.precision)
        return roofline(done, moved, dev, w.precision, eff(layer.kind))

    fwd = tuple(one(x, x.fwd_flops, x.fwd_bytes, x.fwd_s) for x in w.layers)
    bwd = tuple(one(x, x.bwd_flops, x.bwd_bytes, x.bwd_s) for x in w.layers)
    if w.optimizer_s is not None:
        opt = w.optimizer_s
    elif dev is None:
        opt = 0.0
    else:
        opt = w.params * optimizer_bytes / dev.memory_bps / eff("other")
    return LayerTimes(fwd, bwd, opt)


def gradient_bytes(w: Workload) -> int:
    """Bytes of one step's gradients at the workload's precision (what a ring moves)."""
    return w.params * PRECISIONS[w.precision]
