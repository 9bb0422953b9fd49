"""One data-parallel rank of `ina train`: ``python -m ina.train.worker_main CONFIG.json``.

Launched by torchrun (``torch.distributed.run``), or by anything that sets torchrun's
environment contract: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``. The gloo
process group is only the bootstrap (DDP's initial broadcast of the parameters, the per-epoch
metrics, the optional replica check); with ``backend: ina`` every gradient bucket goes
through the switch (`ina.workload.hook`), with ``backend: gloo`` through gloo's allreduce (the
baseline). The rank's INA worker is entry ``RANK`` of the job in the config: ``worker_id`` =
rank, bound to the address the switch's ``worker_table`` has for it.

Outputs, in the config's ``out`` directory: ``rank{r}.json`` (this rank's statistics and, with
``check_sync``, a digest of its parameters after every step), ``result.json`` and
``metrics.csv`` (rank 0), ``dump_rank{r}.pt`` (with ``dump_step``: parameters, gradients,
local gradients and quantization bounds after that step), ``error_rank{r}.txt`` on failure.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ina.errors import Diverged, NonFiniteError
from ina.workload.catalog import resolve
from ina.workload.hook import ina_allreduce_hook
from ina.workload.models import num_parameters
from ina.workload.rank import (
    METRICS,
    STEP_LOG,
    ina_worker,
    param_digest,
    with_metric,
)
from ina.workload.tasks import build_rank, evaluate, loss_fn
from ina.workload.traffic import Densities, compression_of


def make_ina_worker(config: dict, rank: int, world: int):
    """This rank's `Worker` and hook state, from the config's ``ina`` section."""
    from ina.host.transport import WorkerConfig

    ina = config["ina"]
    if len(ina["workers"]) != world:
        raise ValueError(
            f"the job has {len(ina['workers'])} workers but torchrun started {world} ranks"
        )
    ip, port = ina["workers"][rank]
    cfg = WorkerConfig(
        job_id=ina["job_id"],
        worker_id=rank,
        num_workers=world,
        switch=(ina["switch"][0], int(ina["switch"][1])),
        bind=(ip, int(port)),
        pool_size=ina["pool_size"],
        lanes=ina["lanes"],
        timeout=ina["timeout"],
    )
    link = None
    delay = config.get("delay") or "none"
    rate = config.get("link_rate_bps")
    if delay != "none" or rate:  # this worker's up and down links (ina.netem), seeded per rank
        from ina.host.emulated_path import EmulatedPath
        from ina.netem import parse_profile

        name, params = parse_profile(delay)
        shared = name == "high" and params.get("episode_seed", -1) >= 0
        # Shared episodes must line up on every worker: one schedule from the launch time.
        extra = {"epoch": config["clock_epoch"]} if shared else {}
        link = EmulatedPath.from_profile(
            delay, seed=config["seed"], worker_id=rank, rate_bps=rate, **extra
        )
    return ina_worker(config, cfg, link=link)


def _all_sum(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def snapshot(model: torch.nn.Module, batch) -> tuple[list, tuple]:
    """Parameters and this rank's own (not yet averaged) gradient, before a step.

    ``autograd.grad`` leaves ``.grad`` and DDP's hooks alone: nothing is communicated."""
    params = list(model.parameters())
    x, y = batch
    local = torch.autograd.grad(loss_fn(model(x), y), params)
    return [p.detach().clone() for p in params], local


def dump_step(path: Path, model, pre: tuple[list, tuple], lr: float, state) -> None:
    """Save parameters before/after a step, the averaged and the local gradients, and the
    quantization bound of each averaged value (INA)."""
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    before, local = pre
    bounds = {}
    if state is not None:
        by_id = {}
        for plist, bound in state.error_bounds.values():
            offset = 0
            for p in plist:
                by_id[id(p)] = bound[offset : offset + p.numel()].reshape(p.shape)
                offset += p.numel()
        bounds = {n: by_id[id(p)] for n, p in zip(names, params, strict=True) if id(p) in by_id}
    torch.save(
        {
            "lr": lr,
            "params_before": dict(zip(names, before, strict=True)),
            "params": {n: p.detach().clone() for n, p in zip(names, params, strict=True)},
            "grads": {n: p.grad.detach().clone() for n, p in zip(names, params, strict=True)},
            "local_grads": dict(zip(names, local, strict=True)),
            "error_bounds": bounds,
        },
        path,
    )


# wall-clock MergeComp: timed calls per size of the cost table, after one untimed call
CALIBRATION_REPEATS = 3


class Run:
    """One rank's training run: set-up in the constructor, then `epoch` per epoch, `finish`.

    ``self.state`` is the hook state (INA backend) as soon as it exists, so that a failure
    can be reported with the transport's own error (`main`).
    """

    def __init__(self, config: dict, rank: int, world: int) -> None:
        self.config, self.rank, self.world = config, rank, world
        self.lead = rank == 0
        self.densities = Densities()
        self.out = Path(config["out"])
        self.worker = self.state = None
        torch.set_num_threads(config.get("threads", 1))
        dist.init_process_group(
            "gloo",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=config.get("gloo_timeout", 120)),
        )
        seed = config["seed"]
        np.random.seed(seed)
        self.workload = resolve(config["dataset"], config.get("model"))
        self.metric = self.workload.metric
        # stop at this value of the metric (eval_every evaluations); "stop_acc": older configs
        self.target = config.get("target", config.get("stop_acc"))
        parts = build_rank(
            self.workload, rank, world, config["batch_size"], seed, config.get("data_dir")
        )
        self.data, self.model = parts.data, parts.model
        self.loader, self.sampler = parts.loader, parts.sampler
        self.test_x, self.test_y = parts.test_x, parts.test_y
        mergecomp = bool(config.get("mergecomp"))
        # MergeComp: a bucket per gradient (DDP hands each over as soon as it exists) and
        # the hook merges them into the plan's groups (the cap also applies to the first one)
        self.ddp = DistributedDataParallel(  # broadcasts rank 0's parameters
            self.model, **({"bucket_cap_mb": 1e-6} if mergecomp else {})
        )
        self.merged = self.plan = None
        if config["backend"] == "ina":
            self.worker, self.state = make_ina_worker(config, rank, world)
            if mergecomp:
                from ina.workload.hook import MergedHookState, mergecomp_hook

                self.plan = self._search_mergecomp()
                params = dict(self.model.named_parameters())
                groups = [[params[n] for n in g] for g in self.plan.groups]
                self.merged = MergedHookState(self.state, groups)
                self.ddp.register_comm_hook(self.merged, mergecomp_hook)
            else:
                self.ddp.register_comm_hook(self.state, ina_allreduce_hook)
        elif config["backend"] != "gloo":
            raise ValueError(f"backend must be ina or gloo, got {config['backend']!r}")
        self.opt = torch.optim.SGD(
            self.model.parameters(),
            lr=config["lr"],
            momentum=config["momentum"],
            weight_decay=config.get("weight_decay", 0.0),
        )
        # Internal state and stats.
        self.step = 0
        self.step_times: list[float] = []
        self.digests: list[str] = []
        self.epochs: list[dict] = []
        self._csv = None
        self.step_log: list[tuple] | None = [] if self.lead and config.get("step_log") else None
        if self.lead:
            self._csv = open(self.out / "metrics.csv", "w", newline="")
            csv.writer(self._csv).writerow(with_metric(METRICS, self.metric.column))
            self._announce()
        self.eval_seconds = 0.0  # in eval_every evaluations, left out of steps.csv's time_s
        self.reached = False  # an eval_every evaluation reached the target: stop
        self.target_step: int | None = None  # the step of that evaluation
        self.t0 = time.perf_counter()

    def _search_mergecomp(self):
        """MergeComp's partition on the wall clock, searched by all ranks together:

        1. rank 0 profiles backward and times a step on its CPU (`ina.sim.mergecomp`), and
           broadcasts both (the model's batch norm statistics are left as they were);
        2. every rank times its compressor's calls at the cost table's sizes through its real
           Worker, transport and switch (the same calls in the same order on every rank, as
           the switch needs; the least of `CALIBRATION_REPEATS` after a first call);
        3. the slowest rank's time per size is the table, so every rank runs the same search
           on the same numbers and gets the same partition; rank 0 prints it.
        """
        from ina.workload.compute import parse_compute
        from ina.workload.mergecomp import (
            TableCost,
            backward_profile,
            grid,
            model_step_seconds,
            plan_from,
            print_plan,
        )

        c = self.config
        profile: list = [None]
        if self.lead:
            x, y = next(iter(self.loader))
            buffers = {k: v.clone() for k, v in self.model.named_buffers()}
            fwd_share, rows = backward_profile(self.model, x, y, loss_fn)
            step_s = model_step_seconds(parse_compute("measured"), self.model, x, y)
            with torch.no_grad():
                for k, v in self.model.named_buffers():
                    v.copy_(buffers[k])
            profile = [(fwd_share, rows, step_s)]
        dist.broadcast_object_list(profile, src=0)
        fwd_share, rows, step_s = profile[0]
        sizes = grid(sum(k for _, k, _ in rows), c.get("mergecomp_points", 14))
        rng = np.random.default_rng([c["seed"], self.rank])
        best = []
        for n in sizes:
            x = torch.from_numpy((rng.standard_normal(n) * 1e-2).astype(np.float32))
            times = []
            for _ in range(CALIBRATION_REPEATS + 1):  # the very first call also joins the run
                t0 = time.perf_counter()
                self.worker.allreduce(x, average=True, key=("mergecomp", n), compressor=True)
                times.append(time.perf_counter() - t0)
            best.append(min(times[1:]))
        slowest = torch.tensor(best, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = slowest.tolist()
        # more values never cost less: what remains of the noise is removed as in calibrate
        seconds = [min(seconds[i:]) for i in range(len(seconds))]
        cost = TableCost(tuple(sizes), (0.0,) * len(sizes), tuple(seconds))
        plan = plan_from(fwd_share, rows, step_s, cost)
        if self.lead:
            print_plan(plan, f"{len(plan.groups)} groups, calls timed on this transport")
        return plan

    def _announce(self) -> None:
        c = self.config
        where = "gloo allreduce"
        if self.worker is not None:
            host, port = c["ina"]["switch"]
            method = (
                f"compressor {c['compressor']}"
                if c.get("compressor")
                else f"compression {c['compression']}"
            )
            where = f"switch {host}:{port}, {method}"
        d = self.data
        print(
            f"training {self.workload.model} ({num_parameters(self.model):,} parameters) on "
            f"{d.name} "
            f"({len(d.train_y)} train / {len(d.test_y)} test), {self.world} workers x batch "
            f"{c['batch_size']}, {len(self.loader)} steps/epoch, gradients via {where}",
            flush=True,
        )

    def _train_step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        c = self.config
        dump = self.step + 1 == c.get("dump_step")
        pre = snapshot(self.model, (x, y)) if dump else None
        density = self.worker.density() if self.state and self.state.compressing() else 1.0
        self.densities.add(density)
        comm0 = self.state.seconds if self.state else 0.0
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = loss_fn(self.ddp(x), y)
        if not torch.isfinite(loss):  # before backward: NaN would reach the allreduce
            raise Diverged(self.step + 1, self.rank)
        loss.backward()  # DDP allreduces the buckets here (the hook, or gloo)
        self.opt.step()
        t1 = time.perf_counter()
        self.step_times.append(t1 - t0)
        self.step += 1
        t_train = t1 - self.t0 - self.eval_seconds  # wall time without eval_every's evaluations
        value = ""
        every = c.get("eval_every") or 0
        if every and self.step % every == 0:  # every rank takes part: counts summed over gloo
            value = self.metric.value(
                *_all_sum(list(evaluate(self.model, self.test_x, self.test_y)))
            )
            self.eval_seconds += time.perf_counter() - t1
            # the same summed counts on every rank: all ranks stop after the same step
            if self.target is not None and self.metric.reached(value, self.target):
                self.reached = True
                self.target_step = self.step
        if self.step_log is not None:
            w = self.worker
            self.step_log.append(
                (self.step, t_train, time.monotonic(), t1 - t0,
                 (self.state.seconds - comm0) if self.state else 0.0, loss.item(), density,
                 w.level if w else 0, w.stats.bytes_sent if w else 0, value)
            )  # fmt: skip
        if c.get("check_sync"):
            self._check_sync()
        if dump:
            dump_step(self.out / f"dump_rank{self.rank}.pt", self.model, pre, c["lr"], self.state)
        return loss.item()

    def _check_sync(self) -> None:
        """Every rank's parameter digest after this step; fail loudly if any differs."""
        self.digests.append(param_digest(self.model))
        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, self.digests[-1])
        if len(set(everyone)) != 1:
            raise RuntimeError(f"replicas diverged after step {self.step}: digests {everyone}")

    def epoch(self, epoch: int) -> bool:
        """Train one epoch, evaluate, report; False once ``max_steps`` is reached."""
        c = self.config
        self.sampler.set_epoch(epoch)
        t_epoch = time.perf_counter()
        comm0 = self.state.seconds if self.state else 0.0
        steps0 = len(self.step_times)
        loss_sum, seen = 0.0, 0
        batches = self.loader
        if self.lead and c.get("progress", True):
            from tqdm import tqdm

            batches = tqdm(batches, desc=f"epoch {epoch + 1}", leave=False, disable=None)
        more = True
        for x, y in batches:
            loss_sum += self._train_step(x, y) * len(y)
            seen += len(y)
            if (c.get("max_steps") and self.step >= c["max_steps"]) or self.reached:
                more = False
                break
        epoch_s = time.perf_counter() - t_epoch
        tr_loss, tr_n, te_loss, te_correct, te_n = _all_sum(
            [loss_sum, seen, *evaluate(self.model, self.test_x, self.test_y)]
        )
        nsteps = max(len(self.step_times) - steps0, 1)
        comm = (self.state.seconds - comm0) if self.state else 0.0
        row = {
            "epoch": epoch + 1,
            "step": self.step,
            "train_loss": tr_loss / max(tr_n, 1),
            "test_loss": te_loss / max(te_n, 1),
            self.metric.column: self.metric.value(te_loss, te_correct, te_n),
            "epoch_s": epoch_s,
            "step_ms": 1e3 * sum(self.step_times[steps0:]) / nsteps,
            "comm_ms": 1e3 * comm / nsteps,
            "bytes_sent": self.worker.stats.bytes_sent if self.worker else 0,
        }
        self.epochs.append(row)
        if self.lead:
            columns = with_metric(METRICS, self.metric.column)
            csv.writer(self._csv).writerow(row[k] for k in columns)
            self._csv.flush()
            print(
                f"epoch {epoch + 1:>3}/{c['epochs']}  train loss {row['train_loss']:.4f}  "
                f"test loss {row['test_loss']:.4f}  {self.metric.name} "
                f"{self.metric.format(row[self.metric.column])}  "
                f"{row['step_ms']:6.2f} ms/step"
                + (f" ({row['comm_ms']:.2f} in INA allreduce)" if self.worker else ""),
                flush=True,
            )
        return more

    def finish(self, train_seconds: float) -> dict | None:
        """Gather every rank's statistics; rank 0 writes and returns ``result.json``."""
        times = np.asarray(self.step_times) * 1e3
        mine = {
            "rank": self.rank,
            "steps": self.step,
            "step_ms_mean": float(times.mean()) if times.size else 0.0,
            "step_ms_median": float(np.median(times)) if times.size else 0.0,
            "digests": self.digests,
            "final_digest": param_digest(self.model),
        }
        if self.worker is not None:
            st, hs = self.worker.stats, self.state
            mine.update(
                bytes_sent=st.bytes_sent,
                packets_sent=st.packets_sent,
                retransmissions=st.retransmissions,
                mean_rtt_us=1e6 * st.rtt_sum / max(st.rtt_samples, 1),
                hook_calls=hs.calls,
                compressed_calls=hs.compressed_calls,
                hook_seconds=hs.seconds,
                layout_changes=hs.layout_changes,
                final_level=self.worker.level,
                group_calls=self.merged.group_calls if self.merged else None,
            )
        (self.out / f"rank{self.rank}.json").write_text(json.dumps(mine))
        if self.step_log is not None:
            with open(self.out / "steps.csv", "w", newline="") as f:
                header = with_metric(STEP_LOG, self.metric.column)
                csv.writer(f).writerows([header, *self.step_log])
            if self.state is not None and self.state.controller is not None:
                self.state.controller.write_csv(self.out / "dc2_rank0.csv")
        everyone: list = [None] * self.world
        dist.all_gather_object(everyone, mine)
        result = None
        if self.lead:
            c, m = self.config, self.metric
            final = self.epochs[-1][m.column] if self.epochs else None
            result = {
                "backend": c["backend"],
                "compression": c["compression"] if self.worker else None,
                "density": c["density"] if c["compression"] == "homomorphic" else None,
                "compressor": c.get("compressor") if self.worker else None,
                "compressor_args": c.get("compressor_args") or [],
                "model": self.workload.model,
                "parameters": num_parameters(self.model),
                "dataset": self.data.name,
                "workers": self.world,
                "epochs": self.epochs,
                "metric": {
                    "name": m.name,
                    "column": m.column,
                    "higher_is_better": m.higher_is_better,
                },
                "final_metric": final,
                "final_accuracy": final if m.column == "test_acc" else None,
                "target": self.target,
                "target_step": self.target_step,  # first eval_every step at the target
                "train_seconds": train_seconds,
                "steps": self.step,
                "step_ms_mean": mine["step_ms_mean"],
                "step_ms_median": mine["step_ms_median"],
                "gradient_bytes_per_step": 4 * num_parameters(self.model),
                "compression_summary": compression_of(
                    c,
                    self.densities,
                    self.worker.stats.bytes_sent if self.worker else 0,
                    self.step,
                    4 * num_parameters(self.model),
                ),
                "ranks": everyone,
                "replicas_identical": len({r["final_digest"] for r in everyone}) == 1,
                "mergecomp": {
                    **self.plan.as_dict(),
                    "group_calls_per_rank": [r["group_calls"] for r in everyone],
                }
                if self.plan is not None
                else None,
            }
            (self.out / "result.json").write_text(json.dumps(result, indent=1))
            self._csv.close()
        if self.worker is not None:
            self.worker.close()
        dist.destroy_process_group()
        return result


def train(config: dict, rank: int, world: int, ctx: dict | None = None) -> dict | None:
    """Train; rank 0 returns the result. ``ctx["run"]`` holds the `Run` once it exists."""
    run = Run(config, rank, world)
    if ctx is not None:
        ctx["run"] = run
    t0 = time.perf_counter()
    for epoch in range(config["epochs"]):
        if not run.epoch(epoch):
            break
    return run.finish(time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m ina.train.worker_main CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(argv[0]).read_text())
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    ctx: dict = {}
    try:
        train(config, rank, world, ctx)
    except BaseException as e:  # report once, clearly, then leave without waiting on peers
        root = e
        # an INA failure inside backward reaches us wrapped by autograd: report the original
        run = ctx.get("run")
        state = getattr(run, "state", None)
        if state is not None and state.error is not None:
            root = state.error
        if isinstance(root, NonFiniteError) and run is not None:  # a finite loss, NaN grads
            root = Diverged(run.step + 1, rank)
        why = str(root) if isinstance(root, Diverged) else f"{type(root).__name__}: {root}"
        msg = f"rank {rank}: {why}"
        # one write(2) of the whole line: the ranks share the launcher's stderr, and print's
        # separate writes of text and newline let two ranks' lines run into one
        sys.stderr.flush()
        os.write(sys.stderr.fileno(), f"ina train: {msg}\n".encode())
        try:
            Path(config["out"], f"error_rank{rank}.txt").write_text(
                msg + "\n\n" + "".join(traceback.format_exception(e))
            )
        finally:
            sys.stdout.flush()
            os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
