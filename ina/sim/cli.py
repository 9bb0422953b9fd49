"""`ina sim {allreduce,validate,compare,collectives,published,calibrate,train,fidelity,mergecomp,scenarios}`: the virtual-time
simulator's commands
(`ina train --sim` runs training in it)."""

from __future__ import annotations

import argparse
import importlib
import sys

from ina.errors import HelpFormatter

COMMANDS = {
    "allreduce": ("ina.sim.allreduce", "N workers allreduce a tensor in simulated time"),
    "validate": ("ina.sim.validate", "simulated vs measured time on emulated links (a table)"),
    "compare": ("ina.sim.compare", "INA against ring and halving-doubling all-reduce"),
    "collectives": (
        "ina.sim.collectives_cli",
        "NCCL's collectives, INA and SHARP on a cluster, printed as nccl-tests prints them",
    ),
    "published": (
        "ina.sim.published",
        "ina's predictions against published measurements (nccl-tests, training), with errors",
    ),
    "calibrate": (
        "ina.workload.calibrate",
        "derive the compute efficiencies from their named measurements",
    ),
    "train": ("ina.sim.train_steps", "steps of a model's gradients, no training (timing)"),
    "fidelity": ("ina.sim.fidelity", "the fast engine against the ns-3 backend (a table)"),
    "mergecomp": (
        "ina.sim.mergecomp",
        "MergeComp's partition of a model's gradients vs per tensor and DDP's buckets",
    ),
    "scenarios": ("ina.sim.generate", "generate scenario files drawn from families of paths"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="sim_command", required=True, metavar="COMMAND")
    argv = sys.argv[sys.argv.index("sim") + 1 :] if "sim" in sys.argv else []
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            formatter_class=HelpFormatter,
        )
        if argv and argv[0] == name:  # only the command being run loads its module
            importlib.import_module(module).add_arguments(sp)


def main(args: argparse.Namespace) -> int:
    module, _ = COMMANDS[args.sim_command]
    return int(importlib.import_module(module).main(args) or 0)
