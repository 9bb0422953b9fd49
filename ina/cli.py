"""The `ina` command: one subcommand per job a user does.

    ina switch      run the switch model (UDP data path + P4Runtime service)
    ina allreduce   N workers allreduce a tensor through a switch, checked exactly
    ina counters    read a switch's aggregation counters over P4Runtime (once or live)
    ina train       data-parallel training with gradients summed in the (simulated) switch
    ina bench       benchmarks (switch throughput, compression, BMv2)
    ina experiment  experiments (dc2, dc2-bound, grace, stragglers)
    ina sim         the virtual-time simulator (allreduce, train, compare, validate, ...)
    ina reproduce   a seed paper's headline experiment, with verdicts
    ina workloads   the model zoo

Each subcommand lives in its own module with ``add_arguments(parser)`` and ``main(args)``;
this file only maps names to modules, importing a module when its command runs. Bad input
(`ina.errors.UsageError`) is printed as one line, ``ina CMD: message``, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ina.errors import INTERRUPTED_EXIT, HelpFormatter, run_command

COMMANDS = {
    "switch": ("ina.switch_model.run", "run the switch model"),
    "allreduce": ("ina.host.allreduce_cmd", "allreduce a tensor with N workers and check it"),
    "counters": ("ina.control.counters_cli", "read a switch's counters over P4Runtime"),
    "train": ("ina.train_cli", "train a PyTorch model with gradients summed in the switch"),
    "bench": ("ina.bench.cli", "run benchmarks"),
    "experiment": ("ina.experiments.cli", "run an experiment (dc2, dc2-bound, grace, stragglers)"),
    "sim": ("ina.sim.cli", "simulate in virtual time (allreduce, train, compare, validate, ...)"),
    "reproduce": ("ina.experiments.reproduce.cli", "re-run a seed paper's headline experiment"),
    "workloads": ("ina.workload.cli", "list the model zoo"),
}


# where the commands with subcommands keep the one chosen (their add_subparsers dest)
SUBCOMMANDS = ("sim_command", "experiment", "study", "which")


def version() -> str:
    """The installed package's version (pyproject.toml), or "unknown" outside an install."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ina")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ina", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"ina {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, formatter_class=HelpFormatter)
        sp.set_defaults(_module=module)
        # Parse lazily: load the module's own arguments only for the command being run.
        if argv and argv[0] == name:
            importlib.import_module(module).add_arguments(sp)
            _name_the_choices(sp)
    return parser.parse_args(argv)


def _name_the_choices(parser: argparse.ArgumentParser) -> None:
    """``--help`` lists every name a command's positional takes: argparse lists a
    subcommand only when it has a help line, so a positional whose subcommands have none
    (``ina reproduce NAME``) says its names in its own help."""
    for action in parser._actions:  # (argparse keeps a parser's arguments only here)
        if not action.option_strings and action.choices and action.help is None:
            names = action.choices.keys() if isinstance(action.choices, dict) else action.choices
            listed = {getattr(a, "dest", None) for a in getattr(action, "_choices_actions", [])}
            if not set(names) <= listed:
                action.help = "one of: " + ", ".join(names)


def main(argv: list[str] | None = None) -> int:
    if argv is not None:  # called from Python: the subcommands' parsers read sys.argv too
        sys.argv = [sys.argv[0] if sys.argv else "ina", *argv]
    argv = sys.argv[1:]
    try:
        args = _parse(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load: as during its run
        words = [a for a in argv[:2] if not a.startswith("-")]
        grouped = (["sim"], ["experiment"], ["reproduce"], ["bench"])  # commands of commands
        shown = words[:2] if words[:1] in grouped else words[:1]
        print(f"{' '.join(['ina', *shown])}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    # `ina sim allreduce: ...`, not `ina sim: ...`, for commands with subcommands
    sub = next((getattr(args, k) for k in SUBCOMMANDS if getattr(args, k, None)), None)
    prog = f"ina {args.command}" + (f" {sub}" if sub else "")
    return run_command(prog, importlib.import_module(args._module).main, args)


if __name__ == "__main__":
    sys.exit(main())
