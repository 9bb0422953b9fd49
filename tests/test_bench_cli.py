"""`ina bench`: every benchmark's options parse through the `ina` command (no benchmark runs)."""

from __future__ import annotations

import pytest

from ina.bench import cli as bench_cli
from ina.cli import main as ina_main


@pytest.mark.parametrize("name", sorted(bench_cli.BENCHES))
def test_every_benchmark_parses_its_options(name, capsys):
    with pytest.raises(SystemExit) as e:
        ina_main(["bench", name, "--help"])
    assert e.value.code == 0
    assert f"usage: ina bench {name}" in capsys.readouterr().out
    bench_cli.parser_for(name).parse_args([])  # the defaults parse too


def test_unknown_benchmark_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        ina_main(["bench", "compression", "--no-such-option"])
    assert e.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_bench_all_takes_no_options(capsys):
    assert ina_main(["bench", "all", "--quick"]) == 2
    assert capsys.readouterr().err.startswith("ina bench all: `ina bench all` runs every")


def test_result_copies_parses_its_options():
    """`python -m ina.bench.result_copies` (docs/control-plane.md's measurement) is not in
    `ina bench all` (it needs root and shapes links), but its options parse."""
    import argparse

    from ina.bench import result_copies

    p = argparse.ArgumentParser()
    result_copies.add_arguments(p)
    args = p.parse_args(["--target", "model", "--mbit", "2", "--rates", "4000", "8000"])
    assert (args.target, args.mbit, args.rates, args.workers) == ("model", 2.0, [4000.0, 8000.0], 4)


@pytest.mark.parametrize(
    "option, says",
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--workers", "40"], "workers must be 1..32 per job"),
        (["--lanes", "100000"], "lanes must be 1..4096"),
    ],
)
def test_bench_sim_bad_sizes_are_usage_errors(option, says, capsys):
    """Checked before anything runs: one line, exit 2, no traceback."""
    assert ina_main(["bench", "sim", "--no-train", *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ina bench sim: ") and says in err and "Traceback" not in err
