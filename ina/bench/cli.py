"""`ina bench {switch,compression,compressors,bmv2,p4runtime,sim,classes,flow,zoo,report,all}`: run
benchmarks, print markdown tables.

Each benchmark is a module with ``add_arguments(parser)`` and ``main(args)``, like the `ina`
subcommands; ``ina bench NAME --help`` lists its options. ``ina bench report`` runs the
benchmarks' commands and writes docs/benchmarks.md (`make bench-report`); ``ina bench all``
runs every benchmark but the report, which would run them again.
"""

from __future__ import annotations

import argparse
import importlib

from ina.errors import HelpFormatter, UsageError

BENCHES = {
    "switch": "ina.bench.switch",
    "compression": "ina.bench.compression",
    "compressors": "ina.bench.compressors",
    "bmv2": "ina.bench.bmv2",
    "p4runtime": "ina.bench.p4runtime",
    "sim": "ina.bench.sim",
    "classes": "ina.bench.classes",
    "flow": "ina.bench.flow",
    "zoo": "ina.bench.zoo",
    "report": "ina.bench.report",
}
NOT_IN_ALL = {"report"}  # it runs the others itself
ALL = [name for name in BENCHES if name not in NOT_IN_ALL]


def parser_for(name: str) -> argparse.ArgumentParser:
    """The argument parser of benchmark ``name``, with that module's options."""
    parser = argparse.ArgumentParser(prog=f"ina bench {name}", formatter_class=HelpFormatter)
    importlib.import_module(BENCHES[name]).add_arguments(parser)
    return parser


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "which",
        choices=[*BENCHES, "all"],
        help="benchmark to run (report: run them and write docs/benchmarks.md)",
    )
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for that benchmark")


def main(args: argparse.Namespace) -> int:
    """Run the benchmark(s); the exit status is the largest integer one returned."""
    if args.which == "all" and args.rest in (["-h"], ["--help"]):
        print(
            f"usage: ina bench all\n\nruns every benchmark ({', '.join(ALL)}) with its "
            "defaults; it takes no options (`ina bench NAME --help` lists a benchmark's)"
        )
        return 0
    if args.which == "all" and args.rest:
        raise UsageError("`ina bench all` runs every benchmark with its defaults: no options")
    names = ALL if args.which == "all" else [args.which]
    # Parse every benchmark's options before running any: a typo fails at once.
    parsed = [(name, parser_for(name).parse_args(args.rest)) for name in names]
    for name, options in parsed:  # and check them, where a benchmark can
        check = getattr(importlib.import_module(BENCHES[name]), "check_options", None)
        if check is not None:
            check(options)
    status = 0
    for name, options in parsed:
        print(f"\n## ina bench {name}\n", flush=True)
        out = importlib.import_module(BENCHES[name]).main(options)
        if isinstance(out, int) and not isinstance(out, bool):
            status = max(status, out)
    return status
