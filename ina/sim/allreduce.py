"""`ina sim allreduce`: N workers allreduce a tensor through the switch, in simulated time.

The same `Worker.allreduce` code as `ina allreduce` (dense, or compressed with
``--density``), the same transport core and the same switch pipeline, over the simulated
network of `ina.sim.options`. It checks every sum bit for bit (the integers each worker
decoded against the int32 sum of what every worker encoded) and reports the simulated time
of each call, the traffic, the switch's counters, and how fast the simulation itself ran.
``--out DIR`` writes ``result.json``; with the same options and seed two runs write the same
file apart from the fields named ``wall_*``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ina import topology, units
from ina.errors import output_dir
from ina.host.transport_core import ReduceTimeout
from ina.p4.entities import POOL_SLOTS
from ina.procs import available_memory
from ina.sim import flow
from ina.sim.backends import build
from ina.sim.network import PLACEMENTS, NetworkSpec, simulated_workers, workers_for
from ina.sim.nodes import Compute
from ina.sim.options import add_network_arguments, describe, network_spec, with_link_conditions
from ina.sim.stragglers import Stragglers, parse_stragglers


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=8)
    p.add_argument(
        "--size", "--params", type=float, default=1_000_000, help="float32 values per tensor"
    )
    p.add_argument(
        "--timing-only",
        action="store_true",
        help="one worker stands for each class of alike workers (same links, same compute; "
        "found from the topology and the options): any number of workers, times and traffic "
        "but no checked sums (docs/simulation.md)",
    )
    p.add_argument(
        "--flow",
        action="store_true",
        help="flow level: the job as a fluid at the rate its slowest hop leaves it, no "
        "packets (bulk transfers on lossless, deterministic links; any number of workers, "
        "in milliseconds; docs/simulation.md)",
    )
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="a topology file (bmv2_topologies/two_level_2x2.json): its switches aggregate "
        "hierarchically, its workers replace --workers",
    )
    p.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="NODE:KEY=VALUE,...",
        help="conditions on one link of the --topology, named by its lower end (a worker "
        "host, or a switch for its uplink): rate, delay, loss, profile, capacity, cross, "
        "buffer, as in a topology file (l3:capacity=episodes:share=0.5:fixed=1); repeatable",
    )
    p.add_argument(
        "--rack",
        action="append",
        default=[],
        metavar="SWITCH:KEY=VALUE,...",
        help="the same conditions on every link below a switch of the --topology; repeatable",
    )
    p.add_argument(
        "--compute",
        default="0",
        help="simulated compute before each call (a backward pass), e.g. 20ms; --stragglers "
        "scales it per worker",
    )
    p.add_argument(
        "--stragglers",
        default="none",
        help="per-worker factors on --compute: slow:W=F[,W=F], jitter:SIGMA, factors:F,... "
        "or A+B (ina/sim/stragglers.py)",
    )
    p.add_argument(
        "--fail",
        metavar="WORKER@TIME",
        help="worker WORKER (0..N-1) stops dead at simulated TIME (5@1ms): the run reports it "
        "by name and the others' chunks time out, as on the wire",
    )
    p.add_argument("--iters", type=int, default=3, help="allreduce calls per worker")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="jobs on the switch at once, each with --workers workers and a pool of --pool "
        "(ATP's setting): each job's time together and alone (ina/sim/jobs.py)",
    )
    p.add_argument(
        "--placement",
        default="separate",
        choices=PLACEMENTS,
        help="with --jobs: every worker on its own host, or worker w of every job on host w "
        "(sharing its link)",
    )
    p.add_argument(
        "--switch-slots",
        type=int,
        default=POOL_SLOTS,
        help="the switch's slot memory, shared by the jobs' pools",
    )
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet")
    p.add_argument("--pool", type=int, default=64, help="slots in the job's pool (window)")
    p.add_argument("--density", type=float, default=1.0, help="< 1: compressed (top-k)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tensors and the network")
    p.add_argument("--out", help="directory for result.json")
    add_network_arguments(p)


def run(
    spec: NetworkSpec,
    size: int,
    iters: int,
    density: float = 1.0,
    seed: int = 0,
    codec_time: Callable[[float], float] = lambda wall: 0.0,
    lookahead_s: float | None = None,
    compute_s: float = 0.0,
    stragglers: Stragglers | None = None,
    max_memory: bool = False,
    fail: tuple[int, float] | None = None,
) -> dict:
    """Simulate ``iters`` allreduce calls of ``size`` float32 values per worker.
    ``codec_time`` charges the workers' own code (see `ina.workload.compute.CodecModel`);
    ``lookahead_s`` caps every node's lookahead (1e-9: one packet per event, as the ns-3
    backend delivers them; `ina sim fidelity` uses it to tell batching from modelling).
    Each call follows ``compute_s`` of compute, times each worker's factor (``stragglers``).
    ``max_memory``: refuse (ValueError) a run whose simulated workers' tensors would not
    fit in memory (`check_memory`). ``fail``: (worker, time) of a worker that stops dead
    (`ina.sim.nodes.WorkerNode.crash`); the result then says who failed and how the others
    ended (``"failed"``), and has no times."""
    factors = (stragglers or Stragglers()).factor_matrix(spec.workers, iters, seed)

    def differs(g: int):  # timing only: workers that run otherwise are classes of their own
        return (tuple(factors[:, g]) if compute_s else None, fail is not None and g == fail[0])

    if max_memory:
        check_memory(size, simulated_workers(spec, differs), spec.timing_only, spec.workers)
    net = build(spec, codec_time, differs)
    if lookahead_s is not None:
        for node in [*net.workers, *(net.switches.values() or [net.switch])]:
            node.lookahead = min(node.lookahead, lookahead_s)
            node.run_ahead = False  # no channel clocks either: at most lookahead_s
    workers = workers_for(net, density)
    rng = np.random.default_rng(seed)
    tensors = [rng.standard_normal(size).astype(np.float32) for _ in net.workers]

    def program(w: int):
        calls, ends = [], []
        g = net.members[w][0]  # (its class's workers all have its compute times)
        for i in range(iters):
            if compute_s:
                yield Compute(compute_s * factors[i, g])
            t0 = net.now
            yield from workers[w].allreduce_steps(tensors[w], key="tensor")
            calls.append(net.now - t0)
            ends.append(net.now)
        return calls, ends

    if fail is not None:
        failing = next(w for w, m in enumerate(net.members) if fail[0] in m)
        net.workers[failing].crash(fail[1])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        done = net.run([program(w) for w in range(len(net.workers))])
    except ReduceTimeout as e:
        if fail is None:
            raise
        return failed_result(spec, net, fail, e)
    per_worker = [calls for calls, _ in done]
    ends = [max(e[i] for _, e in done) for i in range(iters)]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    expected = np.add.reduce([w.last_ints for w in workers], dtype=np.int32)
    exact = all(np.array_equal(w.last_int_sums, expected) for w in workers)
    links = net.links()
    ups = list({id(n.uplink): n.uplink for n in net.workers}.values())
    downs = list({id(link): link for link in net.switch.ports.values()}.values())
    packets = sum(link.packets for link in links)
    stats = [w.stats for w in workers]
    return {
        "model": describe(spec),
        "size": size,
        "iters": iters,
        "timing_only": spec.timing_only,
        "density": density,
        # the union of the workers' kept positions in the last call, over the tensor: what
        # round 2 carries. Each worker draws its own tensor, so it grows with the workers as
        # in training; timing only, it is the representative's own (one worker's top-k)
        "union_density": (
            workers[0].last_compressed.support.nnz / size if density < 1 and size else 1.0
        ),
        "exact": bool(exact),
        "call_seconds": [max(c[i] for c in per_worker) for i in range(iters)],
        # compute and call, from the end of the previous one for the slowest worker
        "step_seconds": [b - a for a, b in zip([0.0, *ends], ends, strict=False)],
        "compute_s": compute_s,
        "stragglers": (stragglers or Stragglers()).text,
        "simulated_workers": len(net.workers),
        "sim_seconds": net.now,
        "packets_on_links": packets,
        "bytes_on_links": sum(link.bytes for link in links),
        "packets_sent_per_worker": [s.packets_sent for s in stats],
        # (timing only: each simulated worker's once per worker it stands for)
        "retransmissions": sum(
            s.retransmissions * len(m) for s, m in zip(stats, net.members, strict=True)
        ),
        "queue_delay_up_s": mean_queue_delay(ups),
        "queue_delay_down_s": mean_queue_delay(downs),
        "counters": {k: v[0] for k, v in net.pipeline.counters.snapshot().items()},
        "events": net.engine.events,
        "wall_seconds": wall,
        # this process's CPU time in the simulation: on a shared machine, less noisy than
        # wall time (named wall_* as it is not a simulated result)
        "wall_cpu_seconds": cpu,
        "wall_packets_per_second": packets / wall if wall > 0 else 0.0,
    }


def failed_result(spec: NetworkSpec, net, fail: tuple[int, float], e: ReduceTimeout) -> dict:
    """What a run with a failed worker reports: who failed, when, and how the others
    ended (the first of them to time out, with its transport's message)."""
    worker, at = fail
    name = spec.topology.workers[worker] if spec.topology is not None else f"worker {worker}"
    return {
        "model": describe(spec),
        "timing_only": spec.timing_only,
        "failed": {
            "worker": worker,
            "name": name,
            "at_s": at,
            "others_timed_out_at_s": net.now,
            "timeout_s": spec.timeout_s,
            # (timing only: the transport's message numbers the classes, not the workers)
            "error": f"{type(e).__name__}" if spec.timing_only else str(e),
        },
    }


def mean_queue_delay(links) -> float:
    """Mean queueing delay of the packets the links delivered (beyond an unloaded path)."""
    packets = sum(link.packets for link in links)
    return sum(link.queue_delay_sum for link in links) / packets if packets else 0.0


def print_result(r: dict) -> None:
    if "failed" in r:
        f = r["failed"]
        print(
            f"{f['name']} (worker {f['worker']}) failed at "
            f"{units.format_seconds(f['at_s'])} simulated; the others timed out at "
            f"{units.format_seconds(f['others_timed_out_at_s'])} (a chunk with no result for "
            f"{units.format_seconds(f['timeout_s'])}): {f['error']}"
        )
        return
    n = r.get("simulated_workers", 1)
    print(
        f"model: {r['model']}"
        + (
            f" (timing only: {n:,} class{'' if n == 1 else 'es'} of alike workers, one "
            "worker simulated for each)"
            if r["timing_only"]
            else ""
        )
    )
    print(
        f"{r['size']:,} float32 values per worker, {units.plural(r['iters'], 'call')}, "
        f"density {r['density']:g}"
    )
    for i, s in enumerate(r["call_seconds"]):
        step = r.get("step_seconds", [])
        with_compute = (
            f" (step with compute: {units.format_seconds(step[i])})" if r.get("compute_s") else ""
        )
        print(f"  call {i}: {units.format_seconds(s):>12} simulated{with_compute}")
    print(
        f"traffic: {r['packets_on_links']} packets on links, {r['retransmissions']} "
        "retransmissions"
        + (
            "; sums not checked (timing only: one worker's own)"
            if r["timing_only"]
            else f"; every sum exact: {'yes' if r['exact'] else 'NO'}"
        )
    )
    print(
        f"mean queueing delay: {r['queue_delay_up_s'] * 1e6:.3f} us up, "
        f"{r['queue_delay_down_s'] * 1e6:.3f} us down"
    )
    print(
        f"simulator: {r['sim_seconds'] * 1e3:.3f} ms simulated in {r['wall_seconds']:.2f} s "
        f"of wall time, {r['wall_packets_per_second']:,.0f} packets per wall second, "
        f"{r['events']} events"
    )


# Memory of a checked run: every worker's tensor, its fixed-point copy and its share of the
# sums, about 21 bytes per value per worker (RSS measured at 2 and 8 workers, 1e6 and 4e6
# values), rounded up; timing-only runs hold no values.
BYTES_PER_VALUE_PER_WORKER = 24


def check_memory(size: int, workers: int, timing_only: bool = False, of: int | None = None) -> None:
    """ValueError before a run that would not fit in memory, with the estimate: ``workers``
    simulated workers (timing only: classes, of ``of`` workers in all)."""
    need = BYTES_PER_VALUE_PER_WORKER * size * workers
    have = available_memory()
    if have is None or need <= have:
        return
    if timing_only and workers > 1:
        raise ValueError(
            f"--size {size:,} with {workers:,} classes of alike workers (of {of or workers:,}; "
            f"every link with loss or a random delay profile, and every worker with its own "
            f"compute, is a class) needs about {need / 2**30:,.1f} GiB even timing only, and "
            f"{have / 2**30:,.1f} GiB is free: make fewer links and workers differ, or use a "
            "smaller --size"
        )
    if timing_only:
        raise ValueError(
            f"--size {size:,} needs about {need / 2**30:,.1f} GiB even timing only (one "
            f"worker's tensor), and {have / 2**30:,.1f} GiB is free: use a smaller --size"
        )
    raise ValueError(
        f"--size {size:,} with {workers} workers needs about {need / 2**30:,.1f} GiB to "
        f"check every sum, and {have / 2**30:,.1f} GiB is free: use --timing-only "
        "(times and traffic, no values) or a smaller --size"
    )


@dataclass(frozen=True)
class Prepared:
    """What `ina sim allreduce`'s options describe, checked."""

    spec: NetworkSpec
    compute_s: float
    stragglers: Stragglers
    fail: tuple[int, float] | None


def prepare(args: argparse.Namespace) -> Prepared:
    """The run the parsed options describe; ValueError (one line) for a user's mistake.
    Sets ``args.size`` to an int."""
    if not (math.isfinite(args.size) and args.size >= 1 and args.size == int(args.size)) or (
        args.iters < 1
    ):
        raise ValueError("--size must be a whole number >= 1 and --iters >= 1")
    args.size = int(args.size)
    if args.out is not None:
        output_dir(args.out)  # before the simulation, not after it
    fabric = topology.load(args.topology) if args.topology else None
    if (args.link or args.rack) and fabric is None:
        raise ValueError("--link and --rack name links of a --topology (e.g. two_level:4x8)")
    if fabric is not None:
        fabric = with_link_conditions(fabric, args.link, args.rack)
    workers = len(fabric.workers) if fabric else args.workers
    # timing only: the classes' tensors, checked once they are known (in `run`); the
    # flow level holds none
    if not (args.timing_only or args.flow):
        check_memory(args.size, workers)
    if not 0 < args.density <= 1:
        raise ValueError(f"--density must be in (0, 1], got {args.density}")
    compute_s = units.seconds(args.compute, "--compute")
    fail = parse_fail(args.fail, workers) if args.fail else None
    stragglers = parse_stragglers(args.stragglers)
    stragglers.factor_matrix(workers, 1, 0)  # a worker out of range: one line now
    if args.stragglers != "none" and not compute_s:
        raise ValueError(
            f"--stragglers {args.stragglers} scales each worker's --compute: give one "
            "(e.g. --compute 20ms); without it there is nothing to slow down"
        )
    if args.placement != "separate" and args.jobs < 2:
        raise ValueError(
            f"--placement {args.placement} places the workers of several --jobs: give "
            "--jobs 2 or more"
        )
    if args.flow:  # the links' conditions, before timing only's own reasons for them
        if args.sim_backend != "fast":  # before asking whether that backend is installed
            raise ValueError(
                f"--flow runs no packets, on no backend: drop --backend {args.sim_backend}"
            )
        flow.check(network_spec(args, 1, args.lanes, args.pool), args.density, fail)
    spec = replace(
        network_spec(
            args,
            len(fabric.workers) if fabric else args.workers,
            args.lanes,
            args.pool,
            seed=args.seed,
            # (the flow level simulates no worker: any number, as timing only)
            timing_only=args.timing_only or args.flow,
            topology=fabric,
        ),
        jobs=args.jobs,
        placement=args.placement,
        switch_slots=args.switch_slots,
    )
    if args.jobs > 1 and args.density != 1:
        raise ValueError("--jobs runs dense allreduces (no --density)")
    if args.jobs > 1 and (compute_s or args.stragglers != "none" or fail):
        raise ValueError("--jobs runs allreduces alone: no --compute, --stragglers or --fail")
    if args.flow:
        flow.check(spec, args.density, fail)
    return Prepared(spec, compute_s, stragglers, fail)


def main(args: argparse.Namespace) -> int:
    try:
        p = prepare(args)
    except ValueError as e:
        print(f"ina sim allreduce: {e}", file=sys.stderr)
        return 2
    spec, compute_s, stragglers, fail = p.spec, p.compute_s, p.stragglers, p.fail
    if args.flow:
        r = flow.run(spec, args.size, args.iters, compute_s, stragglers, args.seed)
        flow.print_result(r)
        write(args.out, r)
        return 0
    if args.jobs > 1:
        from ina.sim import jobs

        r = jobs.run(spec, args.size, args.iters, args.seed)
        jobs.print_result(r)
        write(args.out, r)
        return 0 if r["exact"] else 1
    try:
        r = run(
            spec, args.size, args.iters, args.density, args.seed,
            compute_s=compute_s, stragglers=stragglers, max_memory=True, fail=fail,
        )  # fmt: skip
    except ValueError as e:  # (the classes' memory)
        print(f"ina sim allreduce: {e}", file=sys.stderr)
        return 2
    print_result(r)
    write(args.out, r)
    return 0 if r.get("exact") else 1


def parse_fail(text: str, workers: int) -> tuple[int, float]:
    """``WORKER@TIME`` -> (worker, seconds); ValueError (one line) otherwise."""
    w, at, t = text.partition("@")
    if not at or not w.strip().isdigit():
        raise ValueError(f"--fail {text!r}: use WORKER@TIME, e.g. 5@1ms")
    if not int(w) < workers:
        raise ValueError(f"--fail {text!r}: worker {w} of {workers} (0..{workers - 1})")
    seconds = units.seconds(t, "--fail time")
    if not seconds >= 0:
        raise ValueError(f"--fail {text!r}: the time must be >= 0")
    return int(w), seconds


def write(out: str | None, r: dict) -> None:
    """``out``/result.json, if asked for."""
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "result.json").write_text(json.dumps(r, indent=2) + "\n")
