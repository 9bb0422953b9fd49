"""`ina bench {switch,compression,compressors,bmv2,all}`: run benchmarks, print markdown tables."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "switch": "ina.bench.switch",
    "compression": "ina.bench.compression",
    "compressors": "ina.bench.compressors",
    "bmv2": "ina.bench.bmv2",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=[*BENCHES, "all"], help="benchmark to run")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for that benchmark")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark(s); the exit status is the largest integer one returned."""
    names = list(BENCHES) if args.which == "all" else [args.which]
    status = 0
    for name in names:
        mod = importlib.import_module(BENCHES[name])
        parser = argparse.ArgumentParser(prog=f"ina bench {name}")
        mod.add_arguments(parser)
        print(f"\n## ina bench {name}\n", flush=True)
        out = mod.main(parser.parse_args(args.rest if args.which != "all" else []))
        if isinstance(out, int) and not isinstance(out, bool):
            status = max(status, out)
    return status
