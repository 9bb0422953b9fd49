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

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
