"""`ina sim train`: a workload's training steps in simulated time, without training.

What a step of data-parallel training costs at a scale this host cannot train at, from the
workload alone (`ina.workload`): a zoo model built on the meta device, an imported AICB file
or torch.profiler trace, or one of the trainable models (``--dataset``/``--model``):

1. Each layer's forward and backward time: measured where the workload has it, else the
   device profile's roofline at the precision, each layer at the calibrated efficiency of its
   kind on that device (`ina.workload.calibration`) or at one ``--efficiency``;
   ``--compute fixed:TIME`` rescales the layers so that forward + backward take TIME.
2. The step model (`ina.sim.step`): forward, backward layer by layer, each DDP bucket's
   allreduce starting when its last gradient is ready and overlapping the rest of backward,
   then the optimizer; INA through the transport and switch pipeline, or the ring and
   halving-doubling baselines.
3. ``--timing-only``: one worker per class of alike workers stands for its class (any N; a
   slow worker is a class of its own); without it every worker is simulated (N <= 32) and
   every sum is checked bit for bit. Stragglers scale each worker's compute
   (`ina.sim.stragglers`).

Writes ``result.json`` (per step ``iteration_s``, ``compute_s``, ``exposed_comm_s``,
``codec_s``, ``throughput``; overall ``scaling_factor``), ``timeline.json`` (a Chrome trace:
open it in Perfetto) and ``timeline.png``. The numbers are a pure function of the options:
two runs write the same files apart from the fields named ``wall_*``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from ina import topology, units
from ina.control.dc2.laws import law_params
from ina.errors import UsageError, output_dir
from ina.sim.cluster import hosts
from ina.sim.options import (
    add_cluster_arguments,
    add_network_arguments,
    auto_pool,
    cluster_of,
    link_bps,
    network_spec,
)
from ina.sim.step import (
    ALGORITHMS,
    CommConfig,
    accumulated,
    mergecomp_groups,
    shape_of,
    simulate,
)
from ina.sim.stragglers import parse_stragglers
from ina.sim.timeline import draw, write_chrome_trace
from ina.workload.calibration import calibrated
from ina.workload.compute import parse_codec
from ina.workload.devices import (
    CALIBRATED,
    DEFAULT_EFFICIENCY,
    DEVICES,
    device,
    gradient_bytes,
    layer_times,
)
from ina.workload.layers import PRECISIONS, Workload
from ina.workload.memory import OPTIMIZERS, check_fits, footprint, optimizer


def add_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload")
    w.add_argument(
        "--workload",
        help="a zoo model (ina workloads), an AICB file or a torch.profiler trace "
        "(default: the trainable --dataset/--model)",
    )
    w.add_argument("--dataset", help="trainable workload's data set (default: digits)")
    w.add_argument("--model", help="trainable workload's model (default: the data set's own)")
    w.add_argument("--batch-size", type=int, help="per worker (default: the model's own)")
    w.add_argument("--seq-len", type=int, help="sequence length of a language model")
    w.add_argument("--precision", default="bf16", help=f"one of {', '.join(PRECISIONS)}")
    w.add_argument(
        "--device", help=f"one of {', '.join(DEVICES)} (default: the --system's GPU, or h100)"
    )
    w.add_argument(
        "--optimizer",
        choices=sorted(OPTIMIZERS),
        help="default: SGD with momentum for the ImageNet CNNs, AdamW for the rest",
    )
    w.add_argument(
        "--ignore-memory",
        action="store_true",
        help="run a step that does not fit in the device's memory",
    )
    w.add_argument(
        "--efficiency",
        default=CALIBRATED,
        help="share of the peak reached: calibrated (per kind of layer, from named "
        f"measurements; {DEFAULT_EFFICIENCY:g} where the device has none) or a number",
    )
    w.add_argument(
        "--calibration",
        metavar="FILE",
        help="your own efficiency per kind of layer for this device (JSON; docs/cluster.md)",
    )
    w.add_argument(
        "--compute",
        default="profile",
        help="profile (the device's roofline per layer) or fixed:TIME (forward + backward, "
        "the layers rescaled)",
    )
    w.add_argument(
        "--stragglers", default="none", help="none, slow:W=F, jitter:SIGMA, factors:F,..."
    )
    c = p.add_argument_group("communication")
    c.add_argument(
        "--algorithm",
        default="ina",
        choices=ALGORITHMS,
        help="ina: the switch (on nodes of several GPUs: inside the node by NVLink, across "
        "by the rails' switches); nccl: NCCL's pick of ring and tree per bucket; ring, tree, "
        "hierarchical, sharp: that one (docs/cluster.md)",
    )
    c.add_argument("--density", type=float, default=1.0, help="INA: < 1 homomorphic sparse")
    c.add_argument(
        "--compressor",
        help="a GRACE method (ina/compressors): through the switch with --algorithm ina, or "
        "its payloads all-gathered or all-reduced by NCCL with the others",
    )
    c.add_argument(
        "--compressor-arg", action="append", default=[], metavar="KEY=VALUE", help="its arguments"
    )
    c.add_argument("--law", help="INA: DC2, a control law picking the density (ownq, aimd, ...)")
    c.add_argument(
        "--law-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the law's parameters",
    )
    c.add_argument(
        "--mergecomp",
        action="store_true",
        help="INA: MergeComp's groups of gradients (searched on this network) instead of DDP's buckets",
    )
    c.add_argument(
        "--per-tensor",
        action="store_true",
        help="a collective per gradient tensor (GRACE's and Horovod's per-tensor path), not "
        "DDP's buckets: each pays its launch, latency and codec call",
    )
    c.add_argument("--codec", default="none", help="codec time: none or a throughput (30GB/s)")
    c.add_argument("--lanes", type=int, default=256, help="lanes per packet")
    c.add_argument(
        "--pool",
        type=int,
        help="slots in the job's pool (window); default: enough for the path's "
        "bandwidth-delay product, at least 64",
    )
    p.add_argument("--workers", type=int, default=8, help="hosts of one GPU (without --system)")
    add_cluster_arguments(p)
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="a topology file or two_level:LxW: a tree of switches aggregating hierarchically; "
        "its workers replace --workers",
    )
    p.add_argument("--steps", type=int, default=2, help="training steps")
    par = p.add_argument_group("parallel layout (docs/cluster.md; needs a cluster)")
    par.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (inside a node)")
    par.add_argument("--pp", type=int, default=1, help="pipeline stages (1F1B)")
    par.add_argument(
        "--ep", type=int, default=1, help="expert-parallel ranks (a mixture of experts)"
    )
    par.add_argument("--dp", type=int, help="data-parallel replicas (default: GPUs / (tp x pp))")
    par.add_argument(
        "--micro-batches", type=int, default=1, help="of --batch-size each, per step and replica"
    )
    par.add_argument("--zero", type=int, default=0, help="ZeRO stage on the data-parallel group")
    par.add_argument("--recompute", action="store_true", help="activation recomputation")
    par.add_argument(
        "--tp-across-nodes", action="store_true", help="allow --tp beyond a node's GPUs"
    )
    p.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="micro-batches of --batch-size per step (gradient accumulation): the gradients "
        "are reduced once, during the last one's backward",
    )
    p.add_argument(
        "--timing-only",
        action="store_true",
        help="one worker per class of alike workers (identical deterministic links; a slow "
        "worker is a class of its own): any number of workers",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the gradients and the network")
    p.add_argument("--out", help="directory for result.json, timeline.json and timeline.png")
    p.add_argument("--trace", help="the Chrome trace's path (default: OUT/timeline.json)")
    add_network_arguments(p)


def load_workload(args: argparse.Namespace) -> Workload:
    """The workload the options name (ValueError in one line)."""
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.workload:
        from ina.workload import imports, zoo

        if args.dataset or args.model:
            raise ValueError(
                "--dataset and --model name a trainable workload: with --workload they do nothing"
            )
        if args.workload in zoo.NAMES or args.workload.startswith("gpt:"):
            return zoo.build(args.workload, args.batch_size, args.precision, args.seq_len)
        if args.workload in imports.EXAMPLES or Path(args.workload).exists():
            w = imports.load(args.workload, args.precision)
            return replace(w, samples=args.batch_size) if args.batch_size else w
        raise ValueError(
            f"--workload {args.workload!r}: not a zoo model ({', '.join(zoo.NAMES)}, "
            f"{zoo.GPT_SHAPE}), "
            f"a shipped example ({', '.join(imports.EXAMPLES)}) or a file"
        )
    from ina.workload import zoo
    from ina.workload.catalog import resolve

    task = resolve(args.dataset or "digits", args.model)
    return zoo.trainable(task.dataset, task.model, args.batch_size or 32, args.precision)


def rescale(times, compute_s: float):
    """Layer times scaled so that forward + backward take ``compute_s``."""
    k = compute_s / times.compute if times.compute else 0.0
    return replace(times, fwd=tuple(t * k for t in times.fwd), bwd=tuple(t * k for t in times.bwd))


def compressor_args(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--compressor-arg {item!r}: use KEY=VALUE")
        out[key] = value
    return out


def layout_of(args: argparse.Namespace, cluster, work: Workload):
    """The parallel layout the options name, checked against the cluster and the model."""
    from ina.sim.parallel import Layout, check

    if args.accumulate > 1 and args.micro_batches > 1:
        raise ValueError("--accumulate and --micro-batches say the same: name one")
    trivial = (args.tp, args.pp, args.micro_batches, args.zero, args.recompute, args.ep) == (
        1, 1, 1, 0, False, 1,
    )  # fmt: skip
    if trivial and args.dp is None:
        return Layout(dp=cluster.gpus if cluster is not None else args.workers)
    if cluster is None:
        raise ValueError("a parallel layout runs on a --system (or --workers hosts)")
    for name in ("tp", "pp", "micro_batches"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.dp is None and cluster.gpus % (args.tp * args.pp):
        raise ValueError(
            f"--tp {args.tp} x --pp {args.pp} = {args.tp * args.pp} does not divide the "
            f"{cluster.gpus} GPUs of {cluster.name}"
        )
    dp = args.dp if args.dp is not None else cluster.gpus // (args.tp * args.pp)
    layout = Layout(dp, args.tp, args.pp, args.micro_batches, args.zero, args.recompute, args.ep)
    check(layout, cluster, work, args.tp_across_nodes)
    return layout


def prepare(args: argparse.Namespace):
    """Everything a run needs, checked before anything runs."""
    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if args.accumulate < 1:
        raise ValueError(f"--accumulate must be >= 1, got {args.accumulate}")
    work = load_workload(args)
    cluster = cluster_of(args, args.workers, args.link_rate, args.device or "h100")
    if cluster is not None and args.device and args.device.lower() != cluster.gpu:
        raise ValueError(
            f"--device {args.device}: the {cluster.name} system's GPUs are {cluster.gpu}"
        )
    if cluster is not None and args.topology:
        raise ValueError("--topology and --system both describe the network: name one")
    args.device = cluster.gpu if cluster is not None else (args.device or "h100")
    system = cluster is not None
    dev = device(args.device)
    if not system and not args.topology:  # --workers hosts of one GPU at --link-rate
        cluster = hosts(args.workers, link_bps(args.link_rate), args.device)
    opt = optimizer(args.optimizer, work)
    layout = layout_of(args, cluster, work)
    if not args.ignore_memory and layout.trivial:
        check_fits(work, opt, dev.capacity, dev.name)
    if args.efficiency != CALIBRATED:
        try:
            args.efficiency = float(args.efficiency)
        except ValueError:
            raise ValueError(f"--efficiency {args.efficiency!r}: calibrated or a number") from None
    overrides = None
    if args.calibration:
        from ina.workload.calibration import load_file

        overrides = load_file(args.calibration, dev.name, work.precision)
    times = layer_times(work, dev, args.efficiency, opt.step_values * 4, overrides)
    name, _, rest = args.compute.partition(":")
    if name == "fixed" and rest:
        times = rescale(times, units.seconds(rest, "--compute fixed"))
    elif args.compute != "profile":
        raise ValueError(
            f"--compute {args.compute!r}: profile or fixed:TIME (measured and flops: are "
            "ina train --sim's; here name --device, --precision and --efficiency)"
        )
    codec = parse_codec(args.codec)
    if codec.scale and not codec.bytes_per_second:
        raise ValueError("--codec: none or a throughput (no codec code runs to measure)")
    stragglers = parse_stragglers(args.stragglers)
    fabric = topology.load(args.topology) if args.topology else None
    workers = len(fabric.workers) if fabric else args.workers
    rate = None
    plan = None
    if not layout.trivial:
        from ina.sim import parallel

        stage0, stimes, costs = parallel.plan(work, times, cluster, layout)
        mem = parallel.memory(work, layout, stage0, opt.state_values)
        if not args.ignore_memory and mem.total > dev.capacity:
            part, size = max(mem.parts.items(), key=lambda kv: kv[1])
            raise ValueError(
                f"the layout does not fit on a {dev.name} ({dev.capacity / 1e9:.0f} GB): a GPU "
                f"needs {mem.total / 1e9:.1f} GB, the largest part {part} "
                f"({size / 1e9:.1f} GB); --ignore-memory runs it anyway"
            )
        plan = (stage0, stimes, costs, mem)
        cluster = parallel.group_cluster(cluster, layout)  # the data-parallel collectives'
    if system or plan:
        # INA's network: one worker per node, each on one rail at that rail's line rate
        workers = cluster.nodes
        rate = f"{cluster.node_net_bw * 8 / cluster.gpus_per_node:.6g}bit/s"
    if args.pool is None:
        args.pool = auto_pool(
            link_bps(rate or args.up_rate or args.link_rate),
            units.seconds(args.prop_delay, "--prop-delay"),
            units.seconds(args.switch_latency, "--switch-latency"), args.lanes,
        )  # fmt: skip
    spec = network_spec(
        args, workers, args.lanes, args.pool, seed=args.seed, timing_only=args.timing_only,
        topology=fabric, rate=rate,
    )  # fmt: skip
    bpv = PRECISIONS[work.precision]
    params = law_params(args.law_param)
    if args.law:
        from ina.control.dc2.laws import LAWS, make_law

        if args.law not in LAWS:
            raise ValueError(f"unknown --law {args.law!r}; known: {', '.join(sorted(LAWS))}")
        try:
            make_law(args.law, **params)
        except (TypeError, ValueError) as e:
            raise ValueError(f"--law {args.law} --law-param: {e}") from None
    elif params:
        raise ValueError("--law-param needs --law")
    comm = CommConfig(
        args.algorithm, args.density, args.compressor, compressor_args(args.compressor_arg), bpv,
        args.law, params, "reduce_scatter" if layout.zero else "all_reduce",
    )  # fmt: skip
    if layout.zero and (comm.compressor or comm.law or comm.density < 1):
        raise ValueError("ZeRO's reduce-scatter carries dense gradients: no compression")
    if args.per_tensor:
        if args.mergecomp:
            raise ValueError("--per-tensor and --mergecomp are two ways to group: name one")
        # GRACE's and Horovod's per-tensor path: a collective (and a codec call) per tensor
        work = replace(work, buckets=tuple((k,) for k in range(len(work.gradients))))
    if args.mergecomp:
        if args.algorithm != "ina":
            raise ValueError("--mergecomp groups INA's allreduces (--algorithm ina)")
        work = replace(work, buckets=mergecomp_groups(work, times, spec, codec))
    if comm.compressor:
        from ina.compressors import COMPRESSORS

        if comm.compressor not in COMPRESSORS:
            raise ValueError(
                f"unknown compressor {comm.compressor!r}; known: {', '.join(sorted(COMPRESSORS))}"
            )
        if comm.algorithm != "ina":
            from ina.compressors.nccl_paths import stages

            stages(comm.compressor, comm.compressor_args, 1 << 20)  # a size it can have
    factors = stragglers.factor_matrix(workers, args.steps, args.seed)
    args.optimizer = opt.name
    args.layout, args.plan = layout, plan
    return work, times, codec, spec, comm, factors, cluster


def result_of(work: Workload, args, times, r: dict) -> dict:
    per_worker = (work.tokens if work.tokens_per_sample > 1 else work.samples) * args.accumulate
    unit = "tokens/s" if work.tokens_per_sample > 1 else "samples/s"
    for row in r["steps"]:
        row["throughput"] = r["gpus"] * per_worker / row["iteration_s"]
    return {
        "workload": work.name,
        "source": work.source,
        "parameters": work.params,
        "precision": work.precision,
        "batch_size": work.samples,
        "accumulate": args.accumulate,
        "tokens_per_sample": work.tokens_per_sample,
        "device": args.device,
        "efficiency": args.efficiency,
        "calibrated": args.efficiency == CALIBRATED and calibrated(args.device, work.precision),
        "calibration_file": args.calibration,
        "optimizer": args.optimizer,
        "memory_per_gpu_bytes": footprint(work, optimizer(args.optimizer, work)).parts(),
        "compute": args.compute,
        "stragglers": args.stragglers,
        "law": args.law,
        "mergecomp": args.mergecomp,
        "per_tensor": args.per_tensor,
        "throughput_unit": unit,
        "gradient_bytes_per_step": gradient_bytes(work),
        "ina_lane_bytes_per_step": 4 * work.params,
        **{k: v for k, v in r.items() if k != "timelines"},
    }


def layout_shape(work: Workload, times, shape, args, dp_cluster, bpv: int):
    """The step of a parallel layout (`ina.sim.parallel`): the first stage's buckets in its
    last backward, the whole pipeline before it, ZeRO's gathers after the optimizer."""
    from ina.sim import parallel

    lay = args.layout
    stage0, stimes, costs, mem = args.plan
    s = shape_of(stage0, stimes, bpv)
    opt_s = times.optimizer * stage0.params / work.params / (lay.dp if lay.zero else 1)
    zero_s, zero_bytes = parallel.zero_extra_s(
        dp_cluster, stage0.params * bpv, lay, costs.forward_s, costs.backward_s
    )
    s = replace(s, forward_s=costs.pipeline_s - s.backward_s, optimizer_s=opt_s + zero_s)
    samples = lay.dp * lay.micro_batches * work.samples
    passes = 4 / 3 if lay.recompute else 1.0  # Megatron counts the recomputed forward
    return s, {
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "micro_batches": lay.micro_batches,
                   "zero": lay.zero, "recompute": lay.recompute, "ep": lay.ep},
        "gpus_total": lay.gpus,
        "bubble": lay.bubble,
        "pipeline_s": costs.pipeline_s,
        "tp_comm_s_per_microbatch": costs.tp_comm_s,
        "pp_comm_s_per_microbatch": costs.pp_comm_s,
        "ep_comm_s_per_microbatch": costs.ep_comm_s,
        "zero_gather_exposed_s": zero_s,
        "zero_gather_bytes_per_gpu": zero_bytes,
        "memory_per_gpu_bytes": mem.parts,
        "samples": samples,
        "tokens_per_step": samples * work.tokens_per_sample,
        "flops_per_step": work.flops * lay.dp * lay.micro_batches * passes,
    }  # fmt: skip


def _efficiency(r: dict) -> str:
    if r.get("calibration_file"):
        return f"the efficiencies of {r['calibration_file']} (the built-in ones elsewhere)"
    if r["efficiency"] != CALIBRATED:
        return f"{r['efficiency']:g} of peak"
    if r["calibrated"]:
        return "calibrated efficiencies"
    return f"{DEFAULT_EFFICIENCY:g} of peak (uncalibrated: no measurement of this device)"


def print_result(r: dict) -> None:
    ms = 1e3
    print(f"network: {r['network']}" + (" (timing only)" if r["timing_only"] else ""))
    print(
        f"{r['workload']}: {r['parameters']:,} parameters, batch {r['batch_size']} per worker, "
        f"{r['precision']} on {r['device']} at {_efficiency(r)}; "
        f"{len(r['buckets'])} bucket{'s' if len(r['buckets']) != 1 else ''}; "
        f"gradients {r['gradient_bytes_per_step'] / 1e6:,.1f} MB at {r['precision']} "
        f"(INA's int32 lanes: {r['ina_lane_bytes_per_step'] / 1e6:,.1f} MB)"
    )
    mem = sum(r["memory_per_gpu_bytes"].values())
    print(f"optimizer {r['optimizer']}; memory per GPU {mem / 1e9:,.1f} GB (estimate)")
    if r.get("cluster"):
        print(f"cluster {r['cluster']}")
    if r.get("layout"):
        lay = r["layout"]
        print(
            f"layout dp {lay['dp']} x tp {lay['tp']} x pp {lay['pp']} = {r['gpus_total']:,} "
            f"GPUs, {lay['micro_batches']} micro-batches, ZeRO {lay['zero']}"
            + (", recompute" if lay["recompute"] else "")
            + (f", ep {lay['ep']}" if lay["ep"] > 1 else "")
            + f"; bubble {100 * r['bubble']:.1f} %; TP {r['tp_comm_s_per_microbatch'] * 1e3:.2f}"
            f" ms, PP {r['pp_comm_s_per_microbatch'] * 1e3:.2f} ms and EP "
            f"{r['ep_comm_s_per_microbatch'] * 1e3:.2f} ms per micro-batch"
        )
        print(f"data parallel: {r['algorithm']} over {r['gpus']:,} replicas ({r['cluster']})")
        tf = r["steps"][-1]["tflops_per_gpu"]
        print(f"model TFLOP/s per GPU {tf:.1f}")
    else:
        print(f"{r['algorithm']} over {r['gpus']:,} GPUs, stragglers {r['stragglers']}")
    print(
        "step  iteration ms  compute ms  exposed comm ms  codec ms  optimizer ms  density  "
        + r["throughput_unit"]
    )
    for i, s in enumerate(r["steps"]):
        print(
            f"{i:4d}  {s['iteration_s'] * ms:12,.3f}  {s['compute_s'] * ms:10,.3f}  "
            f"{s['exposed_comm_s'] * ms:15,.3f}  {s['codec_s'] * ms:8,.3f}  "
            f"{s['optimizer_s'] * ms:12,.3f}  {s['density']:7.4g}  {s['throughput']:,.0f}"
        )
    exact = r.get("exact")
    print(
        f"scaling factor {100 * r['scaling_factor']:.1f} % (N workers' throughput over N times "
        f"one alone); {r['bytes_sent_per_worker']:,} bytes sent per worker"
        + ("" if exact is None else f"; every sum exact: {'yes' if exact else 'NO'}")
    )
    print(f"simulator: {r['wall_seconds']:.2f} s of wall time")


def main(args: argparse.Namespace) -> int:
    try:
        work, times, codec, spec, comm, factors, cluster = prepare(args)
        out = output_dir(args.out) if args.out else None
        if args.trace:  # before the simulation, not after it
            output_dir(Path(args.trace).parent, "--trace")
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    bpv = PRECISIONS[work.precision]
    shape = accumulated(shape_of(work, times, bpv), args.accumulate)
    extra = {}
    if args.plan is not None:
        shape, extra = layout_shape(work, times, shape, args, cluster, bpv)
    want_trace = out is not None or args.trace
    r = simulate(
        shape,
        spec,
        args.steps,
        comm,
        codec,
        factors,
        args.seed,
        trace_workers=1 if want_trace else 0,
        cluster=cluster,
    )
    result = result_of(work, args, times, r)
    result.update(extra)
    if extra:
        per_step = extra["tokens_per_step"] if work.tokens_per_sample > 1 else extra["samples"]
        flops = extra["flops_per_step"]
        for row in result["steps"]:
            row["throughput"] = per_step / row["iteration_s"]
            row["tflops_per_gpu"] = flops / row["iteration_s"] / extra["gpus_total"] / 1e12
    print_result(result)
    if out is not None:
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    if want_trace:
        trace = Path(args.trace) if args.trace else out / "timeline.json"
        meta = {k: result[k] for k in ("workload", "device", "precision", "network", "algorithm")}
        write_chrome_trace(trace, r["timelines"], meta)
        png = trace.with_suffix(".png")
        draw(png, r["timelines"], f"{work.name} on {args.device} ({work.precision}), "
             f"{result['algorithm']} over {result['workers']} workers")  # fmt: skip
        print(
            f"wrote {', '.join(str(p) for p in ([out / 'result.json'] if out else []) + [trace, png])}"
        )
    return 0 if result.get("exact") is not False else 1
