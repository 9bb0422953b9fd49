"""The step model: one data-parallel training step with backward overlapped with communication.

A worker's step, as DDP runs it on a GPU with one communication stream (NCCL's):

1. **Forward**, the layers in order.
2. **Backward**, the layers in reverse. A layer's gradients are ready when its backward
   ends; they fill DDP's buckets (PyTorch's assignment by size, `ina.workload.buckets`).
3. **Each bucket's allreduce** starts when its last gradient is ready *and* the previous
   bucket's allreduce has finished (one stream, buckets in order), and overlaps the rest of
   backward. The codec's time (a throughput, as a GPU codec's) is charged on the
   communication stream before the bucket's rounds.
4. **The optimizer** runs once backward is over and the last bucket is reduced.

INA buckets go through the real transport core and switch pipeline on the simulated network
(`ina.sim.network`): dense int32 lanes, the homomorphic sparse path at a density, or a GRACE
method. The ring and halving-doubling baselines take their time from `ina.sim.baselines`
over the same links, with the gradients at the step's precision (a ring of bf16 gradients
moves half the bytes of a float32 one; INA's lanes are int32 whatever the precision).

Per step it reports: ``compute_s`` (forward + backward), ``exposed_comm_s`` (the time the
step is longer than compute and optimizer: communication and codec not hidden behind
backward), ``codec_s`` (charged in all), ``optimizer_s``, ``iteration_s`` and the throughput;
and over the run the scaling factor, N workers' throughput over N times one worker's alone
(compute and optimizer only). Stragglers (`ina.sim.stragglers`) scale each worker's compute.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ina.sim.backends import build
from ina.sim.network import MAX_WORKERS
from ina.sim.nodes import Compute
from ina.sim.options import describe
from ina.workload.buckets import assign_by_size
from ina.workload.compute import CodecModel
from ina.workload.devices import LayerTimes
from ina.workload.layers import Workload

# ina: the switch (hierarchical on nodes of several GPUs); nccl: NCCL's own pick of ring and
# tree at each bucket's size; ring, tree, hierarchical, sharp: that algorithm
# (`ina.sim.collectives`); halving-doubling: the idealized packet-level baseline
ALGORITHMS = ("ina", "nccl", "ring", "tree", "hierarchical", "sharp", "halving-doubling")
COLLECTIVE_ALGORITHMS = ("nccl", "ring", "tree", "hierarchical", "sharp")
# What launching one collective costs the communication stream before its first byte: a
# CUDA kernel launch (about 5 us, a commonly stated figure) that NCCL's latency model
# leaves out.
LAUNCH_S = 5e-6
GRADIENT_BLOCK = 1 << 20  # random values, repeated to a bucket's size


class SumCheck:
    """Every worker's decoded sums of a call against the int32 sum of what every worker
    encoded, without holding every worker's arrays: a running sum and a digest per worker."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pending: dict[object, tuple[np.ndarray, list[bytes]]] = {}
        self.exact = True

    def add(self, call: object, ints: np.ndarray, sums: np.ndarray) -> None:
        acc, digests = self.pending.setdefault(call, (np.zeros(ints.size, np.int32), []))
        np.add(acc, ints, out=acc)  # int32: wraps around, as the switch adds
        digests.append(hashlib.blake2b(np.ascontiguousarray(sums).tobytes()).digest())
        if len(digests) == self.workers:
            del self.pending[call]
            expected = hashlib.blake2b(acc.tobytes()).digest()
            self.exact &= all(d == expected for d in digests)


@dataclass(frozen=True)
class StepShape:
    """One worker's step at factor 1: seconds of forward, backward and optimizer, each
    bucket's elements and when its last gradient is ready (seconds after backward starts)."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    buckets: tuple[int, ...]
    ready_s: tuple[float, ...]
    layer_names: tuple[str, ...] = ()
    layer_bwd_s: tuple[float, ...] = ()  # backward order, for the timeline

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s


def shape_of(w: Workload, times: LayerTimes, bytes_per_value: int) -> StepShape:
    """Buckets and their ready times from a workload's layers and their times."""
    # done[i]: seconds after backward starts when layer i's backward ends (layers L-1..i)
    done = np.cumsum(times.bwd[::-1])[::-1]
    grads = w.gradients  # (layer, elements), backward order
    groups = (
        [list(b) for b in w.buckets]
        if w.buckets is not None
        else assign_by_size([n for _, n in grads], bytes_per_value)
    )
    bwd_total = float(done[0]) if len(done) else 0.0
    buckets, ready = [], []
    for g in groups:
        buckets.append(sum(grads[k][1] for k in g))
        ready.append(max(float(done[grads[k][0]]) for k in g))
    return StepShape(
        forward_s=float(sum(times.fwd)),
        backward_s=bwd_total,
        optimizer_s=times.optimizer,
        buckets=tuple(buckets),
        ready_s=tuple(ready),
        layer_names=tuple(x.name for x in w.layers[::-1]),
        layer_bwd_s=tuple(times.bwd[::-1]),
    )


def accumulated(shape: StepShape, k: int) -> StepShape:
    """The step of ``k`` micro-batches with gradient accumulation: the first ``k - 1`` run
    forward and backward with no communication (DDP's ``no_sync``), the last as one step, its
    buckets reduced as its backward goes. Drawn as one long forward on the timeline."""
    if k < 1:
        raise ValueError(f"--accumulate must be >= 1, got {k}")
    if k == 1:
        return shape
    return replace(shape, forward_s=shape.forward_s + (k - 1) * shape.compute_s)


def mergecomp_groups(
    w: Workload, times: LayerTimes, spec, codec: CodecModel, points: int = 8,
    largest: int = 1 << 22,
) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    """MergeComp's partition of the workload's gradients (indices into `Workload.gradients`):
    the exact search of `ina.workload.mergecomp` over a cost table of this network, one
    timing-only INA allreduce per size of a geometric grid up to ``largest`` values (beyond
    it the table goes on along its last segment, where time is linear in bytes), plus the
    codec's throughput."""
    from ina.sim.allreduce import run as allreduce_run
    from ina.workload.mergecomp import TableCost, TensorInfo, grid, search

    done = np.cumsum(times.bwd[::-1])[::-1]
    tensors = [
        TensorInfo(f"{w.layers[i].name}#{k}", n, float(done[i]))
        for k, (i, n) in enumerate(w.gradients)
    ]
    sizes = grid(min(sum(t.numel for t in tensors), largest), points)
    rep = replace(spec, timing_only=True)
    comm = [allreduce_run(rep, n, 2)["call_seconds"][1] for n in sizes]
    cost = TableCost(tuple(sizes), tuple(codec.per_call(n) for n in sizes), tuple(comm))
    return search(tensors, cost).groups


@dataclass(frozen=True)
class CommConfig:
    """How buckets are reduced: ``ina`` (density 1: dense; < 1: homomorphic sparse; or a GRACE
    ``compressor`` with its arguments), or one of NCCL's collectives (a ``compressor``'s
    payloads all-reduced or all-gathered as GRACE's NCCL path sends them,
    `ina.compressors.nccl_paths`), or ``halving-doubling``."""

    algorithm: str = "ina"
    density: float = 1.0
    compressor: str | None = None
    compressor_args: dict = field(default_factory=dict)
    bytes_per_value: int = 4  # the gradients' precision (what a ring sends)
    law: str | None = None  # DC2: a control law picks each step's density from the delays
    law_params: dict = field(default_factory=dict)
    # what reduces each bucket: an all-reduce, or ZeRO's reduce-scatter (`ina.sim.parallel`)
    collective: str = "all_reduce"

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(
                f"unknown algorithm {self.algorithm!r}; known: {', '.join(ALGORITHMS)}"
            )
        if not 0 < self.density <= 1:
            raise ValueError(f"--density must be in (0, 1], got {self.density:g}")
        if sum(x is not None for x in (self.compressor, self.law)) + (self.density < 1) > 1:
            raise ValueError("choose one of --density, --compressor and --law")
        if self.algorithm != "ina" and (self.law or self.density < 1):
            raise ValueError(
                f"{self.algorithm} sends dense gradients or a --compressor's payloads: "
                "--density and --law are INA's"
            )
        if self.algorithm == "halving-doubling" and self.compressor:
            raise ValueError("halving-doubling sends dense gradients: compress on nccl or ina")


@dataclass
class Timeline:
    """What one worker did, as (stream, name, start, end) rows: the Chrome trace's events."""

    worker: int
    rows: list[tuple[str, str, float, float]] = field(default_factory=list)

    def add(self, stream: str, name: str, start: float, end: float) -> None:
        if end > start:
            self.rows.append((stream, name, start, end))


def _worker_step(shape: StepShape, f: float, t0: float, tl: Timeline | None):
    """The compute stream of one step at factor ``f`` from ``t0``: (backward start, each
    bucket's ready time, backward end), recorded on ``tl``."""
    tb = t0 + shape.forward_s * f
    if tl is not None:
        tl.add("compute", "forward", t0, tb)
        t = tb
        for name, s in zip(shape.layer_names, shape.layer_bwd_s, strict=True):
            tl.add("compute", f"backward {name}", t, t + s * f)
            t += s * f
    return tb, [tb + r * f for r in shape.ready_s], tb + shape.backward_s * f


def _summary(
    shape: StepShape, ends: list[tuple[float, float, float]], codec: list[float], f: np.ndarray
) -> list[dict]:
    """Per step (start, compute end, end) of the slowest worker -> the reported columns."""
    rows = []
    for s, (t0, _tc, t1) in enumerate(ends):
        fmax = float(f[s].max())
        compute = shape.compute_s * fmax
        opt = shape.optimizer_s * fmax
        it = t1 - t0
        rows.append(
            {
                "iteration_s": it,
                "compute_s": compute,
                "optimizer_s": opt,
                "exposed_comm_s": max(it - compute - opt, 0.0),
                "codec_s": codec[s],
            }
        )
    return rows


def collective_seconds(comm: CommConfig, cluster, spec, n: int) -> tuple[float, int]:
    """(seconds, bytes each GPU sends) of one bucket of ``n`` values reduced without ina's
    switch: NCCL's model on ``cluster`` (`ina.sim.collectives`) plus a launch, or the
    idealized halving-doubling over ``spec``'s links."""
    if comm.algorithm == "halving-doubling":
        from ina.sim.baselines import allreduce_time

        # values at the gradients' precision, packed into the same lanes as INA's packets
        r = allreduce_time(spec, -(-n * comm.bytes_per_value // 4), comm.algorithm)
        return r["seconds"], r["bytes_sent_per_worker"]
    from ina.sim import collectives

    if comm.compressor is not None and comm.algorithm != "ina":  # GRACE's NCCL path
        from ina.compressors.nccl_paths import stages

        seconds, sent = 0.0, 0
        for coll, nbytes in stages(comm.compressor, comm.compressor_args, n):
            if coll == "all_gather":  # nccl-tests' size: the gathered output
                e = collectives.nccl_best(cluster, coll, nbytes * cluster.gpus)
                sent += int(nbytes * cluster.gpus * collectives.bus_factor(coll, cluster.gpus))
            else:
                e = _allreduce(comm, cluster, nbytes)
                sent += int(nbytes * collectives.bus_factor(coll, cluster.gpus))
            seconds += e.seconds + LAUNCH_S
        return seconds, sent
    nbytes = n * comm.bytes_per_value
    e = _allreduce(comm, cluster, nbytes, comm.collective)
    sent = int(nbytes * collectives.bus_factor(comm.collective, cluster.gpus))
    return e.seconds + LAUNCH_S, sent


def _allreduce(comm: CommConfig, cluster, nbytes: int, collective: str = "all_reduce"):
    from ina.sim import collectives

    if comm.algorithm == "nccl" or collective not in ("all_reduce", "reduce_scatter"):
        return collectives.nccl_best(cluster, collective, nbytes)
    algorithm = comm.algorithm
    if algorithm not in collectives.available(cluster, collective):
        algorithm = "ring"  # NCCL has one reduce-scatter
    return collectives.estimate(cluster, collective, algorithm, nbytes, comm.bytes_per_value)


def _ring_run(shape, steps, f, comm: CommConfig, spec, codec: CodecModel, timelines, cluster):
    """Collectives without ina's switch: every step waits for the slowest worker's bucket,
    then takes the collective's time (no network state carries between buckets)."""
    per_bucket = {n: collective_seconds(comm, cluster, spec, n) for n in set(shape.buckets)}
    t, ends, codec_s, sent = 0.0, [], [], 0
    for s in range(steps):
        fmax = float(f[s].max())
        tl = timelines[0] if timelines else None
        _tb, ready, bwd_end = _worker_step(shape, fmax, t, tl)
        c, charged = t, 0.0
        for b, n in enumerate(shape.buckets):
            c = max(c, ready[b])
            extra = codec.per_call(n)
            if tl is not None:
                tl.add("comm", f"codec b{b}", c, c + extra)
            c += extra
            charged += extra
            dt, bytes_out = per_bucket[n]
            if tl is not None:
                tl.add("comm", f"{comm.algorithm} b{b} ({n:,} values)", c, c + dt)
            c += dt
            sent += bytes_out
        end_c = max(bwd_end, c)
        opt = shape.optimizer_s * fmax
        if tl is not None:
            tl.add("compute", "optimizer", end_c, end_c + opt)
        ends.append((t, bwd_end, end_c + opt))
        codec_s.append(charged)
        t = end_c + opt
    return (
        ends,
        codec_s,
        {"densities": [1.0] * steps, "bytes_sent_per_worker": sent, "exact": None, "events": 0},
    )


def _ina_workers(net, comm: CommConfig, seed: int):
    from ina.host.allreduce import CompressionConfig, Worker
    from ina.sim.network import SimTransport

    out = []
    for n in net.workers:
        kwargs = {}
        if comm.law:  # DC2: one controller per worker, levels agreed through the switch
            from ina.control.dc2 import DC2Controller, index_to_density

            controller = DC2Controller(comm.law, **comm.law_params)
            kwargs.update(controller=controller, ladder=index_to_density, level=controller.index)
        if comm.compressor:
            from ina.compressors import make_communicator

            kwargs["communicator"] = make_communicator(
                comm.compressor, n.core.cfg.num_workers, n.core.cfg.worker_id, seed,
                comm.compressor_args,
            )  # fmt: skip
        out.append(
            Worker(
                n.core.cfg,
                transport=SimTransport(n.core),
                compression=CompressionConfig(density=comm.density),
                clock=lambda: net.now,
                **kwargs,
            )
        )
    return out


def straggler_classes(spec, f: np.ndarray) -> bool:
    """Timing only: whether the workers of each distinct column of factors ``f`` (a slow
    worker, say) are simulated as a class of their own (`ina.sim.classes`), which gives every
    worker's times, including what the others do while they wait for it. Not when there are
    more such classes than one switch's job holds (jitter on every worker): then one
    representative runs at the slowest factor of each step, which leaves out what the
    others' earlier packets change at the switch: their queueing, and their retransmissions
    while they wait (`ina.sim.stragglers`)."""
    return spec.timing_only and len(np.unique(f.T, axis=0)) <= MAX_WORKERS


def _ina_run(
    shape, steps, f, comm: CommConfig, spec, codec: CodecModel, timelines, seed, cluster=None
):
    """INA: every worker (timing only: one per class of alike workers, or a representative
    at the slowest factor, `straggler_classes`) runs its step as a program on the simulated
    network; buckets through the real transport.

    On nodes of G > 1 GPUs (``cluster``) a worker is a node's GPU on one rail: its bucket is
    reduce-scattered inside the node, its 1/G shard goes through the rail's switch (the
    simulated network: one worker per node, at the rail's rate), and the sums are
    all-gathered inside the node. The stages run at once on successive chunks, so the node's
    stage adds its latency and whatever of its bandwidth time the switch stage does not
    cover (`ina.sim.collectives.intra_stage`). With one GPU per node this is the flat path."""
    from ina.host.repeated import Repeated
    from ina.sim.collectives import intra_stage

    g = cluster.gpus_per_node if cluster is not None else 1
    intra = {
        n: intra_stage(cluster, n * comm.bytes_per_value) if g > 1 else (0.0, 0.0)
        for n in set(shape.buckets)
    }
    classes = straggler_classes(spec, f)
    net = build(spec, worker_key=(lambda w: tuple(f[:, w])) if classes else (lambda w: None))
    workers = _ina_workers(net, comm, seed)
    members = net.members or [[w] for w in range(len(net.workers))]  # (ns-3: no classes)
    # One set of gradients for every worker (the sums are still checked bit for bit, and a
    # ResNet-50 step of 32 workers holds one copy of its 25 M values, not 32): a block of
    # random values repeated, as drawing 336 M normal values would cost BERT-large's step
    # seconds of the simulator's time, and the values change no time on a dense path.
    # Timing only and dense, not even that copy: the block stands for each bucket
    # (`ina.host.repeated`), its packets made as they go out and its sums not kept, so
    # that memory does not grow with the model (Llama-7B's would be 27 GB; issue 47).
    block = np.random.default_rng(seed).standard_normal(GRADIENT_BLOCK, dtype=np.float32)
    block *= 1e-2
    lazy = spec.timing_only and comm.density == 1 and not (comm.compressor or comm.law)
    grads = [(Repeated if lazy else np.resize)(block, -(-n // g)) for n in shape.buckets]
    nodes = len(net.workers)
    check = SumCheck(nodes)
    per_step: list[list[tuple[float, float, float, float]]] = [[] for _ in range(nodes)]
    rep = spec.timing_only and not classes  # one representative, at the slowest factor
    densities: list[float] = []  # worker 0's density at each step's start
    # dense sums are checked bit for bit against the int32 sum of what every worker encoded
    # (compressed paths verify their own decode; the representative's sums are its own)
    checked = comm.density == 1 and not (comm.compressor or comm.law or spec.timing_only)

    def program(w: int):
        tl = timelines[w] if w < len(timelines) else None
        worker = workers[w]
        for s in range(steps):
            fw = float(f[s].max()) if rep else float(f[s, members[w][0]])
            t0 = net.now
            if w == 0:
                densities.append(worker.density())
            _tb, ready, bwd_end = _worker_step(shape, fw, t0, tl)
            charged = 0.0
            for b, n in enumerate(shape.buckets):
                if ready[b] > net.now:
                    yield Compute(ready[b] - net.now, "wait")
                extra = codec.per_call(n)
                if extra:
                    if tl is not None:
                        tl.add("comm", f"codec b{b}", net.now, net.now + extra)
                    yield Compute(extra, "codec")
                    charged += extra
                c0 = net.now
                if lazy:
                    yield from worker.timing_steps(grads[b])
                else:
                    yield from worker.allreduce_steps(
                        grads[b], key=b, compressor=comm.compressor is not None
                    )
                lat, intra_s = intra[n]
                if lat or intra_s:  # the node's reduce-scatter and all-gather around it
                    yield Compute(lat + max(intra_s - (net.now - c0), 0.0), "intra-node")
                if tl is not None:
                    tl.add("comm", f"allreduce b{b} ({n:,} values)", c0, net.now)
                if checked:
                    check.add((s, b), worker.last_ints, worker.last_int_sums)
            if bwd_end > net.now:
                yield Compute(bwd_end - net.now, "wait")
            opt = shape.optimizer_s * fw
            if tl is not None:
                tl.add("compute", "optimizer", net.now, net.now + opt)
            yield Compute(opt)
            worker.control_step()  # DC2's next proposal (no-op without a law)
            per_step[w].append((t0, bwd_end, net.now, charged))

    net.run([program(w) for w in range(nodes)])
    # the job's step s ends when its slowest worker ends it, and begins when step s - 1 ended
    # (a fast worker starting early only waits longer for the others)
    ends, t = [], 0.0
    for s in range(steps):
        end = max(p[s][2] for p in per_step)
        ends.append((t, max(p[s][1] for p in per_step), end))
        t = end
    codec_s = [max(p[s][3] for p in per_step) for s in range(steps)]
    stats = workers[0].stats
    exact = bool(check.exact and not check.pending) if checked else None
    return (
        ends,
        codec_s,
        {
            "densities": densities,
            "bytes_sent_per_worker": stats.bytes_sent,
            # (timing only: a class's once per worker it stands for)
            "retransmissions": sum(
                w.stats.retransmissions * len(m) for w, m in zip(workers, members, strict=True)
            ),
            "simulated_workers": len(net.workers),
            "exact": exact,
            "events": net.engine.events,
        },
    )


def simulate(
    shape: StepShape,
    spec,
    steps: int = 2,
    comm: CommConfig | None = None,
    codec: CodecModel | None = None,
    factors: np.ndarray | None = None,
    seed: int = 0,
    trace_workers: int = 0,
    cluster=None,
) -> dict:
    """Simulate ``steps`` steps of ``shape`` on ``spec``'s network; ``factors``: the
    ``(steps, workers)`` straggler factors (None: all 1); ``trace_workers``: how many workers'
    timelines to keep (the Chrome trace); ``cluster``: the `ina.sim.cluster.Cluster` the
    collectives run on (None: ``spec``'s workers as hosts of one GPU, NCCL's model over its
    link rate). INA's ``spec`` has one worker per node, on one rail."""
    comm = comm or CommConfig()
    codec = codec or CodecModel(scale=0.0)
    f = np.ones((steps, spec.workers)) if factors is None else factors
    if f.shape != (steps, spec.workers):
        raise ValueError(f"factors of shape {f.shape}, expected {(steps, spec.workers)}")
    shown = 1 if (spec.timing_only or comm.algorithm != "ina") else spec.workers
    timelines = [Timeline(w) for w in range(min(trace_workers, shown))]
    wall0 = time.perf_counter()
    if comm.algorithm == "ina" and comm.collective == "all_reduce":
        ends, codec_s, extra = _ina_run(
            shape, steps, f, comm, spec, codec, timelines, seed, cluster
        )
    else:
        if cluster is None and comm.algorithm != "halving-doubling":
            from ina.sim.cluster import hosts

            cluster = hosts(spec.workers, spec.up.rate_bps or 1e12, "h100")
        ends, codec_s, extra = _ring_run(shape, steps, f, comm, spec, codec, timelines, cluster)
    wall = time.perf_counter() - wall0
    rows = _summary(shape, ends, codec_s, f)
    for row, d in zip(rows, extra.pop("densities"), strict=True):
        row["density"] = d
    alone = shape.compute_s + shape.optimizer_s  # one worker, no communication, factor 1
    mean_it = float(np.mean([r["iteration_s"] for r in rows]))
    return {
        "network": describe(spec),
        "workers": spec.workers,
        "gpus": cluster.gpus if cluster is not None else spec.workers,
        "cluster": cluster.describe() if cluster is not None else None,
        "timing_only": spec.timing_only,
        "algorithm": comm.algorithm,
        "density": comm.density,
        "compressor": comm.compressor,
        "buckets": list(shape.buckets),
        "bucket_ready_s": list(shape.ready_s),
        "forward_s": shape.forward_s,
        "backward_s": shape.backward_s,
        "steps": rows,
        "mean_iteration_s": mean_it,
        "scaling_factor": alone / mean_it if mean_it > 0 else 1.0,
        **extra,
        "timelines": timelines,
        "wall_seconds": wall,
    }
