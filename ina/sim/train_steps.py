"""`ina sim train`: training steps of a named model's gradients, in simulated time, without
training.

What a step of data-parallel training costs at a scale this host cannot train at (a thousand
workers), from the model's definition alone:

1. The model (`ina.workload.models`, a workload of `ina.workload.tasks`) is built from the data
   set's shapes (`ina.workload.data.SHAPES`), never trained and no data set loaded; its
   parameters are cut into DDP's buckets exactly as `ina train --sim` cuts them
   (`ina.sim.train.buckets_of`: PyTorch's own assignment, 1 MiB then 25 MiB).
2. Each step is the compute model's time for one worker's batch (`ina.workload.compute`:
   ``fixed:TIME``, ``flops:DEVICE[:EFFICIENCY]`` counted by torch on one batch of the data
   set's shape, or ``measured[:SCALE]``, this host's time for that batch), then one allreduce
   per bucket, in DDP's order, of random float32 values of the bucket's size: the same
   `Worker.allreduce_steps`, transport core and switch pipeline as `ina sim allreduce`.
3. ``--timing-only``: one representative worker stands for all N (`ina.sim.network.build`),
   so N may be in the thousands; without it every worker is simulated (N <= 32) and every
   sum is checked bit for bit. Both give the same simulated times (a test).

Reports the simulated time of every step (its compute and its communication), the total,
and the bytes: gradient bytes per step, bytes each worker sent, bytes on the links. The
numbers are a pure function of the options (no measured model), so ``--out DIR`` writes the
same ``result.json`` twice apart from the fields named ``wall_*``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ina.sim.backends import build
from ina.sim.network import NetworkSpec, workers_for
from ina.sim.nodes import Compute
from ina.sim.options import add_network_arguments, describe, network_spec
from ina.workload.buckets import buckets_of
from ina.workload.compute import (
    CodecModel,
    ComputeModel,
    calibrate_step,
    parse_codec,
    parse_compute,
    step_flops,
)
from ina.workload.data import SHAPES
from ina.workload.models import build_model, num_parameters
from ina.workload.tasks import TASKS, Workload, loss_fn, resolve


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="digits", help=f"data set: {', '.join(sorted(TASKS))}")
    p.add_argument("--model", help="model (default: the data set's own; ina/workload/models.py)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="training steps")
    p.add_argument("--batch-size", type=int, default=32, help="per worker (compute models)")
    p.add_argument(
        "--compute",
        default="fixed:5ms",
        help="compute per step: fixed:TIME, flops:DEVICE[:EFFICIENCY] or measured[:SCALE]",
    )
    p.add_argument("--codec", default="none", help="codec time: none or a throughput (30GB/s)")
    p.add_argument(
        "--timing-only",
        action="store_true",
        help="one representative worker stands for all (identical deterministic links): "
        "any number of workers",
    )
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet")
    p.add_argument("--pool", type=int, default=64, help="slots in the job's pool (window)")
    p.add_argument("--seed", type=int, default=0, help="seed of the gradients and the network")
    p.add_argument("--out", help="directory for result.json")
    add_network_arguments(p)


def model_of(workload: Workload) -> torch.nn.Module:
    """The workload's model, built from its data set's shapes (no data loaded)."""
    shape, classes = SHAPES[workload.dataset]
    return build_model(workload.model, shape, classes)


def example_batch(workload: Workload, batch: int, seed: int = 0):
    """A batch of the data set's shape and types (random values): what the compute models
    time or count the FLOPs of."""
    shape, classes = SHAPES[workload.dataset]
    g = torch.Generator().manual_seed(seed)
    if workload.task.kind == "text":  # character ids in, the next character's id per position
        x = torch.randint(0, classes, (batch, *shape), generator=g)
        return x, torch.randint(0, classes, (batch, *shape), generator=g)
    x = torch.randn((batch, *shape), generator=g)
    return x, torch.randint(0, classes, (batch,), generator=g)


def step_seconds(workload: Workload, model, compute: ComputeModel, batch: int) -> float:
    """Simulated seconds of one worker's forward and backward pass."""
    if compute.kind == "fixed":
        return compute.step_time(0.0)
    x, y = example_batch(workload, batch)
    if compute.needs_flops:
        return compute.step_time(0.0, step_flops(model, x, y, loss_fn))
    return compute.step_time(calibrate_step(model, x, y, loss_fn))


class SumCheck:
    """Every worker's decoded sums of a call against the int32 sum of what every worker
    encoded, without holding every worker's arrays: a running sum and a digest per worker."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pending: dict[object, tuple[np.ndarray, list[bytes]]] = {}
        self.exact = True

    def add(self, call: object, ints: np.ndarray, sums: np.ndarray) -> None:
        acc, digests = self.pending.setdefault(call, (np.zeros(ints.size, np.int32), []))
        np.add(acc, ints, out=acc)  # int32: wraps around, as the switch adds
        digests.append(hashlib.blake2b(np.ascontiguousarray(sums).tobytes()).digest())
        if len(digests) == self.workers:
            del self.pending[call]
            expected = hashlib.blake2b(acc.tobytes()).digest()
            self.exact &= all(d == expected for d in digests)


def run(
    spec: NetworkSpec,
    buckets: list[int],
    steps: int,
    compute_s: float,
    codec: CodecModel | None = None,
    seed: int = 0,
) -> dict:
    """Simulate ``steps`` steps: ``compute_s`` of compute, then an allreduce of each bucket
    (``buckets``: float32 values each, in DDP's order)."""
    codec = codec or CodecModel(scale=0.0)
    net = build(spec)
    workers = workers_for(net)
    rng = np.random.default_rng(seed)
    grads = [[rng.standard_normal(n).astype(np.float32) for n in buckets] for _ in net.workers]
    checks = SumCheck(len(net.workers))

    def program(w: int):
        worker, times = workers[w], []
        for _ in range(steps):
            t_step = net.now
            yield Compute(compute_s)
            t_comm = net.now
            for b, flat in enumerate(grads[w]):
                extra = codec.per_call(flat.size)
                if extra:
                    yield Compute(extra, "codec")
                yield from worker.allreduce_steps(flat, key=b)
                checks.add((len(times), b), worker.last_ints, worker.last_int_sums)
            times.append((net.now - t_step, net.now - t_comm))
        return times

    wall0 = time.perf_counter()
    per_worker = net.run([program(w) for w in range(len(net.workers))])
    wall = time.perf_counter() - wall0
    # a step ends when its slowest worker ends it (they are alike on alike links)
    step_s = [max(t[i][0] for t in per_worker) for i in range(steps)]
    comm_s = [max(t[i][1] for t in per_worker) for i in range(steps)]
    links = net.links()
    stats = [w.stats for w in workers]
    return {
        "network": describe(spec),
        "timing_only": spec.timing_only,
        "workers": spec.workers,
        "buckets": buckets,
        "gradient_bytes_per_step": 4 * sum(buckets),
        "compute_seconds_per_step": compute_s,
        "step_seconds": step_s,
        "comm_seconds": comm_s,
        "sim_seconds": net.now,
        "bytes_sent_per_worker": stats[0].bytes_sent,
        "bytes_on_links": sum(link.bytes for link in links)
        * (spec.workers if spec.timing_only else 1),
        "retransmissions": sum(s.retransmissions for s in stats),
        "exact": checks.exact and not checks.pending,
        "events": net.engine.events,
        "wall_seconds": wall,
    }


def print_result(r: dict) -> None:
    print(f"network: {r['network']}" + (" (timing only)" if r["timing_only"] else ""))
    print(
        f"{r['model']}: {r['parameters']:,} parameters, {len(r['buckets'])} "
        f"bucket{'s' if len(r['buckets']) > 1 else ''} "
        f"({', '.join(f'{n:,}' for n in r['buckets'])} values), "
        f"{r['gradient_bytes_per_step']:,} gradient bytes per step; compute {r['compute']} "
        f"= {r['compute_seconds_per_step'] * 1e3:.3f} ms per step"
    )
    for i, (s, c) in enumerate(zip(r["step_seconds"], r["comm_seconds"], strict=True)):
        print(f"  step {i}: {s * 1e3:10.4f} ms simulated, {c * 1e3:10.4f} ms of it communication")
    print(
        f"total: {r['sim_seconds'] * 1e3:.4f} ms simulated for {len(r['step_seconds'])} steps; "
        f"{r['bytes_sent_per_worker']:,} bytes sent per worker, {r['bytes_on_links']:,} bytes "
        f"on all links, {r['retransmissions']} retransmissions"
        + ("" if r["timing_only"] else f"; every sum exact: {'yes' if r['exact'] else 'NO'}")
    )
    print(f"simulator: {r['wall_seconds']:.2f} s of wall time, {r['events']} events")


def main(args: argparse.Namespace) -> int:
    try:
        workload = resolve(args.dataset, args.model)
        if args.steps < 1 or args.batch_size < 1:
            raise ValueError("--steps and --batch-size must be >= 1")
        compute, codec = parse_compute(args.compute), parse_codec(args.codec)
        if codec.scale and not codec.bytes_per_second:
            raise ValueError("--codec: none or a throughput (no codec code runs to measure)")
        spec = network_spec(
            args, args.workers, args.lanes, args.pool, seed=args.seed, timing_only=args.timing_only
        )
    except ValueError as e:
        print(f"ina sim train: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    model = model_of(workload)
    buckets = [b.numel for b in buckets_of(model)]
    compute_s = step_seconds(workload, model, compute, args.batch_size)
    r = run(spec, buckets, args.steps, compute_s, codec, args.seed)
    r = {"model": workload.name, "parameters": num_parameters(model), "compute": args.compute, **r}
    print_result(r)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(r, indent=2) + "\n")
    return 0 if r["exact"] else 1
