"""Errors in what a user gave (an option, a file, a port), as opposed to bugs.

A command raises `UsageError` with a message that says what is wrong and how to fix it; the
`ina` command (and each module run with ``python -m``) prints it as one line,
``ina CMD: message``, and exits with status 2. A traceback is for bugs only. Ctrl-C ends a
command with one line and status 130, SIGTERM with one line and 143, each after the
command's clean-up has stopped what it started (`run_command`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

USAGE_EXIT = 2  # argparse's status for bad options; ours for any bad input
INTERRUPTED_EXIT = 130  # a shell's status for a command ended by SIGINT (128 + 2)
TERMINATED_EXIT = 143  # ... and by SIGTERM (128 + 15)


class UsageError(ValueError):
    """Bad input from the user: shown as one line, exit status 2 (see the module docstring).

    A ValueError, so library callers that catch ValueError for bad values still do."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a job scheduler), raised in the main thread as Ctrl-C's
    KeyboardInterrupt is (`sigterm_as_interrupt`): a KeyboardInterrupt, so that the blocks
    that stop what a command started on Ctrl-C (children by PID, temporary folders) run
    for it too, instead of the command dying with its switch and ranks left running."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` inside (in the main thread; elsewhere signal handlers
    cannot be set). Further SIGTERMs are ignored while that one's clean-up runs: `timeout`
    sends two (to the command, then to its process group), and the second would otherwise
    cut the first's clean-up short. A command that sets its own handler inside (`ina
    switch`: SIGTERM is its normal stop) keeps it; a child forked inside dies of SIGTERM
    as it did before, until it sets its own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    owner = os.getpid()

    def terminated(signum, frame) -> None:
        if os.getpid() != owner:
            # a child forked inside (`ina switch`'s shards, as they start) has this handler
            # too: there SIGTERM ends the process, as it did before
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    after printing ``prog: message`` for a `UsageError`, or 130 after one line for Ctrl-C,
    143 for SIGTERM (the command's ``finally`` blocks have stopped what it started by then)."""
    try:
        with sigterm_as_interrupt():
            rc = main(*args)
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return USAGE_EXIT
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return TERMINATED_EXIT
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    return rc if isinstance(rc, int) else 0


def output_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """``path`` created if need be and checked writable before a run spends time on results
    it could not save; UsageError naming ``option`` otherwise."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".ina-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror or e})") from None
    return out


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` with every option's default, where it has one and its help text does not
    already say it (argparse's own formatter also prints "(default: None)")."""

    @staticmethod
    def _has_default(action: argparse.Action) -> bool:
        return (
            bool(action.option_strings)
            and action.nargs != 0
            and action.default not in (None, False, argparse.SUPPRESS, [], "")
        )

    def add_argument(self, action: argparse.Action) -> None:
        if action.help is None and self._has_default(action):
            action.help = "default: %(default)s"  # argparse prints no line for help=None
        super().add_argument(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or not self._has_default(action):
            return text
        return f"{text} (default: %(default)s)"


def whole_number(text: str) -> int:
    """argparse's type for a count that may be written ``4e6`` or ``4000000``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value.is_integer():  # NaN and infinity are not integers either
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)
