"""INA allreduce through the switch vs gloo's ring allreduce, same hosts, same links.

N worker hosts (default 4) hang off one switch by bandwidth-limited links (TCLink's htb,
default 100 Mbit/s each way). The same switch node serves both runs: it aggregates INA
packets, and forwards gloo's TCP by ``forward_table``. For each tensor size:

- INA: every host runs `ina.host.allreduce.Worker.allreduce` (dense mode: one MAX round for
  the exponents, one SUM round of int32 lanes) against the switch;
- ring: every host runs ``torch.distributed.all_reduce`` on the gloo backend (a ring:
  reduce-scatter then all-gather).

Each host reports the time of every call and the bytes its interface sent and received
(``/proc/net/dev`` in its namespace) over the timed calls. A call's time is the slowest
worker's; the table shows the median over ``--iters`` calls after one warm-up call.

Why 1.5x is the bound at 4 workers: each link carries S bytes each way for INA (send the
tensor, get the sum back), 2 (N - 1) / N * S = 1.5 S for the ring. With both at line rate the
ratio is 1.5 (minus the difference in per-packet overhead: INA's 62-byte frame and header per
1452 bytes of lanes, TCP's 66 bytes per 1448).

    sudo .venv/bin/python -m bmv2_topologies.bench_ring --sizes 1,10,25 --bw 100
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

try:
    from bmv2_topologies import topology
    from bmv2_topologies.network import InaNetwork, choose_target, log, max_lanes
except ImportError:  # run as a script
    import topology  # type: ignore[no-redef]
    from network import InaNetwork, choose_target, log, max_lanes  # type: ignore[no-redef]

from ina.protocol import UDP_PORT

MB = 1_000_000
RING_PORT = 29500


# -- on a host ---------------------------------------------------------------------------------


def iface_bytes(ifname: str) -> tuple[int, int]:
    """(rx, tx) bytes of an interface in this process's network namespace."""
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            f = rest.split()
            return int(f[0]), int(f[8])
    raise KeyError(f"no interface {ifname} here")


def tensor(rank: int, n: int):
    import torch

    g = torch.Generator().manual_seed(1234 + rank)
    return torch.randn(n, generator=g, dtype=torch.float32)


def host_main(args: argparse.Namespace) -> int:
    """One worker: every size, warm-up + timed calls; one JSON line per size."""
    import torch

    torch.set_num_threads(1)
    sizes = [int(float(s) * MB) // 4 for s in args.sizes.split(",")]
    if args.mode == "ina":
        from ina.host.allreduce import Worker
        from ina.host.transport import WorkerConfig
        from ina.switch_model.tables import load_jobs

        spec = load_jobs(args.jobs)[0]
        me = spec.workers[args.rank]
        host, port = args.switch.rsplit(":", 1)
        cfg = WorkerConfig(
            job_id=spec.job_id,
            worker_id=args.rank,
            num_workers=spec.num_workers,
            switch=(host, int(port)),
            bind=(me.ip, me.udp_port),
            pool_size=spec.pool_size,
            lanes=args.lanes,
            timeout=60.0,
            rto=max(args.min_rto, 0.05),
            min_rto=args.min_rto,
        )
        worker = Worker(cfg)

        def reduce(t):
            return worker.allreduce(t)

        def close():
            worker.close()
    else:
        import torch.distributed as dist

        # Mininet hosts share the machine's hostname (it resolves to 127.0.0.1): tell gloo
        # which interface to use
        os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
        dist.init_process_group(
            "gloo", init_method=f"tcp://{args.master}", rank=args.rank, world_size=args.world
        )

        def reduce(t):
            dist.all_reduce(t)
            return t

        def close():
            dist.destroy_process_group()

    try:
        for n in sizes:
            x = tensor(args.rank, n)
            reduce(x.clone())  # warm-up: connections, buffers, the other workers catch up
            times = []
            rx0, tx0 = iface_bytes(args.ifname)
            for _ in range(args.iters):
                t = x.clone()
                t0 = time.perf_counter()
                out = reduce(t)
                times.append(time.perf_counter() - t0)
            rx1, tx1 = iface_bytes(args.ifname)
            # sanity: the sum of every worker's tensor (float32 rounding, INA quantization)
            want = sum(tensor(r, n) for r in range(args.world))
            err = float((out - want).abs().max() / want.abs().max())
            print(
                json.dumps(
                    {
                        "mode": args.mode,
                        "rank": args.rank,
                        "bytes": 4 * n,
                        "times": times,
                        "tx": (tx1 - tx0) / args.iters,
                        "rx": (rx1 - rx0) / args.iters,
                        "rel_err": err,
                    }
                ),
                flush=True,
            )
    finally:
        close()
    return 0


# -- the benchmark -----------------------------------------------------------------------------


def run_mode(net: InaNetwork, mode: str, args: argparse.Namespace) -> dict[int, list[dict]]:
    """Run ``mode`` on every worker host at once; {size in bytes: [report per rank]}."""
    world = len(net.topo.workers)
    master = f"{net.topo.hosts[net.topo.workers[0]].ip}:{RING_PORT}"
    cmds = {}
    for rank, h in enumerate(net.topo.workers):
        ifname = net.host(h).defaultIntf().name
        cmd = [
            sys.executable, "-m", "bmv2_topologies.bench_ring", "host", mode,
            "--rank", str(rank), "--world", str(world), "--sizes", args.sizes,
            "--iters", str(args.iters), "--ifname", ifname, "--lanes", str(net.target.lanes),
            "--jobs", str(net.jobs_file), "--switch", f"{net.topo.switch_ip}:{UDP_PORT}",
            "--master", master, "--min-rto", str(args.min_rto),
        ]  # fmt: skip
        cmds[h] = cmd
    results = net.run_on_hosts(cmds, timeout=args.timeout)
    by_size: dict[int, list[dict]] = {}
    for h, (rc, text) in results.items():
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        if rc != 0 or not lines:
            raise RuntimeError(f"{mode} on {h} failed (exit {rc}):\n{text[-3000:]}")
        for ln in lines:
            r = json.loads(ln)
            by_size.setdefault(r["bytes"], []).append(r)
    return by_size


def summarize(reports: list[dict]) -> dict:
    """Per call, the slowest worker's time; the median call; mean bytes per worker."""
    calls = [max(r["times"][i] for r in reports) for i in range(len(reports[0]["times"]))]
    return {
        "time": statistics.median(calls),
        "tx": statistics.mean(r["tx"] for r in reports),
        "rx": statistics.mean(r["rx"] for r in reports),
        "err": max(r["rel_err"] for r in reports),
    }


def table(rows: list[dict], bw: float, world: int, lanes: int, mtu: int) -> str:
    payload = 4 * lanes
    ina_wire = (payload + 42 + 20) / payload  # bytes on the wire per byte of tensor
    mss = mtu - 52  # TCP with timestamps
    ring_wire = (mss + 66) / mss
    ring_factor = 2 * (world - 1) / world
    bound = ring_factor * ring_wire / ina_wire
    out = [
        f"{world} workers, {bw:g} Mbit/s per link, MTU {mtu}, INA {lanes} lanes per packet; "
        f"bound {bound:.2f}x (ring sends {ring_factor:.2f}x the tensor; per-packet overheads)",
        "",
        "| size | INA s | ring s | speedup | INA tx MB/worker | ring tx MB/worker "
        "| INA % of line rate | ring % of line rate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r["bytes"]
        ideal_ina = s * ina_wire * 8 / (bw * 1e6)
        ideal_ring = s * ring_factor * ring_wire * 8 / (bw * 1e6)
        out.append(
            f"| {s / MB:g} MB | {r['ina']['time']:.3f} | {r['ring']['time']:.3f} "
            f"| {r['ring']['time'] / r['ina']['time']:.2f}x "
            f"| {r['ina']['tx'] / MB:.2f} | {r['ring']['tx'] / MB:.2f} "
            f"| {100 * ideal_ina / r['ina']['time']:.0f} % "
            f"| {100 * ideal_ring / r['ring']['time']:.0f} % |"
        )
    return "\n".join(out)


def bench_main(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise SystemExit("Mininet needs root")
    topo = topology.parse(topology.single(args.workers), name=f"single_{args.workers}")
    lanes = args.lanes or max_lanes(args.mtu)
    target = choose_target("model" if args.target == "auto" else args.target, lanes, args.mtu)
    log(f"switch: {target.kind} ({target.reason}); {args.bw:g} Mbit/s links")

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # leave the `with` block: it tears the network down

    signal.signal(signal.SIGTERM, on_signal)
    with InaNetwork(
        topo, target, bw=args.bw, pool_size=args.pool, mtu=args.mtu, switch_nice=args.switch_nice
    ) as net:
        ina = run_mode(net, "ina", args)
        counters = net.counters()
        ring = run_mode(net, "ring", args)
    rows = [{"bytes": s, "ina": summarize(ina[s]), "ring": summarize(ring[s])} for s in sorted(ina)]
    print(table(rows, args.bw, args.workers, target.lanes, args.mtu))
    errs = ", ".join(
        f"{r['bytes'] / MB:g} MB: INA {r['ina']['err']:.1e} ring {r['ring']['err']:.1e}"
        for r in rows
    )
    print(f"\nmax relative error vs the float32 sum: {errs}")
    if counters:
        keep = (
            "packets_in",
            "aggregated",
            "duplicates",
            "results",
            "result_packets",
            "retx_replies",
            "pending_replies",
            "drop_stale",
        )
        print(
            "switch counters after the INA runs: "
            + ", ".join(f"{k} {counters[k][0]}" for k in keep if k in counters)
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bmv2_topologies.bench_ring", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="cmd")
    b = sub.add_parser("run", help="the benchmark (default)")
    h = sub.add_parser("host", help="(internal) one worker on a Mininet host")
    for q in (p, b):
        q.add_argument("--workers", type=int, default=4)
        q.add_argument("--bw", type=float, default=100.0, help="Mbit/s per link")
        q.add_argument("--sizes", default="1,10,25", help="tensor sizes in MB")
        q.add_argument("--iters", type=int, default=3)
        q.add_argument("--mtu", type=int, default=1500, help="MTU of every link")
        q.add_argument("--lanes", type=int, help="INA lanes (default: as many as the MTU holds)")
        q.add_argument("--pool", type=int, default=64, help="INA window (slots)")
        q.add_argument(
            "--min-rto",
            type=float,
            default=0.005,
            help="INA retransmission timeout floor, s (a full window queues for "
            "pool * frame / bw: keep the floor above it to avoid spurious retransmissions)",
        )
        q.add_argument("--target", choices=("auto", "model", "bmv2"), default="auto")
        q.add_argument("--timeout", type=float, default=900.0)
        q.add_argument("--json", help="also write the rows here")
        q.add_argument(
            "--switch-nice",
            type=int,
            default=0,
            help="nice value of the switch process (< 0: it gets the CPU first, like a "
            "device of its own)",
        )
    h.add_argument("mode", choices=("ina", "ring"))
    h.add_argument("--rank", type=int, required=True)
    h.add_argument("--world", type=int, required=True)
    h.add_argument("--sizes", required=True)
    h.add_argument("--iters", type=int, required=True)
    h.add_argument("--ifname", required=True)
    h.add_argument("--lanes", type=int, required=True)
    h.add_argument("--jobs")
    h.add_argument("--switch")
    h.add_argument("--master")
    h.add_argument("--min-rto", type=float, default=0.005)
    args = p.parse_args(argv)
    if args.cmd == "host":
        return host_main(args)
    return bench_main(args)


if __name__ == "__main__":
    sys.exit(main())
