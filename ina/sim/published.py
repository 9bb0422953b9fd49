"""`ina sim published`: ina's predictions against published measurements, point by point.

Each `Point` is one published number in a stated setting: a bus bandwidth from `nccl-tests`,
a training throughput, a scaling efficiency, an INA speed-up. ina runs the same setting
through the commands a user would run (`ina sim collectives`, `ina sim train`: the command
line is printed beside each row) and prints its number and the error. Every parameter of
the model comes from data sheets, the setting the source states and the calibration
measurements (`ina.workload.calibration` for compute, `ina.sim.collectives.EFFICIENCY` for
links), fixed before this table was made; none of the calibration points is a row here.
Where a source leaves a setting open, the row's note says what was assumed.

The report (``--out``) holds the table as markdown and JSON, with the cluster files its
commands name; docs/results/published/ is that folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from ina.errors import UsageError, output_dir

# Clusters the sources describe that no preset is: cluster files, written next to the report
CLUSTER_FILES = {
    # Horovod's benchmark servers: 4 Pascal GPUs each (taken as P100 PCIe: the docs say
    # "Pascal" only), one RoCE-capable 25 Gbit/s NIC, RDMA
    "horovod-pascal": {"name": "horovod-pascal", "gpu": "p100", "gpus_per_node": 4,
                       "intra": "pcie", "intra_rate": "15.75GB/s", "nics_per_node": 1,
                       "nic_rate": "25G", "nodes_per_leaf": 128},
    # BytePS's V100 servers: 8 V100 on NVLink, one 100 Gbit/s RDMA NIC per server
    "byteps-v100": {"preset": "dgx1-v100", "name": "byteps-v100", "nics_per_node": 1},
    # Azure ND H200 v5: 8 H200 on NVLink 4 through NVSwitch, as the DGX H100
    "nd-h200-v5": {"preset": "dgx-h100", "name": "nd-h200-v5", "gpu": "h200"},
    # A800: an A100 with NVLink cut to 400 GB/s both ways; one HDR 200 Gbit/s NIC a node
    "a800": {"preset": "dgx-a100", "name": "a800", "intra_rate": "200GB/s",
             "nics_per_node": 1},
}  # fmt: skip


@dataclass(frozen=True)
class Point:
    """A published number and how ina predicts it."""

    key: str
    kind: str  # busbw (GB/s), throughput (samples/s), scaling (%), speedup (x), algbw (GB/s)
    setting: str
    published: float
    source: str
    command: str  # `ina sim collectives ...` or `ina sim train ...`
    note: str = ""
    per: int = 1  # throughput: divide ina's by this (tokens to sequences)
    baseline: str = ""  # speedup: the command ina's time is divided into


DLE = "NVIDIA DeepLearningExamples"
RN50 = "PyTorch/Classification/ConvNets/resnet50v1.5/README.md"
BERT = "PaddlePaddle/LanguageModeling/BERT/README.md"
AZ = "Azure/AI-benchmarking-guide, Azure_Results"
COLL = "ina sim collectives -b {size} -e {size} "
TRAIN = "ina sim train --timing-only --steps 1 --algorithm nccl "

POINTS = (
    # -- collectives (nccl-tests bus bandwidth, GB/s) --------------------------------------
    Point("a100-16M", "busbw", "8 x A100 (one DGX A100-like node), all_reduce 16 MB", 109.22,
          f"{AZ}/ND_A100_v4_results.md, NCCL AllReduce in-place, 16M",
          COLL.format(size="16M") + "--system dgx-a100 --algorithm nccl"),
    Point("a100-64M", "busbw", "8 x A100, one node, all_reduce 64 MiB (the 67M row)", 166.63,
          f"{AZ}/ND_A100_v4_results.md, 67M row",
          COLL.format(size="64M") + "--system dgx-a100 --algorithm nccl"),
    Point("a100-1M", "busbw", "8 x A100, one node, all_reduce 1 MB", 36.22,
          f"{AZ}/ND_A100_v4_results.md, 1M row",
          COLL.format(size="1M") + "--system dgx-a100 --algorithm nccl"),
    Point("dgxa100-multi", "busbw", "DGX A100 nodes (8 x HDR 200G), all_reduce, large", 192,
          "NVIDIA/nccl issue 812, a maintainer: 'we measure 192GB/s AllReduce BusBW'",
          COLL.format(size="8G") + "--system dgx-a100 --nodes 4 --algorithm nccl",
          "node count not stated: 4 nodes, 8 GB"),
    Point("h100-ring", "busbw", "8 x H100 SXM, one node, NCCL_ALGO=RING all_reduce", 370,
          "NVIDIA/nccl-tests issue 212, a maintainer: 'effective NVLink bandwidth of 370GB/s'",
          COLL.format(size="8G") + "--system dgx-h100 --algorithm ring", "8 GB"),
    Point("h100-rs", "busbw", "8 x H100, one node, reduce_scatter", 360,
          "NVIDIA/nccl issue 1281 (a user's run)",
          COLL.format(size="8G") + "--system dgx-h100 --collective reduce_scatter "
          "--algorithm nccl", "size not stated: 8 GB"),
    Point("h100-ag", "busbw", "8 x H100, one node, all_gather", 350,
          "NVIDIA/nccl issue 1281 (a user's run)",
          COLL.format(size="8G") + "--system dgx-h100 --collective all_gather "
          "--algorithm nccl", "size not stated: 8 GB"),
    Point("h200-8G", "busbw", "8 x H200 (Azure ND H200 v5), all_reduce 8 GB (NVLS)", 479.98,
          f"{AZ}/ND_H200_v5_results.md, 8G row",
          COLL.format(size="8G") + "--system {nd-h200-v5} --algorithm nccl"),
    Point("h200-64M", "busbw", "8 x H200, all_reduce 64 MiB (the 67M row)", 368.11,
          f"{AZ}/ND_H200_v5_results.md, 67M row",
          COLL.format(size="64M") + "--system {nd-h200-v5} --algorithm nccl"),
    Point("h200-16M", "busbw", "8 x H200, all_reduce 16 MB", 240.41,
          f"{AZ}/ND_H200_v5_results.md, 16M row",
          COLL.format(size="16M") + "--system {nd-h200-v5} --algorithm nccl"),
    Point("a800-intra", "busbw", "8 x A800 (NVLink 400 GB/s both ways), one node, 8 GB", 160,
          "NVIDIA/nccl issue 412, a maintainer: '~160GB/s intra-node'",
          COLL.format(size="8G") + "--system {a800} --algorithm nccl"),
    Point("a800-inter", "busbw", "12 A800 nodes, one HDR 200G NIC each, all_reduce 8 GB", 24,
          "NVIDIA/nccl issue 412, a maintainer: '24GB/s inter-node'",
          COLL.format(size="8G") + "--system {a800} --nodes 12 --algorithm ring"),
    Point("switchml-nccl", "algbw", "8 hosts of one GPU, 100 Gbit/s RDMA, NCCL all_reduce",
          1.26e9 * 4 / 1e9,
          "p4lang/p4app-switchML docs/img/benchmark.png: NCCL-RDMA about 1.26e9 elements/s "
          "at 8 workers (read off the chart)",
          COLL.format(size="1G") + "--system hosts --nodes 8 --link-rate 100G "
          "--algorithm nccl", "tensor size not stated: 1 GB"),
    # -- training ------------------------------------------------------------------------
    Point("rn50-a100-tf32", "throughput", "ResNet-50, DGX A100, 8 GPUs, TF32, batch 256",
          7248, f"{DLE} {RN50}, DGX A100 80GB table, 8 GPUs",
          TRAIN + "--workload resnet50 --precision tf32 --batch-size 256 --system dgx-a100"),
    Point("rn50-a100-amp", "throughput", "ResNet-50, DGX A100, 8 GPUs, mixed precision, 256",
          16621, f"{DLE} {RN50}, DGX A100 80GB table, 8 GPUs",
          TRAIN + "--workload resnet50 --precision fp16 --batch-size 256 --system dgx-a100"),
    Point("rn50-v100-fp32", "throughput", "ResNet-50, DGX-1 16GB, 8 GPUs, FP32, batch 112",
          2855, f"{DLE} {RN50}, DGX-1 16GB table, 8 GPUs",
          TRAIN + "--workload resnet50 --precision fp32 --batch-size 112 --system dgx1-v100"),
    Point("rn50-v100-amp", "throughput", "ResNet-50, DGX-1 16GB, 8 GPUs, mixed, batch 256",
          8322, f"{DLE} {RN50}, DGX-1 16GB table, 8 GPUs",
          TRAIN + "--workload resnet50 --precision fp16 --batch-size 256 --system dgx1-v100"),
    Point("bert-a100-4n", "throughput", "BERT-large pre-training seq 128, 4 DGX A100 nodes, "
          "mixed, micro-batch 256, 8 accumulated", 21389,
          f"{DLE} {BERT}, multi-node scaling table, 4 nodes",
          TRAIN + "--workload bert-large --precision fp16 --batch-size 256 --seq-len 128 "
          "--accumulate 8 --system dgx-a100 --nodes 4",
          "the fabric is not stated: a rail-optimised leaf", per=128),
    Point("bert-a100-32n", "throughput", "BERT-large pre-training seq 128, 32 DGX A100 nodes, "
          "mixed, micro-batch 256, none accumulated", 157952,
          f"{DLE} {BERT}, multi-node scaling table, 32 nodes",
          TRAIN + "--workload bert-large --precision fp16 --batch-size 256 --seq-len 128 "
          "--system dgx-a100 --nodes 32", "the fabric is not stated: a rail-optimised leaf",
          per=128),
    Point("vgg16-p100", "throughput", "VGG-16, one Pascal GPU, FP32, batch 64", 130.8,
          "Horovod README (Aug 2017), baseline single-GPU row",
          TRAIN + "--workload vgg16 --precision fp32 --batch-size 64 --device p100 --workers 1",
          "P100 PCIe assumed"),
    Point("hvd16-rn101", "scaling", "ResNet-101, 16 Pascal GPUs (4 servers x 4), 25 Gbit/s "
          "RDMA, batch 64", 87.5, "Horovod README (Aug 2017): RDMA Horovod, 1,651.2 img/s "
          "= 14.0x of 118.1",
          TRAIN + "--workload resnet101 --precision fp32 --batch-size 64 "
          "--system {horovod-pascal} --nodes 4"),
    Point("hvd16-vgg16", "scaling", "VGG-16, 16 Pascal GPUs (4 x 4), 25 Gbit/s RDMA, batch 64",
          87.0, "Horovod README (Aug 2017): 1,824.0 img/s = 13.9x of 130.8",
          TRAIN + "--workload vgg16 --precision fp32 --batch-size 64 --system {horovod-pascal} "
          "--nodes 4"),
    Point("hvd512-rn101", "scaling", "ResNet-101, 512 Pascal GPUs (128 x 4), 25 Gbit/s RoCE",
          90, "horovod/horovod docs/benchmarks.rst: '90% scaling efficiency for ... "
          "ResNet-101'", TRAIN + "--workload resnet101 --precision fp32 --batch-size 64 "
          "--system {horovod-pascal} --nodes 128",
          "batch 64 assumed (the README's example)"),
    Point("hvd512-vgg16", "scaling", "VGG-16, 512 Pascal GPUs (128 x 4), 25 Gbit/s RoCE", 68,
          "horovod/horovod docs/benchmarks.rst: '68% scaling efficiency for VGG-16'",
          TRAIN + "--workload vgg16 --precision fp32 --batch-size 64 --system {horovod-pascal} "
          "--nodes 128", "batch 64 assumed"),
    Point("byteps-bert", "scaling", "BERT-large, 256 V100 (32 servers x 8, NVLink, one 100 "
          "Gbit/s RDMA NIC), mixed, batch 64, Horovod + NCCL", 70,
          "bytedance/byteps README: 'Horovod+NCCL has only ~70% scaling efficiency'",
          TRAIN + "--workload bert-large --precision fp16 --batch-size 64 --seq-len 128 "
          "--system {byteps-v100} --nodes 32", "sequence length 128 assumed"),
    Point("switchml-x", "speedup", "SwitchML over NCCL-RDMA all_reduce, 8 hosts, 100 Gbit/s",
          2.8 / 1.26, "p4lang/p4app-switchML docs/img/benchmark.png: about 2.8e9 against "
          "1.26e9 elements/s (read off the chart)",
          COLL.format(size="1G") + "--system hosts --nodes 8 --link-rate 100G --algorithm ina",
          "ina's switch in place of SwitchML's", baseline=COLL.format(size="1G")
          + "--system hosts --nodes 8 --link-rate 100G --algorithm nccl"),
)  # fmt: skip


MEG = "Narayanan et al., SC'21, Table 1 (Selene: DGX A100 80GB, 8 x HDR 200G per node)"
MCORE = "NVIDIA/Megatron-LM README, images/model_table.png (H100, sequence 4096)"
LLM = "ina sim train --timing-only --steps 1 --algorithm nccl --precision fp16 --recompute "
# Published LLM training runs (issue 46): model TFLOP/s per GPU, Megatron's count (the
# recomputed forward included). Micro-batches of one sequence (not stated in the tables).
LLM_POINTS = (
    Point("meg-1.7b", "tflops", "GPT 1.7B (24 x 2304), 32 A100s, dp 32, batch 512", 137, MEG,
          LLM + "--workload gpt:24:2304:24 --system dgx-a100 --nodes 4 --micro-batches 16",
          "micro-batch 1 assumed"),
    Point("meg-7.5b", "tflops", "GPT 7.5B (36 x 4096), 128 A100s, tp 4, dp 32, batch 512", 142,
          MEG, LLM + "--workload gpt:36:4096:32 --system dgx-a100 --nodes 16 --tp 4 "
          "--micro-batches 16", "micro-batch 1 assumed"),
    Point("meg-39b", "tflops", "GPT 39.1B (48 x 8192), 512 A100s, tp 8, pp 2, dp 32, batch "
          "1536", 138, MEG, LLM + "--workload gpt:48:8192:64 --system dgx-a100 --nodes 64 "
          "--tp 8 --pp 2 --micro-batches 48", "micro-batch 1 assumed"),
    Point("meg-146b", "tflops", "GPT 145.6B (80 x 12288), 1,536 A100s, tp 8, pp 8, dp 24, "
          "batch 2304", 148, MEG, LLM + "--workload gpt:80:12288:96 --system dgx-a100 "
          "--nodes 192 --tp 8 --pp 8 --micro-batches 96", "micro-batch 1 assumed"),
    Point("mcore-7b", "tflops", "GPT 7.1B (30 x 4096), 96 H100s, tp 2, dp 48, batch 192", 465.9,
          MCORE, LLM.replace("fp16", "bf16") + "--workload gpt:30:4096:32:4096:131072 "
          "--system dgx-h100 --nodes 12 --tp 2 --micro-batches 4",
          "micro-batch 1 assumed; H100 uncalibrated"),
    Point("mcore-70b", "tflops", "GPT 70B (84 x 8192), 768 H100s, tp 8, pp 2, dp 48, batch 384",
          419.7, MCORE, LLM.replace("fp16", "bf16") + "--workload gpt:84:8192:64:4096:131072 "
          "--system dgx-h100 --nodes 96 --tp 8 --pp 2 --micro-batches 8",
          "micro-batch 1 assumed; H100 uncalibrated"),
)  # fmt: skip
SETS = {"training": POINTS, "llm": LLM_POINTS}


def _files(folder: Path) -> dict[str, str]:
    paths = {}
    for name, data in CLUSTER_FILES.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        paths[name] = str(path)
    return paths


def _run(command: str, files: dict[str, str], out: Path) -> dict:
    """Run an `ina sim` command in this process and return its result."""
    from ina.sim import collectives_cli, train_steps

    words = shlex.split(command.format(**files))
    assert words[:2] == ["ina", "sim"]
    module = collectives_cli if words[2] == "collectives" else train_steps
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    args = p.parse_args([*words[3:], "--out", str(out)])
    with contextlib.redirect_stdout(io.StringIO()):
        module.main(args)
    name = "collectives.json" if module is collectives_cli else "result.json"
    return json.loads((out / name).read_text())


def _seconds(result: dict) -> float:
    return result["rows"][-1]["time_us"]


def predict(point: Point, files: dict[str, str], work: Path) -> float:
    r = _run(point.command, files, work)
    if point.kind == "busbw":
        return r["rows"][-1]["busbw_GBps"]
    if point.kind == "algbw":
        return r["rows"][-1]["algbw_GBps"]
    if point.kind == "speedup":
        return _seconds(_run(point.baseline, files, work)) / _seconds(r)
    step = r["steps"][-1]
    if point.kind == "throughput":
        return step["throughput"] / point.per
    if point.kind == "tflops":
        return step["tflops_per_gpu"]
    # scaling: N GPUs' throughput over N times one GPU's (the step model's scaling factor)
    return 100 * r["scaling_factor"]


UNITS = {
    "busbw": "GB/s", "algbw": "GB/s", "throughput": "/s", "scaling": "%", "speedup": "x",
    "tflops": "TFLOP/s",
}  # fmt: skip


def table(points=POINTS, folder: Path | None = None) -> list[dict]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ina-published-") as tmp:
        work = Path(tmp)
        files = _files(folder or work)
        rows = []
        for p in points:
            ina = predict(p, files, work)
            rows.append({"key": p.key, "kind": p.kind, "setting": p.setting,
                         "published": p.published, "ina": ina,
                         "error": ina / p.published - 1, "source": p.source,
                         "command": p.command, "note": p.note})  # fmt: skip
    return rows


def markdown(rows: list[dict], which: str = "training") -> str:
    errors = [abs(r["error"]) for r in rows]
    coll = sum(r["kind"] in ("busbw", "algbw") for r in rows)
    lines = [
        "# ina against published measurements",
        "",
        f"Made by `ina sim published --set {which} --out docs/results/published` "
        "(docs/cluster.md says how the model works and which measurements calibrate it: none "
        "of them is a row here).",
        "",
        "| # | setting | published | ina | error | source |",
        "|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        unit = UNITS[r["kind"]]
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(
            f"| {i} | {r['setting']}{note} | {r['published']:,.4g} {unit} | "
            f"{r['ina']:,.4g} {unit} | {100 * r['error']:+.1f} % | {r['source']} |"
        )
    lines += [
        "",
        f"{len(rows)} points ({coll} collective bandwidths, {len(rows) - coll} training): "
        f"median absolute error {100 * statistics.median(errors):.1f} %, largest "
        f"{100 * max(errors):.1f} %, {sum(e <= 0.25 for e in errors)} of {len(rows)} within "
        "25 %.",
        "",
        "The commands, one per row (cluster files in braces are written beside the report):",
        "",
        *(f"{i}. `{r['command']}`" for i, r in enumerate(rows, 1)),
    ]
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        default="training",
        choices=sorted(SETS),
        help="training: collectives and data-parallel training; llm: LLM layouts",
    )
    p.add_argument("--only", help="comma-separated keys of the points to run")
    p.add_argument("--out", help="folder for published.md, published.json and cluster files")


def main(args: argparse.Namespace) -> int:
    points = SETS[args.set]
    try:
        if args.only:
            keys = [k.strip() for k in args.only.split(",")]
            known = {p.key for p in points}
            bad = [k for k in keys if k not in known]
            if bad:
                raise ValueError(f"unknown --only {', '.join(bad)}; known: {', '.join(known)}")
            points = tuple(p for p in points if p.key in keys)
        out = output_dir(args.out) if args.out else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    rows = table(points, out)
    text = markdown(rows, args.set)
    print(text)
    if out is not None:
        stem = "published" if args.set == "training" else f"published-{args.set}"
        (out / f"{stem}.md").write_text(text)
        (out / f"{stem}.json").write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {out / f'{stem}.md'}, {out / f'{stem}.json'}")
    return 0
