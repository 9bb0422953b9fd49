"""`ina experiment dc2 --sim --generated N` (issue 31): the regret distribution on synthetic
rows with a known answer (median, 90th percentile, worst, share beating every fixed level,
runs that missed the target), its report and CDF plot, the plan, and one-line errors."""

from __future__ import annotations

import argparse
import math

import matplotlib
import pytest
from conftest import ina_in_process

from ina.experiments import cli
from ina.experiments.dc2_sim import (
    DC2_DEFAULT,
    QUICK,
    analyse,
    goals,
    markdown,
    plan,
    regret_distribution,
    resolve,
)
from ina.experiments.dc2_sim_plots import plot_regret_cdf
from ina.sim import regret as rg

matplotlib.use("Agg")

LAW = DC2_DEFAULT["ownq"]


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = resolve(p.parse_args(["dc2", "--sim", *argv]))
    args.command = "ina experiment dc2 --sim " + " ".join(argv)
    return args


def test_percentiles_interpolate_and_a_missed_target_is_infinite():
    assert rg.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert rg.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert rg.percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0], 90) == 10.0
    assert rg.percentile([1.0, 2.0], 90) == pytest.approx(1.9)
    assert rg.percentile([1.0, math.inf], 90) == math.inf  # towards a missed target: inf
    assert rg.percentile([1.0, 2.0, math.inf], 50) == 2.0
    assert math.isnan(rg.percentile([], 50))
    with pytest.raises(ValueError, match="percentile"):
        rg.percentile([1.0], 101)


def test_the_distribution_of_known_regrets():
    d = rg.distribution([0.9, 1.0, 1.1, 1.2, 0.95, 1.3, 1.05, 1.15, 1.25, 1.5, math.inf, math.nan])
    assert (d.scenarios, d.not_reached, d.no_reference) == (11, 1, 1)
    assert d.median == pytest.approx(1.15)  # the 6th of 11 sorted
    assert d.p90 == pytest.approx(1.5)  # rank 9 of 0..10
    assert d.worst == math.inf
    assert d.beats_fixed == pytest.approx(2 / 11)  # 0.9 and 0.95; 1.0 ties, no win
    empty = rg.distribution([math.nan])
    assert empty.scenarios == 0 and math.isnan(empty.median) and math.isnan(empty.beats_fixed)


def _row(scenario, config, t, steps, seed=0):
    return {"workload": "mnist1d", "scenario": scenario, "state": "", "fraction": 1.0,
            "config": config, "seed": seed, "metric": "test_acc", "steps": steps,
            "time_to_target_s": t, "reached": int(t != ""), "final_metric": 0.96,
            "kb_per_step": 1.0, "mean_density": 0.5, "step_s": math.nan, "error": ""}  # fmt: skip


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory):
    """Five generated scenarios (files only) and synthetic results: the law's regret is 0.8,
    1.0, 1.2 and inf (missed the target) where a fixed level reached it, and undefined in the
    fifth, where none did."""
    out = tmp_path_factory.mktemp("gen")
    args = parse("--generated", "5", "--seed", "3", "--workloads", "mnist1d", "--levels", "0.1",
                 "--laws", "ownq", "--out", str(out))  # fmt: skip
    s = args.scenario_list
    rows = []
    for name, (dense, fixed, law) in zip(s, [(2.0, 1.0, 0.8), (1.0, 3.0, 1.0), (5.0, 2.0, 2.4),
                                             (1.0, 1.5, ""), ("", "", 7.0)], strict=True):  # fmt: skip
        rows += [_row(name, "dense", dense, 500), _row(name, "fixed:0.1", fixed, 520),
                 _row(name, LAW, law, 4000 if law == "" else 510)]  # fmt: skip
    return args, analyse(rows, args.config_list)


def test_the_regret_distribution_of_synthetic_rows(generated_run):
    args, table = generated_run
    d = regret_distribution(table, args.config_list)["mnist1d"]
    law, dense, fixed = d[LAW], d["dense"], d["fixed:0.1"]
    assert (law.scenarios, law.not_reached, law.no_reference) == (4, 1, 1)
    assert law.median == pytest.approx(1.1)  # (1.0 + 1.2) / 2
    assert law.p90 == math.inf and law.worst == math.inf  # the missed target, not dropped
    assert law.beats_fixed == pytest.approx(0.25)  # only 0.8
    assert dense.median == pytest.approx(1.5) and dense.p90 == pytest.approx(2.35)  # 2 + 0.7 x 0.5
    assert dense.worst == pytest.approx(2.5)
    assert dense.beats_fixed == 0 and fixed.worst == pytest.approx(3.0)


def test_the_report_and_the_cdf(generated_run, tmp_path):
    args, table = generated_run
    md = markdown(table, goals(table, args.config_list), args.config_list, args, 60.0)
    assert "# DC2 in simulated time (generated scenarios)" in md
    assert "## Regret over 5 generated scenarios" in md
    # dense is the best fixed level in two scenarios: the law ties it in one, misses the
    # target in the other
    assert "| DC2 ownq | 4 | 1.10x | ∞ | ∞ | 25 % | 1 | 1 of 2 (worst ∞) |" in md, md
    assert "| dense | 4 | 1.50x | 2.35x | 2.50x | – | 0 | – |" in md, md
    assert "In 1 scenario(s) no fixed level reached the target" in md
    assert "| mnist1d | gen3-000-square | square |" in md and "/scenarios/" not in md.split("##")[2]
    assert md.count("the oracle was not measured") == 0 and "the oracle: not measured" in md
    (png,) = plot_regret_cdf(table, args, tmp_path)
    from PIL import Image

    width, height = Image.open(png).size
    assert width <= 2000 and height <= 2000


def test_generated_runs_plan_every_method_without_state_runs(tmp_path):
    args = parse("--generated", "3", "--seed", "1", "--quick", "--out", str(tmp_path))
    assert args.workload_list == ["mnist1d", "pytext"]  # both workloads by default
    assert [c.spec for c in args.config_list if c.kind == "fixed"] == [
        f"fixed:{d}" for d in QUICK["levels"].split(",")
    ]
    files = sorted((tmp_path / "scenarios").glob("*.json"))
    assert [f.name for f in files] == ["gen1-000-square.json", "gen1-001-swell.json",
                                       "gen1-002-onoff.json"]  # fmt: skip
    jobs = plan(args)
    assert not [j for j in jobs if j["state"]]
    assert len(jobs) == 2 * 3 * (1 + 3 + 2)  # workloads x scenarios x (dense, levels, laws)
    assert all(j["argv"][j["argv"].index("--max-steps") + 1] == "2500" for j in jobs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--generated", "0"], "--generated takes a number of scenarios >= 1, got 0"),
        (["--generated", "2", "--scenarios", "slow"], "no --scenarios with it"),
        (["--generated", "2", "--seed", "-1"], "--seed must be >= 0 with --generated"),
    ],
)
def test_bad_generated_options_are_one_line_errors(tmp_path, argv, message):
    r = ina_in_process("experiment", "dc2", "--sim", *argv, "--out", str(tmp_path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
