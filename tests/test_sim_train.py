"""`ina train --sim`: real training in simulated time, deterministic from its seed."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from conftest import ina_in_process

FIXED = ["--compute", "fixed:2ms", "--codec", "none"]  # simulated times independent of host


def train(
    tmp_path, name: str, *args: str, new_process: bool = False
) -> tuple[subprocess.CompletedProcess, object]:
    """`ina train --sim` in this process (no interpreter start and torch import per run), or
    in a new one where a test compares runs (each its own interpreter, as a user's)."""
    out = tmp_path / name
    argv = ["train", "--sim", "--no-progress", "--out", str(out), *args]
    if not new_process:
        return ina_in_process(*argv), out
    r = subprocess.run([sys.executable, "-m", "ina", *argv], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    return r, out


def drop_wall(x):
    """``x`` without any key named ``wall_*``, at any depth."""
    if isinstance(x, dict):
        return {k: drop_wall(v) for k, v in x.items() if not k.startswith("wall_")}
    if isinstance(x, list):
        return [drop_wall(v) for v in x]
    return x


def without_wall(path) -> list[dict]:
    with open(path, newline="") as f:
        return [
            {k: v for k, v in row.items() if not k.startswith("wall_")} for row in csv.DictReader(f)
        ]


@pytest.mark.slow
def test_same_seed_same_files_apart_from_wall_fields(tmp_path):
    args = ["--workers", "4", "--epochs", "2", "--step-log", "--eval-every", "3", *FIXED]
    args += ["--link-loss", "0.01", "--delay", "low", "--rto", "1ms", "--min-rto", "1ms"]
    runs = [train(tmp_path, str(i), *args, new_process=True) for i in range(2)]
    for r, _ in runs:
        assert r.returncode == 0, r.stderr
    (_, a), (_, b) = runs
    for name in ("metrics.csv", "steps.csv"):
        assert without_wall(a / name) == without_wall(b / name)
        assert any(k.startswith("wall_") for k in csv.DictReader(open(a / name)).fieldnames)
    ra, rb = (drop_wall(json.loads((d / "result.json").read_text())) for d in (a, b))
    assert ra == rb
    assert sum(ra["retransmissions_per_worker"]) > 0  # the loss was there, and recovered


def test_training_reaches_a_target_and_time_follows_the_network(tmp_path):
    args = ["--workers", "4", "--epochs", "20", "--eval-every", "2", "--stop-at-acc", "0.8"]
    fast, fast_out = train(tmp_path, "fast", *args, *FIXED, "--link-rate", "100G")
    slow, slow_out = train(tmp_path, "slow", *args, *FIXED, "--link-rate", "100M")
    assert fast.returncode == 0 and slow.returncode == 0, fast.stderr + slow.stderr
    f = json.loads((fast_out / "result.json").read_text())
    s = json.loads((slow_out / "result.json").read_text())
    # the same training (the same integers are summed), at another speed
    assert f["steps"] == s["steps"] and f["final_digest"] == s["final_digest"]
    assert f["time_to_target_s"] is not None and f["final_metric"] >= 0.8
    # 100G: compute-bound (2 ms per step); 100M: every step puts each worker's 9,610
    # gradient values (4 bytes each, and headers) through its 100 Mbit/s link
    assert f["time_to_target_s"] == pytest.approx(f["steps"] * 2e-3, rel=0.05)
    assert s["time_to_target_s"] > f["time_to_target_s"] + f["steps"] * 9_610 * 4 * 8 / 100e6


def test_a_diverging_run_stops_with_one_line_and_its_results(tmp_path):
    """A learning rate far too large: the loss becomes infinite or NaN within a few steps.
    The run stops at that step with one line (no traceback), exit 1, and writes what it
    has (the steps so far and where it diverged)."""
    args = ["--workers", "2", "--epochs", "2", "--step-log", "--lr", "1e6", *FIXED]
    r, out = train(tmp_path, "diverged", *args)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("ina train: training diverged at step")
    res = json.loads((out / "result.json").read_text())
    step = res["diverged_at_step"]
    assert step is not None and res["steps"] == step and res["diverged_worker"] in (0, 1)
    assert f"diverged at step {step}" in r.stderr
    with open(out / "steps.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == step  # every step before it, logged


def test_compressed_and_dc2_training_run_in_simulation(tmp_path):
    r, out = train(
        tmp_path, "dc2", "--workers", "4", "--max-steps", "12", "--compression", "dc2",
        "--law", "target", "--law-param", "initial=0.1", "--step-log", *FIXED,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (out / "dc2_rank0.csv").exists()
    steps = list(csv.DictReader(open(out / "steps.csv")))
    assert len(steps) == 12 and {s["density"] for s in steps[1:]} != {"1.0"}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--backend", "gloo"], "--sim simulates INA"),
        (["--compute", "sometimes"], "--compute 'sometimes'"),
        (["--compute", "flops:abacus"], "unknown device"),
        (["--codec", "quickly"], "--codec 'quickly'"),
        (["--link-rate", "fast"], "--link-rate 'fast' does not parse"),
        (["--prop-delay=-1us"], "propagation delay"),
        (["--capacity", "episodes:share=0"], "share must be in (0, 1]"),
        (["--cross", "episodes:on_s=1"], "needs its rate"),
        (["--cross", "trace:/nonexistent/cross.txt"], "cannot read trace"),
        (["--check-sync"], "one model for all workers"),
    ],
)
def test_bad_sim_options_are_one_line_errors(tmp_path, args, message):
    out = tmp_path / "bad"
    r = ina_in_process("train", "--sim", "--no-progress", "--out", str(out), *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


SHORT = ["--workers", "4", "--epochs", "1", "--max-steps", "12"]


def test_default_compute_and_codec_are_models_the_same_on_every_run(tmp_path):
    """No --compute or --codec: simulated times come from device models, not this host."""
    runs = [train(tmp_path, str(i), *SHORT, new_process=True) for i in range(2)]
    for r, _ in runs:
        assert r.returncode == 0, r.stderr
        assert "flops:a100, device:a100" in r.stdout and "measured on this host" not in r.stdout
    (_, a), (_, b) = runs
    assert without_wall(a / "metrics.csv") == without_wall(b / "metrics.csv")
    for name in ("result.json", "summary.json"):
        ra, rb = (drop_wall(json.loads((d / name).read_text())) for d in (a, b))
        assert ra == rb and ra["sim_seconds"] > 0
    ca, cb = (json.loads((d / "config.json").read_text()) for d in (a, b))
    assert {**ca, "out": None} == {**cb, "out": None}


def test_measured_is_flagged_as_host_dependent(tmp_path):
    r, _ = train(tmp_path, "m", *SHORT, "--compute", "measured", "--codec", "none")
    assert r.returncode == 0, r.stderr
    assert "compute measured on this host: times differ run to run" in r.stdout


def test_without_out_a_run_gets_its_own_folder_under_runs(tmp_path):
    outs = []
    for _ in range(2):  # (in this process, from tmp_path: no interpreter start per run)
        r = ina_in_process("train", "--sim", "--no-progress", *SHORT, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("results: "))
        out = tmp_path / line.removeprefix("results: ")
        assert out.parent == tmp_path / "runs" / "train"
        assert (
            out / "summary.json"
        ).exists() and f"wrote {line.removeprefix('results: ')}" in r.stdout
        outs.append(out)
    assert outs[0] != outs[1]


def test_a_previous_runs_files_are_replaced_not_mixed(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "steps.csv").write_text("left by an older run with --step-log\n")
    r, _ = train(tmp_path, "o", *SHORT)
    assert r.returncode == 0, r.stderr
    assert "held a previous run's files: replacing steps.csv" in r.stdout
    assert not (out / "steps.csv").exists()


@pytest.mark.parametrize("where", ["/proc/ina-out", "/dev/null/out"])
def test_an_out_that_cannot_be_written_is_one_line_before_the_run(tmp_path, where):
    r, _ = train(tmp_path, "x", *SHORT, "--out", where)
    assert r.returncode == 2
    assert r.stderr.startswith(f"ina train: --out {where}: cannot write there")
    assert len(r.stderr.strip().splitlines()) == 1 and "training" not in r.stdout


def test_the_summary_says_what_compression_did(tmp_path):
    r, out = train(tmp_path, "dc2", *SHORT, "--compression", "dc2", "--law", "aimd",
                   "--law-param", "initial=0.5", "--delay", "high")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "compression                  dc2, law aimd (initial=0.5)" in r.stdout
    assert "delay profile                high" in r.stdout
    s = json.loads((out / "result.json").read_text())["compression_summary"]
    line = next(ln for ln in r.stdout.splitlines() if "density per step" in ln)
    assert f"mean {s['density_mean']:.3g}, range {s['density_min']:.3g}-" in line
    assert s["density_min"] < 1 and s["ratio"] > 1  # it compressed, and said by how much
    r, out = train(tmp_path, "qsgd", *SHORT, "--compressor", "qsgd", "--compressor-arg",
                   "levels=7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "compression                  qsgd (levels=7)" in r.stdout
    ratio = json.loads((out / "result.json").read_text())["compression_summary"]["ratio"]
    assert f"{ratio:.2f}x compression" in r.stdout and ratio > 2
