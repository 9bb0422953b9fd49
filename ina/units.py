"""Quantities on the command line and in scenario files: ``100G``, ``1us``, ``4MB``.

Rates are bits per second and need their unit on the command line and in files
(``100G``, ``25Gbit/s``, ``10M``, ``1000bit/s``): a bare ``1000`` has meant Mbit/s in one
tool and bit/s in another, so it is refused with the two readings spelled out. A number
that is already numeric (a JSON number in a scenario file) is bits per second. Times are
seconds (``1us``, ``0.5ms``, ``2s``; a bare number is seconds); sizes are bytes (``4MB``,
``256KiB``, ``1500``; a bare number is bytes). Everything that does not parse, or is
negative where it may not be, is a ValueError with a message that names the quantity.
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
    """Bits per second: ``100G``, ``100Gbit/s``, ``100gbps``, ``25M``, ``1000bit/s``; a
    string without a unit is refused (see the module's docstring), a float is bit/s."""
    if isinstance(text, int | float):
        return _parse(text, _RATE, what)
    raw = str(text).strip()
    t = raw.lower()
    has_unit = any(t.endswith(u) for u in ("bit/s", "bps", "b/s"))
    t = t.replace("bit/s", "").replace("bps", "").replace("b/s", "")
    value = _parse(t, _RATE, what, text)
    if not has_unit and re.fullmatch(_NUMBER, t) and value != 0:
        raise ValueError(
            f"{what} {raw} needs a unit: write {_with_prefix(value * 1e6)} for "
            f"{raw} Mbit/s, or {_with_prefix(value)} for {raw} bit/s"
        )
    return value


def _scaled(bps: float) -> tuple[float, str]:
    """(value, SI prefix) of a rate: (100, "G") for 1e11, (7, "") for 7."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bps >= scale:
            return bps / scale, prefix
    return bps, ""


def _with_prefix(bps: float) -> str:
    """A rate as the command line takes it: ``1G``, ``100M``, ``5k`` or ``7bit/s``."""
    value, prefix = _scaled(bps)
    return f"{value:g}{prefix or 'bit/s'}"


def seconds(text: str | float, what: str = "time") -> float:
    """Seconds: ``1us``, ``0.5ms``, ``2s``, ``1e-6``."""
    return _parse(text, _TIME, what)


def size(text: str | float, what: str = "size") -> float:
    """Bytes: ``4MB``, ``256KiB``, ``1500``."""
    return _parse(text, _SIZE, what)


def format_seconds(s: float) -> str:
    """A duration for people: ``390.36 ms``, ``12.50 us``, ``1,234.5 s`` (3 to 5 digits)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(s) >= scale or unit == "ns":
            return f"{s / scale:,.2f} {unit}"
    raise AssertionError("unreachable")


def plural(n: int, noun: str) -> str:
    """``1 call``, ``2 calls``, ``1,024 workers``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def format_rate(bps: float) -> str:
    """A rate for people: ``100 Gbit/s``, ``25 Mbit/s``, ``7 bit/s``."""
    value, prefix = _scaled(bps)
    return f"{value:g} {prefix}bit/s"
