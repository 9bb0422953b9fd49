"""Parallel layouts (`ina.sim.parallel`): data, tensor and pipeline parallelism, ZeRO, memory
per GPU, on the cluster model (docs/cluster.md)."""

from __future__ import annotations

import json

import pytest

from ina.sim import cluster as clusters
from ina.sim import parallel
from ina.sim.collectives import bus_factor
from ina.sim.parallel import Layout
from ina.sim.step import shape_of
from ina.workload.devices import LayerTimes
from ina.workload.layers import Layer, Workload
from tests.conftest import ina_in_process


def blocks_model(blocks: int = 8) -> tuple[Workload, LayerTimes]:
    """A transformer of identical blocks and nothing else: uniform pipeline stages."""
    layers = tuple(
        Layer(f"h.{b}.{part}", (1000,), fwd_flops=1.0, bwd_flops=2.0, kind="gemm")
        for b in range(blocks)
        for part in ("attn", "mlp")
    )
    w = Workload("toy", layers, samples=2, precision="bf16", tokens_per_sample=16, hidden=64,
                 blocks=blocks)  # fmt: skip
    n = len(layers)
    return w, LayerTimes(tuple([1e-3] * n), tuple([2e-3] * n), 1e-4)


def test_a_trivial_layout_is_the_ddp_step():
    w, t = blocks_model()
    c = clusters.sized(clusters.PRESETS["dgx-a100"], 1)
    stage0, st, costs = parallel.plan(w, t, c, Layout(dp=8))
    ddp = shape_of(w, t, 2)
    mine = shape_of(stage0, st, 2)
    assert mine.buckets == ddp.buckets and mine.ready_s == pytest.approx(ddp.ready_s)
    assert costs.pipeline_s - mine.backward_s == pytest.approx(ddp.forward_s)
    assert Layout(dp=8).trivial and not Layout(dp=4, tp=2).trivial


@pytest.mark.parametrize("pp, m", [(2, 1), (4, 8), (8, 32), (4, 4)])
def test_the_bubble_of_uniform_stages_is_pp_minus_1_over_m_plus_pp_minus_1(pp, m):
    w, t = blocks_model(8)
    c = clusters.sized(clusters.PRESETS["dgx-a100"], pp)
    lay = Layout(dp=8, pp=pp, micro_batches=m)
    _, _, costs = parallel.plan(w, t, c, lay)
    stage = costs.forward_s + costs.backward_s
    assert costs.pipeline_s == pytest.approx((m + pp - 1) * stage)
    idle = costs.pipeline_s - m * stage
    assert (
        idle / costs.pipeline_s
        == pytest.approx(lay.bubble)
        == pytest.approx((pp - 1) / (m + pp - 1))
    )


def test_zero_moves_the_all_reduces_bytes_and_stage_3_half_again():
    n, size = 16, 1e9
    rs, _ag, ar = (size * bus_factor(k, n) for k in ("reduce_scatter", "all_gather", "all_reduce"))
    c = clusters.sized(clusters.PRESETS["dgx-a100"], 16)
    dp = parallel.group_cluster(c, Layout(dp=16, tp=8))
    for stage, ratio in ((1, 1.0), (2, 1.0), (3, 1.5)):
        _, gathered = parallel.zero_extra_s(dp, size, Layout(dp=16, tp=8, zero=stage), 1.0, 1.0)
        assert (rs + gathered) / ar == pytest.approx(ratio)


def test_tensor_parallel_groups_stay_in_a_node_and_data_parallel_ones_take_a_rail():
    c = clusters.sized(clusters.PRESETS["dgx-h100"], 16)
    g = parallel.group_cluster(c, Layout(dp=16, tp=8))
    assert (g.nodes, g.gpus_per_node, g.nic_bw) == (16, 1, c.nic_bw)
    g2 = parallel.group_cluster(c, Layout(dp=64, tp=2))
    assert (g2.nodes, g2.gpus_per_node) == (16, 4)
    assert parallel.tp_cluster(c, 8).nodes == 1


def test_stages_split_blocks_evenly_with_the_ends_on_the_first_and_last():
    layers = (Layer("embed"), *(Layer(f"h.{b}.mlp", (1,)) for b in range(5)), Layer("head"))
    w = Workload("t", layers, 1, blocks=5, hidden=8)
    assert parallel.stages(w, 2) == [[0, 1, 2, 3], [4, 5, 6]]


def test_memory_of_llama_70b_fits_only_sharded(tmp_path):
    args = ("sim", "train", "--workload", "llama-70b", "--system", "dgx-h100", "--nodes", "16",
            "--timing-only", "--steps", "1", "--algorithm", "nccl")  # fmt: skip
    r = ina_in_process(*args)
    assert r.returncode == 2 and "does not fit" in r.stderr
    r = ina_in_process(*args, "--tp", "8", "--pp", "4", "--micro-batches", "8", "--zero", "1",
                       "--recompute", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "result.json").read_text())
    assert d["layout"] == {"dp": 4, "tp": 8, "pp": 4, "micro_batches": 8, "zero": 1,
                           "recompute": True, "ep": 1}  # fmt: skip
    assert d["bubble"] == pytest.approx(3 / 11)
    assert sum(d["memory_per_gpu_bytes"].values()) < 80e9
    assert d["steps"][0]["tflops_per_gpu"] > 0 and d["tokens_per_step"] == 4 * 8 * 4096


@pytest.mark.parametrize(
    "args, says",
    [
        (["--tp", "8", "--pp", "3"], "= 24 does not divide the 16 GPUs of dgx-a100"),
        (["--tp", "8", "--dp", "4"], "= 32 GPUs, but dgx-a100 has 16"),
        (["--tp", "16"], "more than a node's 8 GPUs"),
        (["--tp", "3", "--dp", "1", "--pp", "1"], "= 3 GPUs"),
        (["--zero", "4", "--tp", "8"], "--zero takes 0, 1, 2 or 3"),
        (["--pp", "2", "--zero", "2"], "use 0 or 1"),
        (["--micro-batches", "0", "--tp", "2"], "--micro-batches must be >= 1"),
        (["--tp", "2", "--micro-batches", "2", "--accumulate", "2"], "name one"),
    ],
)
def test_bad_layouts_are_one_line(args, says):
    r = ina_in_process("sim", "train", "--workload", "gpt2", "--system", "dgx-a100", "--nodes",
                       "2", "--timing-only", "--steps", "1", *args)  # fmt: skip
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def test_a_cnn_has_no_blocks_to_split():
    r = ina_in_process("sim", "train", "--workload", "resnet50", "--system", "dgx-a100",
                       "--tp", "2", "--timing-only", "--steps", "1")  # fmt: skip
    assert r.returncode == 2 and "not a transformer" in r.stderr


def test_a_published_llm_row_runs_its_layout(tmp_path):
    r = ina_in_process("sim", "published", "--set", "llm", "--only", "meg-39b", "--out",
                       str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    (row,) = json.loads((tmp_path / "published-llm.json").read_text())
    assert row["kind"] == "tflops" and 50 < row["ina"] < 312  # below the A100's fp16 peak


def test_a_gpt_of_a_stated_shape_counts_its_parameters():
    from ina.workload import zoo

    w = zoo.build("gpt:2:64:4:128:1000", 1, "bf16")
    # GPT-2 blocks: 12 h^2 + 13 h per block, embeddings (V + S) h, the final norm 2 h
    assert w.params == 2 * (12 * 64 * 64 + 13 * 64) + (1000 + 128) * 64 + 2 * 64
    assert (w.hidden, w.blocks, w.tokens_per_sample) == (64, 2, 128)
    with pytest.raises(ValueError, match="HIDDEN a multiple of HEADS"):
        zoo.build("gpt:2:65:4")


def test_the_llm_study_writes_shares_that_add_up_and_ina_leaves_tp_and_pp_alone(tmp_path):
    r = ina_in_process("experiment", "llm", "--models", "llama-13b", "--nodes", "2",
                       "--nic-rates", "100G", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    (row,) = json.loads((tmp_path / "llm.json").read_text())
    assert sum(row["share"].values()) == pytest.approx(1.0)
    assert row["share"]["tp"] > 0 and row["layout"]["tp"] == 2
    assert (tmp_path / "llm.png").stat().st_size > 0 and "INA speed-up" in r.stdout
    bad = ina_in_process("experiment", "llm", "--models", "bert", "--out", str(tmp_path))
    assert bad.returncode == 2 and "known llama-7b" in bad.stderr


def test_the_llm_study_refuses_a_system_it_cannot_read(tmp_path):
    r = ina_in_process("experiment", "llm", "--system", str(tmp_path / "nosuch"), "--models",
                       "llama-7b", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 2 and "not a readable cluster file" in r.stderr


def test_experts_split_over_ep_and_pay_two_all_to_alls_a_block_each_way(tmp_path):
    from ina.workload import zoo

    w = zoo.build("mixtral-8x7b", 1, "bf16", 256)
    assert (w.params, w.experts, w.top_k) == (46_702_792_704, 8, 2)
    c = clusters.sized(clusters.PRESETS["dgx-h100"], 2)
    from ina.workload.devices import device, layer_times

    t = layer_times(w, device("h100"))
    one, _, c1 = parallel.plan(w, t, c, Layout(dp=16))
    four, _, c4 = parallel.plan(w, t, c, Layout(dp=16, ep=4))
    experts = sum(x.params for x in w.layers if x.name.endswith(".experts"))
    assert one.params - four.params == experts - experts // 4
    assert c1.ep_comm_s == 0 and c4.ep_comm_s > 0
    assert c4.forward_s - c1.forward_s == pytest.approx(c4.ep_comm_s / 2)  # forward's half


@pytest.mark.parametrize(
    "args, says",
    [
        (["--workload", "gpt2", "--ep", "2"], "gpt2 has no experts"),
        (["--workload", "mixtral-8x7b", "--ep", "3", "--tp", "1", "--dp", "24"],
         "= 24 GPUs, but"),
        (["--workload", "mixtral-8x7b", "--ep", "16", "--tp", "1"], "must divide"),
    ],
)  # fmt: skip
def test_bad_expert_layouts_are_one_line(args, says):
    r = ina_in_process("sim", "train", "--system", "dgx-h100", "--nodes", "2",
                       "--timing-only", "--steps", "1", "--ignore-memory", *args)  # fmt: skip
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
