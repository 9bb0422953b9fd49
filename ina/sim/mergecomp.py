"""`ina sim mergecomp`: MergeComp's partition of a model's gradients, chosen and checked in
simulation against per-tensor compression and DDP's 25 MB buckets.

1. **The tensors.** The model's parameters in the order backward produces their gradients,
   with the time each is ready: measured on this CPU with post-accumulate-grad hooks
   (median of several backward passes, as fractions of the backward pass) and scaled to the
   step time of ``--compute`` (`ina.workload.compute`); the forward pass takes its measured
   share of the step.
2. **The cost model** of one group of ``n`` values (`TableCost`): the compressor's codec time
   on this CPU (worker 0's whole step against the switch's recorded answers, the least CPU
   time of 5, made non-decreasing in ``n``; `ina.bench.compressors.replay_seconds`) plus the simulated time of its rounds through
   the switch on the ``--link-rate`` network (`ina.sim.network`, codec free), measured at a
   geometric grid of sizes and interpolated linearly between them.
3. **The search** (`ina.workload.mergecomp.search`): the contiguous partition with the
   earliest end of communication, exact under the cost model.
4. **The check, in simulation**: every partition (per tensor; DDP's buckets, 1 MiB then
   25 MiB, filled in backward order as DDP fills them after its first step; MergeComp's)
   runs ``--iters`` real iterations on the simulated network: each worker's gradients enter
   `ina.workload.hook.MergedHookState` (the DDP hook's own logic) as backward produces them,
   each completed group is charged its codec time and reduced through the real transport
   and switch with the real compressor, overlapping the rest of the backward pass.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from ina.workload.buckets import BUCKET_BYTES, FIRST_BUCKET_BYTES
from ina.workload.mergecomp import (
    MergePlan,
    Partition,
    TableCost,
    TensorInfo,
    backward_profile,
    by_size,
    grid,
    model_step_seconds,
    plan_from,
)
from ina.workload.mergecomp import per_tensor as per_tensor_partition
from ina.workload.tasks import loss_fn

# -- 2. the cost model, measured here ---------------------------------------------------------


def comm_seconds(spec, name: str, args: dict, n: int, seed: int = 0) -> float:
    """Simulated seconds of one call of ``name`` on ``n`` values through the network of
    ``spec`` (the second call: the first also joins the run); codec free."""
    from ina.compressors import make_communicator
    from ina.sim.backends import build

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
    from ina.compressors.timing import record, replay_seconds

    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(n) * 1e-2 for _ in range(workers)]
    _, _, recorded = record(name, args, xs)
    cpu, _ = replay_seconds(name, args, xs[0], workers, recorded, repeats)
    return min(cpu)


def calibrate(
    spec, name: str, args: dict, largest: int, points: int = 14, codec_model=None
) -> TableCost:
    """The cost table at ``points`` sizes up to ``largest``. ``codec_model``: a run's
    `ina.workload.compute.CodecModel`; a throughput or ``none`` replaces the measured codec time,
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


def plan_partition(
    model: torch.nn.Module, x, y, spec, name: str, args: dict, step_s: float,
    points: int = 14, codec_model=None,
) -> MergePlan:  # fmt: skip
    """Profile backward on this CPU, scale it to ``step_s``, calibrate the cost model of
    compressor ``name`` on ``spec``'s network and search the partition (steps 1-3)."""
    fwd_share, rows = backward_profile(model, x, y, loss_fn)
    cost = calibrate(spec, name, args, sum(k for _, k, _ in rows), points, codec_model)
    return plan_from(fwd_share, rows, step_s, cost)


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
    from ina.sim.backends import build
    from ina.sim.network import SimTransport
    from ina.sim.nodes import Compute
    from ina.workload.buckets import SimBucket
    from ina.workload.hook import INAHookState, MergedHookState

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

    p.add_argument("--model", default="resnet", help="a model of ina/workload/models.py")
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
    from ina.sim.options import describe, network_spec
    from ina.workload.catalog import resolve
    from ina.workload.compute import parse_compute
    from ina.workload.tasks import build_rank

    try:
        cargs = parse_args(args.compressor_arg)
        make_communicator(args.compressor, args.workers, 0, args.seed, cargs)
        workload = resolve(args.dataset, args.model)
        spec = network_spec(args, args.workers, args.lanes, args.pool, seed=args.seed)
        compute = parse_compute(args.compute)
        if args.iters < 2:
            raise ValueError("--iters must be >= 2 (the first iteration also joins the run)")
        if args.points < 2:  # the grid always holds 1 and the largest size: fewer is ignored
            raise ValueError(f"--points must be >= 2 (the cost model's sizes), got {args.points}")
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
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
