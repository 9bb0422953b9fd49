"""Aggregation throughput of the switch model on loopback (`ina bench switch`).

A switch model child process and N worker processes; each worker reduces (SUM) an int32
vector through the switch ``rounds`` times with the real worker transport. Reported:

- gradient payload: completed slots x lanes x 4 bytes per second (what every worker gets
  back aggregated), in Gbit/s;
- packets/s into the switch (slots x N) and the switch's CPU time per second of wall time
  (from /proc), so a reader sees whether the switch or the workers were the limit.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import time

import numpy as np

from ina.errors import UsageError
from ina.host.launch import LocalSwitch, local_jobs
from ina.host.transport import Transport, WorkerConfig
from ina.protocol import MAX_LANES, MAX_WORKERS, P4_LANES, Op
from ina.switch_model.shards import MAX_SHARDS


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """`cpu_seconds` of ``pid`` and its child processes (a sharded switch's shards)."""
    total = cpu_seconds(pid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _load(cfg: WorkerConfig, values: int, rounds: int, start, q) -> None:
    try:
        vec = np.arange(values, dtype=np.int32) * (cfg.worker_id + 1)
        with Transport(cfg) as t:
            t.reduce(vec[: cfg.lanes * 4], Op.SUM)  # warm-up: sockets, first RTT sample
            start.wait()
            t0, c0 = time.perf_counter(), cpu_seconds(os.getpid())
            for _ in range(rounds):
                out = t.reduce(vec, Op.SUM).values
            dt = time.perf_counter() - t0
            cpu = cpu_seconds(os.getpid()) - c0
        expect = np.arange(values, dtype=np.int32) * sum(range(1, cfg.num_workers + 1))
        q.put(
            (
                cfg.worker_id,
                dt,
                bool(np.array_equal(out, expect)),
                t.stats.retransmissions,
                cpu / dt,
            )
        )
    except Exception as e:
        q.put((cfg.worker_id, float("nan"), False, repr(e), 0.0))


def default_pool(lanes: int, inflight_bytes: int = 2 * 1024 * 1024) -> int:
    """A window of about ``inflight_bytes`` per worker, a power of two in [8, 256].

    A deeper window only queues at the switch: the queueing delay outgrows the timeout and
    spurious retransmissions eat the switch's capacity."""
    want = max(inflight_bytes // (20 + 4 * lanes), 8)
    return min(1 << (want.bit_length() - 1), 256)


def measure(
    workers: int, lanes: int, values: int, rounds: int, pool: int | None = None, shards: int = 1
) -> dict:
    """One configuration: returns the row of the table."""
    pool = pool or default_pool(lanes)
    jobs = local_jobs(workers, pool)
    with LocalSwitch(jobs, lanes=lanes, pool=max(pool, 1024), grpc=False, shards=shards) as sw:
        ctx = mp.get_context("spawn")
        q, start = ctx.Queue(), ctx.Event()
        cfgs = [
            WorkerConfig(
                job_id=1,
                worker_id=w.worker_id,
                num_workers=workers,
                switch=sw.address,
                bind=(w.ip, w.udp_port),
                pool_size=pool,
                lanes=lanes,
                timeout=30.0,
            )
            for w in jobs[0].workers
        ]
        procs = [ctx.Process(target=_load, args=(c, values, rounds, start, q)) for c in cfgs]
        for p in procs:
            p.start()
        # Every worker is ready when it blocks on `start`; give spawn time with a deadline.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(p.pid for p in procs):
            time.sleep(0.05)
        time.sleep(2.0)  # workers import numpy and warm up before the start signal
        cpu0, t0 = tree_cpu_seconds(sw.proc.pid), time.perf_counter()
        start.set()
        rows = [q.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t0
        cpu = tree_cpu_seconds(sw.proc.pid) - cpu0
        for p in procs:
            p.join(timeout=10)
        counters = sw.stop()
    slots = rounds * -(-values // lanes)
    worst = max(r[1] for r in rows)
    return {
        "shards": shards,
        "workers": workers,
        "lanes": lanes,
        "packet_bytes": 20 + 4 * lanes,
        "pool": pool,
        "slots_per_s": slots / worst,
        "packets_in_per_s": slots * workers / worst,
        "gbit_s": slots * lanes * 4 * 8 / worst / 1e9,
        "switch_cpu": cpu / wall,
        "worker_cpu": sum(r[4] for r in rows),  # all workers together, in cores
        "exact": all(r[2] for r in rows),
        "retx": sum(r[3] for r in rows if isinstance(r[3], int)),
        "results": counters["results"][0] if counters else None,
    }


TABLE_HEAD = (
    "| shards | workers | lanes | packet B | pool | slots/s | packets in/s | gradient Gbit/s "
    "| switch CPU | workers' CPU | retx | exact |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|"
)


def row_md(r: dict) -> str:
    return (
        f"| {r['shards']} | {r['workers']} | {r['lanes']} | {r['packet_bytes']} | {r['pool']} "
        f"| {r['slots_per_s']:,.0f} "
        f"| {r['packets_in_per_s']:,.0f} | {r['gbit_s']:.3f} | {r['switch_cpu']:.2f} "
        f"| {r['worker_cpu']:.2f} | {r['retx']} | {'yes' if r['exact'] else 'NO'} |"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--lanes", type=int, nargs="+", default=[P4_LANES, 2048])
    p.add_argument("--megabytes", type=float, default=8.0, help="tensor size per worker")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--shards",
        type=int,
        nargs="+",
        default=[1],
        help="switch processes (`ina switch --shards`); several values: one row each",
    )


def check_options(args: argparse.Namespace) -> None:
    """UsageError for options no run can use, before any switch starts."""
    bad = [w for w in args.workers if not 1 <= w <= MAX_WORKERS]
    if bad:
        raise UsageError(f"--workers {bad[0]}: a job has 1..{MAX_WORKERS} workers")
    bad = [n for n in args.lanes if not 1 <= n <= MAX_LANES]
    if bad:
        raise UsageError(f"--lanes {bad[0]}: packets carry 1..{MAX_LANES} lanes")
    if not (math.isfinite(args.megabytes) and args.megabytes * 1e6 / 8 >= 4):
        raise UsageError(
            f"--megabytes {args.megabytes:g}: a size > 0 (at least 0.000032: rows with "
            "fewer than 256 lanes send an eighth of it, and a tensor needs a 4-byte value)"
        )
    if args.rounds < 1:
        raise UsageError(f"--rounds {args.rounds}: at least one round")
    bad = [n for n in args.shards if not 1 <= n <= MAX_SHARDS]
    if bad:
        raise UsageError(f"--shards {bad[0]}: run 1..{MAX_SHARDS} shards")


def main(args: argparse.Namespace) -> list[dict]:
    check_options(args)
    print(TABLE_HEAD)
    rows = []
    for lanes in args.lanes:
        for workers in args.workers:
            mb = args.megabytes if lanes >= 256 else args.megabytes / 8  # small packets: fewer
            values = int(mb * 1e6 / 4)
            for shards in args.shards:
                r = measure(workers, lanes, values, args.rounds, shards=shards)
                rows.append(r)
                print(row_md(r), flush=True)
    return rows
