"""`ina sim compare`: INA against ring and halving-doubling all-reduce on the same network.

One allreduce of ``--params`` float32 values per worker across ``--workers`` workers (any
number: INA runs timing-only, one representative worker for all; the baselines likewise),
over the links and switch of the network options. Prints the simulated time of each, the
speed-up of INA, and the bandwidth bound of that speed-up (2(N-1)/N: the bytes a ring sends
per worker against INA's once). ``--sweep`` prints the table against N and message size.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from ina.sim.allreduce import run
from ina.sim.baselines import allreduce_time, bound
from ina.sim.network import NetworkSpec
from ina.sim.options import add_network_arguments, describe, network_spec

SWEEP_WORKERS = (8, 64, 512, 1024, 4096)
SWEEP_PARAMS = (1e4, 1e6, 25e6)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=1024)
    p.add_argument("--params", type=float, default=25e6, help="float32 values per worker")
    p.add_argument("--lanes", type=int, default=256)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--sweep", action="store_true", help="the table against N and size")
    add_network_arguments(p)


def compare(spec: NetworkSpec, n: int) -> dict:
    """INA (timing only, the second call: the run already joined), ring, halving-doubling."""
    ina = run(replace(spec, timing_only=True), n, 2)["call_seconds"][1]
    out = {"workers": spec.workers, "params": n, "ina": ina}
    for algorithm in ("ring", "halving-doubling"):
        try:
            out[algorithm] = allreduce_time(spec, n, algorithm)["seconds"]
        except ValueError:  # halving-doubling: not a power of two
            out[algorithm] = None
    out["bound"] = bound("ring", spec.workers)
    return out


def row(r: dict) -> str:
    hd = r["halving-doubling"]
    return (
        f"| {r['workers']} | {r['params']:,.0f} | {1e3 * r['ina']:.3f} | {1e3 * r['ring']:.3f} | "
        f"{'-' if hd is None else f'{1e3 * hd:.3f}'} | {r['ring'] / r['ina']:.2f}x | "
        f"{r['bound']:.2f}x |"
    )


def main(args: argparse.Namespace) -> int:
    try:
        if args.params < 1 or args.params != int(args.params):
            raise ValueError("--params must be a whole number >= 1")
        spec = network_spec(
            args, args.workers, args.lanes, args.pool, timing_only=True
        )  # checks the options (and that the links are alike and deterministic)
    except ValueError as e:
        print(f"ina sim compare: {e}", file=sys.stderr)
        return 2
    print(f"network: {describe(spec)}\n")
    print("| workers | values | INA ms | ring ms | halving-doubling ms | INA vs ring | bound |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    cases = (
        [(w, p) for w in SWEEP_WORKERS for p in SWEEP_PARAMS]
        if args.sweep
        else [(args.workers, int(args.params))]
    )
    for workers, n in cases:
        print(row(compare(replace(spec, workers=workers), int(n))), flush=True)
    return 0
