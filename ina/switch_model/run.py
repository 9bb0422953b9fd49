"""`ina switch`: run the switch model as a process (UDP data path + P4Runtime service)."""

from __future__ import annotations

import argparse
import errno
import json
import signal
import sys
import threading

from ina.errors import INTERRUPTED_EXIT, HelpFormatter, UsageError, run_command
from ina.p4.entities import POOL_SLOTS
from ina.protocol import MAX_LANES, P4_LANES, UDP_PORT
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.server import SwitchServer
from ina.switch_model.shards import MAX_SHARDS
from ina.switch_model.tables import JobSpec, load_jobs

READY = "ina-switch ready"  # first line on stdout once both services listen
MAX_POOL = 1 << 16  # slot indices and pool bases are 16-bit fields (header, job_table)


def install_job_spec(pipeline: Pipeline, spec: JobSpec) -> None:
    """Install a job as the control plane would: job_table, multicast group, worker_table
    and, on a leaf of a hierarchical job, parent_table."""
    entry = spec.entry()
    pipeline.install_job(entry)
    if spec.parent is not None:
        pipeline.set_parent(spec.parent)
    else:
        pipeline.remove_parent(spec.job_id)
    pipeline.tables.mcast_groups[entry.mcast_grp] = [(w.port, w.worker_id) for w in spec.workers]
    for w in spec.workers:
        pipeline.tables.add_worker(w)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address", default="127.0.0.1", help="IP to serve INA on (default %(default)s)"
    )
    p.add_argument(
        "--port", type=int, default=UDP_PORT, help="UDP port to serve INA on (default %(default)s)"
    )
    p.add_argument(
        "--lanes",
        type=int,
        default=256,
        help=f"int32 lanes per packet, 1..{MAX_LANES} (default %(default)s; the P4 program "
        f"uses {P4_LANES})",
    )
    p.add_argument(
        "--pool",
        type=int,
        default=POOL_SLOTS,
        help="slots in the switch's register pool, shared by all jobs (default %(default)s)",
    )
    p.add_argument("--jobs", help="jobs file (JSON) to install at start (e.g. examples/jobs.json)")
    p.add_argument(
        "--grpc",
        default="127.0.0.1:9559",
        metavar="HOST:PORT",
        help="P4Runtime address to serve, '' to disable (default %(default)s)",
    )
    p.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (default 1)")
    p.add_argument(
        "--shards",
        type=int,
        default=1,
        help="data-plane processes, each serving the slots = shard (mod SHARDS) of every job "
        "(default %(default)s: one process)",
    )
    p.add_argument("--loss", type=float, default=0.0, help="drop probability per packet (0)")
    p.add_argument("--dup", type=float, default=0.0, help="duplication probability per packet (0)")
    p.add_argument("--reorder", type=float, default=0.0, help="shuffle probability per batch (0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the impairments (0)")


def _check(args: argparse.Namespace) -> None:
    """Raise `UsageError` for options the switch cannot run with."""
    if not 1 <= args.lanes <= MAX_LANES:
        raise UsageError(f"--lanes {args.lanes}: the switch model runs 1..{MAX_LANES} lanes")
    if not 1 <= args.pool <= MAX_POOL:
        raise UsageError(f"--pool {args.pool}: the pool has 1..{MAX_POOL} slots")
    if args.pool & (args.pool - 1):
        raise UsageError(
            f"--pool {args.pool}: the pool must be a power of two (the P4 program's register "
            f"arrays are; it has {POOL_SLOTS})"
        )
    if not 0 <= args.device_id < 1 << 64:
        raise UsageError(f"--device-id {args.device_id}: P4Runtime's device id is 0..2^64-1")
    if not 1 <= args.shards <= MAX_SHARDS:
        raise UsageError(f"--shards {args.shards}: run 1..{MAX_SHARDS} shards")
    if not 0 <= args.port < 1 << 16:
        raise UsageError(f"--port {args.port} is not a UDP port")
    if args.grpc:
        host, sep, port = args.grpc.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UsageError(f"--grpc {args.grpc!r}: give HOST:PORT (e.g. 127.0.0.1:9559)")
        if int(port) >= 1 << 16:
            raise UsageError(f"--grpc {args.grpc!r}: {port} is not a TCP port (0..65535)")


def main(args: argparse.Namespace) -> int:
    """Run the switch until SIGTERM/SIGINT; `UsageError` (one line) for bad options, a bad
    jobs file, or a port that another process holds."""
    _check(args)
    specs = load_jobs(args.jobs) if args.jobs else []
    try:
        impairment = Impairment(args.loss, args.dup, args.reorder, args.seed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.shards > 1:
        return run_sharded(args, specs, impairment)
    pipeline = Pipeline(lanes=args.lanes, pool_total=args.pool)
    _install_jobs(pipeline, specs, args.jobs)
    try:
        server = SwitchServer(pipeline, bind=(args.address, args.port), impairment=impairment)
    except OSError as e:
        raise _bind_problem(args, e) from None
    grpc_server = None
    grpc_where = "off"
    if args.grpc:
        from ina.switch_model.p4runtime_server import start_server

        try:
            grpc_server = start_server(pipeline, args.grpc, server.lock, device_id=args.device_id)
        except OSError as e:
            server.close()
            raise UsageError(str(e)) from None
        grpc_where = grpc_server.address

    stopped_by: list[int] = []

    def stop(signum, _frame):
        stopped_by.append(signum)
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _print_ready(args, server.address, grpc_where, pipeline)
    t = threading.Thread(target=server.serve_forever, name="ina-dataplane", daemon=True)
    t.start()
    t.join()
    if grpc_server is not None:
        grpc_server.stop(grace=0.5)
    server.close()
    # The final counters, for whoever started us without a P4Runtime client.
    print(json.dumps({"counters": pipeline.counters.snapshot()}), flush=True)
    return _exit_status(stopped_by)


def _exit_status(stopped_by: list[int]) -> int:
    """0 when stopped by SIGTERM (the way `LocalSwitch` and scripts stop a switch); Ctrl-C
    (SIGINT) ends as in every command: one line, exit status 130."""
    if signal.SIGINT in stopped_by:
        print("ina switch: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    return 0


def _install_jobs(pipeline: Pipeline, specs: list[JobSpec], jobs_file: str) -> None:
    for spec in specs:
        try:
            install_job_spec(pipeline, spec)
        except ValueError as e:  # e.g. the job's pool does not fit --pool
            raise UsageError(f"jobs file {jobs_file}: {e}") from None


def _bind_problem(args: argparse.Namespace, e: OSError) -> UsageError:
    return UsageError(
        f"cannot serve INA on udp {args.address}:{args.port}: {e.strerror or e}"
        + (" (another switch?)" if e.errno == errno.EADDRINUSE else "")
    )


def _print_ready(args, address: tuple[str, int], grpc_where: str, pipeline: Pipeline) -> None:
    host, port = address
    shards = f", shards {args.shards}" if args.shards > 1 else ""
    print(
        f"{READY}: INA on udp {host}:{port}, "
        + (f"P4Runtime on {grpc_where}, " if grpc_where != "off" else "P4Runtime off, ")
        + f"lanes {args.lanes}, pool {args.pool}, jobs {sorted(pipeline.tables.jobs)}{shards}",
        flush=True,
    )


def run_sharded(args: argparse.Namespace, specs: list[JobSpec], impairment: Impairment) -> int:
    """`main` with ``--shards`` > 1: shard processes on one SO_REUSEPORT group, the
    P4Runtime service here (`ina.switch_model.shards`)."""
    import multiprocessing as mp

    from ina.switch_model.shards import FrontLock, SharedState, bind_group, serve_shard

    state = SharedState(args.lanes, args.pool, args.shards)
    front = state.front
    _install_jobs(front, specs, args.jobs)
    state.publish()
    try:
        socks = bind_group(
            (args.address, args.port), args.shards, batch=128, stride=front.payload_bytes + 1
        )
    except OSError as e:
        raise _bind_problem(args, e) from None
    # fork before any thread exists here (gRPC starts below): the shards inherit the
    # shared mapping and their sockets.
    ctx = mp.get_context("fork")
    locks = [ctx.Lock() for _ in range(args.shards)]
    procs = []
    for i in range(args.shards):
        imp = Impairment(args.loss, args.dup, args.reorder, args.seed + i)
        proc = ctx.Process(
            target=serve_shard, args=(state, i, socks, locks[i], imp), name=f"ina-shard-{i}"
        )
        proc.start()
        procs.append(proc)
    address = socks[0].address
    for s in socks:
        s.close()  # the shards hold them
    stopping = threading.Event()
    stopped_by: list[int] = []

    def stop(signum, _frame):
        stopped_by.append(signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    grpc_server = None
    grpc_where = "off"
    rc = 0
    try:
        if args.grpc:
            from ina.switch_model.p4runtime_server import start_server

            try:
                grpc_server = start_server(
                    front, args.grpc, FrontLock(state, locks), device_id=args.device_id
                )
            except OSError as e:
                raise UsageError(str(e)) from None
            grpc_where = grpc_server.address
        _print_ready(args, address, grpc_where, front)
        while not stopping.wait(0.2):
            dead = [p for p in procs if not p.is_alive()]
            if dead:
                print(
                    f"ina switch: shard {dead[0].name} exited ({dead[0].exitcode})",
                    file=sys.stderr,
                )
                rc = 1
                break
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        if grpc_server is not None:
            grpc_server.stop(grace=0.5)
    shards = [c.snapshot() for c in state.counters.shards]
    print(json.dumps({"counters": state.counters.snapshot(), "shards": shards}), flush=True)
    return rc or _exit_status(stopped_by)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="ina switch", formatter_class=HelpFormatter)
    add_arguments(parser)
    sys.exit(run_command("ina switch", main, parser.parse_args()))
