"""`ina bench {switch,compression,all}`: run benchmarks and print markdown tables."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "switch": "ina.bench.switch",
    "compression": "ina.bench.compression",
    "bmv2": "ina.bench.bmv2",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=[*BENCHES, "all"], help="benchmark to run")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for that benchmark")


def main(args: argparse.Namespace) -> int:
    names = list(BENCHES) if args.which == "all" else [args.which]
    for name in names:
        mod = importlib.import_module(BENCHES[name])
        parser = argparse.ArgumentParser(prog=f"ina bench {name}")
        mod.add_arguments(parser)
        print(f"\n## ina bench {name}\n", flush=True)
        mod.main(parser.parse_args(args.rest if args.which != "all" else []))
    return 0
