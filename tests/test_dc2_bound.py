"""`ina experiment dc2-bound`: the oracle's arithmetic, and a tiny run through the real
switch model that writes its tables (no wall-clock assertions)."""

from __future__ import annotations

import argparse
import csv
import math

import pytest

from ina.experiments import cli
from ina.experiments.dc2_bound import (
    Level,
    oracle_speedups,
    oracle_time,
    time_to_target,
)
from ina.netem import congested_fraction

# Dense is the best level on a quiet path, 1 % on a congested one.
LEVELS = [
    Level(1.0, steps_to_target=30, quiet_s=0.10, congested_s=2.0),
    Level(0.1, steps_to_target=40, quiet_s=0.09, congested_s=0.5),
    Level(0.01, steps_to_target=60, quiet_s=0.08, congested_s=0.2),
    Level(0.001, steps_to_target=math.nan, quiet_s=0.07, congested_s=0.15),  # never gets there
]


def test_fixed_level_time_is_the_inverse_of_its_mixed_rate():
    t = time_to_target(LEVELS, 0.5)
    assert t[1.0] == pytest.approx(1 / ((0.5 / 0.10 + 0.5 / 2.0) / 30))
    assert math.isinf(t[0.001])
    assert time_to_target(LEVELS, 0.0)[1.0] == pytest.approx(30 * 0.10)
    assert time_to_target(LEVELS, 1.0)[0.01] == pytest.approx(60 * 0.2)


@pytest.mark.parametrize("f", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_oracle_is_never_slower_than_any_fixed_level(f):
    fixed = time_to_target(LEVELS, f)
    assert oracle_time(LEVELS, f) <= min(fixed.values()) * (1 + 1e-12)


def test_oracle_takes_the_best_level_in_each_state():
    # Quiet: dense is best (3 s to target); congested: 1 % (12 s to target).
    assert oracle_time(LEVELS, 0.0) == pytest.approx(3.0)
    assert oracle_time(LEVELS, 1.0) == pytest.approx(12.0)
    t_star, vs_dense, vs_fixed = oracle_speedups(LEVELS, 0.5)
    assert t_star == pytest.approx(1 / (0.5 / 3.0 + 0.5 / 12.0))
    fixed = time_to_target(LEVELS, 0.5)
    assert vs_dense == pytest.approx(fixed[1.0] / t_star)
    assert vs_fixed == pytest.approx(min(fixed[0.1], fixed[0.01]) / t_star)
    assert vs_fixed > 1  # the levels' best states differ: switching pays
    # With one state only, the oracle is no better than the best fixed level.
    assert oracle_speedups(LEVELS, 0.0)[1] == pytest.approx(1.0)


def test_congested_fraction_from_the_profile():
    assert congested_fraction("high:episode_seed=3:episode_on_s=2:episode_off_s=6", 2) == (
        pytest.approx(0.25),
        True,
    )
    f, shared = congested_fraction("high", 2)  # per link: on 1 s, off 3 s, 4 links
    assert not shared and f == pytest.approx(1 - 0.75**4)
    with pytest.raises(ValueError, match="episodes"):
        congested_fraction("low", 2)


@pytest.mark.slow
def test_tiny_run_writes_bound_tables(tmp_path):
    out = tmp_path / "bound"
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(
        [
            "dc2-bound", "--model", "mlp", "--epochs", "1", "--levels", "1,0.1",
            "--timing-steps", "3", "--target-acc", "0.3", "--out", str(out),
        ]
    )  # fmt: skip
    assert cli.main(args) == 0
    with open(out / "bound.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["density"] for r in rows] == ["1", "0.1"]
    for r in rows:
        assert float(r["quiet_s_per_step"]) > 0 and float(r["congested_s_per_step"]) > 0
        assert 0 <= float(r["final_acc"]) <= 1
    # The congested path (episode on throughout) is slower than the quiet one.
    assert all(float(r["congested_s_per_step"]) > float(r["quiet_s_per_step"]) for r in rows)
    md = (out / "bound.md").read_text()
    assert "oracle" in md and "both goals reachable" in md
    assert (out / "quiet" / "dense" / "steps.csv").exists()
    assert (out / "congested" / "fixed_0.1" / "steps.csv").exists()


def test_bad_options_exit_2(tmp_path):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    for bad in (["--levels", "0.1"], ["--levels", "2,1"], ["--profile", "low"]):
        args = p.parse_args(["dc2-bound", "--out", str(tmp_path), *bad])
        assert cli.main(args) == 2
