"""`ina experiment dc2 --sim` (ina/experiments/dc2_sim.py): the plan, the analysis on a
synthetic table, one-line errors, and a tiny simulated run per workload."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ina_in_process

from ina.experiments import cli
from ina.experiments.dc2_sim import (
    DC2_DEFAULT,
    analyse,
    goals,
    markdown,
    plan,
    resolve,
    run_job,
)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return resolve(p.parse_args(["dc2", "--sim", *argv]))


def test_the_plan_runs_each_distinct_state_once(tmp_path):
    args = parse("--scenarios", "quiet-dc,episodes,episodes-25", "--levels", "0.01",
                 "--laws", "target", "--out", str(tmp_path))  # fmt: skip
    jobs = plan(args)
    main = [j for j in jobs if not j["state"]]
    assert len(main) == 3 * 3  # dense, fixed 0.01, DC2 target in each scenario
    states = [j for j in jobs if j["state"]]
    # two time-varying scenarios x two states x two fixed configurations ...
    assert len(states) == 8
    # ... but episodes and episodes-25 share their quiet and congested paths: run once
    assert sum(1 for j in states if not j.get("same_as")) == 4
    assert all("--target" in j["argv"] for j in main)
    assert all("--target" not in j["argv"] and "40" in j["argv"] for j in states)


def test_seeds_run_each_cell_once_per_seed_and_each_state_once(tmp_path):
    args = parse("--scenarios", "quiet-dc,episodes", "--levels", "0.01", "--laws", "target",
                 "--seed", "5", "--seeds", "3", "--out", str(tmp_path))  # fmt: skip
    jobs = plan(args)
    main = [j for j in jobs if not j["state"]]
    assert len(main) == 2 * 3 * 3  # scenarios x (dense, 0.01, DC2) x seeds
    for j in main:
        assert j["argv"][j["argv"].index("--seed") + 1] == str(j["seed"])
        assert j["dir"].endswith(f"seed-{j['seed']}")
    assert sorted({j["seed"] for j in main}) == [5, 6, 7]
    assert len({j["dir"] for j in main}) == len(main)
    states = [j for j in jobs if j["state"]]
    assert len(states) == 2 * 2 and all(j["seed"] == 5 for j in states)  # first seed only


def test_a_law_runs_its_default_or_a_whole_other_configuration_named_in_full(tmp_path):
    from ina.experiments.dc2_sim import label

    args = parse("--scenarios", "quiet-dc", "--levels", "0.01", "--laws",
                 "ownq,ownq:share=0.15", "--out", str(tmp_path))  # fmt: skip
    laws = [c for c in args.config_list if c.kind == "dc2"]
    assert [c.spec for c in laws] == [DC2_DEFAULT["ownq"], "ownq:share=0.15"]
    assert [label(c) for c in laws] == ["DC2 ownq", "DC2 ownq:share=0.15"]
    assert len({j["dir"] for j in plan(args)}) == 4  # dense, 0.01, and each law in its own


def test_bad_seed_count_is_a_one_line_error():
    with pytest.raises(ValueError, match="--seeds must be >= 1"):
        parse("--seeds", "0")


def _row(scenario, config, t, steps, acc=0.96, state="", fraction=1.0, step_s=math.nan, seed=0):
    return {"workload": "mnist1d", "scenario": scenario, "state": state, "fraction": fraction,
            "config": config, "seed": seed, "metric": "test_acc", "steps": steps,
            "time_to_target_s": t, "reached": int(t != ""), "final_metric": acc,
            "kb_per_step": 1.0, "mean_density": 1.0, "step_s": step_s, "error": ""}  # fmt: skip


def _episode_states() -> list[dict]:
    """The runs held in each state of `episodes`: half quiet (1 s per step at any level),
    half congested (dense 10 s, 0.01 2 s)."""
    return [
        _row("episodes", "dense", "", 40, state="quiet", fraction=0.5, step_s=1.0),
        _row("episodes", "fixed:0.01", "", 40, state="quiet", fraction=0.5, step_s=1.0),
        _row("episodes", "dense", "", 40, state="congested", fraction=0.5, step_s=10.0),
        _row("episodes", "fixed:0.01", "", 40, state="congested", fraction=0.5, step_s=2.0),
    ]


def test_analysis_and_goals_on_a_synthetic_table():
    args = parse("--scenarios", "quiet-dc,episodes", "--levels", "0.01", "--laws", "target")
    law = DC2_DEFAULT["target"]
    rows = [
        # quiet: dense 100 steps x 1 s; 0.01 150 x 1 s; DC2 stays dense
        _row("quiet-dc", "dense", 100.0, 100),
        _row("quiet-dc", "fixed:0.01", 150.0, 150, acc=0.955),
        _row("quiet-dc", law, 105.0, 100),
        # episodes: half quiet (1 s per step at any level), half congested (dense 10 s, 0.01 2 s)
        _row("episodes", "dense", 190.0, 100),
        _row("episodes", "fixed:0.01", 200.0, 150, acc=0.955),
        _row("episodes", law, 140.0, 120, acc=0.962),
        *_episode_states(),
    ]
    table = analyse(rows, args.config_list)["mnist1d"]
    q, e = table["quiet-dc"], table["episodes"]
    assert q["best_fixed"] == "dense" and q["regret"][law] == pytest.approx(1.05)
    assert q["oracle_s"] == pytest.approx(100.0) and q["oracle_ratio"] == pytest.approx(1.0)
    # the oracle: dense when quiet, 0.01 when congested: 1 / (0.5/100 + 0.5/300) = 150 s
    assert e["oracle_s"] == pytest.approx(150.0)
    assert e["oracle_levels"] == {"quiet": "dense", "congested": "fixed:0.01"}
    assert e["model_ratio"] == pytest.approx(150 / (100 / (0.5 + 0.05)))  # 150 / 181.8
    assert e["oracle_ratio"] == pytest.approx(150 / 190)  # over dense's run
    assert e["regret"][law] == pytest.approx(140 / 190)
    verdicts = {(g, n): met for g, met, n in goals(table and {"mnist1d": table}, args.config_list)}
    by_goal = {g: met for (g, _), met in verdicts.items()}
    assert by_goal["mnist1d: DC2 target within 1.15x of the best fixed level in every scenario"]
    assert by_goal["mnist1d: fixed 0.01 >= 1.5x slower than the best somewhere"] is True
    assert by_goal["mnist1d: dense >= 1.5x slower than the best somewhere"] is False
    assert by_goal["mnist1d/episodes: time-varying congestion"] is None  # oracle 0.83x > 0.77x
    assert (
        by_goal["mnist1d/episodes: DC2 target <= 0.20x dense's time (5x faster), metric within "
                "bounds"]
        is False
    )  # fmt: skip


def test_a_time_varying_scenario_without_its_state_runs_has_no_oracle():
    """`episodes` mixes two states: without the runs held in each, its oracle is not
    measured (not the steady one its full runs would give), and goal 2 says so."""
    args = parse("--scenarios", "episodes", "--levels", "0.01", "--laws", "target")
    law = DC2_DEFAULT["target"]
    rows = [_row("episodes", "dense", 190.0, 100), _row("episodes", "fixed:0.01", 200.0, 150),
            _row("episodes", law, 140.0, 120)]  # fmt: skip
    table = {"mnist1d": analyse(rows, args.config_list)["mnist1d"]}
    e = table["mnist1d"]["episodes"]
    assert math.isnan(e["oracle_s"]) and math.isnan(e["oracle_ratio"]) and not e["states"]
    assert e["regret"][law] == pytest.approx(140 / 190)  # the runs still compare
    rows_goal = [(met, n) for g, met, n in goals(table, args.config_list)
                 if g == "mnist1d/episodes: time-varying congestion"]  # fmt: skip
    assert rows_goal == [(None, "the oracle was not measured (no state runs)")]
    md = markdown(table, goals(table, args.config_list), args.config_list,
                  argparse.Namespace(**{**vars(args), "command": "x"}), 60.0)  # fmt: skip
    assert "| – | – |" in md and "no state runs" in md


def test_seeds_are_averaged_before_regret_and_oracle():
    """Regret and the oracle on the means over seeds; the spread is min-max; a seed that
    missed the target leaves its method without a time (regret inf)."""
    args = parse("--scenarios", "quiet-dc,episodes", "--levels", "0.01", "--laws", "target",
                 "--seeds", "2")  # fmt: skip
    law = DC2_DEFAULT["target"]
    rows = [
        # quiet-dc: dense 100 and 140 steps of 1 s (mean 120), 0.01 150 and 130 (mean 140):
        # dense is the best fixed level on the means though 0.01 wins with seed 1
        _row("quiet-dc", "dense", 100.0, 100, seed=0),
        _row("quiet-dc", "dense", 140.0, 140, seed=1),
        _row("quiet-dc", "fixed:0.01", 150.0, 150, seed=0),
        _row("quiet-dc", "fixed:0.01", 130.0, 130, seed=1),
        _row("quiet-dc", law, 126.0, 126, seed=0),
        _row("quiet-dc", law, 150.0, 150, seed=1),
        # episodes: the law misses the target with seed 1
        _row("episodes", "dense", 190.0, 100, seed=0),
        _row("episodes", "dense", 210.0, 110, seed=1),
        _row("episodes", "fixed:0.01", 200.0, 150, seed=0),
        _row("episodes", "fixed:0.01", 240.0, 170, seed=1),
        _row("episodes", law, 140.0, 120, seed=0),
        _row("episodes", law, "", 4000, seed=1),
        *_episode_states(),
    ]
    table = analyse(rows, args.config_list)["mnist1d"]
    q, e = table["quiet-dc"], table["episodes"]
    assert q["times"]["dense"] == pytest.approx(120.0)
    assert (q["runs"]["dense"]["t_min"], q["runs"]["dense"]["t_max"]) == (100.0, 140.0)
    assert q["best_fixed"] == "dense"
    assert q["regret"]["fixed:0.01"] == pytest.approx(140 / 120)
    assert q["regret"][law] == pytest.approx(138 / 120)
    assert q["oracle_s"] == pytest.approx(120.0)  # steady: the best fixed level's mean
    # the oracle on the mean steps: dense 105, 0.01 160; quiet 1 s any level, congested
    # dense 10 s, 0.01 2 s: 1 / (0.5 / 105 + 0.5 / 320)
    assert e["oracle_s"] == pytest.approx(1 / (0.5 / 105 + 0.5 / 320))
    assert e["oracle_levels"] == {"quiet": "dense", "congested": "fixed:0.01"}
    assert math.isnan(e["times"][law]) and math.isinf(e["regret"][law])
    assert e["runs"][law]["reached"] == 0 and e["runs"][law]["seeds"] == [0, 1]
    md = markdown({"mnist1d": table}, goals({"mnist1d": table}, args.config_list),
                  args.config_list, argparse.Namespace(**{**vars(args), "command": "x"}), 60.0)  # fmt: skip
    assert "seeds 0-1" in md and "120.000 s [100.000-140.000] (1.00x)" in md


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workloads", "cifar"], "unknown workload 'cifar'"),
        (["--scenarios", "nowhere"], "unknown scenario 'nowhere'"),
        (["--targets", "mnist1d:0.5"], "--targets takes WORKLOAD=VALUE"),
        (["--laws", "pid"], "unknown law(s)"),
        (["--laws", "ownq:share=2"], "share must be in (0, 1), got 2"),
        (["--levels", "lots"], "--levels takes densities"),
    ],
)
def test_bad_options_are_one_line_errors(argv, message):
    r = ina_in_process("experiment", "dc2", "--sim", *argv)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("workload", "target"), [("mnist1d", "0.4"), ("pytext", "4.4")])
def test_a_tiny_run_per_workload_reaches_a_low_target_deterministically(tmp_path, workload, target):
    """DC2 (the default law) on short congestion episodes (it changes level): twice the same
    simulated run."""
    args = parse("--workloads", workload, "--scenarios", "episodes-short", "--levels", "0.01",
                 "--laws", "ownq", "--targets", f"{workload}={target}", "--eval-every", "10",
                 "--max-steps", "300", "--out", str(tmp_path))  # fmt: skip
    job = next(j for j in plan(args) if j["config"] == DC2_DEFAULT["ownq"] and not j["state"])
    rows = [run_job({**job, "dir": str(tmp_path / str(i))}) for i in range(2)]
    for r in rows:
        assert r["error"] == "", r["error"]
        assert r["reached"] == 1 and 0 < r["time_to_target_s"] < r["sim_s"] + 1e-12
        assert r["mean_density"] < 1.0  # the episodes made DC2 compress
    a, b = ({k: v for k, v in r.items() if k != "wall_s"} for r in rows)
    assert a == b


def test_replot_of_results_without_their_run_folders_writes_the_tables(tmp_path):
    """--replot over a results.csv alone (rows merged from several outputs, say, without the
    wall time or the runs' folders): the tables and the regret chart, no accuracy curves
    (those need the runs' steps), no traceback; and no results.csv at all is one line."""
    head = ("workload,scenario,state,fraction,config,seed,metric,steps,sim_s,time_to_target_s,"
            "reached,final_metric,bytes_per_worker,kb_per_step,step_s,mean_density,"
            "retransmissions,wall_s,error")  # fmt: skip
    cells = [("dense", 500, 0.5, 104.8, 1), ("fixed:0.03", 550, 0.55, 14.3, 0.0318),
             (DC2_DEFAULT["ownq"], 520, 0.52, 50.0, 0.5)]  # fmt: skip
    lines = [head] + [
        f"mnist1d,{where},,1,{c},0,test_acc,{n},{t},{t},1,0.965,1000,{kb},0.001,{d},0,1.0,"
        for where in ("quiet-dc", "slow")
        for c, n, t, kb, d in cells[: 3 if where == "quiet-dc" else 2]  # the law: quiet-dc only
    ]
    replot = [sys.executable, "-m", "ina", "experiment", "dc2", "--sim", "--replot", "--out",
              str(tmp_path)]  # fmt: skip
    r = subprocess.run(replot, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "no results.csv in" in r.stderr
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")  # and no wall_seconds.txt
    r = subprocess.run(replot, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "summary.md").read_text()
    assert "experiment wall time not recorded" in md
    assert "| quiet-dc | 0.500 s (1.00x) | 0.550 s (1.10x) | 0.520 s (1.04x) |" in md, md
    assert "| slow | 0.500 s (1.00x) | 0.550 s (1.10x) | not run |" in md, md  # not "not reached"
    assert "DC2 ownq within 1.15x of the best fixed level in every scenario: worst 1.040x" in md
    assert not (tmp_path / "dc2sim_accuracy_mnist1d.png").exists()


def test_resume_reads_a_finished_run_and_runs_only_what_changed(tmp_path):
    """--resume: a job whose folder holds its finished run (the same command) is read, not
    run again, and gives the row the run gave; a changed command, an error or a half-written
    folder runs again."""
    from ina.experiments.dc2_sim import finished, run_plan

    argv = ("--workloads", "mnist1d", "--scenarios", "quiet-dc", "--levels", "0.1", "--laws",
            "ownq", "--targets", "mnist1d=0.5", "--eval-every", "10", "--max-steps", "60",
            "--parallel", "1", "--out", str(tmp_path))  # fmt: skip
    args = parse(*argv)
    jobs = [j for j in plan(args) if j["config"] in ("dense", "fixed:0.1")]
    first = run_plan(jobs[:1], args)  # dense only
    done = finished(jobs[0])
    assert done is not None and math.isnan(done["wall_s"])
    assert {k: v for k, v in done.items() if k != "wall_s"} == {
        k: v for k, v in first[0].items() if k != "wall_s"
    }
    assert finished(jobs[1]) is None  # never ran
    assert finished({**jobs[0], "argv": [*jobs[0]["argv"], "--lr", "0.1"]}) is None
    before = sorted(p.name for p in tmp_path.rglob("*"))
    args.resume = True
    rows = run_plan(jobs, args)  # dense read, fixed 0.1 run
    assert math.isnan(rows[0]["wall_s"]) and rows[1]["wall_s"] > 0 and rows[1]["error"] == ""
    assert rows[0]["time_to_target_s"] == first[0]["time_to_target_s"]
    assert before != sorted(p.name for p in tmp_path.rglob("*"))  # the fixed run's folder
    (Path(jobs[0]["dir"]) / "error.txt").write_text("x")
    assert finished(jobs[0]) is None
