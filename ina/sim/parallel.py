"""Parallel layouts of LLM training: data (``dp``), tensor (``tp``), pipeline (``pp``) and
expert (``ep``) parallelism, with ZeRO's stages on the data-parallel dimension, as one step of
the step model (`ina.sim.step`).

**Experts** (a mixture of experts' blocks): ``ep`` ranks carved out of the data-parallel
group each hold 1/ep of every block's experts; each MoE block sends every token's routed
copies (top_k of them) to their experts' ranks and back, an all-to-all each way, in the
forward and again in the backward, on the expert group's links. The experts' gradients are
reduced with the rest (their group is dp/ep ranks, about the same ring). A switch cannot
add anything to an all-to-all: INA leaves it as it is.

**Placement** is Megatron-LM's: a rank's tensor-parallel index varies fastest, then its
data-parallel index, then its pipeline stage, so a tensor-parallel group sits inside a node
(``tp`` at most the node's GPUs unless asked otherwise), a data-parallel group is every
``tp``-th rank (with ``tp`` = 8, one GPU per node, all on one rail), and consecutive pipeline
stages are ``tp x dp`` ranks apart.

**One micro-batch on one stage** is the stage's share of the model's layers (its blocks split
evenly, the embedding on the first stage, the head on the last), each layer's time divided by
``tp``, plus what tensor parallelism adds on the critical path: two all-reduces of the
block's activations (batch x sequence x hidden values) in its forward and two in its
backward, on the tensor-parallel group's links (NVLink inside a node), and the pipeline's
activation send to the next stage and gradient send back (NVLink, or the rail's NIC).
Activation recomputation (``recompute``) runs each block's forward again in its backward,
with its all-reduces.

**The pipeline** runs 1F1B: with m micro-batches and stages of times T_s (forward and
backward), a step's compute is sum(T_s) + (m - 1) max(T_s): for uniform stages
(m + pp - 1) T, a bubble of (pp - 1) / (m + pp - 1) of it.

**The data-parallel collective** reduces the first stage's gradients (the last to finish
in 1F1B) as DDP's buckets fill during its last backward: the step model's overlap, on the
data-parallel group's own cluster (`group_cluster`). ZeRO 1 and 2 reduce-scatter them and
all-gather the updated parameters after the optimizer (the same bytes as an all-reduce, the
all-gather exposed); ZeRO 3 also all-gathers each layer's parameters before its forward and
its backward, prefetched one layer ahead, so only what outlasts the layer's compute shows
(1.5x the all-reduce's bytes in all). The optimizer's state is sharded over ``dp`` from ZeRO 1,
gradients from 2, parameters at 3.

With ``tp`` = ``pp`` = 1, one micro-batch and no ZeRO the step is DDP's, unchanged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ina.sim.cluster import Cluster
from ina.workload.devices import LayerTimes
from ina.workload.layers import PRECISIONS, Layer, Workload

_BLOCK = re.compile(r"\.(\d+)\.")


@dataclass(frozen=True)
class Layout:
    """How a job's GPUs divide the work (see the module docstring)."""

    dp: int
    tp: int = 1
    pp: int = 1
    micro_batches: int = 1
    zero: int = 0
    recompute: bool = False
    ep: int = 1  # expert parallelism: carved out of dp, each rank holding experts / ep

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def trivial(self) -> bool:
        """Plain DDP: the step model's own step."""
        return (self.tp, self.pp, self.micro_batches, self.zero, self.recompute, self.ep) == (
            1, 1, 1, 0, False, 1,
        )  # fmt: skip

    @property
    def bubble(self) -> float:
        """The share of a uniform 1F1B pipeline's time its stages wait."""
        return (self.pp - 1) / (self.micro_batches + self.pp - 1)


def check(layout: Layout, cluster: Cluster, work: Workload, tp_across_nodes: bool = False):
    """ValueError in one line for a layout the job cannot run."""
    lay = layout
    for name in ("dp", "tp", "pp", "micro_batches"):
        if getattr(lay, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(lay, name)}")
    if lay.gpus != cluster.gpus:
        raise ValueError(
            f"the layout dp {lay.dp} x tp {lay.tp} x pp {lay.pp} = {lay.gpus} GPUs, but "
            f"{cluster.name} has {cluster.gpus}"
        )
    g = cluster.gpus_per_node
    if lay.tp > g and not tp_across_nodes:
        raise ValueError(
            f"--tp {lay.tp} is more than a node's {g} GPUs: its all-reduces would cross the "
            "network on every layer (--tp-across-nodes if that is what you mean)"
        )
    if (lay.tp <= g and g % lay.tp) or (lay.tp > g and lay.tp % g):
        raise ValueError(f"--tp {lay.tp} does not divide into nodes of {g} GPUs")
    if (lay.tp > 1 or lay.pp > 1) and not work.blocks:
        raise ValueError(
            f"{work.name} is not a transformer of identical blocks: tensor and pipeline "
            "parallelism split blocks"
        )
    if lay.pp > max(work.blocks, 1):
        raise ValueError(f"--pp {lay.pp} is more than {work.name}'s {work.blocks} blocks")
    if lay.zero not in (0, 1, 2, 3):
        raise ValueError(f"--zero takes 0, 1, 2 or 3, got {lay.zero}")
    if lay.pp > 1 and lay.zero >= 2:
        raise ValueError("ZeRO 2 and 3 shard gradients that pipeline stages accumulate: use 0 or 1")
    if lay.ep < 1:
        raise ValueError(f"--ep must be >= 1, got {lay.ep}")
    if lay.ep > 1 and not work.experts:
        raise ValueError(f"--ep {lay.ep}: {work.name} has no experts (a mixture of experts has)")
    if lay.ep > 1 and (lay.dp % lay.ep or work.experts % lay.ep):
        raise ValueError(
            f"--ep {lay.ep} must divide the data-parallel size ({lay.dp}) and the "
            f"{work.experts} experts"
        )


def group_cluster(c: Cluster, layout: Layout) -> Cluster:
    """The data-parallel group's own cluster: its GPUs per node (``G / tp`` of a node's, at
    most ``dp``), their share of the node's NICs, as many nodes as it spans."""
    per_node = max(1, min(c.gpus_per_node // layout.tp, layout.dp))
    share = c.node_net_bw / c.gpus_per_node  # each GPU's rail (or share of a shared NIC)
    return replace(
        c, name=f"{c.name} dp group", nodes=layout.dp // per_node, gpus_per_node=per_node,
        nics_per_node=per_node, nic_bw=share, nvls=c.nvls and per_node > 1,
        intra=c.intra if per_node > 1 else "none",
    )  # fmt: skip


def tp_cluster(c: Cluster, tp: int) -> Cluster:
    """The tensor-parallel group's cluster: inside one node (or across ``tp / G`` nodes)."""
    g = min(tp, c.gpus_per_node)
    return replace(c, name=f"{c.name} tp group", nodes=max(1, tp // c.gpus_per_node),
                   gpus_per_node=g, nvls=c.nvls and g > 1)  # fmt: skip


def ep_cluster(c: Cluster, layout: Layout) -> Cluster:
    """The expert-parallel group's cluster: ``ep`` ranks ``tp`` apart (Megatron's order puts
    the expert rank right after the tensor rank), inside a node while they fit."""
    per_node = max(1, min(c.gpus_per_node // layout.tp, layout.ep))
    return replace(c, name=f"{c.name} ep group", nodes=layout.ep // per_node,
                   gpus_per_node=per_node, nics_per_node=per_node,
                   nic_bw=c.node_net_bw / c.gpus_per_node, nvls=False,
                   intra=c.intra if per_node > 1 else "none")  # fmt: skip


def stages(work: Workload, pp: int) -> list[list[int]]:
    """Indices of each stage's layers: blocks split evenly, what comes before the first block
    on the first stage, what comes after the last on the last."""
    block_of = [int(m.group(1)) if (m := _BLOCK.search(x.name)) else None for x in work.layers]
    first = next((i for i, b in enumerate(block_of) if b is not None), len(work.layers))
    per = [work.blocks // pp + (s < work.blocks % pp) for s in range(pp)]
    bounds = [sum(per[:s]) for s in range(pp + 1)]
    out: list[list[int]] = [[] for _ in range(pp)]
    for i, b in enumerate(block_of):
        if b is None:
            out[0 if i < first else pp - 1].append(i)
        else:
            out[next(s for s in range(pp) if b < bounds[s + 1])].append(i)
    return out


@dataclass(frozen=True)
class StageCosts:
    """One micro-batch on the critical stage, and the pipeline around it (seconds)."""

    forward_s: float  # one micro-batch's forward on the first stage
    backward_s: float  # its backward (recomputation included)
    pipeline_s: float  # every micro-batch on every stage, 1F1B
    tp_comm_s: float  # tensor-parallel all-reduces in one micro-batch (first stage)
    pp_comm_s: float  # one micro-batch's activation and gradient sends
    bubble: float
    ep_comm_s: float = 0.0  # expert parallelism's all-to-alls in one micro-batch


def _collective_s(c: Cluster, collective: str, nbytes: float) -> float:
    from ina.sim import collectives

    if c.gpus < 2 or nbytes <= 0:
        return 0.0
    return collectives.nccl_best(c, collective, int(nbytes)).seconds


def plan(work: Workload, times: LayerTimes, c: Cluster, layout: Layout):
    """The first stage's workload (its layers' gradients and times per GPU) and the costs of
    the pipeline around it, for `ina.sim.step.shape_of`."""
    lay = layout
    bpv = PRECISIONS[work.precision]
    act = work.samples * work.tokens_per_sample * work.hidden * bpv  # one boundary's tensor
    ar = _collective_s(tp_cluster(c, lay.tp), "all_reduce", act) if lay.tp > 1 else 0.0
    # pipeline sends: to the next stage tp x dp ranks on (another node, by the rail, when
    # that is a node or more away)
    p2p = 0.0
    if lay.pp > 1:
        from ina.sim.collectives import intra_busbw, rail_bw

        apart = lay.tp * lay.dp
        bw = intra_busbw(c) if apart < c.gpus_per_node else rail_bw(c)
        p2p = 2 * act / bw  # the activation forward, its gradient back
    # expert parallelism: each MoE block sends its tokens to their experts' ranks and back
    # (two all-to-alls of the routed copies, top_k of each token) each way
    a2a = 0.0
    if lay.ep > 1:
        a2a = _collective_s(ep_cluster(c, lay), "all_to_all", act * work.top_k / lay.tp)
    per_stage = []
    for idx in stages(work, lay.pp):
        nblocks = len({m.group(1) for i in idx if (m := _BLOCK.search(work.layers[i].name))})
        f = sum(times.fwd[i] for i in idx) / lay.tp + 2 * nblocks * (ar + a2a)
        b = sum(times.bwd[i] for i in idx) / lay.tp + 2 * nblocks * (ar + a2a)
        if lay.recompute:
            b += f
        per_stage.append((idx, f + p2p / 2, b + p2p / 2, 2 * nblocks * ar))
    totals = [f + b for _, f, b, _ in per_stage]
    pipeline = sum(totals) + (lay.micro_batches - 1) * max(totals)
    idx0, f0, b0, tp0 = per_stage[0]
    passes = 3 if lay.recompute else 2  # forward's, backward's, recomputation's
    nb0 = len({m.group(1) for i in idx0 if (m := _BLOCK.search(work.layers[i].name))})
    costs = StageCosts(f0, b0, pipeline, tp0 * passes, p2p, lay.bubble, 2 * nb0 * a2a * passes)
    # the first stage's layers as one GPU holds them: gradients and times over tp
    keep = set(idx0)

    def share(x: Layer) -> int:  # how many ranks split a layer's parameters
        return lay.tp * (lay.ep if x.name.endswith(".experts") else 1)

    layers = tuple(
        replace(x, grads=tuple(-(-n // share(x)) for n in x.grads)) if i in keep
        else replace(x, grads=())
        for i, x in enumerate(work.layers)
    )  # fmt: skip
    scale = b0 / max(sum(times.bwd[i] for i in idx0), 1e-30)
    bwd = tuple(times.bwd[i] * scale if i in keep else 0.0 for i in range(len(work.layers)))
    fwd = tuple(times.fwd[i] / lay.tp if i in keep else 0.0 for i in range(len(work.layers)))
    return replace(work, layers=layers), LayerTimes(fwd, bwd, times.optimizer), costs


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by part, for a layout."""

    parts: dict

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def memory(work: Workload, layout: Layout, stage0: Workload, state_values: int) -> Memory:
    """What one GPU of the first stage holds: its share of weights, gradients, FP32 master
    weights and optimizer state (sharded over dp by ZeRO's stage), and the activations of the
    micro-batches 1F1B keeps in flight on it (pp of them), a block's input only per block
    when recomputing."""
    from ina.workload.memory import activation_bytes

    lay = layout
    bpv = PRECISIONS[work.precision]
    p = stage0.params
    dp = lay.dp
    parts = {
        "weights": p * bpv / (dp if lay.zero >= 3 else 1),
        "gradients": p * bpv / (dp if lay.zero >= 2 else 1),
        "master weights": (p * 4 if bpv < 4 else 0.0) / (dp if lay.zero >= 1 else 1),
        "optimizer state": p * 4 * state_values / (dp if lay.zero >= 1 else 1),
    }
    in_flight = min(lay.pp, lay.micro_batches)
    acts = activation_bytes(stage0) / lay.tp
    if lay.recompute and work.blocks:
        blocks = max(1, math.ceil(work.blocks / lay.pp))
        one_block = acts / blocks
        inputs = work.samples * work.tokens_per_sample * work.hidden * bpv / lay.tp
        acts_total = in_flight * blocks * inputs + one_block
    else:
        acts_total = in_flight * acts
    parts["activations"] = acts_total
    return Memory(parts)


def zero_extra_s(c_dp: Cluster, param_bytes: float, layout: Layout, fwd: float, bwd: float):
    """What ZeRO's parameter all-gathers add to a step beyond the gradients' reduce-scatter.
    Stages 1 and 2 all-gather the updated parameters once, hidden behind the next forward as
    far as it goes (Megatron's overlapped parameter gather); stage 3 gathers each layer's
    parameters before its forward and again before its backward, prefetched a layer ahead:
    what outlasts the compute it hides behind shows. Returns (seconds, bytes each GPU moves)."""
    if layout.zero == 0 or c_dp.gpus < 2:
        return 0.0, 0.0
    from ina.sim.collectives import bus_factor

    ag = _collective_s(c_dp, "all_gather", param_bytes)
    moved = param_bytes * bus_factor("all_gather", c_dp.gpus)
    if layout.zero < 3:
        return max(0.0, ag - fwd), moved
    return max(0.0, ag - fwd) + max(0.0, ag - bwd), 2 * moved
