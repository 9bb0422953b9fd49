"""`ina sim compare`: INA against ring and halving-doubling all-reduce on the same network.

One allreduce of ``--params`` float32 values per worker across ``--workers`` workers (any
number: INA runs timing-only, one representative worker for all; the baselines likewise),
over the links and switch of the network options. Prints the simulated time of each, the
speed-up of INA, and the bandwidth bound of that speed-up (2(N-1)/N: the bytes a ring sends
per worker against INA's once). ``--sweep`` prints the table against N and message size;
``--sweep-workers 8,64,1024`` and ``--sweep-params 256,2.5e5,25e6`` sweep either or both
(a list replaces ``--workers`` or ``--params``).
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
    p.add_argument("--sweep-workers", help="worker counts, comma-separated (replaces --workers)")
    p.add_argument("--sweep-params", help="values per worker, comma-separated (replaces --params)")
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
        f"| {r['workers']} | {r['params']:,.0f} | {4 * r['params']:,.0f} | {1e6 * r['ina']:,.1f} | "
        f"{1e6 * r['ring']:,.1f} | {'-' if hd is None else f'{1e6 * hd:,.1f}'} | "
        f"{r['ring'] / r['ina']:.2f}x | "
        f"{r['bound']:.2f}x |"
    )


def whole_numbers(text: str, what: str) -> list[int]:
    """``8,64,1e3`` -> [8, 64, 1000]; ValueError naming ``what`` unless whole numbers >= 1."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"{what} {text!r}: comma-separated numbers, e.g. 8,64,1024") from None
    if not values or any(v < 1 or v != int(v) for v in values):
        raise ValueError(f"{what} {text!r}: every value must be a whole number >= 1")
    return [int(v) for v in values]


def cases_of(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(workers, values) of every row the options ask for."""
    if args.params < 1 or args.params != int(args.params):
        raise ValueError("--params must be a whole number >= 1")
    if args.sweep:
        return [(w, int(p)) for w in SWEEP_WORKERS for p in SWEEP_PARAMS]
    workers = (
        whole_numbers(args.sweep_workers, "--sweep-workers")
        if args.sweep_workers
        else [args.workers]
    )
    params = (
        whole_numbers(args.sweep_params, "--sweep-params")
        if args.sweep_params
        else [int(args.params)]
    )
    if min(workers) < 2:
        raise ValueError("a comparison needs at least 2 workers (one worker has nothing to reduce)")
    return [(w, p) for w in workers for p in params]


def main(args: argparse.Namespace) -> int:
    try:
        cases = cases_of(args)
        spec = network_spec(
            args, args.workers, args.lanes, args.pool, timing_only=True
        )  # checks the options (and that the links are alike and deterministic)
    except ValueError as e:
        print(f"ina sim compare: {e}", file=sys.stderr)
        return 2
    several = len({w for w, _ in cases}) > 1
    print(f"network{' (workers: each row)' if several else ''}: {describe(spec)}\n")
    print(
        "| workers | values | bytes | INA us | ring us | halving-doubling us | INA vs ring "
        "| bound |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workers, n in cases:
        try:
            r = compare(replace(spec, workers=workers), n)
        except ValueError as e:  # e.g. a worker count out of range
            print(f"ina sim compare: {e}", file=sys.stderr)
            return 2
        print(row(r), flush=True)
    return 0
