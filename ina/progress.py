"""Progress for long commands: runs done out of runs planned, with the time left.

On a terminal's stderr, a tqdm bar redrawn in place. Anywhere else (``| tee log``, ``2>&1 |
cat``, CI, a batch job's log) a plain line on stderr now and then (`Lines`: when both 10 % of
the work and 30 s have passed since the last one), so that a log of a run of minutes is not
silent and a run of seconds, or a test's captured output, gets no line at all. Never on
stdout, which holds the results. ``INA_PROGRESS`` overrides: ``1`` a bar, ``lines`` lines,
``0`` nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

LINE_EVERY_S = 30.0  # a plain line at most this often ...
LINE_EVERY_SHARE = 0.1  # ... and only once the work has advanced by this share since the last


def mode() -> str:
    """``"bar"`` on a terminal, ``"lines"`` elsewhere, ``"off"``; ``INA_PROGRESS`` (``1``,
    ``lines``, ``0``) overrides."""
    forced = os.environ.get("INA_PROGRESS")
    if forced is not None:
        return "off" if forced in ("", "0") else "lines" if forced == "lines" else "bar"
    return "bar" if sys.stderr.isatty() else "lines"


def enabled() -> bool:
    """Whether a bar is drawn (on a terminal, unless ``INA_PROGRESS`` says otherwise)."""
    return mode() == "bar"


class Lines:
    """Progress as plain lines, for a stream that is not a terminal: the bar's interface
    (``update``, ``write``, ``close``, a context manager).

    A line, ``DESC: N/TOTAL UNITs (P %), M:SS elapsed, about M:SS left``, when at least
    ``every_s`` seconds and ``every_share`` of ``total`` have passed since the last one (of
    an unknown total, every ``every_s`` seconds); none at the end (the command's own output
    follows). ``clock`` is passed in so that a test can drive it."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "run",
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = LINE_EVERY_S,
        every_share: float = LINE_EVERY_SHARE,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.file = sys.stderr if file is None else file
        self.clock, self.every_s, self.every_share = clock, every_s, every_share
        self.n = 0
        self.start = self._last_t = clock()
        self._last_n = 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self._last_t < self.every_s or (self.total and self.n >= self.total):
            return
        if self.total and self.n - self._last_n < self.every_share * self.total:
            return
        self._last_t, self._last_n = now, self.n
        print(self.line(now), file=self.file, flush=True)

    def line(self, now: float) -> str:
        elapsed = now - self.start
        units = self.unit if self.n == 1 and not self.total else f"{self.unit}s"
        if not self.total:
            return f"{self.desc}: {self.n} {units}, {_clock(elapsed)} elapsed"
        left = elapsed * (self.total - self.n) / self.n if self.n else float("nan")
        return (
            f"{self.desc}: {self.n}/{self.total} {units} ({100 * self.n / self.total:.0f} %), "
            f"{_clock(elapsed)} elapsed, about {_clock(left)} left"
        )

    def write(self, s: str, file: TextIO | None = None, end: str = "\n") -> None:
        """A line of the command's own (as tqdm's ``write``: the bar's interface)."""
        print(s, file=sys.stdout if file is None else file, end=end)

    def close(self) -> None:
        pass

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _clock(seconds: float) -> str:
    """``M:SS`` (``H:MM:SS`` from an hour), ``?`` when unknown."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def bar(total: int | None, desc: str, unit: str = "run") -> tqdm | Lines:
    """A progress bar of ``total`` steps (``bar.update(n)`` as they finish): tqdm's on a
    terminal, `Lines` elsewhere, a no-op tqdm when progress is off."""
    how = mode()
    if how == "lines":
        return Lines(total, desc, unit)
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=how == "off",
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
