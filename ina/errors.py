"""Errors in what a user gave (an option, a file, a port), as opposed to bugs.

A command raises `UsageError` with a message that says what is wrong and how to fix it; the
`ina` command (and each module run with ``python -m``) prints it as one line,
``ina CMD: message``, and exits with status 2. A traceback is for bugs only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE_EXIT = 2  # argparse's status for bad options; ours for any bad input


class UsageError(ValueError):
    """Bad input from the user: shown as one line, exit status 2 (see the module docstring).

    A ValueError, so library callers that catch ValueError for bad values still do."""


class NonFiniteError(ValueError):
    """An allreduce input holds NaN or infinity: fixed point has no encoding for it, and
    a sum with it would be meaningless (the model has diverged, almost always)."""


class Diverged(Exception):
    """A worker's loss or gradient is not finite: the run cannot go on (the allreduce has
    no encoding for NaN or infinity), and every later step would be meaningless anyway."""

    def __init__(self, step: int, worker: int) -> None:
        super().__init__(
            f"training diverged at step {step}: worker {worker}'s loss or gradient is not "
            f"finite (a smaller --lr may help)"
        )
        self.step, self.worker = step, worker


def run_command(prog: str, main: Callable[..., int | None], *args) -> int:
    """``main(*args)``'s exit status (its int result; 0 for None or any other result), or 2
    after printing ``prog: message`` for a `UsageError`."""
    try:
        rc = main(*args)
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return USAGE_EXIT
    return rc if isinstance(rc, int) else 0
