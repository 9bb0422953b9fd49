"""`ina experiment grace --sim`: GRACE's methods, aggregated in the switch where they can be,
trained in simulated time on two workloads in two networks.

Per method (a row of `ina.bench.compressors.DEFAULT_ROWS`, or ``--methods``):

* **path** and **traffic vs dense int32**: how the switch aggregates it (sum / union /
  all-gather) and worker 0's bytes per step (lanes and headers) against a dense int32
  allreduce, measured on the workload's own gradient (one bucket per step; `measure_stats`);
* **encode+decode**: worker 0's whole compressed step on that gradient on this CPU (the
  least CPU time of ``--repeats``, the switch's answers replayed), in MB/s of float32 input.
  That time is also the *codec model* of the method's training runs
  (`ina.workload.compute.CodecModel` at that throughput), so a slow codec costs simulated time as
  it would on this CPU;
* **steps and simulated time to the target**, **final metric**: one `ina train --sim` run per
  workload and network (`ina.sim.train.SimTraining`), evaluated every ``--eval-every`` steps;
  the first evaluation at the target gives the steps and the simulated time (runs do not stop
  there, so the final metric is after ``--max-steps``).

  With ``--share-training``, only the first network's runs go to ``--max-steps``: the others
  stop at its steps to target (`later_steps`), which is all their time to target needs, and
  the table checks that their losses and evaluations equal the first network's on every step
  both ran (`same_steps`): most of the later networks' CPU time is saved. ``--reuse DIR``
  takes the runs an earlier output already holds (same configuration, same codec
  throughputs from its ``stats.json``): a matrix can grow by a network or a method, or the
  second phase of ``--share-training`` follow a first run made alone.

The two networks are defined here, explicitly (`NETWORKS`): a quiet datacenter (100 Gbit/s
links, 1 us propagation, a switch at line rate) and a slow network (1 Gbit/s links, 50 us
propagation). Compute per step is ``--compute`` (fixed by default, so every number is a
function of the configuration and the measured codec throughputs). Without loss, the same
method trains identically in both networks (the switch sums the same integers): only the
time differs, which the result checks (``final_digest``).

Configurations run in parallel with `ina.experiments.sweep.run_sweep` (``--parallel``,
``--cluster``). Outputs in ``--out`` (default ``runs/grace``): each run's files under
``WORKLOAD/NETWORK/METHOD/``, ``results.csv`` (one row per run), ``summary.md`` (the tables).
The default is the short run (nine methods, one per aggregation path and family, on
MNIST-1D for 60 steps; four on the LSTM for 30; low targets; under 10 minutes on two shared
cores, docs/compression.md; it shows the mechanics and the step times, not converged
accuracy); ``--long`` trains every method on both workloads to the workloads' default
targets.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ina import progress
from ina.errors import UsageError
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec

# The two network settings of the experiment, in SI units (not a scenario file: explicit).
NETWORKS = {
    "quiet-100G": dict(rate_bps=100e9, prop_delay_s=1e-6),
    "slow-1G": dict(rate_bps=1e9, prop_delay_s=50e-6),
}

ALL_METHODS = [
    "none", "fp16", "u8bit", "qsgd", "qsgd:levels=7", "terngrad", "signsgd", "signum",
    "efsignsgd", "onebit", "natural", "randomk:ratio=0.01", "topk:ratio=0.01",
    "threshold:threshold=0.001", "dgc:ratio=0.01", "powersgd:rank=4",
]  # fmt: skip
# The short run's rows (10 minutes on this shared machine; `--long`: all of them): one method
# per aggregation path and family. MNIST-1D: the baseline, an agreed-exponent sum (fp16), a
# packed 4-bit sum (QSGD), a shared-scale ternary sum, a 1-bit sum with error feedback, the
# all-gather path (natural), a shared-seed sum (random-k), the union path (top-k) and a
# two-round low-rank sum (PowerSGD); the LSTM (twice the CPU per run): one per path.
MNIST1D_SHORT = [
    "none", "fp16", "qsgd:levels=7", "terngrad", "efsignsgd", "natural", "randomk:ratio=0.01",
    "topk:ratio=0.01", "powersgd:rank=4",
]  # fmt: skip
LSTM_SHORT = ["none", "qsgd:levels=7", "natural", "topk:ratio=0.01"]

# workload: (data set, model); the short and the long run's steps, targets and methods
SHORT = {
    "mnist1d": dict(max_steps=60, target=0.35, methods=MNIST1D_SHORT, eval_every=10),
    "pytext": dict(max_steps=30, target=3.9, methods=LSTM_SHORT, eval_every=10),
}
LONG = {
    "mnist1d": dict(max_steps=1500, target=0.96, methods=ALL_METHODS, eval_every=25),
    "pytext": dict(max_steps=2000, target=2.3, methods=ALL_METHODS, eval_every=50),
}
MODELS = {"mnist1d": "cnn1d", "pytext": "char_lstm"}


@dataclass(frozen=True)
class Run:
    """One training run: everything that determines it."""

    workload: str
    network: str
    method: str
    codec_bytes_per_s: float
    max_steps: int
    target: float
    eval_every: int
    workers: int
    compute: str
    batch_size: int
    seed: int
    out: str
    lr: float | None = None  # None: the workload's default

    @property
    def name_args(self) -> tuple[str, list[str]]:
        name, *pairs = self.method.split(":")
        return name, pairs


def network_spec(name: str, workers: int, seed: int) -> NetworkSpec:
    link = LinkSpec(**NETWORKS[name])
    return NetworkSpec(
        workers=workers, up=link, down=link, switch=SwitchSpec(None, 1e-6), lanes=256,
        pool_size=128, seed=seed,
    )  # fmt: skip


def train_one(run: Run) -> dict:
    """Run one configuration (in a sweep process); the row of results.csv."""
    import contextlib
    import io

    from ina.sim.train import SimTraining
    from ina.workload.catalog import resolve
    from ina.workload.compute import CodecModel, parse_compute

    name, pairs = run.name_args
    out = Path(run.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = resolve(run.workload, MODELS[run.workload])
    config = {
        "seed": run.seed, "dataset": run.workload, "model": MODELS[run.workload],
        "data_dir": None, "batch_size": run.batch_size, "lr": workload.task.default_lr if run.lr is None else run.lr,
        "momentum": 0.9, "weight_decay": 0.0, "threads": 1, "epochs": 1000,
        "max_steps": run.max_steps, "eval_every": run.eval_every, "target": None,
        "step_log": True, "progress": False, "compression": "dense", "compressor": name,
        "compressor_args": pairs, "density": 1.0, "coding": "sketch", "warmup_steps": 1,
        "law": "aimd", "law_params": {}, "dump_step": None, "compute": run.compute,
        "codec": f"{run.codec_bytes_per_s:.0f}B/s",
    }  # fmt: skip
    spec = network_spec(run.network, run.workers, run.seed)
    codec = CodecModel(bytes_per_second=run.codec_bytes_per_s)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        sim = SimTraining(config, spec, parse_compute(run.compute), codec, out)
        result = sim.run()
    metric = workload.metric
    reached = None
    with open(out / "steps.csv", newline="") as f:
        for row in csv.DictReader(f):
            value = row.get(metric.column, "")
            if value != "" and metric.reached(float(value), run.target):
                reached = (int(row["step"]), float(row["time_s"]))
                break
    return {
        **{k: v for k, v in asdict(run).items() if k != "out"},
        "metric": metric.column,
        "steps": result["steps"],
        "sim_seconds": result["sim_seconds"],
        "step_ms": result["step_ms_mean"],
        "steps_to_target": reached[0] if reached else None,
        "time_to_target_s": reached[1] if reached else None,
        "final_metric": result["final_metric"],
        "diverged_at_step": result["diverged_at_step"],
        "bytes_sent": result["bytes_sent_per_worker"][0],
        "retransmissions": sum(result["retransmissions_per_worker"]),
        "final_digest": result["final_digest"],
        "wall_s": time.perf_counter() - t0,
        "run_dir": str(out),
    }


def _final(row: dict) -> str:
    """The final metric, or where the run diverged (it stopped there: no final metric)."""
    if row.get("diverged_at_step") not in (None, ""):
        return f"diverged at step {int(row['diverged_at_step'])}"
    return f"{row['final_metric']:.4f}"


def gradient_size(workload: str, seed: int) -> int:
    """Values of the workload's gradient, from the model built on the data set's shapes: no
    data set made here (MNIST-1D takes 15-40 s of CPU to generate; each run makes its own)."""
    import torch

    from ina.workload.catalog import resolve
    from ina.workload.models import num_parameters
    from ina.workload.tasks import model_of

    torch.manual_seed(seed)
    return num_parameters(model_of(resolve(workload, MODELS[workload])))


def measure_methods(methods: list[str], n: int, workers: int, repeats: int) -> dict[str, dict]:
    """Per method on a gradient of ``n`` values: path, traffic vs dense int32, this CPU's
    encode+decode throughput (`ina.bench.compressors.measure_stats`)."""
    import numpy as np

    from ina.bench.compressors import measure_stats
    from ina.compressors.timing import parse_row

    # Warm the allocator as a training process's is: glibc serves arrays above its mmap
    # threshold (128 KiB at start) with fresh mmaps, page faults and all, until a freed one
    # raises the threshold. Cold, the LSTM's 395 KB "none" step measured 50 MB/s, warm 300.
    np.ones(2_000_000)  # 16 MB, touched and freed at once: smaller arrays come from the heap
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(np.float32) * 1e-2 for _ in range(workers)]
    out = {}
    for m in progress.track(methods, "codec timings", unit="method"):
        name, args = parse_row(m)
        out[m] = measure_stats(name, args, xs, 256, repeats)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ina.experiments.sweep import add_sweep_arguments

    p.add_argument("--sim", action="store_true", help="in simulated time (required: the only mode)")
    p.add_argument("--long", action="store_true", help="every method, both workloads, to target")
    p.add_argument("--methods", help="comma-separated NAME[:k=v...] rows (default: the preset's)")
    p.add_argument("--workloads", default="mnist1d,pytext", help="mnist1d, pytext")
    p.add_argument("--networks", default=",".join(NETWORKS), help=", ".join(NETWORKS))
    p.add_argument("--max-steps", type=int, help="steps per run (default: the preset's)")
    p.add_argument("--eval-every", type=int, help="steps between evaluations (the preset's)")
    p.add_argument("--target", type=float, help="the target metric (default: the preset's)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, help="SGD learning rate (default: the workload's)")
    p.add_argument("--compute", default="fixed:5ms", help="compute per step (ina.workload.compute)")
    p.add_argument("--repeats", type=int, default=5, help="timed codec runs per method (least)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--share-training",
        action="store_true",
        help="train to --max-steps in the first network only; in the others, only as far as "
        "the time to target needs (the training is the same in every network)",
    )
    p.add_argument(
        "--reuse",
        metavar="DIR",
        help="take the runs an earlier --out DIR already made with the same configuration, "
        "and its codec throughputs, instead of running them again",
    )
    p.add_argument("--out", default="runs/grace")
    add_sweep_arguments(p)


def run_dir(base: str | Path, workload: str, network: str, method: str) -> Path:
    """Where a run's files go: ``BASE/WORKLOAD/NETWORK/METHOD`` (``:`` and ``=`` dropped)."""
    return Path(base) / workload / network / method.replace(":", "_").replace("=", "")


def plan(args: argparse.Namespace) -> list[Run]:
    """The runs of the matrix (ValueError: a one-line reason); codec throughputs filled in
    later."""
    from ina.compressors.timing import parse_row

    if not args.sim:
        raise ValueError("only the simulated experiment exists: add --sim")
    preset = LONG if args.long else SHORT
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    networks = [n.strip() for n in args.networks.split(",") if n.strip()]
    for w in workloads:
        if w not in preset:
            raise ValueError(f"unknown workload {w!r}; known: {', '.join(preset)}")
    for n in networks:
        if n not in NETWORKS:
            raise ValueError(f"unknown network {n!r}; known: {', '.join(NETWORKS)}")
    runs = []
    for w in workloads:
        methods = preset[w]["methods"]
        if args.methods:
            methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        for m in methods:
            parse_row(m)  # unknown names and malformed arguments: ValueError
        for n in networks:
            for m in methods:
                runs.append(
                    Run(
                        w, n, m, 0.0, args.max_steps or preset[w]["max_steps"],
                        preset[w]["target"] if args.target is None else args.target,
                        args.eval_every or preset[w]["eval_every"], args.workers, args.compute,
                        args.batch_size, args.seed,
                        str(run_dir(args.out, w, n, m)),
                        args.lr,
                    )
                )  # fmt: skip
    return runs


# results.csv's columns and how to read them back (`--reuse`); the others stay strings
_INT = ("max_steps", "eval_every", "workers", "batch_size", "seed", "steps", "bytes_sent")
_INT_OR_NONE = ("steps_to_target", "diverged_at_step")
_FLOAT = (
    "codec_bytes_per_s", "target", "sim_seconds", "step_ms", "final_metric", "wall_s", "ratio",
    "codec_mb_s",
)  # fmt: skip
_FLOAT_OR_NONE = ("lr", "time_to_target_s")
# --share-training: the steps a later network's run takes when the first network's never
# reached the target (enough for its step time; the training itself is the first's)
PROBE_STEPS = 100


def read_results(path: Path) -> list[dict]:
    """``results.csv`` as `main` wrote it, with its numbers and Nones back."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for k in _INT:
                row[k] = int(row[k])
            for k in _FLOAT:
                row[k] = float(row[k])
            for k in _INT_OR_NONE:
                row[k] = int(row[k]) if row.get(k) not in (None, "") else None
            for k in _FLOAT_OR_NONE:
                row[k] = float(row[k]) if row.get(k) not in (None, "") else None
            row["exact"] = row.get("exact") == "True"
            row["same_training"] = {"True": True, "False": False}.get(row.get("same_training"), "")
            rows.append(row)
    return rows


_KEY = ("workload", "network", "method", "max_steps", "target", "eval_every", "workers",
        "compute", "batch_size", "seed", "lr")  # fmt: skip


def _key(r: Run | dict) -> tuple:
    """What makes two runs the same run (a `Run`, or its row of results.csv: the codec
    throughput comes from the same stats)."""
    d = r if isinstance(r, dict) else asdict(r)
    return tuple(d[k] for k in _KEY)


def load_reuse(base: str) -> tuple[dict[tuple, dict], dict]:
    """An earlier output's rows by `_key` (with their run folders) and its codec stats."""
    base_path = Path(base)
    try:
        rows = read_results(base_path / "results.csv")
        stats = json.loads((base_path / "stats.json").read_text())
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--reuse {base}: not an earlier output of this experiment ({e})") from e
    for row in rows:  # outputs made before rows named their folder: the planned one
        if not row.get("run_dir"):
            row["run_dir"] = str(run_dir(base, row["workload"], row["network"], row["method"]))
    return {_key(r): r for r in rows}, stats


def later_steps(first: dict, run: Run) -> int:
    """--share-training: how far a later network's run must go, given the first network's
    row: to its steps to target, to where it diverged, else `PROBE_STEPS` for the step time."""
    for k in ("steps_to_target", "diverged_at_step"):
        if first[k] is not None:
            return min(first[k], run.max_steps)
    return min(PROBE_STEPS, run.max_steps)


def same_steps(a: str, b: str, column: str) -> bool:
    """Whether two runs' ``steps.csv`` agree (loss and metric, to the bit) on every step both
    ran: the same training, whatever the network's speed."""

    def read(d: str) -> dict[str, tuple]:
        with open(Path(d) / "steps.csv", newline="") as f:
            return {r["step"]: (r["loss"], r.get(column, "")) for r in csv.DictReader(f)}

    x, y = read(a), read(b)
    common = x.keys() & y.keys()
    return bool(common) and all(x[k] == y[k] for k in common)


def check(args: argparse.Namespace) -> list[Run]:
    """The runs of the matrix, every option checked before any work (`UsageError`: a
    one-line reason): the matrix, the methods, the numbers, ``--compute``, the sweep's
    options and ``--out``, writable. `ina reproduce grace` calls it before its own work."""
    from ina.compressors import make_communicator
    from ina.errors import output_dir
    from ina.experiments.sweep import check_sweep_arguments
    from ina.workload.catalog import resolve
    from ina.workload.compute import parse_compute

    try:
        runs = plan(args)
        for r in runs:
            name, pairs = r.name_args
            make_communicator(name, args.workers, 0, args.seed, pairs)
        for name, value, least in (("--max-steps", args.max_steps, 1),
                                   ("--eval-every", args.eval_every, 1),
                                   ("--workers", args.workers, 1),
                                   ("--batch-size", args.batch_size, 1),
                                   ("--repeats", args.repeats, 1)):  # fmt: skip
            if value is not None and value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        for w in dict.fromkeys(r.workload for r in runs):
            target = next(r.target for r in runs if r.workload == w)
            try:  # a target no run can reach would train every run to --max-steps for nothing
                resolve(w, MODELS[w]).metric.check_target(target)
            except ValueError as e:
                raise ValueError(f"--target for {w}: {e}") from None
        parse_compute(args.compute)
        if args.lr is not None and not 0 < args.lr < float("inf"):
            raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_sweep_arguments(args.parallel, args.cluster)
    output_dir(args.out)
    return runs


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ina.experiments.sweep import run_sweep

    runs = check(args)
    try:
        done, reused_stats = load_reuse(args.reuse) if args.reuse else ({}, {})
    except ValueError as e:
        raise UsageError(str(e)) from None
    out = Path(args.out)
    t0 = time.perf_counter()
    stats: dict[str, dict[str, dict]] = {}
    sizes = {}
    for w in dict.fromkeys(r.workload for r in runs):
        sizes[w] = gradient_size(w, args.seed)
        stats[w] = dict(reused_stats.get(w, {}))
        methods = [m for m in dict.fromkeys(r.method for r in runs if r.workload == w)
                   if m not in stats[w]]  # fmt: skip
        if methods:
            print(
                f"measuring {len(methods)} methods on {w}'s gradient ({sizes[w]:,} values)",
                flush=True,
            )
            stats[w].update(measure_methods(methods, sizes[w], args.workers, args.repeats))
    runs = [
        replace(r, codec_bytes_per_s=stats[r.workload][r.method]["best_cpu_mb_s"] * 1e6)
        for r in runs
    ]

    def sweep(batch: list[Run]) -> list[dict]:
        todo = [r for r in batch if _key(r) not in done]
        print(
            f"{len(todo)} training runs, {args.parallel} at a time"
            + (f" ({len(batch) - len(todo)} reused)" if len(todo) < len(batch) else "")
            + f", into {out}/",
            flush=True,
        )
        made = iter(run_sweep(train_one, todo, parallel=args.parallel, cluster=args.cluster,
                              desc="grace runs"))  # fmt: skip
        return [done[_key(r)] if _key(r) in done else next(made) for r in batch]

    networks = list(dict.fromkeys(r.network for r in runs))
    if args.share_training and len(networks) > 1:
        first = sweep([r for r in runs if r.network == networks[0]])
        by = {(row["workload"], row["method"]): row for row in first}
        later = [
            replace(r, max_steps=later_steps(by[r.workload, r.method], r))
            for r in runs
            if r.network != networks[0]
        ]
        rows = first + sweep(later)
        for row in rows:
            f = by[row["workload"], row["method"]]
            row["same_training"] = row is f or same_steps(
                f["run_dir"], row["run_dir"], row["metric"]
            )
    else:
        rows = sweep(runs)
    for row in rows:
        row.setdefault("same_training", "")
        s = stats[row["workload"]][row["method"]]
        row.update(
            path=s["path"], ratio=s["ratio"], codec_mb_s=s["best_cpu_mb_s"], exact=s["exact"]
        )
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = summary(rows, args, sizes, time.perf_counter() - t0)
    (out / "summary.md").write_text(text)
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    print(text)
    print(f"written: {out}/ (results.csv, summary.md, stats.json; each run's files under "
          "WORKLOAD/NETWORK/METHOD/)")  # fmt: skip
    return 0


def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def summary(rows: list[dict], args: argparse.Namespace, sizes: dict, wall: float) -> str:
    """The tables: one per workload, a row per method, both networks side by side."""
    networks = list(dict.fromkeys(r["network"] for r in rows))
    argv = " ".join(sys.argv[1:]) if sys.argv and "experiment" in sys.argv else ""
    lines = [
        f"`ina {argv}`" if argv else "`ina experiment grace --sim`",
        "",
        f"{args.workers} workers x batch {args.batch_size}, SGD momentum 0.9, lr "
        f"{'the workload default' if args.lr is None else args.lr}, compute {args.compute} per step, "
        f"codec at each method's measured CPU throughput; networks: "
        + "; ".join(
            f"{k} ({v['rate_bps'] / 1e9:g} Gbit/s, {v['prop_delay_s'] * 1e6:g} us)"
            for k, v in NETWORKS.items()
            if k in networks
        )
        + f"; {wall:.0f} s wall on {os.cpu_count()} cores",
    ]
    if args.share_training and len(networks) > 1:
        lines += [
            "",
            f"--share-training: each method trained to the end in {networks[0]} only; in the "
            f"other networks it ran to {networks[0]}'s steps to target (or where it diverged, "
            f"or {PROBE_STEPS} steps for the step time where it never reached the target), and "
            "its losses and evaluations matched the first network's on every step both ran "
            "(the last column). The final metric is the first network's.",
        ]
    for w in dict.fromkeys(r["workload"] for r in rows):
        wr = [r for r in rows if r["workload"] == w]
        target, metric = wr[0]["target"], wr[0]["metric"]
        lines += [
            "",
            f"**{w}** ({MODELS[w]}, {sizes[w]:,} values per step; target {metric} "
            f"{'>=' if metric == 'test_acc' else '<='} {target:g}; {wr[0]['max_steps']} steps)",
            "",
            "| method | path | traffic vs dense int32 | encode+decode MB/s | "
            + " | ".join(f"{n}: steps / ms to target | {n}: ms/step" for n in networks)
            + f" | final {metric} | same training in both networks |",
            "|---|---|---:|---:|" + "---:|---:|" * len(networks) + "---:|---|",
        ]
        for m in dict.fromkeys(r["method"] for r in wr):
            by = {r["network"]: r for r in wr if r["method"] == m}
            first = next(iter(by.values()))
            cells = []
            for n in networks:
                r = by.get(n)
                if r is None:
                    cells += ["", ""]
                    continue
                t = r["time_to_target_s"]
                cells.append(
                    f"{_fmt(r['steps_to_target'], 'd')} / {_fmt(t and 1e3 * t, '.1f')}"
                    if r["steps_to_target"] is not None
                    else "not reached"
                )
                cells.append(f"{r['step_ms']:.2f}")
            checked = [r["same_training"] for r in by.values() if r.get("same_training") != ""]
            same = all(checked) if checked else len({r["final_digest"] for r in by.values()}) == 1
            lines.append(
                f"| {m.replace(':', ' ')} | {first['path']} | {first['ratio']:.2f}x "
                f"| {first['codec_mb_s']:.0f} | "
                + " | ".join(cells)
                + f" | {_final(first)} | {'yes' if same else 'NO'} |"
            )
    return "\n".join(lines) + "\n"
