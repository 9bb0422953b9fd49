"""`ina experiment grace --sim`: the matrix, its outputs, its one-line errors."""

from __future__ import annotations

import csv

import pytest

from ina.cli import main as ina_main


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "add --sim"),
        (["--sim", "--methods", "nope"], "unknown compressor 'nope'"),
        (["--sim", "--methods", "qsgd:levels=x"], "levels='x'"),
        (["--sim", "--workloads", "imagenet"], "unknown workload 'imagenet'"),
        (["--sim", "--networks", "moon"], "unknown network 'moon'"),
    ],
)
def test_bad_options_are_one_line_errors(args, message, capsys, tmp_path):
    assert ina_main(["experiment", "grace", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_small_matrix_runs_in_parallel_and_trains_alike_in_both_networks(tmp_path, capsys):
    argv = ["experiment", "grace", "--sim", "--workloads", "mnist1d", "--max-steps", "4"]
    argv += ["--methods", "none,signsgd", "--eval-every", "2", "--target", "0.05"]
    argv += ["--repeats", "1", "--parallel", "2", "--out", str(tmp_path)]
    assert ina_main(argv) == 0
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
