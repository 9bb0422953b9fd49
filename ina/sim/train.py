"""`ina train --sim`: real data-parallel training, in simulated time.

The same model, data, optimizer, compression, DC2 controller and hook logic as `ina train`,
with the N workers in one process and the clock and network simulated (`ina.sim`):

1. Every worker computes the gradient of its own batch on the model (real PyTorch). All
   replicas of a data-parallel job are bit-identical after every step (every worker decodes
   the same integers), so one model serves all of them: what differs per worker is its data
   shard, its `Worker` (error-feedback residuals, DC2 controller, transport core) and its
   timing.
2. The step's compute time passes in simulated time (`ina.workload.compute`: measured on this
   host and scaled, fixed, or FLOPs over a device profile).
3. The gradient is cut into DDP's buckets (PyTorch's own bucket assignment, 1 MiB then
   25 MiB, in reverse parameter order) and each bucket goes through
   `Worker.allreduce_steps`, driven round by round by the simulated network; the hook's
   per-bucket logic (`INAHookState.prepare`/`finish`: warm-up, error-feedback keys, DC2
   steps) is the wall-clock hook's own. With ``--mergecomp`` the gradients go in MergeComp's
   groups instead (`ina.sim.mergecomp.plan_partition` searches them at start), each group
   sent as soon as backward has produced its last gradient, overlapping the rest of backward
   (`merged_steps`, through the hook's `MergedHookState`).
4. The first worker to finish the step applies the averaged gradient (the same on every
   worker) with the optimizer, evaluates when due, and decides whether to stop; the others
   find the model already stepped when they finish. No worker can start the next step
   before every worker has sent this step's gradients, so nobody computes on a stale model.

Outputs, like `ina train`'s: ``metrics.csv`` (per epoch; ``epoch_s``, ``step_ms`` and
``comm_ms`` are simulated, plus ``sim_time_s`` and ``wall_s``), ``steps.csv`` with
``--step-log`` (``time_s`` simulated), ``result.json`` and ``dc2_rank0.csv`` (DC2). The same
seed and options give the same files apart from the fields named ``wall_*``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ina.errors import Diverged
from ina.sim.backends import build
from ina.sim.network import NetworkSpec, SimTransport
from ina.sim.nodes import Compute
from ina.sim.options import describe
from ina.units import format_seconds, plural
from ina.workload.buckets import SimBucket, buckets_of
from ina.workload.catalog import resolve
from ina.workload.compute import CodecModel, ComputeModel, calibrate_step, step_flops
from ina.workload.data import shard
from ina.workload.models import num_parameters
from ina.workload.rank import METRICS as RANK_METRICS
from ina.workload.rank import STEP_LOG as RANK_STEP_LOG
from ina.workload.rank import ina_worker, param_digest, with_metric
from ina.workload.tasks import build_rank, evaluate, loss_fn
from ina.workload.traffic import Densities, compression_of, summary_lines

# `ina train`'s columns (epoch_s, step_ms, comm_ms, time_s, step_s, comm_s simulated here),
# plus the simulated clock and the wall time
METRICS = (*RANK_METRICS, "sim_time_s", "wall_s")
STEP_LOG = (*(c for c in RANK_STEP_LOG if c != "monotonic"), "wall_s")


def overlap_shares(workload, model, buckets, batch: int) -> tuple[float, list[float]]:
    """The forward pass's share of a step and, per DDP bucket, the share of the backward pass
    after which its last gradient is ready: from the model's FLOPs per layer
    (`ina.workload.zoo.trainable`, counted by torch), so the step model overlaps backward with
    communication as DDP does, independently of this host."""
    from ina.workload import zoo

    w = zoo.trainable(workload.dataset, workload.model, batch, "fp32")
    fwd = sum(x.fwd_flops for x in w.layers)
    bwd = sum(x.bwd_flops for x in w.layers)
    done, acc = {}, 0.0
    for x in reversed(w.layers):  # backward: the last layer first
        acc += x.bwd_flops
        done[x.name] = acc / bwd if bwd else 1.0
    names = {id(p): n.rpartition(".")[0] for n, p in model.named_parameters()}
    ready = [max(done.get(names.get(id(p), ""), 1.0) for p in b.parameters()) for b in buckets]
    return (fwd / (fwd + bwd) if fwd + bwd else 0.0), ready


class SimTraining:
    """One simulated training run (see the module docstring)."""

    def __init__(
        self,
        config: dict,
        spec: NetworkSpec,
        compute: ComputeModel,
        codec: CodecModel,
        out: Path,
    ) -> None:
        self.config, self.spec, self.compute, self.codec, self.out = (
            config, spec, compute, codec, out,
        )  # fmt: skip
        self.densities = Densities()
        seed = config["seed"]
        torch.set_num_threads(config.get("threads", 1))
        torch.manual_seed(seed)
        np.random.seed(seed)
        n = spec.workers
        self.workload = resolve(config["dataset"], config["model"])
        self.metric = self.workload.metric
        self.target = config.get("target")
        parts = build_rank(self.workload, 0, n, config["batch_size"], seed, config.get("data_dir"))
        self.data, self.model = parts.data, parts.model
        self.opt = torch.optim.SGD(
            self.model.parameters(),
            lr=config["lr"],
            momentum=config["momentum"],
            weight_decay=config.get("weight_decay", 0.0),
        )
        self.buckets = buckets_of(self.model)
        self.forward_share, self.ready_share = overlap_shares(
            self.workload, self.model, self.buckets, config["batch_size"]
        )
        self.loaders = [(parts.loader, parts.sampler)] + [
            shard(self.data, w, n, config["batch_size"], seed) for w in range(1, n)
        ]
        self.net = build(spec, codec_time=codec.from_wall())
        net = self.net
        self.workers, self.states = [], []
        for node in net.workers:
            worker, state = ina_worker(
                config, node.core.cfg, transport=SimTransport(node.core), clock=lambda: net.now
            )
            self.workers.append(worker)
            self.states.append(state)
        self.flops = 0.0
        x, y = next(iter(self.loaders[0][0]))
        if compute.needs_flops:
            self.flops = step_flops(self.model, x, y, loss_fn)
        # measured compute: this host's time for one worker's step, calibrated once (the
        # median of several), so that no worker becomes a straggler by timing noise
        self.step_wall = (
            calibrate_step(self.model, x, y, loss_fn) if compute.kind == "measured" else 0.0
        )
        # MergeComp (--mergecomp): the partition searched for this model, compressor, network,
        # compute and codec, applied through each worker's MergedHookState
        self.plan = self.merged = None
        if config.get("mergecomp"):
            self._plan_mergecomp(x, y)
        self._not_codec = [0.0] * n  # wall time per worker since its last yield, not codec
        # Internal state.
        self.steps_per_epoch = len(self.loaders[0][0])
        self.updated = 0  # steps applied to the model
        self.stop_after: int | None = None  # the step after which every worker stops
        self.losses: dict[int, list[float]] = {}
        self.epochs: list[dict] = []
        self.step_log: list[tuple] = []
        self._epoch_start = (0.0, 0.0)  # simulated and wall time the epoch began
        self._epoch_comm = 0.0
        self._epoch_steps: list[float] = []
        self.target_time: float | None = None
        self._test = (self.data.test_x, self.data.test_y)
        self._epoch_ends: dict[int, tuple[int, float, float]] = {}  # step -> its evaluation
        self._pending_acc: float | str = ""
        self._means: list = []
        self.wall0 = time.perf_counter()

    def _plan_mergecomp(self, x, y) -> None:
        """Search MergeComp's partition (`ina.sim.mergecomp.plan_partition`) under this run's
        models; a bucket per gradient tensor, in backward order, as DDP hands them over with a
        tiny ``bucket_cap_mb``; one `MergedHookState` per worker."""
        from ina.compressors import parse_args
        from ina.sim.mergecomp import plan_partition
        from ina.workload.hook import MergedHookState

        c = self.config
        step_s = self.compute.step_time(self.step_wall, self.flops)
        cargs = parse_args(c.get("compressor_args") or [])
        self.plan = plan_partition(
            self.model, x, y, self.spec, c["compressor"], cargs, step_s,
            c.get("mergecomp_points", 14), self.codec,
        )  # fmt: skip
        params = dict(self.model.named_parameters())
        m = len(self.plan.tensors)
        self.buckets = [
            SimBucket(j, [params[t.name]], j == m - 1) for j, t in enumerate(self.plan.tensors)
        ]
        groups = [[params[n] for n in g] for g in self.plan.groups]
        self.merged = [MergedHookState(state, groups) for state in self.states]

    # -- one worker ----------------------------------------------------------------------

    def program(self, w: int):
        net, c = self.net, self.config
        loader, sampler = self.loaders[w]
        worker, state = self.workers[w], self.states[w]
        step = 0
        for epoch in range(c["epochs"]):
            sampler.set_epoch(epoch)
            for x, y in loader:
                if self.stop_after is not None and step >= self.stop_after:
                    return step
                t_step = net.now
                wall0 = time.perf_counter()
                self.model.zero_grad(set_to_none=True)
                loss = loss_fn(self.model(x), y)
                loss.backward()
                grads = [b.gather() for b in self.buckets]  # the model is shared: copy now
                if not (torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)):
                    raise Diverged(step, w)  # stops the simulation (`SimNetwork.run`)
                self.losses.setdefault(step, []).append(float(loss.item()) * len(y))
                wall = time.perf_counter() - wall0 + self._not_codec[w]
                self._not_codec[w] = 0.0
                density = worker.density() if state.compressing() else 1.0
                if self.plan is not None:  # MergeComp's groups, overlapping backward
                    # comm_s: the communication not hidden behind the backward pass
                    backward_end = net.now + self.plan.forward_s + self.plan.backward_s
                    means = yield from self.merged_steps(w, grads, wall)
                    comm0 = min(backward_end, net.now)
                else:  # DDP's buckets, each as soon as backward has produced it
                    seconds = self.compute.step_time(self.step_wall, self.flops)
                    forward_s = seconds * self.forward_share
                    yield Compute(forward_s, wall=wall)
                    tb, backward_s = net.now, seconds - forward_s
                    means = []
                    for bucket, flat, ready in zip(
                        self.buckets, grads, self.ready_share, strict=True
                    ):
                        if tb + ready * backward_s > net.now:
                            yield Compute(tb + ready * backward_s - net.now)
                        bucket.flat = flat
                        kwargs = state.prepare(bucket)
                        extra = self.codec.per_call(flat.numel())
                        if extra:
                            yield Compute(extra, "codec")
                        t0 = net.now
                        mean = yield from worker.allreduce_steps(flat, **kwargs)
                        bucket.flat = mean
                        state.finish(bucket, net.now - t0)
                        means.append(mean)
                    if tb + backward_s > net.now:
                        yield Compute(tb + backward_s - net.now)
                    # comm_s: the communication not hidden behind the backward pass
                    comm0 = min(tb + backward_s, net.now)
                step += 1
                self._means = means
                wall0 = time.perf_counter()
                self.end_step(w, step, means, net.now - t_step, net.now - comm0, density)
                self._not_codec[w] += time.perf_counter() - wall0  # optimizer, evaluation
        return step

    def merged_steps(self, w: int, grads: list[torch.Tensor], wall: float):
        """One step of worker ``w`` in MergeComp's groups: the forward pass, then each
        gradient enters the worker's `MergedHookState` at its ready time in the backward
        pass (the plan's), and each group it completes is reduced at once (its codec, its
        rounds), overlapping the rest of backward; the step ends when backward has and every
        group is reduced. Returns the means, one per tensor bucket."""
        net, plan, merged = self.net, self.plan, self.merged[w]
        yield Compute(plan.forward_s, wall=wall)
        tb = net.now
        buckets = [SimBucket(b.index(), b.parameters(), b.is_last()) for b in self.buckets]
        for bucket, tensor, flat in zip(buckets, plan.tensors, grads, strict=True):
            wait = tb + tensor.ready_s - net.now
            if wait > 0:
                yield Compute(wait)
            bucket.flat = flat
            t0 = net.now
            for k, group in merged.add(bucket):
                extra = self.codec.per_call(group.numel())
                if extra:
                    yield Compute(extra, "codec")
                yield from merged.group_steps(k, group)  # writes the means into ``flat``
            merged.end_bucket(bucket, net.now - t0)
        wait = tb + plan.backward_s - net.now
        if wait > 0:
            yield Compute(wait)
        return [b.flat for b in buckets]

    # -- the job, once per step ----------------------------------------------------------

    def end_step(self, w: int, step: int, means, step_s: float, comm_s: float, density: float):
        """A worker finished ``step``; the first to do so steps the model and reports."""
        if step > self.updated:
            self._apply(step)
        if w == 0:
            self._epoch_steps.append(step_s)
            self._epoch_comm += comm_s
            self._log_step(step, step_s, comm_s, density)
            self.densities.add(density)
            if step in self._epoch_ends:
                self._end_epoch(self._epoch_ends.pop(step))

    def _apply(self, step: int) -> None:
        means = self._means
        for bucket, mean in zip(self.buckets, means, strict=True):
            bucket.scatter(mean)
        self.opt.step()
        self.updated = step
        c = self.config
        every = c.get("eval_every") or 0
        if every and step % every == 0:
            value = self.metric.value(*evaluate(self.model, *self._test))
            self._pending_acc = value
            if self.target is not None and self.metric.reached(value, self.target):
                self.stop_after = step
                self.target_time = self.net.now
        if c.get("max_steps") and step >= c["max_steps"]:
            self.stop_after = step
        if step % self.steps_per_epoch == 0 or step == self.stop_after:
            # evaluated now, on the model of this step; reported once worker 0 is through it
            self._epoch_ends[step] = (step, *evaluate(self.model, *self._test))

    def _log_step(self, step: int, step_s: float, comm_s: float, density: float) -> None:
        if not self.config.get("step_log"):
            return
        w = self.workers[0]
        acc, self._pending_acc = self._pending_acc, ""
        self.step_log.append(
            (step, self.net.now, step_s, comm_s,
             self.losses.get(step - 1, [0.0])[0] / self.config["batch_size"],
             density, w.level, w.stats.bytes_sent, acc, time.perf_counter() - self.wall0)
        )  # fmt: skip

    def _end_epoch(self, evaluated: tuple[int, float, float, float]) -> None:
        step, test_loss, correct, count = evaluated
        epoch = -(-step // self.steps_per_epoch)
        first = (epoch - 1) * self.steps_per_epoch
        seen = sum(len(self.losses.get(s, [])) for s in range(first, step))
        total = sum(sum(self.losses.pop(s, [])) for s in range(first, step))
        now, wall = self.net.now, time.perf_counter() - self.wall0
        steps = self._epoch_steps or [0.0]
        batch = self.config["batch_size"]
        row = {
            "epoch": epoch,
            "step": step,
            "train_loss": total / max(seen * batch, 1),
            "test_loss": test_loss / max(count, 1),
            self.metric.column: self.metric.value(test_loss, correct, count),
            "epoch_s": now - self._epoch_start[0],
            "step_ms": 1e3 * float(np.mean(steps)),
            "comm_ms": 1e3 * self._epoch_comm / len(steps),
            "bytes_sent": self.workers[0].stats.bytes_sent,
            "sim_time_s": now,
            "wall_s": wall,
        }
        self.epochs.append(row)
        self._epoch_start = (now, wall)
        self._epoch_steps, self._epoch_comm = [], 0.0
        if self.config.get("progress", True):
            print(
                f"epoch {epoch:>3}/{self.config['epochs']}  train loss {row['train_loss']:.4f}  "
                f"test loss {row['test_loss']:.4f}  {self.metric.name} "
                f"{self.metric.format(row[self.metric.column])}  "
                f"{row['step_ms']:8.3f} ms/step simulated ({row['comm_ms']:.3f} in INA)  "
                f"t = {now:.4f} s simulated, {wall:.1f} s wall",
                flush=True,
            )

    # -- the run -------------------------------------------------------------------------

    def run(self) -> dict:
        net = self.net
        try:
            steps = net.run([self.program(w) for w in range(self.spec.workers)])
            diverged = None
        except Diverged as e:  # a result all the same: the steps up to it, and where
            steps, diverged = [e.step], e
        wall = time.perf_counter() - self.wall0
        stats = [w.stats for w in self.workers]
        links = net.links()
        c = self.config
        result = {
            "backend": "ina",
            "simulated": True,
            "network": describe(self.spec),
            "scenario": c.get("scenario"),
            "compute": c["compute"],
            "codec": c["codec"],
            "compression": c["compression"],
            "compressor": c.get("compressor"),
            "compressor_args": c.get("compressor_args") or [],
            "model": c["model"],
            "parameters": num_parameters(self.model),
            "dataset": self.data.name,
            "workers": self.spec.workers,
            "epochs": self.epochs,
            "metric": self.metric.column,
            "final_metric": self.epochs[-1][self.metric.column] if self.epochs else None,
            "target": self.target,
            "steps": int(steps[0]),
            "diverged_at_step": None if diverged is None else diverged.step,
            "diverged_worker": None if diverged is None else diverged.worker,
            "sim_seconds": net.now,
            "time_to_target_s": self.target_time,
            "step_ms_mean": 1e3 * net.now / max(int(steps[0]), 1),
            "gradient_bytes_per_step": 4 * num_parameters(self.model),
            "compression_summary": compression_of(
                c,
                self.densities,
                stats[0].bytes_sent,
                int(steps[0]),
                4 * num_parameters(self.model),
            ),
            "buckets": [b.numel for b in self.buckets],
            "mergecomp": None
            if self.plan is None
            else {
                **self.plan.as_dict(),
                "group_calls_per_worker": [m.group_calls for m in self.merged],
            },
            "bytes_sent_per_worker": [s.bytes_sent for s in stats],
            "retransmissions_per_worker": [s.retransmissions for s in stats],
            "packets_on_links": sum(link.packets for link in links),
            "counters": {k: v[0] for k, v in net.pipeline.counters.snapshot().items()},
            "final_digest": param_digest(self.model),
            "wall_seconds": wall,
            "wall_packets_per_second": sum(link.packets for link in links) / max(wall, 1e-9),
        }
        self.write(result)
        return result

    def write(self, result: dict) -> None:
        out = self.out
        columns = with_metric(METRICS, self.metric.column)
        with open(out / "metrics.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows([row[k] for k in columns] for row in self.epochs)
        if self.config.get("step_log"):
            with open(out / "steps.csv", "w", newline="") as f:
                header = with_metric(STEP_LOG, self.metric.column)
                csv.writer(f).writerows([header, *self.step_log])
            controller = self.states[0].controller
            if controller is not None:
                controller.write_csv(out / "dc2_rank0.csv")
        (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")


def print_summary(r: dict) -> None:
    print("\nsummary (simulated)")
    print(f"  {'network':<28} {r['network']}")
    measured = [k for k in ("compute", "codec") if str(r[k]).startswith("measured")]
    print(
        f"  {'compute, codec':<28} {r['compute']}, {r['codec']}"
        + (f" ({' and '.join(measured)} measured on this host: times differ run to run)"
           if measured else "")
    )  # fmt: skip
    for line in summary_lines(r.get("compression_summary")):
        print(line)
    if r["diverged_at_step"] is not None:
        print(f"  {'diverged':<28} at step {r['diverged_at_step']}: the run stopped there")
    if r["final_metric"] is not None:
        metric = resolve(r["dataset"], r["model"]).metric
        print(f"  {metric.name:<28} {metric.format(r['final_metric'])} on the test set")
    print(
        f"  {'simulated time':<28} {format_seconds(r['sim_seconds'])} for "
        f"{plural(r['steps'], 'step')} ({format_seconds(r['step_ms_mean'] / 1e3)} per step)"
    )
    if r["time_to_target_s"] is not None:
        print(f"  {'time to target':<28} {format_seconds(r['time_to_target_s'])} simulated")
    print(
        f"  {'bytes sent per worker':<28} "
        + ", ".join(f"{b:,}" for b in r["bytes_sent_per_worker"])
    )
    print(
        f"  {'retransmissions per worker':<28} "
        + ", ".join(str(x) for x in r["retransmissions_per_worker"])
    )
    print(
        f"  {'wall time':<28} {r['wall_seconds']:.1f} s "
        f"({r['wall_packets_per_second']:,.0f} simulated packets per wall second)"
    )


def main(args: argparse.Namespace, config: dict, spec: NetworkSpec, compute, codec) -> int:
    """Run and report; called by `ina.train_cli` with everything already checked."""
    out = Path(config["out"])
    (out / "config.json").write_text(json.dumps({**config, "network": describe(spec)}, indent=1))
    sim = SimTraining(config, spec, compute, codec, out)
    print(
        f"training {config['model']} ({num_parameters(sim.model):,} parameters) on "
        f"{sim.data.name}, {spec.workers} workers x batch {config['batch_size']}, "
        f"{sim.steps_per_epoch} steps/epoch, in simulated time: {describe(spec)}",
        flush=True,
    )
    if sim.plan is not None:
        from ina.workload.mergecomp import print_plan

        print_plan(sim.plan, f"{len(sim.plan.groups)} groups, searched in simulation")
    r = sim.run()
    print_summary(r)
    (out / "summary.json").write_text(json.dumps(r, indent=1) + "\n")
    print(f"\nwrote {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    if r["diverged_at_step"] is not None:
        print(
            f"ina train: training diverged at step {r['diverged_at_step']} (a smaller --lr may help)",
            file=sys.stderr,
        )
        return 1
    return 0
