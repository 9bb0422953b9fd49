"""`ina allreduce`: N worker processes allreduce a tensor through a switch and check it.

By default it starts its own switch model (a child process) and N workers on loopback; with
``--switch`` and ``--jobs`` it uses a running switch (the switch model elsewhere, or BMv2 in
Mininet) and, with ``--worker-id``, runs just that one worker (one per Mininet host).

Each worker's tensor is drawn from a seed that every worker knows, so every worker checks
the switch's answer exactly: the integer sums must equal the wrap-around int32 sum of what
all workers encoded, and the float result must be within the quantization bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time

import numpy as np

from ina import progress
from ina.errors import HelpFormatter, UsageError, run_command, whole_number
from ina.host.transport import JoinRejected, JoinTimeout, WorkerConfig
from ina.procs import available_memory, parent_handles_ctrl_c
from ina.protocol import MAX_LANES, MAX_WORKERS
from ina.switch_model.run import MAX_POOL
from ina.switch_model.tables import JobSpec, load_jobs


def worker_tensor(seed: int, worker_id: int, size: int) -> np.ndarray:
    """The tensor worker ``worker_id`` contributes: gradient-like (heavy-tailed) float32.

    numpy, not torch: a worker process then starts without importing torch (about 2 s of
    CPU each); the transport takes either (torch's path is the DDP hook's, tested there)."""
    g = np.random.default_rng(seed * 1000 + worker_id)
    scale = np.exp(g.standard_normal(size))
    return (g.standard_normal(size) * scale * 1e-3).astype(np.float32)


def run_worker(
    cfg: WorkerConfig,
    size: int,
    iters: int,
    seed: int,
    rank: int | None = None,
    on_call=lambda: None,
) -> dict:
    """Run one worker: ``iters`` allreduces, each checked exactly. Returns its statistics.

    ``rank``: the worker's index among all ``cfg.num_workers`` workers when that is not its
    id on its switch (a leaf of a hierarchical job); it picks the worker's tensor.
    ``on_call`` runs after each allreduce (progress)."""
    from ina.host import quantize
    from ina.host.allreduce import Worker

    xs = [worker_tensor(seed, w, size) for w in range(cfg.num_workers)]
    mine = worker_tensor(seed, cfg.worker_id if rank is None else rank, size)
    times = []
    with Worker(cfg) as worker:
        for _ in range(iters):
            t0 = time.perf_counter()
            out = worker.allreduce(mine)
            times.append(time.perf_counter() - t0)
            on_call()
        info = worker.last
        expected = np.zeros(size, np.int32)
        for x in xs:  # int32 wrap-around sum of every worker's encoding
            expected += quantize.encode(x, info.exponents, cfg.lanes, cfg.num_workers)
        exact_ints = bool(np.array_equal(worker.last_int_sums, expected))
        true_sum = np.sum(np.asarray(xs, dtype=np.float64), axis=0)
        err = np.abs(np.asarray(out).astype(np.float64) - true_sum)
        # bound: quantization + the float32 rounding of the returned tensor
        bound = info.error_bound + np.abs(true_sum) * 2.0**-23 + 1e-45
        st = worker.stats
        return {
            "worker": cfg.worker_id if rank is None else rank,
            "exact_ints": exact_ints,
            "within_bound": bool((err <= bound).all()),
            "max_abs_err": float(err.max()) if size else 0.0,
            "seconds": times,
            "packets_sent": st.packets_sent,
            "bytes_sent": st.bytes_sent,
            "retransmissions": st.retransmissions,
            "mean_rtt_us": 1e6 * st.rtt_sum / max(st.rtt_samples, 1),
        }


PROGRESS = "call done"  # a worker's message after each allreduce, for the progress bar


def _worker_main(cfg: WorkerConfig, size: int, iters: int, seed: int, q, rank=None) -> None:
    try:
        q.put(run_worker(cfg, size, iters, seed, rank, on_call=lambda: q.put(PROGRESS)))
    except JoinRejected as e:  # the switch's job is configured otherwise: say how
        q.put(
            {"worker": cfg.worker_id, "error": f"{type(e).__name__}: {e}", "rejected": e.differ()}
        )
    except JoinTimeout as e:  # no switch answers there: the same for every worker
        q.put({"worker": cfg.worker_id, "error": f"{type(e).__name__}: {e}",
               "no_switch": e.switch_silent})  # fmt: skip
    except Exception as e:  # report, never hang the parent
        q.put({"worker": cfg.worker_id, "error": f"{type(e).__name__}: {e}"})


def worker_configs(
    spec: JobSpec,
    switch: tuple[str, int],
    lanes: int,
    timeout: float,
) -> list[WorkerConfig]:
    """Configs of every worker of ``spec`` (they join a fresh run of the job on first use)."""
    return [
        WorkerConfig(
            job_id=spec.job_id,
            worker_id=w.worker_id,
            num_workers=spec.num_workers,
            switch=switch,
            bind=(w.ip, w.udp_port),
            pool_size=spec.pool_size,
            lanes=lanes,
            timeout=timeout,
        )
        for w in spec.workers
    ]


def run_workers(
    cfgs: list[WorkerConfig],
    size: int,
    iters: int,
    seed: int,
    timeout: float,
    ranks: list[int | None] | None = None,
) -> list[dict]:
    """Run the workers as separate processes; collect their reports (with a deadline)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ranks = ranks or [None] * len(cfgs)
    procs = [
        ctx.Process(target=_worker_main, args=(c, size, iters, seed, q, r))
        for c, r in zip(cfgs, ranks, strict=True)
    ]
    with parent_handles_ctrl_c():
        for p in procs:
            p.start()
    reports = []
    deadline = time.monotonic() + timeout
    bar = progress.bar(len(procs) * iters, "allreduce calls", unit="call")
    try:
        while len(reports) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"workers did not finish within {timeout:.0f} s")
            try:
                message = q.get(timeout=min(left, 1.0))
                if message == PROGRESS:
                    bar.update(1)
                else:
                    reports.append(message)
            except Exception:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"worker process died (exit {dead[0].exitcode})") from None
    except BaseException:  # Ctrl-C or a failure: the workers' reports no longer matter
        for p in procs:
            p.terminate()
        raise
    finally:
        bar.close()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return sorted(reports, key=lambda r: r["worker"])


def read_counters_p4runtime(address: str) -> dict[str, tuple[int, int]]:
    """The switch's ``ina_stats`` counters, read over P4Runtime."""
    from ina.control.counters import read_counters
    from ina.control.p4rt import SwitchConnection

    with SwitchConnection(address, arbitrate=False, require_primary=False) as conn:
        return read_counters(conn, workers=False).stats


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers",
        type=int,
        help=f"worker processes (local switch; default {DEFAULT_WORKERS}); with --switch, the "
        "jobs file's count",
    )
    p.add_argument("--size", type=whole_number, default=1_000_000, help="float32 values per tensor")
    p.add_argument("--iters", type=int, default=3, help="allreduce calls per worker")
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet")
    p.add_argument("--pool", type=int, default=128, help="slots in the job's pool (window)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=10.0, help="per-chunk timeout, seconds")
    p.add_argument("--switch", help="IP:PORT of a running switch (default: start a model)")
    p.add_argument("--jobs", help="jobs file describing the job (with --switch)")
    p.add_argument("--worker-id", type=int, help="with --switch: run only this worker")
    p.add_argument(
        "--world",
        type=int,
        help="with --worker-id on a leaf switch of a hierarchical job: all workers of the job "
        "(the jobs file has only the leaf's)",
    )
    p.add_argument("--rank", type=int, help="with --world: this worker's index among them")


def print_report(reports: list[dict], size: int, counters: dict | None) -> bool:
    ok = True
    print(
        f"{'worker':>6} {'exact':>6} {'bound':>6} {'max err':>10} {'ms/call':>9} "
        f"{'MB/s':>7} {'pkts':>8} {'retx':>5} {'rtt us':>7}"
    )
    for r in reports:
        if "error" in r:
            print(f"{r['worker']:>6} ERROR {r['error']}")
            ok = False
            continue
        best = min(r["seconds"])
        ok &= r["exact_ints"] and r["within_bound"]
        print(
            f"{r['worker']:>6} {r['exact_ints']!s:>6} {r['within_bound']!s:>6} "
            f"{r['max_abs_err']:>10.3g} {1e3 * best:>9.2f} {4 * size / best / 1e6:>7.1f} "
            f"{r['packets_sent']:>8} {r['retransmissions']:>5} {r['mean_rtt_us']:>7.0f}"
        )
    if counters:
        print("\nswitch aggregation counters over P4Runtime (packets, bytes):")
        for name, (pk, by) in counters.items():
            print(f"  {name:<18} {pk:>12} {by:>14}")
    print("\nallreduce: " + ("OK, every sum exact" if ok else "FAILED"))
    return ok


DEFAULT_WORKERS = 4  # a local switch's job


# Memory of one worker process per value of --size: every worker's float32 tensor (each
# worker draws them all to check the sums exactly), their float64 sum, its own int32
# encoding, the sums and the error bound; peak RSS measured at 70 bytes with 2 workers and
# 90 with 4 (1e6 and 4e6 values), so 12 per worker plus 48.
def worker_bytes_per_value(workers: int) -> int:
    return 12 * workers + 48


def check_memory(size: int, workers: int, processes: int) -> None:
    """UsageError before a run whose ``processes`` workers (of ``workers``) would not fit
    in the memory this host has free: it could never finish."""
    need = processes * worker_bytes_per_value(workers) * size
    have = available_memory()
    if have is not None and need > have:
        raise UsageError(
            f"--size {size:,} with {workers} workers needs about {need / 2**30:,.1f} GiB "
            f"({processes} worker process{'es' if processes > 1 else ''}, each drawing every "
            f"worker's tensor to check the sums exactly), and {have / 2**30:,.1f} GiB is free: "
            "use a smaller --size"
        )


def check_options(args: argparse.Namespace) -> None:
    """Raise `UsageError` for options no run can use (before anything starts)."""
    if args.workers is not None and args.switch:
        spec = load_jobs(args.jobs)[0] if args.jobs else None
        if spec is not None and args.workers != spec.num_workers:
            raise UsageError(
                f"--workers {args.workers}: job {spec.job_id} in {args.jobs} has "
                f"{spec.num_workers} workers (leave --workers out with --switch)"
            )
    if args.workers is None:
        args.workers = DEFAULT_WORKERS
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(
            f"--workers {args.workers}: a job has 1..{MAX_WORKERS} workers "
            "(one bit each in the switch's slot bitmap)"
        )
    if not 1 <= args.pool <= MAX_POOL or args.pool & (args.pool - 1):
        raise UsageError(
            f"--pool {args.pool}: the job's pool must be a power of two up to {MAX_POOL} "
            "(the switch finds the slot as seq % pool)"
        )
    if not 1 <= args.lanes <= MAX_LANES:
        raise UsageError(f"--lanes {args.lanes}: packets carry 1..{MAX_LANES} lanes")
    if args.size < 1:
        raise UsageError(f"--size {args.size}: the tensor needs at least one value")
    if args.iters < 1:
        raise UsageError(f"--iters {args.iters}: at least one allreduce call")
    if not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout}: seconds, > 0")
    if args.switch:
        host, sep, port = args.switch.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UsageError(f"--switch {args.switch!r}: give IP:PORT of the switch's INA port")
        if not args.jobs:
            raise UsageError("--switch needs --jobs (the job's workers and pool)")
    elif args.jobs or args.worker_id is not None:
        raise UsageError("--jobs and --worker-id go with --switch (a running switch)")
    world, rank = getattr(args, "world", None), getattr(args, "rank", None)
    if (world is None) != (rank is None) or (world is not None and args.worker_id is None):
        raise UsageError("--world and --rank go together, with --worker-id")
    if world is not None and not 0 <= rank < world <= MAX_WORKERS:
        raise UsageError(f"--rank {rank} --world {world}: need 0 <= rank < world <= {MAX_WORKERS}")
    if args.switch:  # the job's workers, from its file; one process with --worker-id
        workers = world or load_jobs(args.jobs)[0].num_workers
        check_memory(args.size, workers, 1 if args.worker_id is not None else workers)
    else:
        check_memory(args.size, args.workers, args.workers)


def main(args: argparse.Namespace) -> int:
    check_options(args)
    if args.switch:
        host, port = args.switch.rsplit(":", 1)
        spec = load_jobs(args.jobs)[0]
        cfgs = worker_configs(spec, (host, int(port)), args.lanes, args.timeout)
        if args.worker_id is not None:
            cfgs = [c for c in cfgs if c.worker_id == args.worker_id]
            if not cfgs:
                raise UsageError(
                    f"--worker-id {args.worker_id}: job {spec.job_id} in {args.jobs} has "
                    f"workers 0..{spec.num_workers - 1}"
                )
        ranks = None
        if getattr(args, "world", None) is not None:
            cfgs = [dataclasses.replace(c, num_workers=args.world) for c in cfgs]
            ranks = [args.rank]
        reports = run_workers(cfgs, args.size, args.iters, args.seed, timeout=600, ranks=ranks)
        if all(r.get("no_switch") for r in reports):  # one line, not a table of failures
            raise UsageError(
                f"--switch {args.switch}: no switch answered job {spec.job_id}'s JOIN within "
                f"{args.timeout:g} s (is it running, with {args.jobs} installed?)"
            )
        rejected = [r["rejected"] for r in reports if "rejected" in r]
        if rejected:  # a configuration that cannot work, whatever the network does
            raise UsageError(
                f"the switch refused to join job {spec.job_id}: {rejected[0]} "
                f"(--lanes, and the pool in {args.jobs}, must be the switch's)"
            )
        return 0 if print_report(reports, args.size, None) else 1

    from ina.host.launch import LocalSwitch, SwitchStartError, local_jobs

    jobs = local_jobs(args.workers, args.pool)
    print(
        f"starting a switch model and {args.workers} workers: {args.size} float32 values "
        f"each, {args.lanes} lanes per packet, pool {args.pool}",
        flush=True,
    )
    try:
        sw = LocalSwitch(jobs, lanes=args.lanes, pool=max(1024, args.pool))
    except SwitchStartError as e:
        print(f"ina allreduce: {e}", file=sys.stderr)
        return 1
    with sw:
        cfgs = worker_configs(jobs[0], sw.address, args.lanes, args.timeout)
        reports = run_workers(cfgs, args.size, args.iters, args.seed, timeout=600)
        counters = read_counters_p4runtime(sw.grpc_address)  # as any controller would
        sw.stop()
    ok = print_report(reports, args.size, counters)
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="ina allreduce", formatter_class=HelpFormatter)
    add_arguments(parser)
    sys.exit(run_command("ina allreduce", main, parser.parse_args()))
