"""`ina sim mergecomp`: MergeComp's partition of a model's gradients, chosen and checked in
simulation against per-tensor compression and DDP's 25 MB buckets.

1. **The tensors.** The model's parameters in the order backward produces their gradients,
   with the time each is ready: measured on this CPU with post-accumulate-grad hooks
   (median of several backward passes, as fractions of the backward pass) and scaled to the
   step time of ``--compute`` (`ina.sim.compute`); the forward pass takes its measured
   share of the step.
2. **The cost model** of one group of ``n`` values (`TableCost`): the compressor's codec time
   on this CPU (worker 0's whole step against the switch's recorded answers, the least CPU
   time of 5, made non-decreasing in ``n``; `ina.bench.compressors.replay_seconds`) plus the simulated time of its rounds through
   the switch on the ``--link-rate`` network (`ina.sim.network`, codec free), measured at a
   geometric grid of sizes and interpolated linearly between them.
3. **The search** (`ina.train.mergecomp.search`): the contiguous partition with the
   earliest end of communication, exact under the cost model.
4. **The check, in simulation**: every partition (per tensor; DDP's buckets, 1 MiB then
   25 MiB, filled in backward order as DDP fills them after its first step; MergeComp's)
   runs ``--iters`` real iterations on the simulated network: each worker's gradients enter
   `ina.train.hook.MergedHookState` (the DDP hook's own logic) as backward produces them,
   each completed group is charged its codec time and reduced through the real transport
   and switch with the real compressor, overlapping the rest of the backward pass.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from ina.train.mergecomp import Partition, Schedule, TensorInfo, by_size, iteration_end
from ina.train.mergecomp import per_tensor as per_tensor_partition
from ina.train.mergecomp import search as search_partition
from ina.train.workloads import loss_fn

FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's defaults
BUCKET_BYTES = 25 * 1024 * 1024


# -- 1. the tensors ------------------------------------------------------------------------


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


# -- 2. the cost model ---------------------------------------------------------------------


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


def comm_seconds(spec, name: str, args: dict, n: int, seed: int = 0) -> float:
    """Simulated seconds of one call of ``name`` on ``n`` values through the network of
    ``spec`` (the second call: the first also joins the run); codec free."""
    from ina.compressors import make_communicator
    from ina.sim.network import build

    net = build(spec)
    rng = np.random.default_rng(seed)
    N = spec.workers
    times: list[float] = []

    def program(w: int):
        comm = make_communicator(name, N, w, seed, args)
        x = rng.standard_normal(n) * 1e-2
        for _ in range(2):
            t0 = net.now
            yield from comm.step_steps(x, "calibrate")
            if w == 0:
                times.append(net.now - t0)
        return None

    net.run([program(w) for w in range(N)])
    return times[-1]


def codec_seconds(name: str, args: dict, n: int, workers: int, repeats: int = 5) -> float:
    """CPU seconds of worker 0's whole step on ``n`` values, this CPU: the least of
    ``repeats`` (on a shared machine, anything more is other work's interference)."""
    from ina.bench.compressors import record, replay_seconds

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(n) * 1e-2 for _ in range(workers)]
    _, _, recorded = record(name, args, xs)
    cpu, _ = replay_seconds(name, args, xs[0], workers, recorded, repeats)
    return min(cpu)


def calibrate(
    spec, name: str, args: dict, largest: int, points: int = 14, codec_model=None
) -> TableCost:
    """The cost table at ``points`` sizes up to ``largest``. ``codec_model``: a run's
    `ina.sim.compute.CodecModel`; a throughput or ``none`` replaces the measured codec time,
    a ``measured:SCALE`` scales it (None: measured, unscaled)."""
    sizes = grid(largest, points)
    if codec_model is not None and (codec_model.bytes_per_second or not codec_model.scale):
        codec = [codec_model.per_call(n) for n in sizes]
    else:
        scale = 1.0 if codec_model is None else codec_model.scale
        codec = [scale * codec_seconds(name, args, n, spec.workers) for n in sizes]
        # more values never cost less: what remains of the noise is removed by taking, for
        # each size, the least time measured at that size or above
        codec = [min(codec[i:]) for i in range(len(codec))]
    comm = [comm_seconds(spec, name, args, n) for n in sizes]
    return TableCost(tuple(sizes), tuple(codec), tuple(comm))


# -- 3. the search, for one model ----------------------------------------------------------


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
            "per tensor": self.iteration_s(per_tensor_partition(len(self.tensors))),
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
    """Seconds of one forward and backward pass under the compute model (`ina.sim.compute`):
    fixed, counted FLOPs over a device, or measured on this CPU and scaled."""
    from ina.sim.compute import step_flops
    from ina.sim.train import calibrate_step

    if compute.kind == "measured":
        return compute.step_time(calibrate_step(model, x, y))
    return compute.step_time(0.0, step_flops(model, x, y, loss_fn) if compute.needs_flops else 0)


def plan_partition(
    model: torch.nn.Module, x, y, spec, name: str, args: dict, step_s: float,
    points: int = 14, codec_model=None,
) -> MergePlan:  # fmt: skip
    """Profile backward on this CPU, scale it to ``step_s``, calibrate the cost model of
    compressor ``name`` on ``spec``'s network and search the partition (steps 1-3)."""
    fwd_share, rows = backward_profile(model, x, y, loss_fn)
    cost = calibrate(spec, name, args, sum(k for _, k, _ in rows), points, codec_model)
    return plan_from(fwd_share, rows, step_s, cost)


def plan_from(fwd_share: float, rows, step_s: float, cost) -> MergePlan:
    """The search (step 3) on a `backward_profile` scaled to ``step_s`` and a cost table
    (`calibrate`'s, or one measured on the wall clock: `ina.train.worker_main`)."""
    forward_s, backward_s = fwd_share * step_s, (1 - fwd_share) * step_s
    tensors = tuple(TensorInfo(n, k, f * backward_s) for n, k, f in rows)
    return MergePlan(tensors, search_partition(tensors, cost), cost, forward_s, backward_s)


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


# -- 4. the check in simulation ------------------------------------------------------------


def simulate(
    spec,
    groups: Partition,
    tensors: list[TensorInfo],
    model: torch.nn.Module,
    name: str,
    args: dict,
    cost: TableCost,
    forward_s: float,
    backward_s: float,
    iters: int = 3,
    seed: int = 0,
) -> list[float]:
    """Simulated seconds of each iteration of every worker 0 with this partition (the
    first one includes the run's JOIN)."""
    from ina.compressors import make_communicator
    from ina.host.allreduce import Worker
    from ina.sim.network import SimTransport, build
    from ina.sim.nodes import Compute
    from ina.sim.train import SimBucket
    from ina.train.hook import INAHookState, MergedHookState

    params = dict(model.named_parameters())
    plist = [params[t.name] for t in tensors]
    net = build(spec)
    times: list[float] = []
    m = len(tensors)

    def program(w: int):
        node = net.workers[w]
        comm = make_communicator(name, spec.workers, w, seed, args)
        worker = Worker(
            node.core.cfg, transport=SimTransport(node.core), communicator=comm,
            clock=lambda: net.now,
        )  # fmt: skip
        inner = INAHookState(worker, compression="compressor", start_compress_iter=0)
        state = MergedHookState(inner, [[plist[i] for i in g] for g in groups])
        rng = np.random.default_rng([seed, w])
        buckets = [SimBucket(j, [plist[j]], j == m - 1) for j in range(m)]
        for _ in range(iters):
            t0 = net.now
            yield Compute(forward_s)
            tb = net.now
            for j, bucket in enumerate(buckets):
                wait = tb + tensors[j].ready_s - net.now
                if wait > 0:
                    yield Compute(wait)
                bucket.flat = torch.from_numpy(rng.standard_normal(tensors[j].numel) * 1e-2)
                for k, flat in state.add(bucket):
                    yield Compute(cost.codec(flat.numel()), "codec")
                    yield from state.group_steps(k, flat)
                state.end_bucket(bucket, 0.0)
            wait = tb + backward_s - net.now
            if wait > 0:
                yield Compute(wait)
            if w == 0:
                times.append(net.now - t0)
        return None

    net.run([program(w) for w in range(spec.workers)])
    return times


# -- the command ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ina.sim.options import add_network_arguments

    p.add_argument("--model", default="resnet", help="a model of ina/train/models.py")
    p.add_argument("--dataset", default="digits", help="its data set (input shape, a batch)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--compressor", default="qsgd", help="a GRACE method (ina/compressors)")
    p.add_argument("--compressor-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument(
        "--compute", default="fixed:10ms", help="step time (forward + backward): fixed:TIME, ..."
    )
    p.add_argument("--iters", type=int, default=3, help="simulated iterations per partition")
    p.add_argument("--lanes", type=int, default=256)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--points", type=int, default=14, help="calibrated sizes of the cost model")
    p.add_argument("--seed", type=int, default=0)
    add_network_arguments(p)


def main(args: argparse.Namespace) -> int:
    from ina.compressors import make_communicator, parse_args
    from ina.sim.compute import parse_compute
    from ina.sim.options import describe, network_spec
    from ina.train.workloads import build_rank, resolve

    try:
        cargs = parse_args(args.compressor_arg)
        make_communicator(args.compressor, args.workers, 0, args.seed, cargs)
        workload = resolve(args.dataset, args.model)
        spec = network_spec(args, args.workers, args.lanes, args.pool, seed=args.seed)
        compute = parse_compute(args.compute)
        if args.iters < 2:
            raise ValueError("--iters must be >= 2 (the first iteration also joins the run)")
    except ValueError as e:
        print(f"ina sim mergecomp: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    parts = build_rank(workload, 0, 1, args.batch_size, args.seed, None)
    model = parts.model
    x, y = next(iter(parts.loader))
    step_s = model_step_seconds(compute, model, x, y)
    label = args.compressor + "".join(f" {k}={v}" for k, v in cargs.items())
    t0 = time.perf_counter()
    plan = plan_partition(model, x, y, spec, args.compressor, cargs, step_s, args.points)
    tensors, cost, best = list(plan.tensors), plan.cost, plan.schedule
    forward_s, backward_s = plan.forward_s, plan.backward_s
    total = sum(t.numel for t in tensors)
    print(
        f"{args.model}: {len(tensors)} gradient tensors, {total:,} values; {label}; "
        f"{describe(spec)}; step {step_s * 1e3:g} ms (forward {forward_s * 1e3:.2f}, "
        f"backward {backward_s * 1e3:.2f}, ready times measured on this CPU)",
        flush=True,
    )
    print(f"cost model: {len(cost.sizes)} sizes calibrated in {time.perf_counter() - t0:.0f} s")
    print("| values | codec us (this CPU) | rounds us (simulated) |\n|---:|---:|---:|")
    for n, c, r in zip(cost.sizes, cost.codec_s, cost.comm_s, strict=True):
        print(f"| {n:,} | {c * 1e6:.0f} | {r * 1e6:.1f} |")
    candidates = {
        "per tensor": per_tensor_partition(len(tensors)),
        "DDP buckets (1 MiB, 25 MiB)": by_size(tensors, [FIRST_BUCKET_BYTES, BUCKET_BYTES]),
        "MergeComp (search)": best.groups,
    }
    print(f"\nMergeComp's partition ({len(best.groups)} groups):")
    print(plan.describe())
    print(
        "\n| partition | groups | iteration ms (cost model) | iteration ms (simulated) "
        "| MergeComp's speed-up |\n|---|---:|---:|---:|---:|"
    )
    results = {}
    for label_, groups in candidates.items():
        model_ms = 1e3 * plan.iteration_s(groups)
        sim = simulate(
            spec, groups, tensors, model, args.compressor, cargs, cost, forward_s, backward_s,
            args.iters, args.seed,
        )  # fmt: skip
        results[label_] = (len(groups), model_ms, 1e3 * statistics.mean(sim[1:]))
    ours = results["MergeComp (search)"][2]
    for label_, (k, model_ms, sim_ms) in results.items():
        print(f"| {label_} | {k} | {model_ms:.3f} | {sim_ms:.3f} | {sim_ms / ours:.2f}x |")
    return 0
