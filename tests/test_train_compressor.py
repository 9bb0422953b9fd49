"""`ina train --compressor NAME`: GRACE's methods in training, simulated and on the wall clock."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ina_in_process

from ina.cli import main as ina_main

FIXED = ["--compute", "fixed:2ms", "--codec", "none"]  # simulated times independent of host


@pytest.mark.parametrize(
    "args, message",
    [
        (["--compressor", "nope"], "unknown compressor 'nope'; known: dgc"),
        (["--compressor", "qsgd", "--compressor-arg", "levels=x"], "levels='x' is not an integer"),
        (["--compressor", "qsgd", "--compressor-arg", "bogus=1"], "unknown argument 'bogus'"),
        (["--compressor", "qsgd", "--compressor-arg", "levels=0"], "levels must be in"),
        (["--compressor", "qsgd", "--compressor-arg", "levels"], "is not key=value"),
        (["--compressor", "topk", "--compressor-arg", "memory=x"], "unknown memory 'x'"),
        (["--compressor-arg", "levels=7"], "--compressor-arg needs --compressor"),
        (["--compressor", "qsgd", "--compression", "dc2"], "replaces --compression"),
        (["--compressor", "qsgd", "--backend", "gloo"], "needs --backend ina"),
    ],
)
@pytest.mark.parametrize("sim", [True, False], ids=["sim", "wall"])
def test_unknown_compressors_and_bad_arguments_are_one_line_usage_errors(
    args, message, sim, capsys
):
    argv = ["train", *(["--sim"] if sim else []), *args]
    assert ina_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def sim_train(tmp_path, name: str, *args: str) -> dict:
    """`ina train --sim` in this process (no interpreter start per run); its result."""
    out = tmp_path / name
    argv = ["train", "--sim", "--no-progress", "--out", str(out)]
    r = ina_in_process(*argv, "--workers", "4", "--max-steps", "4", *FIXED, *args)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
def test_sim_training_runs_each_path_and_pays_its_traffic(tmp_path):
    dense = sim_train(tmp_path, "dense")
    runs = {
        name: sim_train(tmp_path, name, "--compressor", name, *args)
        for name, args in (
            ("qsgd", ["--compressor-arg", "levels=7"]),  # switch-summed, packed 4-bit fields
            ("topk", ["--compressor-arg", "ratio=0.01"]),  # the union path
            ("natural", []),  # all-gathered: N payloads
        )
    }
    assert runs["qsgd"]["compressor"] == "qsgd"
    assert runs["qsgd"]["compressor_args"] == ["levels=7"]
    sent = {k: r["bytes_sent_per_worker"][0] for k, r in runs.items()}
    base = dense["bytes_sent_per_worker"][0]
    # step 1 is the dense warm-up; 3 compressed steps follow (4 workers, 9,610 values)
    assert sent["qsgd"] < 0.6 * base  # 6.4 of 32 bits per value after the warm-up
    assert sent["topk"] < 0.6 * base
    # all-gathered: 8 N = 32 bits per value for N = 4, what dense int32 pays; a 4-bit method
    # summed in the switch pays a fraction of it (all four runs start with a dense step)
    assert sent["natural"] > 0.9 * base and sent["natural"] > 2 * sent["qsgd"]
    for r in runs.values():  # training moved the model and the simulated time is the network's
        assert r["final_digest"] != dense["final_digest"]
        assert r["steps"] == 4 and r["sim_seconds"] >= 4 * 2e-3


@pytest.mark.slow
def test_wall_clock_training_with_a_compressor_keeps_replicas_identical(tmp_path):
    out = tmp_path / "wall"
    cmd = [sys.executable, "-m", "ina", "train", "--no-progress", "--out", str(out)]
    cmd += ["--workers", "2", "--epochs", "1", "--max-steps", "4", "--check-sync"]
    cmd += ["--compressor", "signsgd"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compressor"] == "signsgd" and summary["replicas_identical"]
    assert np.isfinite(summary["final_metric"])
