"""Quantities on the command line and in scenario files: ``100G``, ``1us``, ``4MB``.

Rates are bits per second (``100G``, ``25Gbit/s``, ``10M``, ``1e9``); times are seconds
(``1us``, ``0.5ms``, ``2s``, ``1e-6``); sizes are bytes (``4MB``, ``256KiB``, ``1500``).
A bare number is in the base unit. Everything that does not parse, or is negative where it
may not be, is a ValueError with a message that names the quantity.
"""

from __future__ import annotations

import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_RATE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME = {"": 1, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60}
_SIZE = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024, "mib": 2**20, "gib": 2**30}


def _parse(text: str | float, units: dict[str, float], what: str, shown: object = None) -> float:
    shown = text if shown is None else shown
    if isinstance(text, int | float):
        value = float(text)
    else:
        m = re.fullmatch(_NUMBER + r"\s*([a-zA-Zµ/]*)", str(text).strip())
        unit = m.group(2).lower() if m else None
        if m is None or unit not in units:
            raise ValueError(
                f"{what} {shown!r} does not parse: use a number with one of the units "
                f"{', '.join(u for u in units if u)}"
            )
        value = float(m.group(1)) * units[unit]
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{what} must be a finite number >= 0, got {shown!r}")
    return value


def rate(text: str | float, what: str = "rate") -> float:
    """Bits per second: ``100G``, ``100Gbit/s``, ``100gbps``, ``25M``, ``1e9``."""
    t = str(text).strip().lower().replace("bit/s", "").replace("bps", "").replace("b/s", "")
    return _parse(t, _RATE, what, text)


def seconds(text: str | float, what: str = "time") -> float:
    """Seconds: ``1us``, ``0.5ms``, ``2s``, ``1e-6``."""
    return _parse(text, _TIME, what)


def size(text: str | float, what: str = "size") -> float:
    """Bytes: ``4MB``, ``256KiB``, ``1500``."""
    return _parse(text, _SIZE, what)
