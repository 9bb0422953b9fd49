"""MergeComp's scheduler: which gradient tensors to compress and send together.

Compressing every tensor on its own pays a fixed cost per call (the codec's set-up, the
rounds' round trips) once per tensor: on a model with many small tensors (a ResNet's
batch-norm scales and biases, an LSTM's biases) that overhead dominates. One big group pays
it once, but cannot start before the backward pass has produced its last gradient, so
nothing overlaps with the computation. MergeComp (Wang et al., 2021) merges the tensors into
a few groups and searches for the partition that minimises the iteration time.

The model here, for a partition of the tensors in the order backward produces them
(``t_1 .. t_m``, gradient of ``t_i`` ready at ``r_i``, non-decreasing):

* a group ``g = t_i .. t_j`` (contiguous: merging neighbours, splitting no tensor) is ready
  at ``r_j`` and costs ``c(n_g)`` seconds on the communication channel, codec included,
  where ``n_g`` is its number of values: ``c`` comes from the simulator's cost model
  (`ina.sim.mergecomp`: the compressor's codec time on this CPU plus the simulated time of
  its rounds through the switch);
* groups use the channel one at a time, in order: ``end_g = max(r_j, end_{g-1}) + c(n_g)``;
* the iteration's communication ends at ``end`` of the last group, and the next iteration's
  forward pass cannot start before it.

``end_g`` grows with ``end_{g-1}``, so the best partition of a prefix ``t_1 .. t_j`` only
needs the best end time of each shorter prefix: `search` is the dynamic programme
``E(j) = min_i max(r_j, E(i-1)) + c(n_i + .. + n_j)``, exact over all ``2^(m-1)`` contiguous
partitions in ``O(m^2)`` cost evaluations (`brute_force` enumerates them, for tests).
MergeComp's own search is a heuristic because it measures costs on the hardware; with a cost
model we can afford the exact optimum.

`GroupReducer` applies a partition in a DDP communication hook: DDP hands over its buckets
(with ``bucket_cap_mb`` small, one parameter each) and the reducer sends each group through
the INA worker once all of the group's gradients have arrived.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ina.workload.buckets import BUCKET_BYTES, FIRST_BUCKET_BYTES

Partition = tuple[tuple[int, ...], ...]
"""Groups of tensor indices (positions in backward order), in the order they are sent."""

Cost = Callable[[int], float]
"""Seconds one group of ``n`` values takes on the communication channel (codec included)."""


@dataclass(frozen=True)
class TensorInfo:
    """One gradient tensor: its name, its number of values, and when backward produces it
    (seconds after the backward pass starts)."""

    name: str
    numel: int
    ready_s: float


@dataclass(frozen=True)
class Schedule:
    """A partition and the time its iteration's communication ends (after backward starts)."""

    groups: Partition
    end_s: float

    def describe(self, tensors: Sequence[TensorInfo]) -> str:
        """One line per group: its boundaries (positions in backward order), its number of
        tensors, values and float32 bytes, and the tensors' names."""
        lines = []
        for k, g in enumerate(self.groups):
            names = [tensors[i].name for i in g]
            shown = ", ".join(names if len(names) <= 6 else [*names[:3], "...", *names[-2:]])
            n = sum(tensors[i].numel for i in g)
            lines.append(
                f"  group {k}: tensors {g[0]}-{g[-1]} ({len(g)}), {n:,} values, "
                f"{4 * n:,} bytes: {shown}"
            )
        return "\n".join(lines)


def check_partition(groups: Partition, m: int) -> None:
    """ValueError unless ``groups`` are contiguous runs covering ``0 .. m-1`` once each, in
    order (the tensors are merged, never split or reordered)."""
    flat = [i for g in groups for i in g]
    if any(not g for g in groups):
        raise ValueError("a group is empty")
    if flat != list(range(m)):
        raise ValueError(f"the groups must cover tensors 0..{m - 1} once each, in order")


def iteration_end(groups: Partition, tensors: Sequence[TensorInfo], cost: Cost) -> float:
    """When the last group's communication ends (seconds after backward starts)."""
    check_partition(groups, len(tensors))
    end = 0.0
    for g in groups:
        ready = max(tensors[i].ready_s for i in g)
        end = max(ready, end) + cost(sum(tensors[i].numel for i in g))
    return end


def search(tensors: Sequence[TensorInfo], cost: Cost) -> Schedule:
    """The contiguous partition with the earliest end (the dynamic programme above)."""
    m = len(tensors)
    if not m:
        return Schedule((), 0.0)
    ready = [t.ready_s for t in tensors]
    if any(b < a for a, b in itertools.pairwise(ready)):
        raise ValueError("tensors must be in the order backward produces them (ready times)")
    prefix = [0, *itertools.accumulate(t.numel for t in tensors)]
    best = [0.0] + [math.inf] * m  # best[j]: earliest end of tensors 0..j-1
    cut = [0] * (m + 1)  # cut[j]: where the last group of that best prefix starts
    for j in range(1, m + 1):
        for i in range(1, j + 1):  # last group: tensors i-1 .. j-1
            end = max(ready[j - 1], best[i - 1]) + cost(prefix[j] - prefix[i - 1])
            if end < best[j]:
                best[j], cut[j] = end, i - 1
    groups = []
    j = m
    while j:
        groups.append(tuple(range(cut[j], j)))
        j = cut[j]
    return Schedule(tuple(reversed(groups)), best[m])


def contiguous_partitions(m: int):
    """Every way to cut ``0 .. m-1`` into contiguous groups (``2^(m-1)`` of them)."""
    for mask in range(1 << max(m - 1, 0)):
        groups, start = [], 0
        for k in range(1, m):
            if mask >> (k - 1) & 1:
                groups.append(tuple(range(start, k)))
                start = k
        groups.append(tuple(range(start, m)))
        yield tuple(groups)


def brute_force(tensors: Sequence[TensorInfo], cost: Cost) -> Schedule:
    """The best contiguous partition by enumeration (for tests: small ``m`` only)."""
    best = None
    for groups in contiguous_partitions(len(tensors)):
        end = iteration_end(groups, tensors, cost)
        if best is None or end < best.end_s:
            best = Schedule(groups, end)
    return best


def per_tensor(m: int) -> Partition:
    """Every tensor on its own (GRACE's default: one compression call per tensor)."""
    return tuple((i,) for i in range(m))


def by_size(tensors: Sequence[TensorInfo], caps: Sequence[int], bytes_per_value: int = 4):
    """Groups filled in order up to a byte cap, as DDP fills its buckets (``caps``: the first
    bucket's cap, then the rest's: DDP's 1 MiB and 25 MiB)."""
    groups: list[tuple[int, ...]] = []
    current: list[int] = []
    size = 0
    for i, t in enumerate(tensors):
        current.append(i)
        size += bytes_per_value * t.numel
        if size >= caps[min(len(groups), len(caps) - 1)]:
            groups.append(tuple(current))
            current, size = [], 0
    if current:
        groups.append(tuple(current))
    return tuple(groups)


class GroupReducer:
    """Applies a partition of a model's parameters in a DDP communication hook.

    ``groups``: lists of parameters (each parameter in exactly one group). DDP calls the hook
    with its buckets; `add` takes one bucket's parameters and gradients and returns the
    groups it completes, each with its flat gradient, in the partition's order; `split` cuts
    a group's reduced flat gradient back into the parameters' pieces.
    """

    def __init__(self, groups: Sequence[Sequence[object]]) -> None:
        self.groups = [list(g) for g in groups]
        self.group_of: dict[int, int] = {}
        for k, g in enumerate(self.groups):
            for p in g:
                if id(p) in self.group_of:
                    raise ValueError("a parameter is in two groups")
                self.group_of[id(p)] = k
        self._parts: dict[int, dict[int, object]] = {}  # group -> param id -> gradient

    def add(self, params: Sequence[object], grads: Sequence[object]) -> list[tuple[int, list]]:
        """Note gradients; the (group index, gradients in group order) of completed groups."""
        touched = set()
        for p, g in zip(params, grads, strict=True):
            try:
                k = self.group_of[id(p)]
            except KeyError:
                raise ValueError("a bucket holds a parameter outside the partition") from None
            self._parts.setdefault(k, {})[id(p)] = g
            touched.add(k)
        done = []
        for k in sorted(touched):
            parts = self._parts[k]
            if len(parts) == len(self.groups[k]):
                done.append((k, [parts[id(p)] for p in self.groups[k]]))
                del self._parts[k]
        return done

    def pending(self) -> list[int]:
        """Groups with some but not all gradients (none at the end of a step)."""
        return sorted(self._parts)


# -- a model's tensors, the cost table, the plan (both ways to train use them) ----------


def backward_profile(model: torch.nn.Module, x, y, loss_fn, repeats: int = 5):
    """``(forward share of the step, [(name, numel, ready fraction of backward)])`` in the
    order backward produces the gradients; medians of ``repeats`` passes on this CPU."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    stamps: dict[str, list[float]] = {n: [] for n, _ in named}
    fwd_share = []
    current: dict[str, float] = {}

    def hook_for(name):
        def hook(_p):
            current[name] = time.perf_counter()

        return hook

    handles = [p.register_post_accumulate_grad_hook(hook_for(n)) for n, p in named]
    # the passes must not train: batch norm's running statistics are put back afterwards
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    try:
        for r in range(repeats + 1):  # the first pass warms up
            model.zero_grad(set_to_none=True)
            current.clear()
            t0 = time.perf_counter()
            loss = loss_fn(model(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            if r:
                fwd_share.append((t1 - t0) / (t2 - t0))
                for n, _ in named:
                    stamps[n].append((current[n] - t1) / (t2 - t1))
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])
    rows = [(n, p.numel(), statistics.median(stamps[n])) for n, p in named]
    # backward's order; ties (one autograd node making several gradients) in reverse
    # parameter order, as DDP assumes
    order = sorted(range(len(rows)), key=lambda i: (rows[i][2], -i))
    out, last = [], 0.0
    for i in order:
        last = max(last, rows[i][2])
        out.append((rows[i][0], rows[i][1], last))
    return statistics.median(fwd_share), out


@dataclass(frozen=True)
class TableCost:
    """Seconds for one group of ``n`` values: codec plus simulated rounds, interpolated
    linearly between calibrated sizes (and beyond the largest, along its last segment)."""

    sizes: tuple[int, ...]
    codec_s: tuple[float, ...]
    comm_s: tuple[float, ...]

    def _interp(self, n: int, ys: tuple[float, ...]) -> float:
        xs = self.sizes
        if n <= xs[0]:
            return ys[0]
        k = min(bisect.bisect_left(xs, n), len(xs) - 1)
        x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
        return max(y0 + (y1 - y0) * (n - x0) / (x1 - x0), 0.0)

    def codec(self, n: int) -> float:
        return self._interp(n, self.codec_s)

    def comm(self, n: int) -> float:
        return self._interp(n, self.comm_s)

    def __call__(self, n: int) -> float:
        return self.codec(n) + self.comm(n)


def grid(largest: int, points: int = 14) -> list[int]:
    """Sizes from 1 to ``largest``, geometric."""
    sizes = {round(float(v)) for v in np.geomspace(1, max(largest, 2), points)}
    return sorted(sizes | {1, largest})


@dataclass(frozen=True)
class MergePlan:
    """MergeComp's partition of one model's gradients and what it was chosen under: the
    tensors in backward order with their ready times, the cost table, the step's split into
    forward and backward (`ina sim mergecomp` compares it; `ina train --mergecomp` applies
    it)."""

    tensors: tuple[TensorInfo, ...]
    schedule: Schedule
    cost: TableCost
    forward_s: float
    backward_s: float

    @property
    def groups(self) -> list[list[str]]:
        """The groups as parameter names, in the order they are sent."""
        return [[self.tensors[i].name for i in g] for g in self.schedule.groups]

    def iteration_s(self, groups: Partition | None = None) -> float:
        """The cost model's iteration time of ``groups`` (default: the chosen ones)."""
        groups = self.schedule.groups if groups is None else groups
        return self.forward_s + max(iteration_end(groups, self.tensors, self.cost), self.backward_s)

    def baselines_s(self) -> dict[str, float]:
        """The cost model's iteration time of per-tensor compression and of DDP's buckets
        (1 MiB, then 25 MiB, filled in backward order), to compare with `iteration_s`."""
        return {
            "per tensor": self.iteration_s(per_tensor(len(self.tensors))),
            "DDP buckets": self.iteration_s(
                by_size(self.tensors, [FIRST_BUCKET_BYTES, BUCKET_BYTES])
            ),
        }

    def describe(self) -> str:
        """The chosen partition, a line per group (boundaries, tensor count, values, bytes)."""
        return Schedule(self.schedule.groups, self.schedule.end_s).describe(self.tensors)

    def as_dict(self) -> dict:
        """JSON for config.json and result.json: each group's tensors, values and bytes."""
        return {
            "groups": self.groups,
            "group_values": [sum(self.tensors[i].numel for i in g) for g in self.schedule.groups],
            "group_bytes": [
                4 * sum(self.tensors[i].numel for i in g) for g in self.schedule.groups
            ],
            "predicted_iteration_ms": 1e3 * self.iteration_s(),
            "predicted_per_tensor_ms": 1e3 * self.baselines_s()["per tensor"],
            "predicted_ddp_buckets_ms": 1e3 * self.baselines_s()["DDP buckets"],
            "forward_ms": 1e3 * self.forward_s,
            "backward_ms": 1e3 * self.backward_s,
            "ready_ms": [1e3 * t.ready_s for t in self.tensors],
        }


def model_step_seconds(compute, model: torch.nn.Module, x, y) -> float:
    """Seconds of one forward and backward pass under the compute model (`ina.workload.compute`):
    fixed, counted FLOPs over a device, or measured on this CPU and scaled."""
    from ina.workload.compute import calibrate_step, step_flops
    from ina.workload.tasks import loss_fn

    if compute.kind == "measured":
        return compute.step_time(calibrate_step(model, x, y, loss_fn))
    return compute.step_time(0.0, step_flops(model, x, y, loss_fn) if compute.needs_flops else 0)


def plan_from(fwd_share: float, rows, step_s: float, cost) -> MergePlan:
    """The search (step 3) on a `backward_profile` scaled to ``step_s`` and a cost table
    (`calibrate`'s, or one measured on the wall clock: `ina.train.worker_main`)."""
    forward_s, backward_s = fwd_share * step_s, (1 - fwd_share) * step_s
    tensors = tuple(TensorInfo(n, k, f * backward_s) for n, k, f in rows)
    return MergePlan(tensors, search(tensors, cost), cost, forward_s, backward_s)


def print_plan(plan, how: str) -> None:
    """MergeComp's chosen partition, once, before training (`ina train --mergecomp`)."""
    others = ", ".join(f"{k} {1e3 * v:.3f} ms" for k, v in plan.baselines_s().items())
    print(
        f"MergeComp's partition ({how}): {len(plan.tensors)} gradient tensors in backward "
        f"order; step {1e3 * (plan.forward_s + plan.backward_s):.3f} ms (forward "
        f"{1e3 * plan.forward_s:.3f}); predicted iteration {1e3 * plan.iteration_s():.3f} ms "
        f"({others}, under the same cost model)",
        flush=True,
    )
    print(plan.describe(), flush=True)
