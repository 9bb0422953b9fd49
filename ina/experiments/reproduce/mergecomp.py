"""`ina reproduce mergecomp`: Wang et al., "MergeComp: A Compression Scheduler for Scalable
Communication-Efficient Distributed Training" (2021), re-run in simulated time.

MergeComp merges gradient tensors into a few groups before compressing them, so that the
per-call costs of compression (kernel launches, collective latencies) are paid per group,
not per tensor, while the groups still overlap the backward pass. The paper claims up to
3.83x over per-tensor compression and scaling factors up to 99 % on ResNet-50/101 with 8
V100s in one server, over PCIe 3.0 and NVLink. The study:

1. **Tensors**: each gradient of ina's zoo model in backward order, ready when its layer's
   backward ends on the V100 roofline (`tensors_of`, as `ina.sim.step.shape_of` does it).
2. **A cost model per compressor** (`cost_table`): ``c(n)`` = per-call kernel launches +
   the codec's memory passes at the V100's bandwidth (encode, then one decode per worker's
   payload) + the collective over the links, a ring allgather of the payload (fp16: a ring
   allreduce), its time from `ina.sim.baselines.allreduce_time` on the link rate.
   Every constant is in `COMPRESSORS` and fixed before anything runs.
3. **Per tensor against MergeComp**: `ina.workload.mergecomp.iteration_end` of one group per
   tensor against the exact search's partition (`search`); the iteration is forward +
   max(backward + every group's codec, communication end) + optimizer: the codec's kernels
   run on the GPU that computes backward, so they delay it.
4. **The dense baseline**: DDP buckets through a ring allreduce (`ina.sim.step`, ``ring``).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

from ina.errors import UsageError
from ina.experiments.reproduce import MISSES, NO_EFFECT, Claim, Report, verdict

NAME = "mergecomp"
TITLE = (
    "Wang et al., MergeComp: A Compression Scheduler for Scalable Communication-Efficient "
    "Distributed Training (2021)"
)
MODELS = ("resnet50", "resnet101")
WORKERS = 8
DEVICE = "v100"
# PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 encoding = 126 Gbit/s per direction (the spec)
PCIE_BPS = 8e9 * 16 * 128 / 130
# NVLink 2.0 on the V100: 6 links x 25 GB/s per direction = 150 GB/s per direction per GPU
# (300 GB/s both ways); a ring is taken to get all of it per hop (an upper bound)
NVLINK_BPS = 6 * 25e9 * 8
LINKS = {"PCIe 3.0 x16": PCIE_BPS, "NVLink 2.0": NVLINK_BPS}
LAUNCH_S = 5e-6  # one CUDA kernel launch (a commonly stated figure, ~5 us)
PAPER_SPEEDUP, PAPER_SCALING = 3.83, 0.99


@dataclass(frozen=True)
class Method:
    """A compressor's costs: payload bits per value, collective, kernels and memory passes
    (each a read and write of the float32 tensor) to encode, and to decode one payload."""

    bits: float
    collective: str  # "allgather" or "allreduce"
    enc_kernels: int
    enc_passes: float
    dec_kernels: int
    dec_passes: float


# Nine of GRACE's methods; top-k and DGC at 1 % (value and int32 index: 64 bits a kept value)
COMPRESSORS = {
    "fp16": Method(16, "allreduce", 1, 1, 1, 1),
    "qsgd": Method(8, "allgather", 4, 4, 2, 1),
    "terngrad": Method(2, "allgather", 4, 4, 2, 1),
    "onebit": Method(1, "allgather", 4, 4, 2, 1),
    "signsgd": Method(1, "allgather", 2, 2, 2, 1),
    "efsignsgd": Method(1, "allgather", 4, 4, 2, 1),
    "signum": Method(1, "allgather", 3, 3, 2, 1),
    "topk": Method(0.64, "allgather", 6, 8, 2, 1),
    "dgc": Method(0.64, "allgather", 6, 6, 2, 1),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compressors", default=",".join(COMPRESSORS), help="comma-separated methods")


def tensors_of(w, times):
    """Each gradient as a `TensorInfo` in backward order, ready when its layer's backward
    ends (seconds after backward starts)."""
    import numpy as np

    from ina.workload.mergecomp import TensorInfo

    done = np.cumsum(times.bwd[::-1])[::-1]
    return [
        TensorInfo(f"{w.layers[k].name}#{i}", n, float(done[k]))
        for i, (k, n) in enumerate(w.gradients)
    ]


def cost_table(m: Method, spec, largest: int, points: int):
    """``c(n)`` of one compressed group of ``n`` values, on a geometric grid of sizes."""
    from ina.sim.baselines import allreduce_time
    from ina.workload.devices import DEFAULT_EFFICIENCY, device
    from ina.workload.mergecomp import TableCost, grid

    bw = device(DEVICE).memory_bps * DEFAULT_EFFICIENCY
    N = spec.workers
    sizes = grid(largest, points)
    codec, comm = [], []
    for n in sizes:
        payload = max(math.ceil(n * m.bits / 32), 1)  # in 32-bit lanes
        launches = (m.enc_kernels + N * m.dec_kernels) * LAUNCH_S
        passes = m.enc_passes + N * m.dec_passes
        codec.append(launches + passes * 8 * n / bw)
        if m.collective == "allreduce":
            comm.append(allreduce_time(spec, payload, "ring")["seconds"])
        else:  # a ring allgather: the all-gather half of a ring allreduce of N payloads
            comm.append(allreduce_time(spec, N * payload, "ring")["seconds"] / 2)
    return TableCost(tuple(sizes), tuple(codec), tuple(comm))


def run(args: argparse.Namespace) -> Report:
    t0 = time.perf_counter()
    names = [c.strip() for c in args.compressors.split(",") if c.strip()]
    unknown = [c for c in names if c not in COMPRESSORS]
    if unknown or not names:
        raise UsageError(
            f"--compressors {args.compressors!r}: a comma-separated subset of "
            f"{', '.join(COMPRESSORS)}"
        )
    points = 16 if args.quick else 40
    # imported after the checks: a bad option ends before a second of imports
    from ina.sim.network import NetworkSpec
    from ina.sim.step import CommConfig, shape_of, simulate
    from ina.workload import zoo
    from ina.workload.devices import DEFAULT_EFFICIENCY, device, layer_times
    from ina.workload.mergecomp import iteration_end, per_tensor, search

    dev = device(DEVICE)
    rows, best, scaling = [], (0.0, "", 0.0, 0.0, 0.0), (0.0, "", 0.0)
    dense_rows, dense_sf = [], {}
    for model in MODELS:
        w = zoo.build(model)
        times = layer_times(w, dev, DEFAULT_EFFICIENCY)
        tensors = tensors_of(w, times)
        fwd, bwd, opt = sum(times.fwd), sum(times.bwd), times.optimizer
        alone = fwd + bwd + opt
        shape = shape_of(w, times, 4)
        for link, rate in LINKS.items():
            spec = NetworkSpec(workers=WORKERS, timing_only=True).with_links(rate_bps=rate)
            ring = simulate(shape, spec, 1, CommConfig("ring"))
            dense_sf[model, link] = ring["scaling_factor"]
            dense_rows.append(
                f"| {model} | {link} | {alone * 1e3:.1f} | "
                f"{ring['mean_iteration_s'] * 1e3:.1f} | {ring['scaling_factor']:.1%} |"
            )
            for c in names:
                cost = cost_table(COMPRESSORS[c], spec, w.params, points)

                def codec_of(groups, cost=cost, tensors=tensors):
                    # the codec's kernels run on the same GPU as backward: they delay it
                    return sum(cost.codec(sum(tensors[i].numel for i in g)) for g in groups)

                pt = per_tensor(len(tensors))
                it_pt = fwd + max(bwd + codec_of(pt), iteration_end(pt, tensors, cost))
                plan = search(tensors, cost)
                it_mc = fwd + max(bwd + codec_of(plan.groups), plan.end_s)
                it_pt, it_mc = it_pt + opt, it_mc + opt
                x, sf = it_pt / it_mc, alone / it_mc
                if x > best[0]:
                    best = (x, f"{c}, {model}, {link}", it_pt - alone, it_mc - alone, alone)
                if sf > scaling[0]:
                    scaling = (sf, f"{c}, {model}, {link}", dense_sf[model, link])
                rows.append(
                    f"| {model} | {link} | {c} | {it_pt * 1e3:.1f} | {it_mc * 1e3:.1f} | "
                    f"{len(plan.groups)} | {x:.2f}x | {alone / it_pt:.1%} | {sf:.1%} |"
                )
    table = "\n".join(
        [
            f"Per compressor, {WORKERS} V100s (fp32 roofline at efficiency "
            f"{DEFAULT_EFFICIENCY}, zoo batch 64): iteration time with one compression call "
            "per tensor and with MergeComp's partition (exact search under the cost model), "
            "and the scaling factor (compute + optimizer over iteration).",
            "",
            "| model | link | compressor | per-tensor ms | MergeComp ms | groups | speed-up "
            "| scaling per-tensor | scaling MergeComp |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    dense = "\n".join(
        [
            "The dense baseline: DDP's buckets through a ring allreduce (ina.sim.step, ring).",
            "",
            "| model | link | compute + optimizer ms | ring iteration ms | scaling |",
            "|---|---|---|---|---|",
            *dense_rows,
        ]
    )

    v_speed = verdict(best[0], PAPER_SPEEDUP, best[0] > NO_EFFECT)
    # the 99 % rests on a premise: without compression the same job scales poorly. Where
    # ina's own uncompressed ring already scales as well as the claim, MergeComp's number
    # is not evidence for it, whatever it is
    base_sf = max(dense_sf.values())
    premise = verdict(base_sf, PAPER_SCALING, True) not in ("reproduced", "exceeds")
    v_scale = verdict(scaling[0], PAPER_SCALING, scaling[0] > scaling[2])
    if not premise and v_scale in ("reproduced", "exceeds"):
        v_scale = "not reproduced"
    claims = [
        Claim(
            "up to 3.83x over per-tensor compression",
            f"{PAPER_SPEEDUP}x",
            f"{best[0]:.2f}x ({best[1]})",
            v_speed,
            (
                f"{MISSES}: the codec's real per-tensor costs are higher than "
                f"{LAUNCH_S * 1e6:.0f} us launches; "
                if v_speed == "exceeds"
                else ""
            )
            + f"at the best point per-tensor adds {best[2] * 1e3:.1f} ms to "
            f"{best[4] * 1e3:.1f} ms of compute and optimizer, MergeComp "
            f"{best[3] * 1e3:.1f} ms: with {LAUNCH_S * 1e6:.0f} us launches the per-call "
            "costs are small against the roofline's compute, so merging saves little; "
            "the paper's 3.83x needs far larger per-tensor overheads than stated here",
        ),
        Claim(
            "scaling factor up to 99 %",
            f"{PAPER_SCALING:.0%}",
            f"{scaling[0]:.1%} ({scaling[1]}); uncompressed ring {scaling[2]:.1%} there, "
            f"up to {base_sf:.1%}",
            v_scale,
            (
                f"{MISSES}: per-collective launch and transport costs; "
                if v_scale == "exceeds"
                else ""
            )
            + (
                f"the paper's premise does not hold here: ina's uncompressed ring already "
                f"scales {base_sf:.1%} in this setting (as well as the claim), so "
                f"MergeComp's {scaling[0]:.1%} shows nothing compression adds: with "
                "NCCL's latencies and protocol shares on the server's links "
                "(docs/cluster.md), one server's ring is no bottleneck for ResNet's "
                "gradients"
                if not premise
                else "MergeComp's groups hide communication behind backward; what stays "
                "exposed is the last group's codec and collective"
            ),
        ),
    ]
    wall = time.perf_counter() - t0
    return Report(
        name=NAME,
        title=TITLE,
        command=f"ina reproduce mergecomp{' --quick' if args.quick else ''}",
        setting=[
            "ResNet-50 and ResNet-101 (ina's zoo, ImageNet 224x224, batch 64 per GPU, fp32)",
            f"{WORKERS} V100 GPUs in one server (data sheet roofline, half of peak)",
            f"PCIe 3.0 x16: {PCIE_BPS / 1e9:.0f} Gbit/s per direction (8 GT/s x 16 lanes, "
            "128b/130b encoding, the spec)",
            f"NVLink 2.0: {NVLINK_BPS / 1e9:.0f} Gbit/s per direction per GPU (6 links x "
            "25 GB/s, the V100 data sheet's 300 GB/s both ways)",
            "Nine GRACE compressors: " + ", ".join(names) + "; per-tensor against MergeComp",
        ],
        approximations=[
            "The links are the ring's hops (ina.sim.baselines: packets through a switch), "
            "not a PCIe tree or NVLink's hybrid cube mesh; NVLink's full per-GPU rate per hop "
            "is an upper bound",
            f"Codec cost from stated constants, not measured: {LAUNCH_S * 1e6:.0f} us per "
            "kernel launch, each kernel count and memory pass per method as in COMPRESSORS "
            "(V100 900 GB/s at half), one decode per worker's payload; not host-dependent",
            "Compressed payloads go by ring allgather (fp16 by ring allreduce), as GRACE "
            "does for methods whose payloads cannot be summed",
            "MergeComp's partition is the exact optimum under the cost model (the paper "
            "searches heuristically on hardware measurements)",
            "The codec's kernels delay backward (same GPU) by their time; the search "
            "itself minimises the communication end only (its cost includes the codec)",
            "Compute from the roofline, not measured",
        ],
        tables=[table, dense],
        claims=claims,
        full_run=(
            f"This run took {wall:.0f} s."
            + (" The full run (a finer cost grid) takes about as long." if args.quick else "")
        ),
    )
