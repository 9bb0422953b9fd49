"""`ina sim validate`: the simulator against the emulator, on networks both can run.

For each configuration (workers, link rate, delay profile) it measures on the wall-clock
path (a switch model process, one process per worker, each worker's up and down links
emulated by `ina.host.emulated_path` at that rate with that profile) and simulates on the
same network description (`ina.sim`, the same `LinkEmulator` model per link, compute and
codec times measured on this host):

- **allreduce**: the median time of an allreduce of ``--size`` float32 values per worker;
- **train step**: the median step time of `ina train` against `ina train --sim` (digits,
  ``--model``, by default ``mid_mlp``: 1.2 MB of gradients a step; the default ``mlp``'s 40 KB
  are a few packets, where the host's wakeups, about 1.7 ms a round trip, dominate).

The simulated switch's latency is, by default, this host's idle round trip worker -> switch
model -> worker (`host_round_trip`), measured before the table.

It prints a table of measured against simulated milliseconds and their difference. The
rates are low (10-50 Mbit/s) and the packets large (``--lanes``, 4,096 by default: a
sixteenth of the wakeups of 256; every packet costs the emulator's Python loop about a
millisecond of CPU here) so that the wall-clock path is limited by its emulated links, not by
this host's CPU: only there does the measurement stand for the network. Each measurement
also reads how busy the host's CPUs were while the timed calls or steps ran (`/proc/stat`,
sampled every 20 ms; start-up and imports do not count); above ``--busy-limit``
the emulator's processes wait for a CPU (a worker that should release a packet every 170 us
was seen to stall for 3-5 ms), the row measures the host, and it is marked and left out of
the largest difference. Before the first row it samples the host for a second
(`background_load`): where others already use half the limit, the rows themselves (12-57 %
of a quiet 2-core host, docs/simulation.md) push it over, so it warns in one line that the
result may be empty (``--stop-if-busy``: stop there instead).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ina import progress, units
from ina.errors import UsageError
from ina.netem import check_profile
from ina.procs import parent_handles_ctrl_c, stop_process
from ina.protocol import MAX_LANES

SIZE = 250_000
LANES = 4096
POOL = 64
BUSY_LIMIT = 0.5  # share of the host's CPU time in use above which a row is host-bound


class HostBusy:
    """How busy the host's CPUs are, sampled from /proc/stat in a background thread: the
    share of CPU time not idle over all CPUs and every process (ours and anyone else's),
    asked for over the window that was timed (process start-up and imports before it do
    not count)."""

    PERIOD = 0.02  # seconds between samples

    def __init__(self) -> None:
        self._samples: list[tuple[float, int, int]] = []  # (monotonic, busy ticks, all ticks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None  # not Linux: the share stays unknown (nan), never a failure
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def _run(self) -> None:
        while True:
            got = self._read()
            if got is None:
                return
            self._samples.append((time.monotonic(), *got))
            if self._stop.wait(self.PERIOD):
                return

    def __enter__(self) -> HostBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def share(self, start: float = -math.inf, end: float = math.inf) -> float:
        """The busy share between the last sample at or before ``start`` and the first at
        or after ``end`` (monotonic seconds); nan if unknown."""
        s = self._samples
        if len(s) < 2:
            return math.nan
        times = [x[0] for x in s]
        a = max(bisect.bisect_right(times, start) - 1, 0)
        b = min(bisect.bisect_left(times, end), len(s) - 1)
        if b <= a or s[b][2] <= s[a][2]:
            return math.nan
        return (s[b][1] - s[a][1]) / (s[b][2] - s[a][2])


def background_load(seconds: float = 1.0) -> tuple[float, float]:
    """(the share of the host's CPU time in use over ``seconds`` before any run of ours, as
    `HostBusy` measures the rows; the 1-minute load average per CPU), nan where unknown."""
    with HostBusy() as busy:
        time.sleep(seconds)
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = math.nan
    return busy.share(), load


def busy_warning(share: float, load: float, busy_limit: float) -> str | None:
    """The one-line warning where the host is already busy (``share`` or ``load`` per CPU
    at or above half of ``busy_limit``), else None."""
    cpus = os.cpu_count() or 1
    worst = max((x for x in (share, load) if not math.isnan(x)), default=math.nan)
    if not worst >= busy_limit / 2:
        return None
    return (
        f"ina sim validate: warning: the host is already busy before any run ({_pct(share)} "
        f"of its CPU time in the last second, load average {load * cpus:.1f} on {cpus} "
        f"CPUs); a row over --busy-limit {100 * busy_limit:g} % is left out, "
        "so the result may be empty (no row counted): run it on a quiet machine "
        "(--stop-if-busy to stop here)"
    )


def _pct(x: float) -> str:
    return "?" if math.isnan(x) else f"{100 * x:.0f} %"


def _emulated_worker(cfg, profile: str, rate_bps: float, size: int, iters: int, q) -> None:
    """One wall-clock worker with emulated links: the time of each allreduce call."""
    try:
        from ina.host.allreduce import Worker
        from ina.host.emulated_path import EmulatedPath

        link = EmulatedPath.from_profile(
            profile, seed=1, worker_id=cfg.worker_id, rate_bps=rate_bps
        )
        x = np.random.default_rng(cfg.worker_id).standard_normal(size).astype(np.float32)
        starts, ends = [], []
        with Worker(cfg, link=link) as w:
            for _ in range(iters + 1):  # the first call also joins the run: left out
                starts.append(time.monotonic())
                w.allreduce(x)
                ends.append(time.monotonic())
        times = [e - s for s, e in zip(starts, ends, strict=True)]
        q.put((cfg.worker_id, times[1:], (starts[1], ends[-1])))
    except Exception as e:  # reported, never a hang
        q.put((cfg.worker_id, f"{type(e).__name__}: {e}", None))


def measure_allreduce(
    workers: int, rate_bps: float, profile: str, size: int, iters: int, lanes: int = LANES
) -> tuple[float, tuple[float, float]]:
    """Median seconds per call on the wall-clock path (slowest worker per call), and the
    monotonic window the timed calls took."""
    from ina.host.allreduce_cmd import worker_configs
    from ina.host.launch import LocalSwitch, local_jobs

    jobs = local_jobs(workers, POOL)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with LocalSwitch(jobs, lanes=lanes, pool=1024, grpc=False) as sw:
        cfgs = worker_configs(jobs[0], sw.address, lanes, timeout=30.0)
        procs = [
            ctx.Process(target=_emulated_worker, args=(c, profile, rate_bps, size, iters, q))
            for c in cfgs
        ]
        with parent_handles_ctrl_c():  # Ctrl-C reaches this process, which stops them
            for p in procs:
                p.start()
        try:
            got = [q.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(30)
        finally:  # Ctrl-C, SIGTERM or a worker that never reported: none left running
            for p in procs:
                if p.is_alive():
                    p.terminate()
                p.join()
    errors = [r for _, r, _ in got if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"a wall-clock worker failed: {errors[0]}")
    per_call = np.max([r for _, r, _ in got], axis=0)
    window = (min(w[0] for *_, w in got), max(w[1] for *_, w in got))
    return float(np.median(per_call)), window


def host_round_trip(lanes: int = LANES, rounds: int = 60) -> float:
    """Median seconds of one packet's round trip worker -> switch model -> worker on this
    host, links not emulated, each after an idle gap (as between packets at 10-50 Mbit/s).

    It is the switch's latency the simulated side models: the pipeline's work is tens of
    microseconds, but on an idle machine (a virtual one especially) the switch's and the
    worker's processes each take a wakeup to react, about 1.7 ms a round trip measured on
    this 2-core VM. Modelled at 20 us instead, a 45 KB allreduce at 10 Mbit/s came out 20 %
    shorter in simulation than measured."""
    from ina.host.allreduce import Worker
    from ina.host.allreduce_cmd import worker_configs
    from ina.host.launch import LocalSwitch, local_jobs

    jobs = local_jobs(1, POOL)
    one = np.zeros(1, np.int32)
    times = []
    with LocalSwitch(jobs, lanes=lanes, pool=1024, grpc=False) as sw:
        cfg = worker_configs(jobs[0], sw.address, lanes, timeout=30.0)[0]
        with Worker(cfg) as w:
            w.transport.reduce(one)  # joins the run
            for _ in range(rounds):
                time.sleep(0.002)  # the idle gap is what is measured, not a wait for a state
                t0 = time.monotonic()
                w.transport.reduce(one)
                times.append(time.monotonic() - t0)
    return float(np.median(times))


def simulate_allreduce(
    workers: int,
    rate_bps: float,
    profile: str,
    size: int,
    iters: int,
    lanes: int = LANES,
    latency_s: float = 20e-6,
) -> float:
    """Median simulated seconds per call, on the same network (``latency_s``: the switch's,
    `host_round_trip`)."""
    from ina.host.transport_core import WALL_MIN_RTO, WALL_RTO
    from ina.sim.allreduce import run
    from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec

    link = LinkSpec(rate_bps=rate_bps, prop_delay_s=0.0, profile=profile)
    # the wall clock's timers: the measured side runs with them, on a host with jitter
    spec = NetworkSpec(
        workers=workers, up=link, down=link, switch=SwitchSpec(latency_s=latency_s),
        lanes=lanes, pool_size=POOL, seed=1, rto_s=WALL_RTO, min_rto_s=WALL_MIN_RTO,
    )  # fmt: skip
    # the codec as it runs on this host: the measured side pays for it too
    r = run(spec, size, iters + 1, codec_time=lambda wall: wall)
    return float(np.median(r["call_seconds"][1:]))


def _train(
    sim: bool,
    workers: int,
    rate_mbit: float,
    profile: str,
    steps: int,
    out: Path,
    lanes: int,
    latency_s: float = 20e-6,
    model: str = "mid_mlp",
) -> tuple[float, tuple[float, float]]:
    cmd = [sys.executable, "-m", "ina", "train", "--workers", str(workers), "--max-steps"]
    cmd += [str(steps), "--link-rate", f"{rate_mbit:g}M", "--delay", profile, "--step-log"]
    cmd += ["--no-progress", "--pool", str(POOL), "--lanes", str(lanes), "--out", str(out)]
    cmd += ["--dataset", "digits", "--model", model]
    if sim:
        cmd += ["--sim", "--prop-delay", "0us", "--switch-latency", f"{latency_s * 1e6:.1f}us"]
    with parent_handles_ctrl_c():  # Ctrl-C reaches this process, which stops it by PID
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=900)
    finally:  # by SIGTERM, so that it stops its switch and ranks (SIGKILL would orphan them)
        stop_process(proc, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {err.strip()[-500:]}")
    with open(out / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))[2:]  # warm-up left out
    step = statistics.median(float(row["step_s"]) for row in rows)
    if sim:
        return step, (0.0, 0.0)
    # the wall clock's steps carry their end time (CLOCK_MONOTONIC, shared by processes)
    end = float(rows[-1]["monotonic"])
    return step, (float(rows[0]["monotonic"]) - float(rows[0]["step_s"]), end)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", default="2,4", help="worker counts, comma list")
    p.add_argument("--rates", default="10M,25M,50M", help="link rates with their unit, comma list")
    p.add_argument("--profiles", default="none,low", help="delay profiles, comma list")
    p.add_argument("--size", type=int, default=SIZE, help="float32 values per allreduce")
    p.add_argument(
        "--iters",
        type=int,
        default=8,
        help="allreduce calls measured, their median (a call or three after the join are "
        "the window's and the timeout's start-up on the wall clock: the median needs more)",
    )
    p.add_argument("--steps", type=int, default=10, help="training steps per run")
    p.add_argument("--what", default="allreduce,train", help="allreduce, train, or both")
    p.add_argument("--lanes", type=int, default=LANES, help="lanes per packet")
    p.add_argument(
        "--model",
        default="mid_mlp",
        choices=("mlp", "cnn", "mid_mlp", "big_mlp"),
        help="the model trained on digits for the train-step rows (mid_mlp: 1.2 MB of "
        "gradients a step; mlp's 40 KB a step is dominated by the host's wakeups)",
    )
    p.add_argument(
        "--switch-latency",
        default="measured",
        help="the simulated switch's latency: measured (this host's idle round trip through "
        "the switch model) or a time such as 20us",
    )
    p.add_argument(
        "--busy-limit",
        type=float,
        default=BUSY_LIMIT,
        help="host CPU share above which a measurement is host-bound (left out)",
    )
    p.add_argument(
        "--stop-if-busy",
        action="store_true",
        help="stop (exit 1) instead of warning when the host is already busy before the runs",
    )


def main(args: argparse.Namespace) -> int:
    try:
        workers = [int(x) for x in args.workers.split(",")]
        rates = [units.rate(x, "--rates") / 1e6 for x in args.rates.split(",")]  # Mbit/s
        profiles = args.profiles.split(",")
        what = set(args.what.split(","))
        if not what <= {"allreduce", "train"} or min(workers) < 1 or min(rates) <= 0:
            raise ValueError
    except ValueError as e:
        why = str(e) if "--rates" in str(e) else "bad --workers/--rates/--profiles/--what lists"
        print(f"ina sim validate: {why}", file=sys.stderr)
        return 2
    for profile in profiles:  # before any run: a wall-clock worker would fail on it
        try:
            check_profile(profile)
        except ValueError as e:
            raise UsageError(f"--profiles: {e}") from None
    # each measured on the wall clock: a count below these gives a row with nothing timed
    if args.size < 1:
        raise UsageError(f"--size must be >= 1 float32 value, got {args.size}")
    if "allreduce" in what and args.iters < 1:
        raise UsageError(f"--iters must be >= 1 (the call that joins the run is left out), "
                         f"got {args.iters}")  # fmt: skip
    if "train" in what and args.steps < 3:
        raise UsageError(f"--steps must be >= 3 (2 warm-up steps are left out), got {args.steps}")
    if not 1 <= args.lanes <= MAX_LANES or not 0 < args.busy_limit <= 1:
        print(f"ina sim validate: need 1 <= --lanes <= {MAX_LANES}, 0 < --busy-limit <= 1",
              file=sys.stderr)  # fmt: skip
        return 2
    lanes = args.lanes
    latency, how = 0.0, "measured: this host's idle round trip worker-switch-worker"
    if args.switch_latency != "measured":
        try:
            latency = units.seconds(args.switch_latency, "switch latency")
        except ValueError as e:
            print(f"ina sim validate: {e}", file=sys.stderr)
            return 2
        how = "given"
    warning = busy_warning(*background_load(), args.busy_limit)
    if warning:
        print(warning, file=sys.stderr, flush=True)
        if args.stop_if_busy:
            return 1
    if args.switch_latency == "measured":
        latency = host_round_trip(lanes)
    print(f"{lanes} lanes per packet; host busy: share of the host's CPU time in use while "
          f"measuring (above {100 * args.busy_limit:g} %: host-bound, left out)")  # fmt: skip
    print(f"simulated switch latency {1e6 * latency:.0f} us ({how})")
    print("| what | workers | link | profile | measured ms | simulated ms | difference "
          "| host busy |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    worst, counted, bound = 0.0, 0, 0
    rows = [(kind, n, rate, profile) for kind in ("allreduce", "train") if kind in what
            for n in workers for rate in rates for profile in profiles]  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="ina-validate-") as tmp,
        progress.bar(len(rows), "validate rows", unit="row") as bar,
    ):
        for kind, n, rate, profile in rows:
            if kind == "allreduce":
                sizes = (n, rate * 1e6, profile, args.size, args.iters, lanes)
                with HostBusy() as busy:
                    m, window = measure_allreduce(*sizes)
                s = simulate_allreduce(*sizes, latency_s=latency)
                label = f"allreduce {args.size * 4 / 1e6:g} MB"
            else:
                d = Path(tmp) / f"{n}-{rate}-{profile}"
                with HostBusy() as busy:
                    m, window = _train(False, n, rate, profile, args.steps, d / "wall", lanes,
                                       model=args.model)  # fmt: skip
                s, _ = _train(True, n, rate, profile, args.steps, d / "sim", lanes, latency,
                              args.model)  # fmt: skip
                label = f"train step (digits {args.model})"
            diff = (s - m) / m
            share = busy.share(*window)
            host_bound = share > args.busy_limit
            if host_bound:
                bound += 1
            else:
                counted += 1
                worst = max(worst, abs(diff))
            mark = " (host-bound)" if host_bound else ""
            bar.update(1)
            bar.write(f"| {label} | {n} | {rate:g} Mbit/s | {profile} | {1e3 * m:.1f} | "
                      f"{1e3 * s:.1f} | {100 * diff:+.1f} %{mark} | {100 * share:.0f} % |",
                      file=sys.stdout)  # fmt: skip
            sys.stdout.flush()
    if counted:
        print(f"\nlargest difference: {100 * worst:.1f} % over {counted} rows", end="")
    else:
        print("\nno row counted: the host was too busy (run it on a quiet machine)", end="")
    print(f"; {bound} host-bound rows left out")
    return 0
