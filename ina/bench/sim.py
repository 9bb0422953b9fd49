"""`ina bench sim`: how fast the simulator itself runs.

Simulated packets per wall second (every packet delivered by a link, both directions) of
dense allreduce calls with real data, per event kernel; and the wall time of `ina train
--sim` on the default digits job with 8 workers at 100 Gbit/s (the README compares it with
the wall-clock `make train`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from ina.errors import UsageError
from ina.sim.allreduce import run
from ina.sim.engine import ENGINES
from ina.sim.network import NetworkSpec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--lanes", type=int, default=256)
    p.add_argument("--size", type=int, default=1_000_000, help="float32 values per call")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed runs per engine; the fastest is reported (least disturbed by other load)",
    )
    p.add_argument("--no-train", action="store_true", help="skip the ina train --sim run")
    p.add_argument(
        "--scale",
        action="store_true",
        help="also: wall time of one timing-only allreduce against N (8-4096) and size",
    )


def scale_table() -> None:
    """Wall time of one timing-only INA allreduce at 100 Gbit/s, against N and size: one
    representative worker stands for all, so it grows with the size, not with N."""
    print("\n| workers | values | simulated ms | wall s | packets simulated |")
    print("|---:|---:|---:|---:|---:|")
    for workers, n in [(w, 25_000_000) for w in (8, 64, 512, 1024, 4096)] + [
        (1024, n) for n in (100_000, 1_000_000, 10_000_000)
    ]:
        spec = NetworkSpec(workers=workers, timing_only=True)
        r = run(spec, n, 1)
        print(
            f"| {workers} | {n:,} | {1e3 * r['sim_seconds']:.3f} | {r['wall_seconds']:.1f} | "
            f"{r['packets_on_links']:,} |",
            flush=True,
        )


def main(args: argparse.Namespace) -> int:
    for name in ("workers", "lanes", "size", "iters", "repeats"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1, got {getattr(args, name)}")
    try:
        NetworkSpec(workers=args.workers, lanes=args.lanes)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(
        "| engine | workers | lanes | calls x values | simulated ms | wall s | packets | "
        "packets per wall s | CPU s | packets per CPU s | events |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for engine in sorted(ENGINES):
        spec = NetworkSpec(workers=args.workers, lanes=args.lanes, engine=engine)
        run(spec, 20_000, 1)  # warm-up: imports, caches
        runs = [run(spec, args.size, args.iters) for _ in range(args.repeats)]
        assert all(r["exact"] for r in runs)
        r = min(runs, key=lambda r: r["wall_seconds"])
        print(
            f"| {engine} | {args.workers} | {args.lanes} | {args.iters} x {args.size:,} | "
            f"{1e3 * r['sim_seconds']:.3f} | {r['wall_seconds']:.2f} | "
            f"{r['packets_on_links']:,} | {r['wall_packets_per_second']:,.0f} | "
            f"{r['wall_cpu_seconds']:.2f} | {r['packets_on_links'] / r['wall_cpu_seconds']:,.0f} | "
            f"{r['events']:,} |",
            flush=True,
        )
    if args.scale:
        scale_table()
    if args.no_train:
        return 0
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "ina", "train", "--sim", "--workers", "8", "--link-rate"]
        cmd += ["100G", "--no-progress", "--out", out]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"ina train --sim failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
        return 1
    print(
        f"\n`ina train --sim --workers 8 --link-rate 100G` (digits, 20 epochs): "
        f"{wall:.1f} s of wall time, start-up included"
    )
    return 0
