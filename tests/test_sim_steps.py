"""`ina sim train`: steps of a model's gradient sizes in simulated time, no training. Its
communication is `ina sim allreduce`'s, to the nanosecond; simulated time is deterministic,
so these tests assert it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ina.sim.network import NetworkSpec
from ina.sim.train_steps import example_batch, model_of, run, step_seconds
from ina.workload.buckets import buckets_of
from ina.workload.data import SHAPES, load_dataset
from ina.workload.tasks import resolve
from ina.workload.textdata import VOCAB_SIZE

INA = [sys.executable, "-m", "ina", "sim"]


def cli(tmp_path, name: str, *args: str) -> dict:
    out = tmp_path / name
    subprocess.run([*INA, *args, "--out", str(out)], check=True, capture_output=True, timeout=120)
    return json.loads((out / "result.json").read_text())


def test_a_steps_communication_is_the_allreduce_of_its_gradient(tmp_path):
    common = ["--timing-only", "--workers", "1024", "--link-rate", "25G", "--prop-delay", "2us"]
    train = cli(tmp_path, "train", "train", *common, "--steps", "3", "--compute", "fixed:1ms")
    assert train["model"] == "digits/mlp" and train["buckets"] == [train["parameters"]]
    size = str(train["parameters"])
    allreduce = cli(tmp_path, "ar", "allreduce", *common, "--params", size, "--iters", "3")
    # the same calls in the same order, the first one joining the run: the same times (to
    # the rounding of the clock: the steps start 1 ms later)
    assert train["comm_seconds"] == pytest.approx(allreduce["call_seconds"], rel=0, abs=1e-12)
    assert train["step_seconds"] == pytest.approx([1e-3 + c for c in train["comm_seconds"]])
    assert train["sim_seconds"] == pytest.approx(sum(train["step_seconds"]), abs=1e-15)
    assert train["gradient_bytes_per_step"] == 4 * train["parameters"]
    assert train["bytes_on_links"] == 1024 * allreduce["bytes_on_links"]


def test_timing_only_steps_equal_every_worker_simulated_and_every_sum_is_exact():
    workload = resolve("digits", "mid_mlp")
    buckets = [b.numel for b in buckets_of(model_of(workload))]
    assert len(buckets) == 2  # DDP's first bucket is 1 MiB: two allreduces per step
    full = run(NetworkSpec(workers=4, seed=3), buckets, 3, 2e-3)
    one = run(NetworkSpec(workers=4, seed=3, timing_only=True), buckets, 3, 2e-3)
    assert full["exact"] and one["exact"]
    # the first step also joins the run (N workers probe for their nonces): later steps agree
    assert one["step_seconds"][1:] == pytest.approx(full["step_seconds"][1:], rel=0, abs=1e-12)
    # a bucket never beats its bytes over the link rate
    assert min(full["comm_seconds"]) > 4 * sum(buckets) * 8 / 100e9


def test_compute_models_time_a_batch_of_the_data_sets_shape():
    text = resolve("pytext")
    x, y = example_batch(text, 4)
    assert x.shape == y.shape == (4, *SHAPES["pytext"][0]) and int(x.max()) < VOCAB_SIZE
    from ina.workload.compute import parse_compute

    model = model_of(resolve("digits", "big_mlp"))
    flops = step_seconds(resolve("digits", "big_mlp"), model, parse_compute("flops:h100:1"), 32)
    # a linear layer's forward and backward: 6 FLOPs per weight per sample
    assert flops == pytest.approx(6 * 32 * 3.3e6 / 67e12, rel=0.05)
    assert step_seconds(text, model_of(text), parse_compute("fixed:3ms"), 32) == 3e-3


def test_the_shapes_table_is_the_data_sets_own():
    digits = load_dataset("digits")
    assert SHAPES["digits"] == (digits.input_shape, digits.num_classes)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--dataset", "imagenet"], "unknown data set 'imagenet'"),
        (["--dataset", "pytext", "--model", "cnn"], "does not fit --dataset pytext"),
        (["--compute", "flops:tpu"], "unknown device"),
        (["--codec", "measured"], "--codec: none or a throughput"),
        (["--workers", "64"], "workers must be 1..32"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_options_are_one_line_errors(args, message):
    r = subprocess.run([*INA, "train", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sweep-params", "1,x"], "comma-separated numbers"),
        (["--sweep-workers", "8,0.5"], "whole number >= 1"),
        (["--sweep-workers", "8,70000", "--params", "10"], "workers must be 1..65536"),
    ],
)
def test_compare_sweep_lists_are_one_line_errors(args, message):
    r = subprocess.run([*INA, "compare", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert message in r.stderr.strip().splitlines()[-1], r.stderr
