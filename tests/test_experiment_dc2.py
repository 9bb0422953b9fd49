"""`ina experiment dc2`: a tiny run through the real switch model and torchrun ranks writes
sane CSV, PNG and summary files (no wall-clock assertions: the machine is shared)."""

from __future__ import annotations

import argparse
import csv
import math

import pytest

from ina.experiments import cli, dc2, dc2_common


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(argv)


def read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_configs_parse_and_reject():
    cfgs = dc2_common.parse_configs("dense, fixed:0.05 ,aimd,target:initial=0.01:min_density=0.01")
    assert [c.kind for c in cfgs] == ["dense", "fixed", "dc2", "dc2"]
    assert cfgs[1].density == 0.05
    assert cfgs[1].train_args() == ["--compression", "homomorphic", "--density", "0.05"]
    assert cfgs[3].train_args() == [
        "--compression", "dc2", "--law", "target",
        "--law-param", "initial=0.01", "--law-param", "min_density=0.01",
    ]  # fmt: skip
    assert cfgs[3].label == "DC2 target" and cfgs[2].label == "DC2 aimd (law defaults)"
    for bad in ("fixed:2", "fixed:x", "magic", "target:nope=1", "dense,dense", ""):
        with pytest.raises(ValueError):
            dc2_common.parse_configs(bad)


@pytest.mark.slow
def test_tiny_run_writes_csv_png_and_summary(tmp_path):
    out = tmp_path / "dc2"
    args = parse(
        [
            "dc2", "--model", "mlp", "--workers", "2", "--profiles", "high",
            "--configs", "dense,aimd", "--max-steps", "6", "--epochs", "1",
            "--eval-every", "2", "--target-acc", "0.2", "--no-stop-at-target",
            "--out", str(out),
        ]
    )  # fmt: skip
    assert cli.main(args) == 0

    rows = read(out / "results.csv")
    assert [(r["profile"], r["config"]) for r in rows] == [("high", "dense"), ("high", "aimd")]
    for r in rows:
        assert int(r["steps"]) == 6
        assert 0.0 <= float(r["final_acc"]) <= 1.0
        assert float(r["train_s"]) > 0
        assert float(r["mb_sent_per_step"]) > 0
        if r["reached"] == "1":
            assert 0 < float(r["time_to_target_s"]) <= float(r["train_s"])
            assert int(r["steps_to_target"]) in (2, 4, 6)
    dense = rows[0]
    assert float(dense["mean_density"]) == 1.0
    assert float(dense["final_acc_minus_dense_pp"]) == 0.0
    if dense["reached"] == "1":
        assert float(dense["speedup_vs_dense"]) == pytest.approx(1.0)
    assert 0 < float(rows[1]["mean_density"]) <= 1.0

    timeline = read(out / "timeline.csv")
    assert len(timeline) == 12
    times = [float(r["time_s"]) for r in timeline if r["config"] == "dense"]
    assert times == sorted(times)
    accs = [r["test_acc"] for r in timeline if r["config"] == "dense"]
    assert [a != "" for a in accs] == [False, True] * 3  # every 2 steps
    # the DC2 run has its controller's RTTs, the dense run none
    dc2_rows = [r for r in timeline if r["config"] == "aimd"]
    assert all(float(r["srtt_ms"]) > 0 for r in dc2_rows[1:])
    assert all(r["srtt_ms"] == "" for r in timeline if r["config"] == "dense")
    assert (out / "high" / "aimd" / "dc2_rank0.csv").exists()

    for png in ("dc2_accuracy.png", "dc2_control.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000

    md = (out / "summary.md").read_text()
    assert "## high delay variation" in md and "## Goals" in md
    assert "| dense |" in md and "| DC2 aimd (law defaults) |" in md
    assert "speed-up vs dense" in md


def test_bad_options_exit_2(tmp_path, capsys):
    args = parse(["dc2", "--configs", "dense,warp", "--out", str(tmp_path)])
    assert cli.main(args) == 2
    assert "unknown configuration" in capsys.readouterr().err
    assert not math.isnan(dc2.GOAL_VS_DENSE)
