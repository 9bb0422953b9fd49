"""`ina sim train`: a workload's training steps in simulated time, no training (the step model,
`ina.sim.step`, on a zoo model, an imported file or a trainable model). Simulated time is
deterministic, so these tests assert it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ina_in_process

from ina.workload.data import SHAPES, load_dataset

INA = [sys.executable, "-m", "ina", "sim"]


def cli(tmp_path, name: str, *args: str, new_process: bool = False) -> dict:
    """`ina sim ARGS --out` (in this process unless a test compares runs); its result."""
    out = tmp_path / name
    if new_process:
        subprocess.run([*INA, *args, "--out", str(out)], check=True, capture_output=True,
                       timeout=120)  # fmt: skip
    else:
        r = ina_in_process("sim", *args, "--out", str(out))
        assert r.returncode == 0, r.stderr
    return json.loads((out / "result.json").read_text())


def test_a_zoo_models_step_writes_its_breakdown_and_timeline(tmp_path):
    r = cli(tmp_path, "r", "train", "--workload", "resnet50", "--device", "a100",
            "--precision", "bf16", "--timing-only", "--workers", "1024", "--link-rate", "100G")  # fmt: skip
    assert r["workload"] == "resnet50" and r["parameters"] == 25_557_032
    assert r["gradient_bytes_per_step"] == 2 * r["parameters"]  # bf16 gradients
    assert r["ina_lane_bytes_per_step"] == 4 * r["parameters"]  # INA's int32 lanes
    for s in r["steps"]:
        assert s["iteration_s"] >= s["compute_s"] + s["optimizer_s"]
        assert s["exposed_comm_s"] == pytest.approx(
            s["iteration_s"] - s["compute_s"] - s["optimizer_s"]
        )
        assert s["throughput"] == pytest.approx(1024 * r["batch_size"] / s["iteration_s"])
    assert 0 < r["scaling_factor"] <= 1
    trace = json.loads((tmp_path / "r" / "timeline.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert (
        "forward" in names
        and "optimizer" in names
        and any(n.startswith("allreduce b") for n in names)
    )
    assert (tmp_path / "r" / "timeline.png").stat().st_size > 10_000


def test_two_default_runs_write_the_same_result_apart_from_wall_time(tmp_path):
    a = cli(
        tmp_path, "a", "train", "--workers", "4", "--stragglers", "jitter:0.1", new_process=True
    )
    b = cli(
        tmp_path, "b", "train", "--workers", "4", "--stragglers", "jitter:0.1", new_process=True
    )
    strip = lambda r: {k: v for k, v in r.items() if not k.startswith("wall_")}  # noqa: E731
    assert strip(a) == strip(b) and a["exact"] is True


def test_an_imported_trace_and_an_aicb_file_run():
    for name in ("example-kineto", "example-aicb"):
        # (one step: the AICB example sends 0.5 GB per worker and step)
        r = ina_in_process("sim", "train", "--workload", name, "--workers", "4", "--timing-only",
                           "--steps", "1")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "scaling factor" in r.stdout


def test_the_shapes_table_is_the_data_sets_own():
    digits = load_dataset("digits")
    assert SHAPES["digits"] == (digits.input_shape, digits.num_classes)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--dataset", "imagenet"], "unknown data set 'imagenet'"),
        (["--dataset", "pytext", "--model", "cnn"], "does not fit --dataset pytext"),
        (["--workload", "gpt5"], "not a zoo model"),
        (["--device", "tpu"], "unknown device 'tpu'; known: p100"),
        (["--precision", "fp8"], "unknown precision 'fp8'; known: fp32"),
        (["--device", "v100", "--precision", "bf16"], "v100 has no bf16"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--efficiency", "1.5"], "efficiency must be in (0, 1]"),
        (["--efficiency", "0"], "efficiency must be in (0, 1]"),
        (["--stragglers", "slow:x"], "--stragglers"),
        (["--stragglers", "slow:12=2"], "worker 12 of 8"),
        (["--compute", "flops:h100"], "profile or fixed:TIME"),
        (["--codec", "measured"], "--codec: none or a throughput"),
        (["--workers", "64"], "workers must be 1..32"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_options_are_one_line_errors(args, message):
    r = ina_in_process("sim", "train", *args)
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
    r = ina_in_process("sim", "compare", *args)
    assert r.returncode == 2
    assert message in r.stderr.strip().splitlines()[-1], r.stderr


def test_files_that_do_not_parse_are_one_line_errors(tmp_path):
    bad_aicb = tmp_path / "bad.txt"
    bad_aicb.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1\n1\n"
                        "layer -1 1x NONE 0 10 NONE 0 10 ALLREDUCE 4 100\n")  # fmt: skip
    no_backward = tmp_path / "fwd.json"
    no_backward.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0,
                                                         "dur": 5, "pid": 1, "tid": 1}]}))  # fmt: skip
    for path, message in (
        (bad_aicb, "bad.txt:3: field fwd_compute_time"),
        (no_backward, "no backward events"),
    ):
        r = ina_in_process("sim", "train", "--workload", str(path))
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["allreduce", "--size", "0"], "--size must be a whole number >= 1"),
        (["allreduce", "--size", "inf"], "--size must be a whole number >= 1"),
        (["compare", "--workers", "1", "--params", "10"], "at least 2 workers"),
    ],
)
def test_edges_that_used_to_pass_silently_are_one_line_errors(args, message):
    r = ina_in_process("sim", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_timing_only_says_it_checked_no_sum():
    r = ina_in_process("sim", "allreduce", "--timing-only", "--workers", "64", "--size", "1000",
                       "--iters", "1")  # fmt: skip
    assert r.returncode == 0 and "every sum exact" not in r.stdout
    assert "sums not checked (timing only" in r.stdout
