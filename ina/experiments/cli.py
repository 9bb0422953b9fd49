"""`ina experiment {dc2,dc2-bound,grace,llm,stragglers}`: end-to-end experiments that write CSV, PNG plots and a summary."""

from __future__ import annotations

import argparse
import importlib

from ina.errors import HelpFormatter

EXPERIMENTS = {
    "dc2": ("ina.experiments.dc2", "DC2 vs no compression vs fixed levels, time to accuracy"),
    "dc2-bound": (
        "ina.experiments.dc2_bound",
        "the most any controller could gain over fixed levels on a profile (oracle)",
    ),
    "grace": (
        "ina.experiments.grace",
        "GRACE's methods through the switch: traffic, codec speed, time to target (--sim)",
    ),
    "llm": (
        "ina.experiments.llm",
        "where INA pays in LLM training: each collective's share by model, layout and network",
    ),
    "stragglers": (
        "ina.experiments.stragglers",
        "a slow worker and jitter at 1,024 workers: INA and ring beside the expectation",
    ),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT")
    for name, (module, help_text) in EXPERIMENTS.items():
        sp = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        importlib.import_module(module).add_arguments(sp)


def main(args: argparse.Namespace) -> int:
    module, _ = EXPERIMENTS[args.experiment]
    return int(importlib.import_module(module).main(args) or 0)


if __name__ == "__main__":  # python -m ina.experiments.cli dc2 ... (= ina experiment dc2 ...)
    import sys

    parser = argparse.ArgumentParser(prog="ina experiment", description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
