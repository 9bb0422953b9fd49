"""Quantities on the command line (`ina.units`) and the shared argparse helpers."""

from __future__ import annotations

import argparse
import math

import pytest

from ina import units
from ina.errors import HelpFormatter, whole_number


@pytest.mark.parametrize(
    "text, bps",
    [("100G", 100e9), ("25Gbit/s", 25e9), ("10M", 10e6), ("1000bit/s", 1e3), ("40gbps", 40e9),
     ("0", 0.0), (1e9, 1e9), (2500, 2500.0)],
)  # fmt: skip
def test_rates_with_their_unit(text, bps):
    assert units.rate(text) == bps


@pytest.mark.parametrize("text, hint", [("1000", "write 1G for 1000 Mbit/s, or 1k for 1000 bit/s"),
                                        ("1e9", "write 1000T for 1e9 Mbit/s, or 1G for 1e9 bit/s"),
                                        ("7", "write 7M for 7 Mbit/s, or 7bit/s for 7 bit/s")])  # fmt: skip
def test_a_bare_number_is_not_a_rate_and_the_error_spells_out_both_readings(text, hint):
    with pytest.raises(ValueError, match=r"--link-rate .* needs a unit") as e:
        units.rate(text, "--link-rate")
    assert hint in str(e.value)


@pytest.mark.parametrize("text", ["fast", "-1G", "infG", "1Q"])
def test_rates_that_do_not_parse(text):
    with pytest.raises(ValueError, match="rate"):
        units.rate(text)


def test_times_and_sizes_take_a_bare_number_in_their_base_unit():
    assert units.seconds("2") == 2.0 and units.seconds("1us") == 1e-6
    assert units.size("1500") == 1500 and units.size("256KiB") == 256 * 1024


@pytest.mark.parametrize(
    "s, text",
    [(0.39035858, "390.36 ms"), (1234.5, "1,234.50 s"), (12.5e-6, "12.50 us"), (3e-9, "3.00 ns"),
     (0.0, "0.00 ns")],
)  # fmt: skip
def test_durations_for_people(s, text):
    assert units.format_seconds(s) == text


def test_plural():
    assert units.plural(1, "call") == "1 call" and units.plural(1024, "worker") == "1,024 workers"


def test_whole_number_takes_exponents_and_refuses_fractions():
    assert whole_number("4e6") == 4_000_000 and whole_number("12") == 12
    for bad in ("1.5", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            whole_number(bad)
    assert not math.isnan(whole_number("0"))


def test_help_shows_a_default_once_and_none_never():
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--a", type=int, default=3)
    p.add_argument("--b", default=None, help="no default to show")
    p.add_argument("--c", default="x", help="says its own (default: x)")
    p.add_argument("--d", action="store_true", help="a flag")
    text = " ".join(p.format_help().split())
    assert "--a A default: 3" in text and "(default: None)" not in text
    assert text.count("(default: x)") == 1 and "a flag (default" not in text
