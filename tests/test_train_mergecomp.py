"""`ina train --mergecomp`: MergeComp's partition searched at start and followed every step,
in simulated time and on the wall clock."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from ina.cli import main as ina_main
from ina.workload.catalog import resolve
from ina.workload.tasks import model_of

# simulated times independent of this host: fixed compute, the codec at a throughput (also
# the cost model's codec), a slow network so that the rounds' per-call latency matters
SIM = ["--compute", "fixed:2ms", "--codec", "100MB/s", "--link-rate", "1G"]


def param_names(dataset: str) -> list[str]:
    return [n for n, _ in model_of(resolve(dataset, None)).named_parameters()]


def check_partition_covers_the_model(plan: dict, dataset: str) -> list[str]:
    """Every parameter in exactly one group; the groups' sizes add up."""
    flat = [n for g in plan["groups"] for n in g]
    assert all(plan["groups"])
    assert sorted(flat) == sorted(param_names(dataset)) and len(set(flat)) == len(flat)
    sizes = dict(model_of(resolve(dataset, None)).named_parameters())
    for g, values, nbytes in zip(
        plan["groups"], plan["group_values"], plan["group_bytes"], strict=True
    ):
        assert values == sum(sizes[n].numel() for n in g) and nbytes == 4 * values
    return flat


@pytest.mark.slow
def test_sim_training_follows_the_searched_partition_every_step(tmp_path):
    out = tmp_path / "sim"
    cmd = [sys.executable, "-m", "ina", "train", "--sim", "--no-progress", "--out", str(out)]
    cmd += ["--dataset", "mnist1d", "--workers", "2", "--max-steps", "4", "--step-log", *SIM]
    cmd += ["--mergecomp", "--compressor", "qsgd"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    plan = result["mergecomp"]
    check_partition_covers_the_model(plan, "mnist1d")
    k = len(plan["groups"])
    # printed once, a line per group
    assert r.stdout.count("MergeComp's partition") == 1
    assert sum(line.startswith("  group ") for line in r.stdout.splitlines()) == k
    # one Worker call per group per step on every worker: the groups, not DDP's buckets
    assert result["steps"] == 4 and plan["group_calls_per_worker"] == [4 * k, 4 * k]
    # the compressed steps (after the dense warm-up step with the JOIN) take the time the
    # cost model predicted for this partition
    with open(out / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    for row in steps[2:]:
        assert 1e3 * float(row["step_s"]) == pytest.approx(plan["predicted_iteration_ms"], rel=0.02)


@pytest.mark.slow
def test_wall_clock_training_follows_the_partition_the_ranks_searched(tmp_path):
    out = tmp_path / "wall"
    cmd = [sys.executable, "-m", "ina", "train", "--no-progress", "--out", str(out)]
    cmd += ["--workers", "2", "--epochs", "1", "--max-steps", "3", "--check-sync"]
    cmd += ["--mergecomp", "--compressor", "qsgd", "--compressor-arg", "levels=7"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.count("MergeComp's partition") == 1
    assert "compressor qsgd" in r.stdout and "compression dense" not in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    plan = summary["mergecomp"]
    check_partition_covers_the_model(plan, "digits")
    k = len(plan["groups"])
    assert summary["steps"] == 3 and plan["group_calls_per_rank"] == [3 * k, 3 * k]
    assert summary["replicas_identical"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--mergecomp schedules a --compressor's calls"),
        (["--compression", "homomorphic"], "--mergecomp schedules a --compressor's calls"),
        (["--backend", "gloo"], "--mergecomp schedules a --compressor's calls"),
        (["--compressor", "qsgd", "--backend", "gloo"], "needs --backend ina"),
        (["--compressor", "nope"], "unknown compressor 'nope'"),
    ],
)
@pytest.mark.parametrize("sim", [True, False], ids=["sim", "wall"])
def test_bad_mergecomp_combinations_are_one_line_usage_errors(args, message, sim, capsys):
    argv = ["train", *(["--sim"] if sim else []), "--mergecomp", *args]
    assert ina_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_mergecomp_with_dump_step_is_a_usage_error(tmp_path, capsys):
    argv = ["train", "--mergecomp", "--compressor", "qsgd", "--dump-step", "1"]
    assert ina_main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no --dump-step" in err[0], err
