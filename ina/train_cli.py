"""`ina train`: data-parallel training of a PyTorch model with gradients summed in the switch.

What one run does:

1. Starts the switch model (`LocalSwitch`, a child process) with one job whose workers' UDP
   ports are reserved first, unless ``--switch IP:PORT --jobs FILE`` names a running switch
   (the workers join a fresh run of the job through the switch, so a job may be trained
   again without re-installing it; ``--p4runtime ADDR`` re-installs it anyway).
2. Writes the run's configuration (hyperparameters and each rank's INA address) to
   ``OUT/config.json`` and launches ``--workers`` ranks with torchrun
   (`ina.train.torchrun`: torchrun, quiet about failures the ranks report; gloo rendezvous
   on 127.0.0.1, a free port), each running `ina.train.worker_main`: DDP with the INA
   communication hook (``--backend ina``) or with plain gloo allreduce (``--backend gloo``,
   the baseline).
3. Rank 0 prints per-epoch loss and accuracy (with a tqdm bar on a terminal); at the end this
   command prints the summary (accuracy, time per iteration, bytes each worker sent) and the
   switch's aggregation counters, and writes ``OUT/summary.json``.

``ina train`` with no options is the README's main command (``make train``): a small MLP on
scikit-learn's digits, 4 workers, 20 epochs, about 20-40 s on two cores. ``--dataset
mnist1d`` (a 1-D CNN) and ``--dataset pytext`` (a character LSTM, scored in bits per
character) are the harder workloads (`ina.workload.tasks`); ``--target`` stops a run at a
value of the workload's metric.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from ina.control.dc2.laws import law_params
from ina.errors import HelpFormatter
from ina.procs import stop_process
from ina.workload.catalog import COMPRESSIONS, INPUTS, TASKS, Workload, resolve

DENSITY = 0.05  # --density's default, for --compression homomorphic only
DEFAULT_LAW = "aimd"  # --law's, for --compression dc2 only


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument(
        "--workers",
        type=int,
        help="data-parallel ranks (default 4; the job's worker count with --jobs)",
    )
    g.add_argument(
        "--model",
        choices=sorted(INPUTS),
        help="default: the data set's own ("
        + ", ".join(f"{t.dataset}: {t.default_model}" for t in TASKS.values())
        + ")",
    )
    g.add_argument("--dataset", default="digits", choices=sorted(TASKS))
    g.add_argument("--data-dir", help="directory of the MNIST IDX / CIFAR-10 pickle files")
    g.add_argument("--epochs", type=int, default=20)
    g.add_argument("--batch-size", type=int, default=32, help="per worker")
    g.add_argument(
        "--lr",
        type=float,
        help="SGD learning rate (default: the workload's, "
        + ", ".join(f"{t.dataset}: {t.default_lr:g}" for t in TASKS.values())
        + ")",
    )
    g.add_argument("--momentum", type=float, default=0.9)
    g.add_argument("--weight-decay", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-steps", type=int, help="stop after this many steps in total")
    g.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    g.add_argument(
        "--out",
        help="folder for config.json, metrics.csv, result.json, summary.json (default: a new "
        "runs/train/DATE-TIME); a previous run's files there are replaced",
    )
    g.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    g.add_argument(
        "--step-log",
        action="store_true",
        help="rank 0 writes OUT/steps.csv (time, density, INA time of every step) and, with "
        "dc2, OUT/dc2_rank0.csv (its controller's decision log)",
    )
    g.add_argument(
        "--eval-every",
        type=int,
        metavar="STEPS",
        help="also measure the test metric every STEPS >= 1 steps (into steps.csv; the time it "
        "takes is left out of steps.csv's time_s; default: only at the end of each epoch)",
    )
    g.add_argument(
        "--target",
        nargs="?",
        const="default",
        metavar="VALUE",
        help="with --eval-every: stop once an evaluation reaches this value of the workload's "
        "metric (accuracy: at least, a fraction; bits per character: at most); without "
        "VALUE, the workload's default target ("
        + ", ".join(f"{t.dataset}: {t.default_target:g}" for t in TASKS.values())
        + ")",
    )
    g.add_argument(
        "--stop-at-acc",
        type=float,
        metavar="FRACTION",
        help="--target for an accuracy: stop once an evaluation reaches this test accuracy",
    )
    c = p.add_argument_group("communication")
    c.add_argument(
        "--backend",
        default="ina",
        choices=["ina", "gloo"],
        help="ina: through the switch; gloo: plain DDP allreduce (baseline)",
    )
    c.add_argument("--compression", default="dense", choices=COMPRESSIONS)
    c.add_argument(
        "--compressor",
        metavar="NAME",
        help="a GRACE method from ina/compressors (none, fp16, u8bit, qsgd, terngrad, signsgd, "
        "signum, efsignsgd, onebit, natural, randomk, topk, threshold, dgc, powersgd), summed "
        "in the switch where it can be, all-gathered otherwise (docs/compression.md); "
        "replaces --compression",
    )
    c.add_argument(
        "--compressor-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter of --compressor (or of its memory, or memory=NAME), "
        "repeatable: --compressor qsgd --compressor-arg levels=7",
    )
    c.add_argument(
        "--mergecomp",
        action="store_true",
        help="with --compressor: send the gradients in MergeComp's groups instead of DDP's "
        "buckets; the partition is searched at start for this model, method, network and "
        "compute (with --sim: the simulator's cost model; on the wall clock: the method's "
        "calls timed through the real transport and switch), printed, and every step follows "
        "it (docs/compression.md)",
    )
    c.add_argument(
        "--density",
        type=float,
        help=f"with --compression homomorphic: fraction of entries sent (default {DENSITY})",
    )
    c.add_argument(
        "--law",
        help=f"dc2: control law (fixed, aimd, target, ownq, cost; default {DEFAULT_LAW})",
    )
    c.add_argument(
        "--law-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="dc2: a parameter of the law, repeatable (e.g. initial=0.1, min_density=0.01; "
        "ina/control/dc2/laws.py)",
    )
    c.add_argument(
        "--warmup-steps", type=int, default=1, help="dense steps before compression starts"
    )
    c.add_argument(
        "--delay",
        default="none",
        help="link delay profile per worker (none, constant, low, high, trace:PATH), "
        "optionally with parameters of its delay model: high:episode_on_s=5:episode_off_s=5 "
        "(ina/netem.py)",
    )
    c.add_argument(
        "--link-rate",
        metavar="RATE",
        help="rate of each worker's up and down link, with its unit: 100G, 25Gbit/s, 10M "
        "(default: unlimited; with --sim, 100G)",
    )
    c.add_argument(
        "--coding",
        default="sketch",
        choices=["sketch", "support"],
        help="homomorphic/dc2: round-2 value coding (docs/compression.md)",
    )
    c.add_argument("--lanes", type=int, default=256, help="lanes per packet (switch's)")
    c.add_argument("--pool", type=int, default=128, help="slots in the job's pool (window)")
    c.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="per-chunk timeout: a missing worker fails the run after this long",
    )
    c.add_argument("--switch", help="IP:PORT of a running switch (default: start a model)")
    c.add_argument("--jobs", help="jobs file of the running switch (with --switch)")
    c.add_argument("--job-id", type=int, help="job in the jobs file (default: the first)")
    c.add_argument(
        "--p4runtime",
        help="with --switch: P4Runtime address; re-install the job before training (not "
        "needed for a fresh run: workers join a new run of the job; this also resets its "
        "counters' meaning and slots)",
    )
    s = p.add_argument_group("simulation (ina.sim)")
    s.add_argument(
        "--sim",
        action="store_true",
        help="run the workers, the switch and the network in simulated time, in this process "
        "(docs/simulation.md); --delay is then the links' delay profile",
    )
    s.add_argument(
        "--scenario",
        metavar="NAME|PATH",
        help="with --sim: a named network scenario (ina/sim/scenarios: "
        + ", ".join(scenario_names())
        + ") or a scenario file; it sets the network and, unless given, --compute and "
        "--codec (docs/dc2.md)",
    )
    s.add_argument(
        "--compute",
        help="with --sim: compute time per step: measured[:SCALE], fixed:TIME, "
        "flops:DEVICE[:EFFICIENCY] (ina/workload/compute.py; default flops:a100, or the "
        "scenario's)",
    )
    s.add_argument(
        "--codec",
        help="with --sim: codec time: device:DEVICE[:PASSES], measured[:SCALE] (this "
        "host's), none, or a throughput like 30GB/s (default device:a100, or the scenario's)",
    )
    from ina.sim.options import add_network_arguments

    add_network_arguments(p, train=True)
    t = p.add_argument_group("checks (tests)")
    t.add_argument(
        "--check-sync",
        action="store_true",
        help="compare a digest of every rank's parameters after every step",
    )
    t.add_argument(
        "--dump-step",
        type=int,
        help="save parameters, gradients and quantization bounds after this step",
    )


def scenario_names() -> list[str]:
    from ina.sim.scenario import names

    return names()


# Options that a --scenario sets, with their defaults: giving one with --scenario is an error
# (one description of the network, not two that are merged silently).
_SCENARIO_SETS = {
    "link_rate": None, "delay": "none", "prop_delay": "1us", "link_loss": 0.0,
    "buffer": "none", "capacity": None, "up_rate": None, "down_rate": None,
    "switch_rate": "none", "switch_latency": "1us", "rto": None, "min_rto": None,
}  # fmt: skip


def workload_target(args: argparse.Namespace, workload: Workload) -> float | None:
    """The value of the workload's metric to stop at (``--target``/``--stop-at-acc``), or
    None; ValueError when it is not a valid value of that metric."""
    if args.stop_at_acc is not None:
        if args.target is not None:
            raise ValueError("--target and --stop-at-acc say the same thing: give one")
        if workload.metric.column != "test_acc":
            raise ValueError(
                f"--stop-at-acc: {workload.dataset} is scored in {workload.metric.name}, "
                "not accuracy: use --target"
            )
        target = args.stop_at_acc
    elif args.target is None:
        return None
    elif args.target == "default":
        target = workload.default_target
    else:
        try:
            target = float(args.target)
        except ValueError:
            raise ValueError(f"--target takes a number, got {args.target!r}") from None
    workload.metric.check_target(target)  # "a target accuracy must be in (0, 1], got 2"
    return target


def validate(args: argparse.Namespace) -> Workload:
    """Raise ValueError saying what is wrong with the options; the run's workload."""
    if args.workers is not None and not 1 <= args.workers <= 32:
        raise ValueError(f"--workers must be 1..32, got {args.workers}")
    for name in ("epochs", "batch_size", "threads", "lanes", "pool"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    from ina.protocol import MAX_LANES

    if args.lanes > MAX_LANES:
        raise ValueError(f"--lanes {args.lanes}: packets carry 1..{MAX_LANES} lanes")
    if args.pool & (args.pool - 1):
        raise ValueError(f"--pool must be a power of two (slot = seq % pool), got {args.pool}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout must be a number of seconds > 0, got {args.timeout}")
    if args.warmup_steps < 0:
        raise ValueError(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if not args.sim and getattr(args, "sim_backend", "fast") != "fast":
        raise ValueError(f"--sim-backend {args.sim_backend} is for --sim (simulated time)")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(
            f"--max-steps must be >= 1, got {args.max_steps} (leave it out for every step)"
        )
    if args.density is not None and (args.compression != "homomorphic" or args.compressor):
        raise ValueError(
            "--density is the fraction --compression homomorphic sends: "
            + ("dc2 chooses its own" if args.compression == "dc2" else
               f"--compression {args.compression} would ignore it")
            + ("" if not args.compressor else "; a --compressor takes --compressor-arg")
        )  # fmt: skip
    if args.density is None:
        args.density = DENSITY
    if args.compression == "homomorphic" and not 0 < args.density < 1:
        raise ValueError("--density must be in (0, 1) with --compression homomorphic")
    if args.law is not None and args.compression != "dc2":
        raise ValueError(
            f"--law {args.law} is DC2's control law: it needs --compression dc2 (--compression "
            f"{args.compression} would ignore it)"
        )
    if args.compression == "dc2":
        from ina.control.dc2.laws import LAWS, make_law

        args.law = args.law or DEFAULT_LAW
        if args.law not in LAWS:
            raise ValueError(f"unknown --law {args.law!r}; known: {sorted(LAWS)}")
        params = law_params(args.law_param)  # ValueError naming --law-param itself
        try:
            make_law(args.law, **params)
        except ValueError as e:  # "aimd has no parameter foo; its parameters: ..."
            raise ValueError(f"--law {e}") from None
    elif args.law_param:
        raise ValueError("--law-param needs --compression dc2")
    check_compressor(args)
    check_mergecomp(args)
    if args.eval_every is not None and args.eval_every < 1:
        raise ValueError(
            f"--eval-every must be >= 1, got {args.eval_every} (leave it out for no evaluations "
            "between epochs)"
        )
    workload = resolve(args.dataset, args.model)
    from ina.workload.data import check_files

    try:
        check_files(args.dataset, args.data_dir)  # before any rank starts, not once per rank
    except FileNotFoundError as e:
        raise ValueError(f"--data-dir: {e}") from None
    if workload_target(args, workload) is not None and not args.eval_every:
        option = "--target" if args.stop_at_acc is None else "--stop-at-acc"
        raise ValueError(f"{option} needs --eval-every (the evaluations that check it)")
    link_rate_bps(args.link_rate)  # raises if it does not parse
    if args.sim:
        if args.backend != "ina":
            raise ValueError("--sim simulates INA: --backend ina")
        if args.switch or args.jobs:
            raise ValueError("--sim simulates its own switch: no --switch/--jobs")
        if args.check_sync or args.dump_step is not None:
            raise ValueError("--sim has one model for all workers: no --check-sync/--dump-step")
        if args.scenario:
            given = [k for k, v in _SCENARIO_SETS.items() if getattr(args, k) != v]
            if given:
                names = ", ".join("--" + k.replace("_", "-") for k in given)
                raise ValueError(f"--scenario sets the network: no {names}")
    elif args.scenario or args.compute or args.codec:
        raise ValueError("--scenario, --compute and --codec need --sim")
    if args.backend == "gloo" and args.compression != "dense":
        raise ValueError("--compression needs --backend ina (gloo is the dense baseline)")
    if bool(args.switch) != bool(args.jobs):
        raise ValueError("--switch and --jobs go together (a running switch and its job)")
    if args.p4runtime and not args.switch:
        raise ValueError("--p4runtime re-installs the job of a running --switch")
    if args.dump_step is not None and not args.out:
        raise ValueError("--dump-step needs --out")
    from ina.netem import make_link

    try:
        make_link(args.delay)  # checks the name and the parameters; builds nothing lasting
    except ValueError as e:
        raise ValueError(f"--delay: {e}") from None
    if workload.task.needs_dir and not args.data_dir:
        raise ValueError(f"--dataset {args.dataset} needs --data-dir (nothing is downloaded)")
    if not workload.task.needs_dir and args.data_dir:
        raise ValueError(f"--dataset {args.dataset} is made on this machine: no --data-dir")
    return workload


def check_compressor(args: argparse.Namespace) -> None:
    """``--compressor``/``--compressor-arg``: a known method with valid arguments, built
    once here so that every mistake is a one-line error before anything starts."""
    if not args.compressor:
        if args.compressor_arg:
            raise ValueError("--compressor-arg needs --compressor")
        return
    if args.compression != "dense":
        raise ValueError("--compressor replaces --compression: give one of them")
    if args.backend != "ina":
        raise ValueError("--compressor needs --backend ina (gloo is the dense baseline)")
    from ina.compressors import make_communicator

    try:
        make_communicator(args.compressor, num_workers=args.workers or 4, args=args.compressor_arg)
    except ValueError as e:
        raise ValueError(f"--compressor: {e}") from None


def check_mergecomp(args: argparse.Namespace) -> None:
    """``--mergecomp``: a GRACE method to merge for, and nothing that reads DDP's buckets."""
    if not args.mergecomp:
        return
    if not args.compressor:
        raise ValueError(
            "--mergecomp schedules a --compressor's calls: give one (--compressor none sends "
            "the groups uncompressed)"
        )
    if args.dump_step is not None:
        raise ValueError("--mergecomp reduces groups, not DDP's buckets: no --dump-step")


def link_rate_bps(text: str | None) -> float | None:
    """``--link-rate`` in bit/s: a rate with its unit (``ina.units``)."""
    if text is None:
        return None
    from ina import units

    value = units.rate(text, "--link-rate")
    if not value > 0:
        raise ValueError(f"--link-rate must be > 0, got {text!r}")
    return value


def sim_models(args: argparse.Namespace):
    """The network spec, compute and codec models of ``--sim`` (ValueError: why not)."""
    from ina.workload.compute import DEFAULT_CODEC, DEFAULT_COMPUTE, parse_codec, parse_compute

    if args.scenario:
        from ina.sim.scenario import load_scenario

        scenario = load_scenario(args.scenario)
        return scenario_models(args, scenario)
    args.compute = args.compute or DEFAULT_COMPUTE
    args.codec = args.codec or DEFAULT_CODEC
    spec = sim_network(args, args.workers or 4)
    return spec, parse_compute(args.compute), parse_codec(args.codec)


def sim_network(args: argparse.Namespace, workers: int):
    """The simulated network of the run's options (no --scenario): ``--link-rate`` (default
    100 Gbit/s), ``--delay`` as the links' delay profile, the ``--sim`` network options."""
    from ina.sim.options import network_spec

    rate = args.link_rate or "100G"
    return network_spec(
        args, workers, args.lanes, args.pool, seed=args.seed, rate=rate, profile=args.delay
    )


def scenario_models(args: argparse.Namespace, scenario):
    """The network spec, compute and codec models of ``--sim`` on a loaded `Scenario`; the
    scenario's compute and codec profiles go into ``args`` (and so into the run's config)."""
    from ina.workload.compute import parse_codec, parse_compute

    model = resolve(args.dataset, args.model).model
    spec, args.compute, args.codec = scenario.models(
        model, args.workers, args.lanes, args.pool, args.seed if args.sim_seed is None
        else args.sim_seed, args.compute, args.codec,
    )  # fmt: skip
    backend = getattr(args, "sim_backend", "fast")
    if (args.engine, backend) != (spec.engine, spec.backend):
        from dataclasses import replace

        from ina.sim.backends import check

        spec = replace(spec, engine=args.engine, backend=backend)
        check(spec)  # ns-3's limits, before anything runs
    return spec, parse_compute(args.compute), parse_codec(args.codec)


def ina_section(spec, switch: tuple[str, int], lanes: int, timeout: float) -> dict:
    """The config's ``ina`` section: the job and where each rank's worker binds."""
    workers = sorted(spec.workers, key=lambda w: w.worker_id)
    if [w.worker_id for w in workers] != list(range(spec.num_workers)):
        raise ValueError(f"job {spec.job_id}: worker ids must be 0..{spec.num_workers - 1}")
    return {
        "job_id": spec.job_id,
        "switch": [switch[0], int(switch[1])],
        "pool_size": spec.pool_size,
        "lanes": lanes,
        "timeout": timeout,
        "workers": [[w.ip, w.udp_port] for w in workers],
    }


def make_config(args: argparse.Namespace, out: Path, ina: dict | None) -> dict:
    """Everything a rank needs, as JSON-able data (`ina.train.worker_main` reads it)."""
    workload = resolve(args.dataset, args.model)
    return {
        "backend": args.backend,
        "model": workload.model,
        "dataset": args.dataset,
        "data_dir": args.data_dir,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": workload.task.default_lr if args.lr is None else args.lr,
        "momentum": args.momentum,
        "weight_decay": args.weight_decay,
        "seed": args.seed,
        "max_steps": args.max_steps,
        "threads": args.threads,
        "compression": args.compression,
        "compressor": args.compressor,
        "compressor_args": list(args.compressor_arg),
        # search MergeComp's partition at start (--sim: in the run; wall clock: the ranks)
        "mergecomp": bool(args.mergecomp),
        "density": args.density,
        "law": args.law or DEFAULT_LAW,
        "law_params": law_params(args.law_param),
        "warmup_steps": args.warmup_steps,
        "delay": args.delay,
        # CLOCK_MONOTONIC is one clock for all processes: shared congestion episodes
        # (`high:episode_seed=N`) start from here on every worker's links.
        "clock_epoch": None if args.sim else time.monotonic(),
        "link_rate_bps": link_rate_bps(args.link_rate),
        "scenario": args.scenario,
        "compute": args.compute,
        "codec": args.codec,
        "coding": args.coding,
        "step_log": args.step_log,
        "eval_every": args.eval_every or 0,
        "target": workload_target(args, workload),
        "check_sync": args.check_sync,
        "dump_step": args.dump_step,
        "progress": not args.no_progress,
        "out": str(out),
        "ina": ina,
    }


def torchrun_command(num_workers: int, master_port: int, config_path: Path) -> list[str]:
    """torchrun on one node: ``num_workers`` ranks, static rendezvous on 127.0.0.1 (through
    `ina.train.torchrun`, which leaves the reporting of a failed rank to the rank)."""
    log_dir = config_path.parent / "torchrun"
    return [
        sys.executable,
        "-m",
        "ina.train.torchrun",
        "--nnodes=1",
        f"--nproc-per-node={num_workers}",
        "--master-addr=127.0.0.1",
        f"--master-port={master_port}",
        "--max-restarts=0",
        # torchrun's logs into the run's folder: without a folder it makes a
        # torchelastic_* one in the system's temporary folder and leaves it there
        f"--log-dir={log_dir}",
        "-m",
        "ina.train.worker_main",
        str(config_path),
    ]


def rank_env(num_workers: int, master_port: int) -> dict[str, str]:
    """Environment for the ranks (torchrun adds RANK, WORLD_SIZE, ...)."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",  # 2 cores shared by all ranks (and the switch)
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
    }


# What a run of `ina train` writes into its folder: removed before the next run there.
RUN_FILES = ("config.json", "metrics.csv", "result.json", "summary.json", "steps.csv", "rank*.json",
             "dc2_rank*.csv", "error_rank*.txt", "dump_rank*.pt", "torchrun")  # fmt: skip


def run_ranks(num_workers: int, config: dict, out: Path) -> int:
    """Write the config, run torchrun, return its exit code."""
    from ina.host.launch import free_tcp_port

    config_path = out / "config.json"
    config_path.write_text(json.dumps(config, indent=1))
    port = free_tcp_port()
    cmd = torchrun_command(num_workers, port, config_path)
    # A session of its own: Ctrl-C reaches only this process, which stops torchrun by its
    # PID (SIGTERM: torchrun stops its ranks), instead of every rank printing a traceback.
    proc = subprocess.Popen(cmd, env=rank_env(num_workers, port), start_new_session=True)
    try:
        return proc.wait()
    finally:
        stop_process(proc, timeout=15)


def rank_errors(out: Path) -> list[str]:
    """First line of each rank's error report, by rank."""
    files = sorted(out.glob("error_rank*.txt"), key=lambda p: int(p.stem[len("error_rank") :]))
    return [p.read_text().splitlines()[0] for p in files]


def network_line(args: argparse.Namespace) -> str:
    """The emulated links of a wall-clock run, in words with their units."""
    from ina import units

    rate = link_rate_bps(args.link_rate)
    links = "unlimited" if rate is None else units.format_rate(rate)
    return f"links {links} each way, delay profile {args.delay}"


def print_summary(
    result: dict, counters: dict | None, wall_s: float, network: str | None = None
) -> None:
    metric = resolve(result["dataset"], result["model"]).metric
    print("\nsummary")
    if network:
        print(f"  {'network':<28} {network}")
    print(f"  {metric.name:<28} {metric.format(result['final_metric'])} on the test set")
    if result.get("target") is not None:
        step = result["target_step"]
        where = f"at step {step}" if step else "not reached"
        print(f"  {'target':<28} {metric.format(result['target'])}: {where}")
    print(
        f"  {'time':<28} {result['train_seconds']:.1f} s training, {wall_s:.1f} s in all "
        f"(with process start-up)"
    )
    print(
        f"  {'time per iteration':<28} {result['step_ms_mean']:.2f} ms mean, "
        f"{result['step_ms_median']:.2f} ms median ({result['steps']} steps)"
    )
    ranks = result["ranks"]
    if result["backend"] == "ina":
        comm = [1e3 * r["hook_seconds"] / max(result["steps"], 1) for r in ranks]
        print(f"  {'INA allreduce per iteration':<28} {max(comm):.2f} ms (slowest worker)")
        print(
            f"  {'bytes sent per worker':<28} " + ", ".join(f"{r['bytes_sent']:,}" for r in ranks)
        )
        print(
            f"  {'retransmissions per worker':<28} "
            + ", ".join(str(r["retransmissions"]) for r in ranks)
        )
    print(
        f"  {'gradient per step':<28} {result['gradient_bytes_per_step']:,} bytes of float32 "
        f"({result['parameters']:,} parameters)"
    )
    print(f"  {'replicas identical at end':<28} {result['replicas_identical']}")
    from ina.workload.traffic import summary_lines

    for line in summary_lines(result.get("compression_summary")):
        print(line)
    if counters:
        print_counters(counters)


def print_counters(counters: dict) -> None:
    """The switch's final aggregation counters (`LocalSwitch.stop`)."""
    print("\nswitch aggregation counters (packets, bytes):")
    for name, (pk, by) in counters.items():
        print(f"  {name:<18} {pk:>12} {by:>14}")


def _reinstall(address: str, spec) -> None:
    from ina.control.jobs import install_job
    from ina.control.p4rt import connect

    with connect(address) as conn:
        install_job(conn, spec, replace=True)


def main(args: argparse.Namespace) -> int:
    try:
        validate(args)
        sim = sim_models(args) if args.sim else None
    except ValueError as e:
        print(f"ina train: {e}", file=sys.stderr)
        return 2
    from ina.errors import UsageError
    from ina.runs import clear_previous, run_folder

    try:
        out = run_folder(args.out, "train")
    except UsageError as e:
        print(f"ina train: {e}", file=sys.stderr)
        return 2
    gone = clear_previous(out, RUN_FILES)
    if gone:
        print(f"ina train: {out} held a previous run's files: replacing {', '.join(gone)}")
    print(f"results: {out}", flush=True)
    t0 = time.monotonic()
    switch = None
    counters = None
    try:
        if sim is not None:
            from ina.sim import train as sim_train

            return sim_train.main(args, make_config(args, out, None), *sim)
        if args.backend == "gloo":
            n = args.workers or 4
            rc = run_ranks(n, make_config(args, out, None), out)
        elif args.switch:
            from ina.switch_model.tables import load_jobs

            specs = load_jobs(args.jobs)
            spec = next((s for s in specs if args.job_id in (None, s.job_id)), None)
            if spec is None:
                print(f"ina train: no job {args.job_id} in {args.jobs}", file=sys.stderr)
                return 2
            n = spec.num_workers
            if args.workers not in (None, n):
                print(
                    f"ina train: job {spec.job_id} has {n} workers, not {args.workers}",
                    file=sys.stderr,
                )
                return 2
            if args.p4runtime:
                try:
                    _reinstall(args.p4runtime, spec)
                except ConnectionError as e:  # "no P4Runtime server answers at ..."
                    print(f"ina train: --p4runtime: {e}", file=sys.stderr)
                    return 1
            host, port = args.switch.rsplit(":", 1)
            ina = ina_section(spec, (host, int(port)), args.lanes, args.timeout)
            rc = run_ranks(n, make_config(args, out, ina), out)
        else:
            from ina.host.launch import LocalSwitch, SwitchStartError, local_jobs

            n = args.workers or 4
            jobs = local_jobs(n, args.pool)
            try:
                switch = LocalSwitch(jobs, lanes=args.lanes, pool=max(1024, args.pool), grpc=False)
            except SwitchStartError as e:
                print(f"ina train: {e}", file=sys.stderr)
                return 1
            print(f"switch model started: {switch.ready_line}", flush=True)
            ina = ina_section(jobs[0], switch.address, args.lanes, args.timeout)
            rc = run_ranks(n, make_config(args, out, ina), out)
            counters = switch.stop()
            switch = None
        wall = time.monotonic() - t0
        errors = rank_errors(out)
        result_path = out / "result.json"
        if rc != 0 or errors or not result_path.exists():
            why = "; ".join(errors) or f"torchrun exited with code {rc}"
            print(f"\nina train: FAILED: {why}", file=sys.stderr)
            if counters:
                print_counters(counters)
            return 1
        result = json.loads(result_path.read_text())
        result["switch_counters"] = counters
        result["wall_seconds"] = wall
        (out / "summary.json").write_text(json.dumps(result, indent=1))
        print_summary(result, counters, wall, network_line(args))
        print(f"\nwrote {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
        return 0
    finally:
        if switch is not None:
            switch.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="ina train", description=__doc__.split("\n")[0], formatter_class=HelpFormatter
    )
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
