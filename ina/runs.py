"""Where a command's results go: a folder it names, by default ``runs/<command>/<time stamp>``,
checked writable before the run spends any time, and never shared by two runs' files."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from ina.errors import output_dir

RUNS = Path("runs")


def run_folder(out: str | os.PathLike | None, command: str, option: str = "--out") -> Path:
    """``out``, or a new ``runs/<command>/YYYYmmdd-HHMMSS[-N]`` folder; created and checked
    writable (`ina.errors.UsageError` naming ``option`` if not)."""
    if out is not None:
        return output_dir(out, option)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = output_dir(RUNS / command, option)
    for n in range(1000):
        candidate = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            candidate.mkdir()  # not exist_ok: two runs started in one second get two folders
        except FileExistsError:
            continue
        return candidate
    raise RuntimeError(f"{base}: 1000 runs started in one second?")


def clear_previous(out: Path, patterns: Iterable[str]) -> list[str]:
    """Remove the files a previous run of the same command left in ``out`` (those matching
    ``patterns``), so that the folder never mixes two runs; the names removed."""
    gone = []
    for pattern in patterns:
        for path in sorted(out.glob(pattern)):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            gone.append(path.name)
    return gone
