"""`ina bench flow`: the flow-level mode against the packet engine, on the same runs.

Each row is one `ina sim allreduce` command, run twice in this process: by the packet engine
(timing only: one worker per class of alike workers, the real transport and pipeline) and
with ``--flow`` (`ina.sim.flow`). It prints each one's simulated time of the whole run
(every call, with its compute) and of the last call, their difference, and the wall time
each took. The rows are bulk transfers (4 M values per worker) on the conditions the flow
level models: line rate, a slower link, a slower pipeline, capacity and cross-traffic
episodes, a tree whose window sets the pace, a congested leaf uplink, stragglers, 1,024
and 4,096 workers; and one latency-bound call of 1,000 values, where a fluid is not the right model.
"""

from __future__ import annotations

import argparse
import time

from ina.errors import UsageError
from ina.sim import allreduce, flow

EPISODES = "on_s=0.0002:off_s=0.0003:fixed=1"
TREE = ["--topology", "two_level:4x8"]
ROWS: list[tuple[str, list[str]]] = [
    ("8 workers, 100 Gbit/s", []),
    ("8 workers, 10 Gbit/s", ["--link-rate", "10G"]),
    ("8 workers, a 400 Gbit/s pipeline", ["--switch-rate", "400G"]),
    ("8 workers, half the capacity in episodes", ["--capacity", f"episodes:share=0.5:{EPISODES}"]),
    ("8 workers, 40 Gbit/s of cross packets in episodes",
     ["--cross", f"episodes:rate=40G:{EPISODES}"]),
    ("32 workers on 4 leaves (the window sets the pace)", TREE),
    ("32 workers, one leaf uplink at 25 Gbit/s", [*TREE, "--link", "l2:rate=25G"]),
    ("32 workers, 1 ms compute, one 1.5x straggler",
     [*TREE, "--compute", "1ms", "--stragglers", "slow:5=1.5"]),
    ("1,024 workers on 32 leaves, a leaf uplink in capacity episodes, a 1.5x straggler",
     ["--topology", "two_level:32x32", "--link", f"l7:capacity=episodes:share=0.5:{EPISODES}",
      "--compute", "1ms", "--stragglers", "slow:500=1.5"]),
    ("4,096 workers on three levels, one middle switch's uplink at 50 Gbit/s",
     ["--topology", "three_level:16x16x16", "--link", "m2:rate=50G"]),
    ("8 workers, 1,000 values (latency-bound)", ["--size", "1000"]),
]  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="4e6", help="float32 values per worker (bulk rows)")
    p.add_argument("--iters", type=int, default=2, help="calls per run")
    p.add_argument("--only", type=int, help=f"run row ONLY (1..{len(ROWS)}) instead of every row")


def compare(argv: list[str]) -> dict:
    """The packet engine's and the flow level's results of one `ina sim allreduce` command."""
    parser = argparse.ArgumentParser()
    allreduce.add_arguments(parser)
    args = parser.parse_args(["--timing-only", *argv])
    p = allreduce.prepare(args)
    t0 = time.perf_counter()
    packets = allreduce.run(
        p.spec, args.size, args.iters, compute_s=p.compute_s, stragglers=p.stragglers,
        seed=args.seed,
    )  # fmt: skip
    packet_wall = time.perf_counter() - t0
    fluid = flow.run(p.spec, args.size, args.iters, p.compute_s, p.stragglers, args.seed)
    return {
        "packet_s": packets["sim_seconds"],
        "flow_s": fluid["sim_seconds"],
        "packet_call_s": packets["call_seconds"][-1],
        "flow_call_s": fluid["call_seconds"][-1],
        "packet_wall_s": packet_wall,
        "flow_wall_s": fluid["wall_seconds"],
        "classes": packets["simulated_workers"],
    }


def diff(a: float, b: float) -> str:
    """``b`` against ``a``, signed, in per cent."""
    return f"{(b - a) / a:+.2%}"


def main(args: argparse.Namespace) -> int:
    if args.only is not None and not 1 <= args.only <= len(ROWS):
        raise UsageError(f"--only must be 1..{len(ROWS)}, got {args.only}")
    print(
        "| run | options | packet engine, whole run | flow level | difference | last call: "
        "packets | flow | difference | wall: packets s | flow ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (what, extra) in enumerate(ROWS, 1):
        if args.only is not None and i != args.only:
            continue
        argv = ["--size", args.size, "--iters", str(args.iters), *extra]
        r = compare(argv)
        print(
            f"| {what} | `{' '.join(extra) or '(defaults)'}` | {r['packet_s'] * 1e3:.4f} ms | "
            f"{r['flow_s'] * 1e3:.4f} ms | {diff(r['packet_s'], r['flow_s'])} | "
            f"{r['packet_call_s'] * 1e3:.4f} ms | {r['flow_call_s'] * 1e3:.4f} ms | "
            f"{diff(r['packet_call_s'], r['flow_call_s'])} | {r['packet_wall_s']:.1f} | "
            f"{r['flow_wall_s'] * 1e3:.1f} |",
            flush=True,
        )
    return 0
