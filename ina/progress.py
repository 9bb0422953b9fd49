"""Progress for long commands: runs done out of runs planned, with tqdm's estimate of the time
left. Drawn on a terminal's stderr only, so that piped or captured output (CI, tests, a
report written to a file) stays clean; ``INA_PROGRESS=1`` forces it on, ``=0`` off."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def enabled() -> bool:
    """Whether progress is drawn: on a terminal, unless ``INA_PROGRESS`` says otherwise."""
    forced = os.environ.get("INA_PROGRESS")
    if forced is not None:
        return forced not in ("", "0")
    return sys.stderr.isatty()


def bar(total: int | None, desc: str, unit: str = "run") -> tqdm:
    """A progress bar of ``total`` steps (``bar.update(n)`` as they finish); a no-op object
    when progress is off."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=not enabled(),
        leave=False,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def track(
    items: Iterable[T], desc: str, total: int | None = None, unit: str = "run"
) -> Iterator[T]:
    """Iterate ``items`` with a bar (see :func:`bar`)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as b:
        for item in items:
            yield item
            b.update(1)
