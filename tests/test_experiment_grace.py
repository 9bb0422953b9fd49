"""`ina experiment grace --sim`: the matrix, its outputs, its one-line errors."""

from __future__ import annotations

import csv

import pytest

from ina.cli import main as ina_main
from ina.experiments import grace


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "add --sim"),
        (["--sim", "--methods", "nope"], "unknown compressor 'nope'"),
        (["--sim", "--methods", "qsgd:levels=x"], "levels='x'"),
        (["--sim", "--workloads", "imagenet"], "unknown workload 'imagenet'"),
        (["--sim", "--networks", "moon"], "unknown network 'moon'"),
        (["--sim", "--reuse", "/nonexistent/grace"], "not an earlier output of this experiment"),
    ],
)
def test_bad_options_are_one_line_errors(args, message, capsys, tmp_path):
    assert ina_main(["experiment", "grace", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
def test_a_small_matrix_runs_in_parallel_and_trains_alike_in_both_networks(
    tmp_path, capsys, monkeypatch
):
    argv = ["experiment", "grace", "--sim", "--workloads", "mnist1d", "--max-steps", "4"]
    argv += ["--methods", "none,signsgd", "--eval-every", "2", "--target", "0.05"]
    argv += ["--repeats", "1", "--parallel", "2", "--out", str(tmp_path)]
    monkeypatch.setenv("INA_PROGRESS", "1")  # the runs done out of the runs planned
    assert ina_main(argv) == 0
    out, err = capsys.readouterr()
    assert "grace runs" in err and "/4" in err and "grace runs" not in out
    assert f"written: {tmp_path}/ (results.csv" in out  # where the results are
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert {(r["network"], r["method"]) for r in rows} == {
        (n, m) for n in ("quiet-100G", "slow-1G") for m in ("none", "signsgd")
    }
    by = {(r["network"], r["method"]): r for r in rows}
    for m in ("none", "signsgd"):
        quiet, slow = by["quiet-100G", m], by["slow-1G", m]
        # the switch sums the same integers: the same training, at another speed
        assert quiet["final_digest"] == slow["final_digest"]
        assert float(slow["sim_seconds"]) > float(quiet["sim_seconds"])
        assert quiet["steps_to_target"] == "2"  # any model beats 5 % at the first evaluation
    assert float(by["quiet-100G", "signsgd"]["ratio"]) > 5  # 1-bit fields vs int32
    assert by["quiet-100G", "signsgd"]["path"] == "sum"
    text = (tmp_path / "summary.md").read_text()
    assert "| signsgd | sum |" in text and "| yes |" in text


def test_a_diverging_method_is_a_row_not_a_crash(tmp_path):
    """At a learning rate far too large the run diverges: the sweep goes on, and the row
    says where (it has no final metric)."""
    argv = ["experiment", "grace", "--sim", "--workloads", "mnist1d", "--max-steps", "30"]
    argv += ["--methods", "none", "--networks", "quiet-100G", "--lr", "1e6", "--eval-every", "2"]
    argv += ["--repeats", "1", "--out", str(tmp_path)]
    assert ina_main(argv) == 0
    (row,) = list(csv.DictReader(open(tmp_path / "results.csv")))
    step = int(row["diverged_at_step"])
    assert 0 < step < 30 and int(row["steps"]) == step
    assert f"| diverged at step {step} |" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_share_training_stops_later_networks_at_the_target_with_the_same_times(tmp_path, capsys):
    """--share-training runs the second network only to the first's steps to target; with
    the codec throughputs of a full run (--reuse), its time to target is the full run's to
    the nanosecond, and the first network's runs are taken as they are."""
    argv = ["experiment", "grace", "--sim", "--workloads", "pytext", "--max-steps", "4"]
    argv += ["--methods", "none,signsgd", "--eval-every", "2", "--target", "7"]
    argv += ["--repeats", "1", "--parallel", "1"]  # none: 7 bits/char at step 2; signsgd never
    # (one run at a time in this process: a pool's workers would each import torch again)
    full, shared = tmp_path / "full", tmp_path / "shared"
    assert ina_main([*argv, "--out", str(full)]) == 0
    capsys.readouterr()
    assert ina_main([*argv, "--share-training", "--reuse", str(full), "--out", str(shared)]) == 0
    printed = capsys.readouterr().out
    assert "0 training runs, 1 at a time (2 reused)" in printed  # the first network's
    assert "measuring" not in printed  # the codec throughputs are the full run's
    before = {(r["network"], r["method"]): r for r in grace.read_results(full / "results.csv")}
    after = {(r["network"], r["method"]): r for r in grace.read_results(shared / "results.csv")}
    for m in ("none", "signsgd"):
        assert after["quiet-100G", m]["wall_s"] == before["quiet-100G", m]["wall_s"]  # reused
        assert after["slow-1G", m]["same_training"] is True
    slow, ref = after["slow-1G", "none"], before["slow-1G", "none"]
    assert slow["steps"] == slow["steps_to_target"] == 2 < ref["steps"] == 4
    assert slow["time_to_target_s"] == ref["time_to_target_s"]
    # never at the target: min(PROBE_STEPS, --max-steps) steps for the step time
    slow, ref = after["slow-1G", "signsgd"], before["slow-1G", "signsgd"]
    assert slow["steps_to_target"] is None and slow["steps"] == 4
    assert slow["step_ms"] == ref["step_ms"]
    text = (shared / "summary.md").read_text()
    assert "--share-training" in text and text.count("| yes |") == 2


def test_later_steps_and_the_same_steps_check(tmp_path):
    run = grace.Run("pytext", "slow-1G", "none", 1e8, 2000, 2.3, 50, 4, "fixed:5ms", 32, 0, "x")
    row = {"steps_to_target": None, "diverged_at_step": None}
    assert grace.later_steps({**row, "steps_to_target": 650}, run) == 650
    assert grace.later_steps({**row, "diverged_at_step": 205}, run) == 205
    assert grace.later_steps(row, run) == grace.PROBE_STEPS
    head = "step,time_s,loss,test_bpc\n"
    for name, body in (("a", "1,0.1,4.5,\n2,0.2,4.25,6.1\n"), ("b", "1,0.3,4.5,\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "steps.csv").write_text(head + body)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "steps.csv").write_text(head + "1,0.3,4.500001,\n")
    a, b, c = (str(tmp_path / x) for x in "abc")
    assert grace.same_steps(a, b, "test_bpc")  # times differ, the training does not
    assert not grace.same_steps(a, c, "test_bpc")
