"""`ina sim validate`: the simulator against the emulator, on networks both can run.

For each configuration (workers, link rate, delay profile) it measures on the wall-clock
path (a switch model process, one process per worker, each worker's up and down links
emulated by `ina.host.emulated_path` at that rate with that profile) and simulates on the
same network description (`ina.sim`, the same `LinkEmulator` model per link, compute and
codec times measured on this host):

- **allreduce**: the median time of an allreduce of ``--size`` float32 values per worker;
- **train step**: the median step time of `ina train` (digits MLP) against `ina train --sim`.

It prints a table of measured against simulated milliseconds and their difference. The
rates are low (10-50 Mbit/s) and the packets large (``--lanes``, 1,024 by default: a quarter
of the wakeups of 256) so that the wall-clock path is limited by its emulated links, not by
this host's CPU: only there does the measurement stand for the network. Each measurement
also reads how busy the host's CPUs were while it ran (`/proc/stat`); above ``--busy-limit``
the emulator's processes wait for a CPU (a worker that should release a packet every 170 us
was seen to stall for 3-5 ms), the row measures the host, and it is marked and left out of
the largest difference.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ina.protocol import MAX_LANES

SIZE = 250_000
LANES = 1024
POOL = 64
BUSY_LIMIT = 0.5  # share of the host's CPU time in use above which a row is host-bound


class HostBusy:
    """How busy the host's CPUs were between entering and leaving (from /proc/stat): the
    share of CPU time not idle, over all CPUs and every process (ours and anyone else's)."""

    def __init__(self) -> None:
        self.share = float("nan")

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None  # not Linux: the share stays unknown (nan), never a failure
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def __enter__(self) -> HostBusy:
        self._start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        end = self._read()
        if self._start is not None and end is not None and end[1] > self._start[1]:
            self.share = (end[0] - self._start[0]) / (end[1] - self._start[1])


def _emulated_worker(cfg, profile: str, rate_bps: float, size: int, iters: int, q) -> None:
    """One wall-clock worker with emulated links: the time of each allreduce call."""
    try:
        from ina.host.allreduce import Worker
        from ina.host.emulated_path import EmulatedPath

        link = EmulatedPath.from_profile(
            profile, seed=1, worker_id=cfg.worker_id, rate_bps=rate_bps
        )
        x = np.random.default_rng(cfg.worker_id).standard_normal(size).astype(np.float32)
        times = []
        with Worker(cfg, link=link) as w:
            for _ in range(iters + 1):  # the first call also joins the run: left out
                t0 = time.perf_counter()
                w.allreduce(x)
                times.append(time.perf_counter() - t0)
        q.put((cfg.worker_id, times[1:]))
    except Exception as e:  # reported, never a hang
        q.put((cfg.worker_id, f"{type(e).__name__}: {e}"))


def measure_allreduce(
    workers: int, rate_bps: float, profile: str, size: int, iters: int, lanes: int = LANES
) -> float:
    """Median seconds per call on the wall-clock path (slowest worker per call)."""
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
        for p in procs:
            p.start()
        got = [q.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(30)
    errors = [r for _, r in got if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"a wall-clock worker failed: {errors[0]}")
    per_call = np.max([r for _, r in got], axis=0)
    return float(np.median(per_call))


def simulate_allreduce(
    workers: int, rate_bps: float, profile: str, size: int, iters: int, lanes: int = LANES
) -> float:
    """Median simulated seconds per call, on the same network."""
    from ina.sim.allreduce import run
    from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec

    link = LinkSpec(rate_bps=rate_bps, prop_delay_s=0.0, profile=profile)
    # the switch model process: ~10 us of pipeline per packet on this host
    spec = NetworkSpec(
        workers=workers, up=link, down=link, switch=SwitchSpec(latency_s=20e-6), lanes=lanes,
        pool_size=POOL, seed=1,
    )  # fmt: skip
    # the codec as it runs on this host: the measured side pays for it too
    r = run(spec, size, iters + 1, codec_time=lambda wall: wall)
    return float(np.median(r["call_seconds"][1:]))


def _train(
    sim: bool, workers: int, rate_mbit: float, profile: str, steps: int, out: Path, lanes: int
) -> float:
    cmd = [sys.executable, "-m", "ina", "train", "--workers", str(workers), "--max-steps"]
    cmd += [str(steps), "--link-rate", f"{rate_mbit:g}", "--delay", profile, "--step-log"]
    cmd += ["--no-progress", "--pool", str(POOL), "--lanes", str(lanes), "--out", str(out)]
    if sim:
        cmd += ["--sim", "--prop-delay", "0us", "--switch-latency", "20us"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed: {r.stderr.strip()[-500:]}")
    with open(out / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return statistics.median(float(row["step_s"]) for row in rows[2:])  # warm-up left out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", default="2,4", help="worker counts, comma list")
    p.add_argument("--rates", default="10,50", help="link rates in Mbit/s, comma list")
    p.add_argument("--profiles", default="none,low", help="delay profiles, comma list")
    p.add_argument("--size", type=int, default=SIZE, help="float32 values per allreduce")
    p.add_argument("--iters", type=int, default=3, help="allreduce calls measured")
    p.add_argument("--steps", type=int, default=20, help="training steps per run")
    p.add_argument("--what", default="allreduce,train", help="allreduce, train, or both")
    p.add_argument("--lanes", type=int, default=LANES, help="lanes per packet")
    p.add_argument(
        "--busy-limit",
        type=float,
        default=BUSY_LIMIT,
        help="host CPU share above which a measurement is host-bound (left out)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        workers = [int(x) for x in args.workers.split(",")]
        rates = [float(x) for x in args.rates.split(",")]
        profiles = args.profiles.split(",")
        what = set(args.what.split(","))
        if not what <= {"allreduce", "train"} or min(workers) < 1 or min(rates) <= 0:
            raise ValueError
    except ValueError:
        print("ina sim validate: bad --workers/--rates/--profiles/--what lists", file=sys.stderr)
        return 2
    if not 1 <= args.lanes <= MAX_LANES or not 0 < args.busy_limit <= 1:
        print(f"ina sim validate: need 1 <= --lanes <= {MAX_LANES}, 0 < --busy-limit <= 1",
              file=sys.stderr)  # fmt: skip
        return 2
    lanes = args.lanes
    print(f"{lanes} lanes per packet; host busy: share of the host's CPU time in use while "
          f"measuring (above {100 * args.busy_limit:g} %: host-bound, left out)")  # fmt: skip
    print("| what | workers | link | profile | measured ms | simulated ms | difference "
          "| host busy |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    worst, counted, bound = 0.0, 0, 0
    with tempfile.TemporaryDirectory(prefix="ina-validate-") as tmp:
        for kind in ("allreduce", "train"):
            if kind not in what:
                continue
            for n in workers:
                for rate in rates:
                    for profile in profiles:
                        busy = HostBusy()
                        if kind == "allreduce":
                            sizes = (n, rate * 1e6, profile, args.size, args.iters, lanes)
                            with busy:
                                m = measure_allreduce(*sizes)
                            s = simulate_allreduce(*sizes)
                            label = f"allreduce {args.size * 4 / 1e6:g} MB"
                        else:
                            d = Path(tmp) / f"{n}-{rate}-{profile}"
                            with busy:
                                m = _train(False, n, rate, profile, args.steps, d / "wall", lanes)
                            s = _train(True, n, rate, profile, args.steps, d / "sim", lanes)
                            label = "train step (digits mlp)"
                        diff = (s - m) / m
                        host_bound = busy.share > args.busy_limit
                        if host_bound:
                            bound += 1
                        else:
                            counted += 1
                            worst = max(worst, abs(diff))
                        mark = " (host-bound)" if host_bound else ""
                        print(
                            f"| {label} | {n} | {rate:g} Mbit/s | {profile} | {1e3 * m:.1f} | "
                            f"{1e3 * s:.1f} | {100 * diff:+.1f} %{mark} | "
                            f"{100 * busy.share:.0f} % |",
                            flush=True,
                        )
    if counted:
        print(f"\nlargest difference: {100 * worst:.1f} % over {counted} rows", end="")
    else:
        print("\nno row counted: the host was too busy (run it on a quiet machine)", end="")
    print(f"; {bound} host-bound rows left out")
    return 0
