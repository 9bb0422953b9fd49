"""The cluster model: presets and files, NCCL's collectives with INA beside them, the step
model on nodes of GPUs, memory and calibrated compute (docs/cluster.md)."""

from __future__ import annotations

import json
import math

import pytest

from ina.sim import cluster as clusters
from ina.sim import collectives as coll
from tests.conftest import ina_in_process

GB = 1e9


def sized(name: str, nodes: int = 1) -> clusters.Cluster:
    return clusters.sized(clusters.PRESETS[name], nodes)


# -- physical invariants --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dgx1-v100", "dgx-a100", "dgx-h100", "hgx-b200", "pcie-v100"])
@pytest.mark.parametrize("nodes", [1, 2, 16])
@pytest.mark.parametrize("size", [1 << 10, 1 << 20, 1 << 27, 1 << 33])
def test_busbw_never_above_the_slowest_link_on_the_path(name, nodes, size):
    """A flat ring or tree: its bus bandwidth is at most the slowest link a byte crosses (a
    GPU's NVLink, its node's NICs). Hierarchical and in-network algorithms: no faster than
    the bytes that must cross each node's NICs over them (an all-reduce by a switch sends its
    data up once; one by rings per rail 2(m-1)/m of it; a reduce-scatter or all-gather (m-1)/m)
    and, for an all-reduce, than each byte crossing a GPU's link once."""
    c = sized(name, nodes)
    m = nodes
    for collective in coll.COLLECTIVES:
        for a in coll.available(c, collective):
            e = coll.estimate(c, collective, a, size)
            if a in ("ring", "tree"):
                assert e.busbw <= min(c.intra_bw, c.node_net_bw if m > 1 else math.inf), a
                continue
            if collective == "all_reduce":
                assert e.algbw <= c.intra_bw, (a, e.algbw)
                must = size * (2 * (m - 1) / m if a == "hierarchical" else 1) if m > 1 else 0
            else:
                must = size * (m - 1) / m
            assert e.seconds >= must / c.node_net_bw, (collective, a)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx1-v100", "pcie-v100"])
def test_a_hierarchical_all_reduce_in_one_node_is_the_nodes_nvlink_figure(name):
    c = sized(name)
    e = coll.estimate(c, "all_reduce", "hierarchical", 1 << 33)
    assert e.busbw == pytest.approx(coll.intra_busbw(c), rel=0.01)
    assert e.busbw == pytest.approx(coll.estimate(c, "all_reduce", "ring", 1 << 33).busbw, rel=0.01)


def test_with_one_gpu_per_node_hierarchical_is_the_ring_and_ina_its_inter_node_stage():
    c = clusters.hosts(8, 100e9, "h100")
    for size in (1 << 20, 1 << 28):
        ring = coll.estimate(c, "all_reduce", "ring", size)
        hier = coll.estimate(c, "all_reduce", "hierarchical", size)
        assert hier.seconds == pytest.approx(coll._flat(c, "ring", "all_reduce", size, 2), rel=1e-9)
        assert ring.seconds <= hier.seconds
    # INA moves each byte once each way: 2(N-1)/N less than the ring at large sizes, less its
    # packets' headers
    big = 1 << 32
    ratio = (coll.estimate(c, "all_reduce", "ring", big).seconds
             / coll.estimate(c, "all_reduce", "ina", big).seconds)  # fmt: skip
    wire = coll.ina_wire_bytes(big, 4, 256) / big
    assert ratio == pytest.approx(2 * 7 / 8 / wire, rel=0.01)


def test_ina_carries_16_bit_gradients_in_int32_lanes_and_sharp_does_not():
    c = sized("dgx-a100", 16)
    ina16 = coll.estimate(c, "all_reduce", "ina", 1 << 30, elem_bytes=2)
    ina32 = coll.estimate(c, "all_reduce", "ina", 1 << 30, elem_bytes=4)
    sharp = coll.estimate(c, "all_reduce", "sharp", 1 << 30, elem_bytes=2)
    assert ina16.seconds > ina32.seconds >= sharp.seconds


def test_nccl_picks_the_fastest_of_its_own_and_the_tree_at_small_sizes_across_nodes():
    c = sized("dgx-a100", 64)
    small, big = coll.nccl_best(c, "all_reduce", 1 << 12), coll.nccl_best(c, "all_reduce", 1 << 33)
    assert small.algorithm == "tree" and small.protocol == "LL"
    for e in (small, big):
        others = [coll.estimate(c, "all_reduce", a, e.nbytes) for a in coll.NCCL_ALGORITHMS
                  if a in coll.available(c, "all_reduce")]  # fmt: skip
        assert e.seconds == min(o.seconds for o in others)


def test_the_busbw_grows_with_size_to_the_calibrated_link_figure():
    c = sized("dgx-a100")
    bws = [coll.nccl_best(c, "all_reduce", 1 << k).busbw for k in range(10, 34, 2)]
    assert bws == sorted(bws)
    assert bws[-1] == pytest.approx(230 * GB, rel=0.01)  # the calibration point itself


def test_oversubscription_slows_a_ring_across_leaves_but_not_in_network_reduction():
    flat = clusters.sized(clusters.PRESETS["dgx-a100"], 64)
    over = clusters.from_dict({"preset": "dgx-a100", "nodes": 64, "nodes_per_leaf": 16,
                               "oversubscription": 4})  # fmt: skip
    size = 1 << 32
    assert (
        coll.estimate(over, "all_reduce", "ring", size).seconds
        > 2 * coll.estimate(flat, "all_reduce", "ring", size).seconds
    )
    assert coll.estimate(over, "all_reduce", "ina", size).seconds == pytest.approx(
        coll.estimate(flat, "all_reduce", "ina", size).seconds
    )


# -- cluster files and options ---------------------------------------------------------------


def test_a_cluster_file_overrides_a_preset_and_reads_rates_with_units(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"preset": "dgx-a100", "nic_rate": "100G", "intra_rate": "150GB/s"}))
    c = clusters.load(str(f), nodes=4)
    assert (c.nodes, c.nic_bw, c.intra_bw, c.gpu) == (4, 12.5 * GB, 150 * GB, "a100")


@pytest.mark.parametrize(
    "data, says",
    [
        ({"preset": "nosuch"}, "unknown system 'nosuch'"),
        ({"preset": "dgx-a100", "gpu": "tpu"}, "unknown gpu 'tpu'"),
        ({"preset": "dgx-a100", "nodes": "four"}, "field 'nodes' must be a int"),
        ({"preset": "dgx-a100", "nic_rate": 200}, "nic_rate: a rate with its unit"),
        ({"preset": "dgx-a100", "oversubscription": 0.5}, "oversubscription must be >= 1"),
        ({"preset": "dgx-a100", "bogus": 1}, "unknown field 'bogus'"),
        ({"gpu": "a100"}, "without a preset, give name, nic_rate"),
        ([1, 2], "a JSON object"),
    ],
)
def test_a_bad_cluster_file_names_its_field(tmp_path, data, says):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=None) as e:
        clusters.load(str(f))
    assert says in str(e.value)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--system", "nosuch"], "unknown system 'nosuch'"),
        (["--system", "dgx-a100", "--gpus", "12"], "12 GPUs do not fill whole nodes of 8"),
        (["--system", "dgx-a100", "--nodes", "0"], "--nodes must be >= 1"),
        (["--system", "{file}"], "not JSON"),
        (["--system", "dgx-a100", "--algorithm", "nvls"], "nvls does not run"),
        (["--nodes", "2"], "--nodes and --gpus size a --system"),
        (["--system", "dgx-a100", "-b", "1x"], "--minbytes"),
    ],
)
def test_collectives_mistakes_are_one_line(tmp_path, args, says):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = ina_in_process("sim", "collectives", *(a.format(file=bad) for a in args))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def test_collectives_prints_nccl_tests_columns_and_writes_json(tmp_path):
    r = ina_in_process(
        "sim", "collectives", "--system", "dgx-h100", "--nodes", "2", "-b", "1M", "-e", "4M",
        "--algorithm", "nccl,ring,ina", "--out", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "time(us)" in r.stdout and "busbw(GB/s)" in r.stdout
    rows = json.loads((tmp_path / "collectives.json").read_text())["rows"]
    assert [x["size"] for x in rows] == [1 << 20] * 3 + [2 << 20] * 3 + [4 << 20] * 3
    for x in rows:
        assert x["busbw_GBps"] == pytest.approx(x["algbw_GBps"] * 2 * 15 / 16)


# -- the step model on a cluster -------------------------------------------------------------


def test_with_one_gpu_per_node_the_ina_step_equals_the_flat_path():
    from ina.sim.network import NetworkSpec, parse_link
    from ina.sim.step import CommConfig, StepShape, simulate

    shape = StepShape(0.01, 0.02, 0.001, (1 << 20, 1 << 18), (0.005, 0.02))
    link = parse_link(rate="100G")
    spec = NetworkSpec(workers=4, up=link, down=link, timing_only=True)
    flat = simulate(shape, spec, 2, CommConfig("ina"))
    hosts = simulate(shape, spec, 2, CommConfig("ina"), cluster=clusters.hosts(4, 100e9, "a100"))
    assert [s["iteration_s"] for s in flat["steps"]] == [s["iteration_s"] for s in hosts["steps"]]
    assert hosts["gpus"] == 4


def test_on_nodes_the_ina_step_adds_the_node_stage_and_the_ring_pays_nccls_costs():
    from ina.sim.network import NetworkSpec, parse_link
    from ina.sim.step import CommConfig, StepShape, simulate

    shape = StepShape(0.0, 1e-4, 0.0, (1 << 24,), (1e-4,))
    c = sized("dgx-a100", 4)
    rail = parse_link(rate=f"{c.node_net_bw * 8 / 8:g}bit/s")
    spec = NetworkSpec(workers=4, up=rail, down=rail, timing_only=True)
    ina = simulate(shape, spec, 1, CommConfig("ina"), cluster=c)["steps"][0]["iteration_s"]
    alone = simulate(shape, spec, 1, CommConfig("ina"))["steps"][0]["iteration_s"]
    lat, intra_s = coll.intra_stage(c, 4 << 24)
    assert ina >= lat + intra_s  # the node's reduce-scatter and all-gather bound it
    assert ina > alone / 8  # the shard, not the bucket, crosses the rail: < the flat time
    ring = simulate(shape, spec, 1, CommConfig("ring"), cluster=c)["steps"][0]["iteration_s"]
    e = coll.estimate(c, "all_reduce", "ring", 4 << 24)
    assert ring == pytest.approx(1e-4 + e.seconds + 5e-6)


def test_gradient_accumulation_adds_compute_not_communication():
    from ina.sim.step import StepShape, accumulated

    s = StepShape(0.01, 0.02, 0.001, (100,), (0.02,))
    a = accumulated(s, 4)
    assert a.compute_s == pytest.approx(4 * s.compute_s) and a.buckets == s.buckets
    with pytest.raises(ValueError, match="--accumulate"):
        accumulated(s, 0)


def test_sim_train_on_a_preset_reports_gpus_the_cluster_and_memory(tmp_path):
    r = ina_in_process(
        "sim", "train", "--workload", "resnet50", "--precision", "tf32", "--batch-size", "64",
        "--system", "dgx-a100", "--nodes", "2", "--algorithm", "nccl", "--timing-only",
        "--steps", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "result.json").read_text())
    assert d["gpus"] == 16 and d["device"] == "a100" and d["optimizer"] == "sgd"
    assert d["calibrated"] is True and "dgx-a100: 2 x 8" in d["cluster"]
    assert d["memory_per_gpu_bytes"]["optimizer state"] == pytest.approx(4 * d["parameters"])


# -- memory ---------------------------------------------------------------------------------


def test_llama_7b_under_ddp_with_adam_does_not_fit_an_h100_and_says_why():
    r = ina_in_process(
        "sim", "train", "--workload", "llama-7b", "--workers", "8", "--timing-only",
        "--steps", "1",
    )  # fmt: skip
    assert r.returncode == 2
    assert "does not fit on a h100 (80 GB)" in r.stderr and "optimizer state" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_optimizers_state_and_mixed_precision_master_weights():
    from ina.workload.layers import Layer, Workload
    from ina.workload.memory import footprint, optimizer

    w = Workload("m", (Layer("l", (1000,), fwd_bytes=2 * 1000 + 2 * 500),), 1, "bf16")
    adam, sgd = optimizer("adam", w), optimizer("sgd", w)
    fa, fs = footprint(w, adam), footprint(w, sgd)
    assert (fa.weights, fa.gradients, fa.master_weights) == (2000, 2000, 4000)
    assert (fa.optimizer_state, fs.optimizer_state) == (8000, 4000)
    assert fa.activations == pytest.approx(500)  # half the profile's tensor bytes
    assert optimizer(None, Workload("resnet50", w.layers, 1)).name == "sgd"
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimizer("lion", w)


# -- calibrated compute ---------------------------------------------------------------------


def test_layer_kinds_from_module_classes():
    from ina.workload.layers import kind_of

    assert [kind_of(t) for t in ("Conv2d", "Conv1D", "Linear", "LlamaRMSNorm", "Embedding",
                                 "BertSelfAttention", "ReLU")] == [
        "conv", "gemm", "gemm", "norm", "embedding", "attention", "other"]  # fmt: skip


@pytest.mark.slow
def test_the_efficiency_table_is_what_its_measurements_derive():
    from ina.workload.calibrate import derive
    from ina.workload.calibration import EFFICIENCIES

    table, lines = derive()
    assert len(lines) == 7 and set(table) == set(EFFICIENCIES)
    for key, effs in table.items():
        for kind, e in effs.items():
            if kind != "conv3x3":  # looked up as conv
                assert EFFICIENCIES[key][kind] == e, (key, kind)


def test_a_calibration_point_is_reproduced_by_the_step_model():
    """ResNet-50 on one A100 in TF32 at batch 256 calibrates the convolutions: the step model
    gives the measurement's own throughput back (938 images/s), and never validates on it."""
    from ina.sim.published import POINTS
    from ina.sim.step import shape_of
    from ina.workload import zoo
    from ina.workload.calibration import MEASUREMENTS
    from ina.workload.devices import CALIBRATED, device, layer_times
    from ina.workload.memory import optimizer

    w = zoo.build("resnet50", 256, "tf32")
    t = layer_times(w, device("a100"), CALIBRATED, optimizer(None, w).step_values * 4)
    shape = shape_of(w, t, 4)
    assert 256 / (shape.compute_s + shape.optimizer_s) == pytest.approx(938, rel=2e-3)
    calibrating = {m.source for m in MEASUREMENTS}
    assert not any(p.source in calibrating for p in POINTS)


def test_winograd_only_for_3x3_stride_1_in_fp32():
    from ina.workload.devices import WINOGRAD, layer_flops

    assert layer_flops("conv3x3", 36.0, "fp32") == pytest.approx(36 / WINOGRAD)
    assert layer_flops("conv3x3", 36.0, "tf32") == 36.0
    assert layer_flops("conv", 36.0, "fp32") == 36.0


def test_published_rows_print_ina_and_the_error(tmp_path):
    r = ina_in_process("sim", "published", "--only", "h100-ring,a800-inter", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "published.json").read_text())
    assert [x["key"] for x in rows] == ["h100-ring", "a800-inter"]
    for x in rows:
        assert x["error"] == pytest.approx(x["ina"] / x["published"] - 1)
        assert math.isfinite(x["ina"]) and x["ina"] > 0
    assert "median absolute error" in (tmp_path / "published.md").read_text()


# -- compressed baselines and per-tensor collectives -----------------------------------------


def test_nccl_carries_each_methods_own_payload():
    from ina.compressors.nccl_paths import stages

    n = 1 << 20
    assert stages("none", {}, n) == [("all_reduce", 4 * n)]
    assert stages("fp16", {}, n) == [("all_reduce", 2 * n)]
    assert stages("topk", {"ratio": "0.01"}, n) == [("all_gather", math.ceil(n * 0.64 / 8))]
    assert stages("qsgd", {}, n) == [("all_gather", n + 4)]  # 255 levels in 8 bits
    assert stages("powersgd", {"rank": "2"}, n) == [("all_reduce", 8 * 1024)] * 2
    with pytest.raises(ValueError, match="threshold has no fixed payload"):
        stages("threshold", {}, n)


def test_an_all_gathered_payload_grows_with_the_gpus_and_an_all_reduced_one_does_not():
    from ina.sim.step import CommConfig, collective_seconds

    times = {}
    for nodes in (2, 16):
        c = sized("dgx-a100", nodes)
        for method in ("fp16", "qsgd"):
            comm = CommConfig("nccl", compressor=method)
            times[method, nodes] = collective_seconds(comm, c, None, 1 << 24)[0]
    assert times["qsgd", 16] > 4 * times["qsgd", 2]  # the output is N payloads
    assert times["fp16", 16] < 1.5 * times["fp16", 2]


def test_per_tensor_runs_one_collective_per_gradient(tmp_path):
    r = ina_in_process(
        "sim", "train", "--workload", "resnet50", "--system", "pcie-v100", "--precision",
        "fp32", "--algorithm", "nccl", "--compressor", "topk", "--per-tensor",
        "--timing-only", "--steps", "1", "--out", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "result.json").read_text())
    assert len(d["buckets"]) == 161 and d["per_tensor"] and d["compressor"] == "topk"


def test_a_codecs_time_per_call_is_paid_per_tensor_on_a_per_tensor_path(tmp_path):
    from ina.workload.compute import parse_codec

    assert parse_codec("30GB/s+25us").per_call(0) == pytest.approx(25e-6)
    with pytest.raises(ValueError, match="goes with a throughput"):
        parse_codec("none+1us")
    codec = {}
    for flag in ([], ["--per-tensor"]):
        out = tmp_path / ("t" if flag else "b")
        r = ina_in_process(
            "sim", "train", "--workload", "resnet50", "--system", "pcie-v100", "--precision",
            "fp32", "--algorithm", "nccl", "--compressor", "topk", "--codec", "30GB/s+25us",
            "--timing-only", "--steps", "1", "--out", str(out), *flag,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        d = json.loads((out / "result.json").read_text())
        codec[bool(flag)] = (d["steps"][0]["codec_s"], len(d["buckets"]))
    (per_tensor, tensors), (bucketed, buckets) = codec[True], codec[False]
    assert per_tensor - bucketed == pytest.approx((tensors - buckets) * 25e-6)


def test_the_default_pool_covers_the_paths_bandwidth_delay_product():
    from ina.sim.options import MIN_POOL, auto_pool

    assert auto_pool(100e9, 1e-6, 1e-6, 256) == MIN_POOL  # about 40 packets in flight
    assert auto_pool(400e9, 1e-6, 1e-6, 256) == 256
    assert auto_pool(1e13, 1e-6, 1e-6, 256) == 1024  # never beyond the switch's slots
    pools = [auto_pool(r, 1e-6, 1e-6, 256) for r in (25e9, 100e9, 200e9, 400e9, 800e9)]
    assert pools == sorted(pools)


def test_a_users_calibration_file_overrides_its_kinds_on_its_own_device(tmp_path):
    f = tmp_path / "cal.json"
    f.write_text(json.dumps({"device": "h100", "precision": "bf16",
                             "efficiency": {"gemm": 1.0, "attention": 1.0}}))  # fmt: skip
    base = ("sim", "train", "--workload", "gpt2", "--precision", "bf16", "--device", "h100",
            "--timing-only", "--steps", "1", "--algorithm", "nccl")  # fmt: skip
    times = {}
    for name, extra in (("own", ["--calibration", str(f)]), ("built-in", [])):
        r = ina_in_process(*base, *extra, "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        times[name] = json.loads((tmp_path / name / "result.json").read_text())
    assert times["own"]["steps"][0]["compute_s"] < times["built-in"]["steps"][0]["compute_s"]
    assert times["own"]["calibration_file"] == str(f)
    for data, says in (
        ({"device": "a100", "efficiency": {}}, "is for device 'a100'"),
        ({"device": "h100", "precision": "fp32", "efficiency": {}}, "this run trains in bf16"),
        ({"device": "h100", "efficiency": {"matmul": 0.5}}, "unknown kind 'matmul'"),
        ({"device": "h100", "efficiency": {"gemm": 0}}, "must be a number in (0, 4]"),
        ({"device": "h100"}, "an 'efficiency' object"),
    ):
        f.write_text(json.dumps(data))
        r = ina_in_process(*base, "--calibration", str(f))
        assert r.returncode == 2 and says in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
