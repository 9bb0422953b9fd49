"""`ina bench zoo`: seconds to build each model of the zoo (`ina.workload.zoo.measure`:
instantiate on the meta device, run one counted training step, make the layer rows), at the
model's defaults, uncached.

The first row is the one-off import of transformers (once per process, before the first
transformers model); each model's time is the fastest of ``--repeats`` builds.
"""

from __future__ import annotations

import argparse
import time

from ina.errors import UsageError
from ina.workload import zoo


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", help=f"comma-separated subset of: {', '.join(zoo.NAMES)}")
    p.add_argument("--repeats", type=int, default=2, help="builds per model; the fastest counts")


def main(args: argparse.Namespace) -> int:
    names = args.models.split(",") if args.models else list(zoo.NAMES)
    for name in names:
        if name not in zoo.ENTRIES:
            raise UsageError(f"unknown model {name!r}; known: {', '.join(zoo.NAMES)}")
    if args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}")
    print("| model | build s | layers | parameters | GFLOPs per step |")
    print("|---|---:|---:|---:|---:|")
    t = time.perf_counter()
    zoo._transformers()
    print(f"| (import transformers, once) | {time.perf_counter() - t:.2f} | | | |", flush=True)
    for name in names:
        best = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            w = zoo.measure(name)
            best = min(best, time.perf_counter() - t)
        print(
            f"| {name} | {best:.2f} | {len(w.layers)} | {w.params:,} | {w.flops / 1e9:,.1f} |",
            flush=True,
        )
    return 0
