"""A training step as data: the ordered layers of one worker's step, read by the simulator
without importing the model (as SimAI's AICB layer lists and Chakra traces are).

A `Workload` is what one data-parallel worker does in one step, at a batch size and a
precision: its layers in forward order, each with

- the gradient tensors it produces (element counts, in the order backward produces them:
  DDP's buckets are cut from these);
- forward and backward floating-point operations and bytes moved through device memory
  (a roofline on a device profile turns them into seconds: `ina.workload.devices`);
- measured forward and backward seconds where a trace gave them (they win over the roofline).

Three sources make one: the zoo (`ina.workload.zoo`, real model definitions on PyTorch's meta
device, FLOPs counted by torch), SimAI/AICB workload files and torch.profiler traces
(`ina.workload.imports`). Everything here is plain numbers: a workload of a 7B-parameter model
is a few hundred rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Bytes per value of each training precision: what a gradient costs a ring allreduce that
# sends the gradients as they are (INA's lanes are int32 whatever the precision).
PRECISIONS = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


# Kinds of layer, by the kernels they run (`ina.workload.calibration` sets an efficiency for
# each): convolutions (3x3 stride-1 ones apart: cuDNN runs them by Winograd's algorithm in
# FP32, `ina.workload.devices.WINOGRAD`), matrix multiplies (linear layers, recurrent
# cells), attention, normalisations, embeddings (gathers) and the rest (element-wise,
# pooling, the loss).
KINDS = ("conv", "conv3x3", "gemm", "attention", "norm", "embedding", "other")


def kind_of(module_type: str) -> str:
    """The kind of a module from its class name (``Conv2d``, ``Linear``, ``LlamaRMSNorm``)."""
    if module_type == "Conv1D":  # transformers' GPT-2 linear layer, not a convolution
        return "gemm"
    t = module_type.lower()
    if t.startswith("conv"):
        return "conv"
    if "attention" in t:
        return "attention"
    if "norm" in t:
        return "norm"
    if "embedding" in t:
        return "embedding"
    if t in ("linear", "lstm", "gru", "rnn", "lstmcell", "grucell", "bilinear") or t.endswith(
        "experts"
    ):
        return "gemm"
    return "other"


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return precision


@dataclass(frozen=True)
class Layer:
    """One layer of a step (a module that owns parameters, or does work of its own).

    ``grads``: element counts of the gradient tensors this layer produces, in backward
    order; FLOPs and bytes are for the whole batch; ``*_s`` are measured seconds (None:
    unknown, the device profile's roofline stands in)."""

    name: str
    grads: tuple[int, ...] = ()
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    fwd_s: float | None = None
    bwd_s: float | None = None
    kind: str = "other"  # one of KINDS: which calibrated efficiency its kernels run at

    @property
    def params(self) -> int:
        return sum(self.grads)


@dataclass(frozen=True)
class Workload:
    """One worker's training step: layers in forward order and what they were built for.

    ``samples``: samples per worker per step (the batch); ``tokens_per_sample``: the sequence
    length of a language model (throughput is then counted in tokens), 1 otherwise;
    ``optimizer_s``: measured optimizer seconds where known (None: the device profile's
    memory roofline over the optimizer's bytes); ``source``: where it came from, in words;
    ``buckets``: DDP bucket boundaries taken from a trace (tuples of indices into
    `gradients`), None to cut them as DDP does; ``hidden`` and ``blocks``: a transformer's
    hidden size and number of blocks (what tensor and pipeline parallelism need)."""

    name: str
    layers: tuple[Layer, ...]
    samples: int
    precision: str = "fp32"
    tokens_per_sample: int = 1
    optimizer_s: float | None = None
    source: str = ""
    buckets: tuple[tuple[int, ...], ...] | None = None
    notes: tuple[str, ...] = field(default=())
    hidden: int = 0  # a transformer's hidden size (0: not a transformer)
    blocks: int = 0  # its identical blocks (the layers tensor and pipeline parallelism split)
    experts: int = 0  # a mixture of experts' experts per block (0: dense)
    top_k: int = 0  # experts each token goes to

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.samples < 1:
            raise ValueError(f"the batch size must be >= 1, got {self.samples}")
        if not self.layers:
            raise ValueError(f"workload {self.name!r} has no layers")

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def gradients(self) -> list[tuple[int, int]]:
        """``(layer index, elements)`` of every gradient tensor in the order backward produces
        them: layers in reverse, each layer's tensors in its own order."""
        return [(i, n) for i in range(len(self.layers) - 1, -1, -1) for n in self.layers[i].grads]

    @property
    def flops(self) -> float:
        """Forward and backward floating-point operations of one worker's step."""
        return sum(layer.fwd_flops + layer.bwd_flops for layer in self.layers)

    @property
    def tokens(self) -> int:
        """Samples times tokens per sample: what one worker's step processes."""
        return self.samples * self.tokens_per_sample
