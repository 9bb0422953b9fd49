"""The model zoo (`ina.workload.zoo`) and `ina workloads`: published parameter counts, FLOPs
that add up to torch's own count, the textbook GPT-2 estimate, and the command's errors.

Builds are cached in memory by `zoo.build`, so each model is built once per test process.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from ina.cli import main as ina_main
from ina.workload import zoo
from ina.workload.models import build_model, num_parameters


@pytest.mark.parametrize("name", zoo.NAMES)
def test_parameter_count_is_the_published_one(name):
    # the published figures and their sources are in each entry (`zoo.ENTRIES`)
    assert zoo.build(name).params == zoo.entry(name).params


def test_published_counts_written_out():
    """The counts checked above, as the sources state them (a typo in an entry shows here)."""
    published = {
        "resnet50": 25_557_032,  # torchvision's model table (He et al.: 25.6M)
        "resnet101": 44_549_160,
        "vgg16": 138_357_544,  # Simonyan and Zisserman, Table 2: 138M
        "vgg19": 143_667_240,  # 144M
        "gpt2": 124_439_808,  # the GPT-2 model card: 124M
        "gpt2-xl": 1_557_611_200,  # 1.5B
        "llama-7b": 6_738_415_616,  # the Llama-2-7b checkpoint
        "ptb-lstm": 66_034_000,  # Zaremba et al.: 66M
        # NeuMF at MLPerf's ml-20m sizes: 165,237 ids x (64 + 128) + the MLP + the output
        "ncf": (138_493 + 26_744) * (64 + 128)
        + (256 * 256 + 256)
        + (256 * 128 + 128)
        + (128 * 64 + 64)
        + (128 + 1),
    }
    for name, n in published.items():
        assert zoo.entry(name).params == n, name


def _meta_model(name: str) -> torch.nn.Module:
    with zoo.META:
        return zoo.entry(name).make()


@pytest.mark.parametrize("name", zoo.NAMES)
def test_gradients_are_the_parameters_each_once(name):
    w = zoo.build(name)
    params = list(_meta_model(name).parameters())  # tied parameters are listed once
    assert sorted(n for _, n in w.gradients) == sorted(p.numel() for p in params)
    assert w.params == sum(p.numel() for p in params)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("resnet50", {"batch_size": 2}),
        ("bert-base", {"batch_size": 2}),
        ("gpt2", {"batch_size": 2, "seq_len": 128}),
        ("llama-7b", {"seq_len": 256}),
        ("ptb-lstm", {}),
        ("ncf", {}),
        ("cifar10-resnet20", {}),
    ],
)
def test_layer_flops_add_up_to_the_global_count(name, kwargs):
    """Every row's FLOPs (transformer blocks folded) sum to a plain FlopCounterMode's total
    over one full step of the whole model, forward and backward each."""
    w = zoo.build(name, **kwargs)
    e = zoo.entry(name)
    counter = FlopCounterMode(display=False)
    with counter:
        loss = e.step(_meta_model(name), w.samples, kwargs.get("seq_len", e.seq_len))
        fwd = counter.get_total_flops()
        loss.backward()
    assert sum(x.fwd_flops for x in w.layers) == fwd
    assert sum(x.bwd_flops for x in w.layers) == counter.get_total_flops() - fwd
    assert all(x.fwd_flops >= 0 and x.bwd_flops >= 0 for x in w.layers)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("gpt2", {"seq_len": 64}), ("bert-base", {"seq_len": 32}), ("llama-7b", {"seq_len": 64})],
)
def test_folded_blocks_give_the_rows_of_every_block(name, kwargs):
    """`profile` runs two of the identical transformer blocks and copies the second: the
    rows must be those of running them all."""
    assert zoo.measure(name, **kwargs) == zoo.measure(name, fold_blocks=False, **kwargs)


def test_gpt2_forward_flops_match_the_textbook_estimate():
    """Forward FLOPs of a decoder: 2 x (parameters in matmuls) x tokens, plus the attention
    scores and their weighted sum, 2 x 2 x T^2 x d per layer and sequence (full T x T, as
    the math kernel computes it). The matmul parameters are all but the position
    embeddings (the token embeddings serve as the output layer)."""
    batch, T, d, L = 2, 512, 768, 12
    w = zoo.build("gpt2", batch_size=batch, seq_len=T)
    wpe = 1024 * d
    estimate = 2 * (w.params - wpe) * batch * T + 4 * L * T * T * d * batch
    fwd = sum(x.fwd_flops for x in w.layers)
    assert abs(fwd - estimate) / estimate < 0.05
    bwd = sum(x.bwd_flops for x in w.layers)
    assert 1.9 < bwd / fwd <= 2.0  # input and weight gradients; none for the token ids


def test_tied_embeddings_count_once_at_the_embedding():
    rows = {x.name: x for x in zoo.build("gpt2").layers}
    assert rows["transformer.wte"].grads == (50257 * 768,)
    assert rows["lm_head"].grads == () and rows["lm_head"].fwd_flops > 0
    names = [x.name for x in zoo.build("gpt2").layers]
    assert names[0] == "transformer.wte" and names[-1] == "lm_head"  # forward order


def test_attention_matmuls_sit_on_the_attention_module():
    rows = {x.name: x for x in zoo.build("llama-7b", seq_len=256).layers}
    attn = rows["model.layers.0.self_attn"]
    assert attn.grads == () and attn.fwd_flops == 4 * 256 * 256 * 4096  # QK^T and AV
    q = rows["model.layers.0.self_attn.q_proj"]
    assert q.fwd_flops == 2 * 256 * 4096 * 4096 and q.bwd_flops == 2 * q.fwd_flops


def test_precision_changes_bytes_not_flops():
    a, b = zoo.build("gpt2", precision="fp32"), zoo.build("gpt2", precision="bf16")
    assert [x.fwd_flops for x in a.layers] == [x.fwd_flops for x in b.layers]
    assert sum(x.fwd_bytes for x in a.layers) == 2 * sum(x.fwd_bytes for x in b.layers)
    assert all(x.bwd_bytes == 2 * x.fwd_bytes for x in a.layers)
    assert b.precision == "bf16" and b.tokens_per_sample == 1024


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"^unknown model 'x'; known: resnet50, resnet101"):
        zoo.build("x")
    with pytest.raises(ValueError, match="batch size must be >= 1"):
        zoo.build("gpt2", batch_size=0)
    with pytest.raises(ValueError, match="unknown precision"):
        zoo.build("gpt2", precision="fp8")
    with pytest.raises(ValueError, match="not a language model"):
        zoo.build("vgg16", seq_len=8)


def test_trainable_workloads_follow_the_trainer():
    w = zoo.trainable("mnist1d", "mlp", batch_size=16)
    assert w.name == "mnist1d/mlp" and w.samples == 16
    assert w.params == num_parameters(build_model("mlp", (1, 40), 10))
    assert zoo.trainable("digits", "mlp", 32).layers == zoo.build("digits-mlp").layers
    with pytest.raises(ValueError, match="does not fit"):
        zoo.trainable("pytext", "cnn", 8)


def test_workloads_lists_every_model(capsys):
    assert ina_main(["workloads"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in out.splitlines()[2:]]
    assert rows == list(zoo.NAMES)
    assert "| llama-7b | 6,738,415,616 | 26,953.7 |" in out


def test_workloads_shows_one_model(capsys):
    assert ina_main(["workloads", "--model", "ptb-lstm", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "| lstm | 36,024,000 |" in out and "| **total** (3 layers) | 66,034,000 |" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "nosuch"],
        ["--precision", "fp8"],
        ["--model", "gpt2", "--batch-size", "0"],
        ["--model", "gpt2", "--seq-len", "4096"],
        ["--seq-len", "8"],
    ],
)
def test_workloads_bad_input_is_one_line_and_status_2(argv, capsys):
    assert ina_main(["workloads", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ina workloads: ") and err.count("\n") == 1


def test_step_functions_take_keywords():
    """`measure` passes the batch and sequence length by keyword to every entry's step."""
    e = zoo.entry("digits-mlp")
    loss = functools.partial(e.step, batch=3, seq_len=None)(_meta_model("digits-mlp"))
    assert loss.device.type == "meta"
