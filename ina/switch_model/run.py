"""`ina switch`: run the switch model as a process (UDP data path + P4Runtime service)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from ina.p4.entities import POOL_SLOTS
from ina.protocol import P4_LANES, UDP_PORT
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.server import SwitchServer
from ina.switch_model.tables import JobSpec, load_jobs

READY = "ina-switch ready"  # first line on stdout once both services listen


def install_job_spec(pipeline: Pipeline, spec: JobSpec) -> None:
    """Install a job as the control plane would: job_table, multicast group, worker_table."""
    entry = spec.entry()
    pipeline.install_job(entry)
    pipeline.tables.mcast_groups[entry.mcast_grp] = [(w.port, w.worker_id) for w in spec.workers]
    for w in spec.workers:
        pipeline.tables.add_worker(w)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default="127.0.0.1", help="IP to serve INA on")
    p.add_argument("--port", type=int, default=UDP_PORT, help="UDP port to serve INA on")
    p.add_argument(
        "--lanes",
        type=int,
        default=256,
        help=f"int32 lanes per packet (the P4 program uses {P4_LANES})",
    )
    p.add_argument(
        "--pool",
        type=int,
        default=POOL_SLOTS,
        help="slots in the switch's register pool, shared by all jobs",
    )
    p.add_argument("--jobs", help="jobs file (JSON) to install at start")
    p.add_argument(
        "--grpc", default="127.0.0.1:9559", help="P4Runtime address to serve ('' to disable)"
    )
    p.add_argument("--device-id", type=int, default=1)
    p.add_argument("--loss", type=float, default=0.0, help="drop probability per packet")
    p.add_argument("--dup", type=float, default=0.0, help="duplication probability per packet")
    p.add_argument("--reorder", type=float, default=0.0, help="shuffle probability per batch")
    p.add_argument("--seed", type=int, default=0, help="seed of the impairments")


def main(args: argparse.Namespace) -> int:
    pipeline = Pipeline(lanes=args.lanes, pool_total=args.pool)
    for spec in load_jobs(args.jobs) if args.jobs else []:
        install_job_spec(pipeline, spec)
    impairment = Impairment(args.loss, args.dup, args.reorder, args.seed)
    server = SwitchServer(pipeline, bind=(args.address, args.port), impairment=impairment)
    grpc_server = None
    grpc_where = "off"
    if args.grpc:
        from ina.switch_model.p4runtime_server import serve

        grpc_server = serve(pipeline, args.grpc, server.lock, device_id=args.device_id)
        grpc_where = args.grpc

    def stop(*_):
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.address
    print(
        f"{READY}: INA on udp {host}:{port}, P4Runtime on {grpc_where}, "
        f"lanes {args.lanes}, pool {args.pool}, jobs {sorted(pipeline.tables.jobs)}",
        flush=True,
    )
    t = threading.Thread(target=server.serve_forever, name="ina-dataplane", daemon=True)
    t.start()
    t.join()
    if grpc_server is not None:
        grpc_server.stop(grace=0.5)
    server.close()
    # The final counters, for whoever started us without a P4Runtime client.
    print(json.dumps({"counters": pipeline.counters.snapshot()}), flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="ina switch")
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
