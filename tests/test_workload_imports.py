"""Workloads imported from files: SimAI/AICB workload files and torch.profiler traces, the
examples shipped in ``ina/data/workloads/``, and the one-line errors for files that are not."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch
import torch.distributed as dist

from ina.workload import aicb, examples, imports, kineto
from ina.workload.buckets import BUCKET_BYTES, FIRST_BUCKET_BYTES
from ina.workload.devices import device
from ina.workload.layers import Layer, Workload
from ina.workload.models import build_model, num_parameters


def resnet() -> torch.nn.Module:
    return build_model(examples.MODEL, examples.INPUT_SHAPE, examples.CLASSES)


def ddp_buckets(model: torch.nn.Module) -> list[list[int]]:
    """PyTorch's own bucket assignment over the parameters in backward order."""
    params = [p.detach() for p in model.parameters()][::-1]
    groups, _ = dist._compute_bucket_assignment_by_size(params, [FIRST_BUCKET_BYTES, BUCKET_BYTES])
    return [list(g) for g in groups]


# --- the shipped examples ---


@pytest.mark.parametrize("name", sorted(imports.EXAMPLES))
def test_examples_exist_and_load(name):
    path = imports.EXAMPLES[name]
    assert path.is_file(), f"{path}: run python -m ina.workload.examples ina/data/workloads"
    assert path.stat().st_size < 1_000_000
    w = imports.load(name)
    assert w.params > 0 and len(w.layers) > 1
    assert all(x.fwd_s is not None and x.bwd_s is not None for x in w.layers)
    assert imports.load(str(path)) == w


def test_kineto_example_matches_the_model():
    w = imports.load("example-kineto")
    model = resnet()
    assert w.name == "resnet" and w.samples == examples.BATCH and w.precision == "fp32"
    assert w.params == num_parameters(model)
    # backward produces the gradients in reverse order of definition here
    assert [n for _, n in w.gradients] == [p.numel() for p in model.parameters()][::-1]
    assert w.buckets is not None, w.notes
    assert [list(b) for b in w.buckets] == ddp_buckets(model)
    assert w.optimizer_s is not None and w.optimizer_s > 0
    assert all(x.bwd_s >= 0 for x in w.layers)


def test_kineto_trace_regenerates(tmp_path):
    start = time.monotonic()
    path = examples.trace_step(tmp_path / examples.TRACE)
    if time.monotonic() - start > 30:
        pytest.skip("tracing a step took over 30 s on this machine")
    w = kineto.load(path)
    assert w.params == num_parameters(resnet())
    assert w.buckets is not None and [list(b) for b in w.buckets] == ddp_buckets(resnet())
    assert path.stat().st_size < 1_000_000


# --- AICB ---


def test_aicb_round_trip_is_exact():
    text = aicb.dump(imports.load("example-kineto"))
    w = aicb.parse(text)
    assert aicb.dump(w) == text
    assert aicb.parse(aicb.dump(w)) == w
    shipped = imports.EXAMPLES["example-aicb"]
    assert aicb.dump(aicb.load(shipped)) == shipped.read_text()


def test_aicb_keeps_what_the_format_holds():
    w = Workload(
        "tiny net",
        (
            Layer("conv 1", (432, 16), fwd_flops=1e9, bwd_flops=2e9),
            Layer("relu", ()),
            Layer("fc", (640, 10), fwd_flops=1e6, bwd_flops=2e6),
        ),
        samples=32,
        precision="bf16",
        tokens_per_sample=4,
    )
    back = aicb.parse(aicb.dump(w, device("a100")))
    assert back.name == "tiny_net" and back.samples == 32 and back.tokens_per_sample == 4
    assert back.precision == "bf16" and back.notes == ()
    assert [x.name for x in back.layers] == ["conv_1", "relu", "fc"]
    assert [x.grads for x in back.layers] == [x.grads for x in w.layers]
    assert back.gradients == w.gradients
    assert back.layers[0].bwd_s == pytest.approx(2e9 / 312e12 / 0.5, abs=1e-9)
    assert back.optimizer_s is not None


def test_aicb_without_times_needs_a_device():
    w = Workload("w", (Layer("a", (4,), fwd_flops=1.0),), samples=1)
    with pytest.raises(ValueError, match="device"):
        aicb.dump(w)


FOREIGN = """HYBRID_TRANSFORMER_FWD_IN_BCKWD\tmodel_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 2 ga: 1 all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0
4
grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER\t4000\t100
embedding_layer\t-1\t1000\tALLREDUCE\t16384\t1\tNONE\t0\t1\tNONE\t0\t100
attention_layer\t-1\t539986\tALLREDUCE\t16384\t592000   ALLREDUCE  16384\t592000\tALLREDUCE\t2000\t100
mlp_layer\t-1\t486330\tALLREDUCE\t16384\t529500\tALLREDUCE\t16384\t529500\tALLGATHER\t2000\t100
"""


def test_aicb_reads_files_in_aicb_layout(tmp_path):
    path = tmp_path / "megatron.txt"
    path.write_text(FOREIGN)
    w = imports.load(path)
    assert w.precision == "bf16" and w.samples == 1
    assert [x.name for x in w.layers] == [
        "grad_param_comm", "embedding_layer", "attention_layer", "mlp_layer",
    ]  # fmt: skip
    assert [x.grads for x in w.layers] == [(2000,), (), (1000,), ()]
    attention = w.layers[2]
    assert attention.fwd_s == pytest.approx(539986e-9)
    assert attention.bwd_s == pytest.approx(2 * 592000e-9)
    assert any("forward collectives ignored" in n for n in w.notes)
    assert any("weight-gradient non-reduction" in n for n in w.notes)
    assert imports.load(path, precision="fp32").params == 1000 + 500


@pytest.mark.parametrize(
    ("line", "bad", "match"),
    [
        (3, ("-1\t1\t", "-1\t1x\t"), r":3: field fwd_compute_time: expected an integer, got '1x'"),
        (5, ("592000 ", "59.2 "), r":5: field ig_compute_time: expected an integer"),
        (6, ("2000\t100\n", "2000\n"), r":6: field wg_update_time: expected 12 fields, got 11"),
        (2, ("\n4\n", "\nfour\n"), r":2: field rows: expected an integer"),
    ],
)
def test_aicb_bad_files_name_line_and_field(tmp_path, line, bad, match):
    lines = FOREIGN.splitlines(keepends=True)
    old, new = bad
    if line == 2:
        text = FOREIGN.replace(old, new, 1)
    else:
        lines[line - 1] = lines[line - 1].replace(old, new, 1)
        text = "".join(lines)
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        aicb.load(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_aicb_short_file(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text(FOREIGN.replace("\n4\n", "\n9\n"))
    with pytest.raises(ValueError, match="promises 9 rows, found 4"):
        aicb.load(path)


# --- kineto errors and format picking ---


def test_truncated_json(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(imports.EXAMPLES["example-kineto"].read_text()[:5000])
    with pytest.raises(ValueError, match=r"t\.json:1: not JSON") as e:
        imports.load(path)
    assert "\n" not in str(e.value)


def test_json_without_trace_events(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schemaVersion": 1}))
    with pytest.raises(ValueError, match="field traceEvents"):
        imports.load(path)
    with pytest.raises(ValueError, match="field traceEvents"):
        kineto.load(path)


def test_trace_without_backward(tmp_path):
    trace = json.loads(imports.EXAMPLES["example-kineto"].read_text())
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if not e.get("name", "").startswith("autograd::")
    ]
    path = tmp_path / "forward.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(
        ValueError, match=r"no backward events in .*forward\.json: was the trace taken"
    ):
        imports.load(path)


def test_unmatched_allreduce_leaves_buckets_to_ddp():
    trace = json.loads(imports.EXAMPLES["example-kineto"].read_text())
    for e in trace["traceEvents"]:
        if e.get("name") == kineto.ALLREDUCE_OP:
            e["args"]["Input Dims"] = [[[7]]]
    w = kineto.from_trace(trace)
    assert w.buckets is None and any("does not match" in n for n in w.notes)


def test_missing_and_unknown_files(tmp_path):
    with pytest.raises(ValueError, match="cannot read workload file"):
        imports.load(tmp_path / "nope.txt")
    path = tmp_path / "notes.txt"
    path.write_text("just some text\nhere\n")
    with pytest.raises(ValueError, match="unknown workload format"):
        imports.load(path)


def test_reading_does_not_change_a_workload():
    w = imports.load("example-aicb")
    assert dataclasses.replace(w) == w
