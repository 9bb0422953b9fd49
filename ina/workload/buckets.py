"""DDP's gradient buckets, as both ways to train cut them.

PyTorch's `DistributedDataParallel` packs the parameters, in reverse order of definition (the
order backward produces their gradients), into buckets of at most 1 MiB for the first and
25 MiB for the rest, and reduces a bucket as soon as its last gradient is ready. `buckets_of`
uses PyTorch's own assignment; `SimBucket` is what the communication hook
(`ina.workload.hook`) reads of a DDP ``GradBucket``, for the simulator that has no DDP.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's first bucket (torch.distributed: 1 MiB)
BUCKET_BYTES = 25 * 1024 * 1024  # DDP's bucket_cap_mb default


class SimBucket:
    """What `INAHookState` reads of a DDP ``GradBucket``, for one bucket of parameters."""

    def __init__(self, index: int, params: list[torch.nn.Parameter], last: bool) -> None:
        self._index, self._params, self._last = index, params, last
        self.numel = sum(p.numel() for p in params)
        self.flat: torch.Tensor | None = None

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self.flat

    def parameters(self) -> list[torch.nn.Parameter]:
        return self._params

    def is_last(self) -> bool:
        return self._last

    def gather(self) -> torch.Tensor:
        """The parameters' gradients as one flat tensor (a copy)."""
        return torch.cat([p.grad.reshape(-1) for p in self._params]).clone()

    def scatter(self, flat: torch.Tensor) -> None:
        """Set the parameters' gradients from a flat tensor."""
        offset = 0
        for p in self._params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n


def buckets_of(model: torch.nn.Module) -> list[SimBucket]:
    """DDP's buckets: PyTorch's assignment by size over the parameters in reverse order."""
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    groups, _ = dist._compute_bucket_assignment_by_size(
        [p.detach() for p in params], [FIRST_BUCKET_BYTES, BUCKET_BYTES]
    )
    return [
        SimBucket(i, [params[j] for j in g], i == len(groups) - 1) for i, g in enumerate(groups)
    ]


def assign_by_size(
    sizes: list[int],
    bytes_per_value: int,
    caps: tuple[int, ...] = (FIRST_BUCKET_BYTES, BUCKET_BYTES),
) -> list[list[int]]:
    """DDP's bucket assignment from tensor sizes alone (a workload has no tensors): indices
    into ``sizes`` (element counts, in the order backward produces them), in buckets.

    PyTorch's rule (``compute_bucket_assignment_by_size``, one dtype): tensors join the open
    bucket in order; a bucket closes once its bytes reach the current cap, and the cap then
    moves to the next one (1 MiB for the first bucket, 25 MiB for every later one); what is
    left open at the end is the last bucket. `buckets_of` uses PyTorch's own function on real
    parameters; a test checks that both agree."""
    out: list[list[int]] = []
    bucket: list[int] = []
    size, cap = 0, 0
    for i, n in enumerate(sizes):
        bucket.append(i)
        size += n * bytes_per_value
        if size >= caps[min(cap, len(caps) - 1)]:
            out.append(bucket)
            bucket, size = [], 0
            cap += 1
    if bucket:
        out.append(bucket)
    return out
