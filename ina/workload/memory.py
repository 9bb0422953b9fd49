"""What a data-parallel worker holds in device memory, and the optimizer it runs.

**Optimizers** (`OPTIMIZERS`): the state each keeps per parameter and the bytes its step
moves through memory per parameter (all in FP32: mixed precision keeps FP32 master weights
and FP32 state, PyTorch's and Apex's practice):

| optimizer | state per parameter | a step reads and writes |
|---|---|---|
| ``sgd`` (momentum) | 1 value (momentum) | parameter, gradient, momentum in; parameter, momentum out: 5 values |
| ``adam``, ``adamw`` | 2 values (first and second moments) | parameter, gradient, two moments in; parameter and moments out: 7 values |

The default follows how each model is trained in its paper: ImageNet CNNs with SGD and
momentum, everything else with Adam(W).

**Memory per GPU** (`footprint`): weights and gradients at the training precision, FP32
master weights when that precision is 16-bit, the optimizer's FP32 state, and activations.
Activations are an estimate from the zoo's profile: each layer records the floating-point
tensors of its forward calls (inputs and outputs), and a layer's input is its predecessor's
output, so half of their sum is what backward keeps. Allocator slack, workspace and the
CUDA context are left out: a step that fits here by a few per cent may not fit on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ina.workload.layers import PRECISIONS, Workload


@dataclass(frozen=True)
class Optimizer:
    name: str
    state_values: int  # FP32 values of state per parameter
    step_values: int  # FP32 values a step reads and writes per parameter


OPTIMIZERS = {
    "sgd": Optimizer("sgd", 1, 5),
    "adam": Optimizer("adam", 2, 7),
    "adamw": Optimizer("adamw", 2, 7),
}
SGD_MODELS = ("resnet", "vgg", "cifar10-")  # zoo names trained with SGD and momentum


def optimizer(name: str | None, workload: Workload) -> Optimizer:
    """The named optimizer, or the workload's usual one (None)."""
    if name is None:
        name = "sgd" if workload.name.startswith(SGD_MODELS) else "adamw"
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}") from None


@dataclass(frozen=True)
class Footprint:
    """Bytes per GPU by part."""

    weights: float
    gradients: float
    master_weights: float
    optimizer_state: float
    activations: float

    @property
    def total(self) -> float:
        return (
            self.weights + self.gradients + self.master_weights + self.optimizer_state
            + self.activations
        )  # fmt: skip

    def parts(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "master weights": self.master_weights,
            "optimizer state": self.optimizer_state,
            "activations": self.activations,
        }


def activation_bytes(w: Workload) -> float:
    """The activations backward keeps, estimated from the profile (module docstring)."""
    bpv = PRECISIONS[w.precision]
    return 0.5 * sum(max(x.fwd_bytes - x.params * bpv, 0.0) for x in w.layers)


def footprint(w: Workload, opt: Optimizer) -> Footprint:
    bpv = PRECISIONS[w.precision]
    p = w.params
    return Footprint(
        weights=p * bpv,
        gradients=p * bpv,
        master_weights=p * 4 if bpv < 4 else 0.0,
        optimizer_state=p * 4 * opt.state_values,
        activations=activation_bytes(w),
    )


def check_fits(w: Workload, opt: Optimizer, capacity: float, device: str) -> Footprint:
    """The footprint, or ValueError in one line naming what does not fit and its largest part."""
    fp = footprint(w, opt)
    if fp.total > capacity:
        part, size = max(fp.parts().items(), key=lambda kv: kv[1])
        raise ValueError(
            f"{w.name} does not fit on a {device} ({capacity / 1e9:.0f} GB): a worker needs "
            f"{fp.total / 1e9:.1f} GB, the largest part {part} ({size / 1e9:.1f} GB; "
            f"{opt.name}, {w.precision}, batch {w.samples}); --ignore-memory runs it anyway"
        )
    return fp
