"""Start an INA network in Mininet from a topology file; run a workload or open the CLI.

Design. Mininet's hosts are network namespaces joined to the switch by veth pairs (with
TCLink's htb shaping when a link has a bandwidth). The switch node is a process that owns the
switch ends of those veths, ``s1-eth1``..., in the root namespace, as in the p4lang tutorials:

- BMv2: ``simple_switch_grpc`` with our program (``build/p4/ina.json`` and
  ``ina.p4info.txtpb``, from ``make p4``), when it is on PATH;
- else the switch model on the same interfaces (``python -m ina.switch_model.rawio``), which
  behaves exactly like the program.

Either is programmed the same way, through P4Runtime with our control plane
(`ina.control.jobs.install_job`, ``forward_table`` writes): the job over the topology's
worker hosts and one forwarding entry per host. Without the control plane the model takes
the same entries from files (``--jobs``, ``--forward``). The launcher says which switch it
started and why. No Open vSwitch, no controller: nothing else forwards.

Addresses: hosts send INA to the switch's address (``10.0.0.254``, MAC ``00:00:0a:00:00:fe``
by default; see `bmv2_topologies.topology`) through a static ARP entry; hosts reach each
other through ``forward_table`` and static ARP entries (there is no flooding).

Workloads (``--workload``) run one process per worker host at the same time, then print each
host's output and the switch's counters: ``allreduce`` runs ``ina allreduce --switch ...
--worker-id K``; ``train`` runs one rank of ``ina train`` (`ina.train.worker_main` with the
config ``ina train`` writes, options after ``--``) per host, the ranks meeting over
torch.distributed on the first worker host. Without a workload the Mininet CLI opens
(``h1 ping h2``, ``h1 python -m ina allreduce ...``); Ctrl-D leaves.

Teardown stops exactly what this run started: the worker and switch processes by PID, then
``net.stop()`` removes Mininet's interfaces and namespaces. A state file
(``build/topo/state.json``) lists those PIDs (with their command lines) and interfaces while
the network is up, so that ``--stop`` (``make topo-stop``) can clean up after a run that was
killed; it never matches processes or interfaces by name.

    sudo .venv/bin/python -m bmv2_topologies.launch --topo single_4 --workload allreduce
    sudo .venv/bin/python -m bmv2_topologies.launch --stop
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from bmv2_topologies import mnpath, topology
from bmv2_topologies.network import (
    MODEL_LANES,
    MTU,
    STATE_DIR,
    InaNetwork,
    choose_target,
    log,
    same_process,
    stop_leftovers,
)
from ina.protocol import UDP_PORT

TRAIN_MASTER_PORT = 29500  # torch.distributed rendezvous on the first worker host


def open_cli(net: InaNetwork) -> None:
    """Mininet's CLI on the network (commands from stdin), as ``mn`` opens it: at
    Mininet's "info" log level, without which ``nodes``, ``pingall`` and the rest print
    nothing (they write at "info" and "output", below the "warning" the network was built
    at)."""
    from mininet.cli import CLI
    from mininet.log import setLogLevel

    setLogLevel("info")
    CLI(net.net, stdin=sys.stdin)  # the current stdin (its default is bound at import)


def train_commands(net: InaNetwork, extra: list[str]):
    """One rank of `ina.train.worker_main` per worker host, with the config `ina train`
    would write (its options from ``extra``) and torchrun's environment contract (RANK,
    WORLD_SIZE, MASTER_ADDR, MASTER_PORT): rank = worker id, rendezvous on the first
    worker, gloo on the host's interface."""
    from ina import train_cli

    p = argparse.ArgumentParser(prog="ina train")
    train_cli.add_arguments(p)
    targs = p.parse_args(extra)
    targs.no_progress = True
    out = net.state_dir / "train"
    out.mkdir(parents=True, exist_ok=True)
    ina = train_cli.ina_section(
        net.spec, (net.topo.switch_ip, UDP_PORT), net.target.lanes, targs.timeout
    )
    config = out / "config.json"
    config.write_text(json.dumps(train_cli.make_config(targs, out, ina), indent=1) + "\n")
    master = net.topo.hosts[net.topo.workers[0]].ip
    cmds, env = {}, {}
    for rank, h in enumerate(net.topo.workers):
        cmds[h] = [sys.executable, "-m", "ina.train.worker_main", str(config)]
        env[h] = {
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "WORLD_SIZE": str(len(net.topo.workers)),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(TRAIN_MASTER_PORT),
            # the hosts share the machine's hostname, which resolves to 127.0.0.1
            "GLOO_SOCKET_IFNAME": net.host(h).defaultIntf().name,
        }
    return cmds, env


def run_workload(net: InaNetwork, kind: str, extra: list[str], timeout: float) -> bool:
    if kind == "train":
        cmds, env = train_commands(net, extra)
    else:
        cmds = {h: net.worker_cmd(kind, w, extra) for w, h in enumerate(net.topo.workers)}
        env = {}
    log(f"{kind} on {', '.join(cmds)}: {' '.join(cmds[net.topo.workers[0]][2:])} ...")
    t0 = time.monotonic()
    results = net.run_on_hosts(cmds, timeout, env=env)
    log(f"{kind} done in {time.monotonic() - t0:.1f} s")
    ok = True
    for h, (rc, text) in results.items():
        print(f"--- {h} (exit {rc}) ---\n{text.rstrip()}", flush=True)
        ok &= rc == 0
    return ok


def print_counters(counters: dict | None) -> None:
    if not counters:
        print("switch counters: not available", flush=True)
        return
    print("switch counters (packets, bytes):")
    for name, (pk, by) in counters.items():
        print(f"  {name:<32} {pk:>12} {by:>14}")


# -- command line -----------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topo", default="single_4", help="topology name or JSON path")
    p.add_argument("--workload", choices=("none", "allreduce", "train"), default="none")
    p.add_argument("--target", choices=("auto", "bmv2", "model"), default="auto")
    p.add_argument("--lanes", type=int, help=f"lanes per packet (model: default {MODEL_LANES})")
    p.add_argument("--bw", type=float, help="Mbit/s on every link (overrides the file)")
    p.add_argument("--mtu", type=int, default=MTU, help="MTU of every link (9000: jumbo)")
    p.add_argument("--pool", type=int, help="the job's pool size (default: the file's)")
    p.add_argument("--size", type=int, default=1_000_000, help="allreduce: float32 values")
    p.add_argument("--iters", type=int, default=3, help="allreduce: calls per worker")
    p.add_argument("--timeout", type=float, default=600.0, help="workload deadline, seconds")
    p.add_argument("--cli", action="store_true", help="open the Mininet CLI (after a workload)")
    p.add_argument("--stop", action="store_true", help="clean up a previous run, then exit")
    p.add_argument("--state-dir", type=Path, default=STATE_DIR)
    p.add_argument("--verbose", action="store_true", help="Mininet's info messages")
    p.add_argument("extra", nargs="*", help="after --: more arguments for the workload")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bmv2_topologies.launch", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("Mininet needs root: run with sudo (make topo does)")
    if args.stop:
        stop_leftovers(args.state_dir)
        return 0
    state_file = args.state_dir / "state.json"
    if state_file.exists():
        data = json.loads(state_file.read_text())
        live = [
            r
            for r in [*data.get("processes", []), data.get("launcher", {})]
            if r.get("pid") and same_process(r)
        ]
        if live:
            raise SystemExit(f"a previous network is still up ({state_file}): make topo-stop")
        log(f"cleaning up after a previous run ({state_file})")
        stop_leftovers(args.state_dir)
    try:
        path = topology.resolve(args.topo)
    except FileNotFoundError as e:
        raise SystemExit(f"bmv2_topologies.launch: {e}") from None
    if len(json.loads(path.read_text()).get("switches") or {}) > 1:
        return run_tree(args, path)  # hierarchical aggregation: bmv2_topologies.tree
    topo = topology.load(args.topo)
    target = choose_target(args.target, args.lanes, args.mtu)
    log(f"topology {topo.name}: {len(topo.hosts)} hosts, workers {', '.join(topo.workers)}")
    log(f"switch: {target.kind} ({target.reason})")

    def on_signal(signum, _frame):
        # SystemExit, not KeyboardInterrupt: Mininet's CLI swallows the latter
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    ok = True
    try:
        net = InaNetwork(
            topo,
            target,
            bw=args.bw,
            state_dir=args.state_dir,
            pool_size=args.pool,
            verbose=args.verbose,
            mtu=args.mtu,
        )
    except mnpath.MininetMissing as e:
        raise SystemExit(f"bmv2_topologies.launch: {e}") from None
    try:
        net.start()
        log(
            f"network up: workers send to {topo.switch_ip}:{UDP_PORT} "
            f"({topo.switch_mac}), lanes {target.lanes}; jobs file {net.jobs_file}"
        )
        if args.workload != "none":
            extra = list(args.extra)
            if args.workload == "allreduce":
                extra = ["--size", str(args.size), "--iters", str(args.iters), *extra]
            ok = run_workload(net, args.workload, extra, args.timeout)
            print_counters(net.counters())
        if args.workload == "none" or args.cli:
            open_cli(net)
    except KeyboardInterrupt:
        log("interrupted")
        ok = False
    finally:
        # a second signal must not cut the teardown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        log("tearing down")
        net.stop()
    return 0 if ok else 1


def run_tree(args: argparse.Namespace, path: Path) -> int:
    """`main` for a topology with a tree of switches (`bmv2_topologies.tree`)."""
    from bmv2_topologies.tree import TreeNetwork, print_tree_counters
    from ina.topology import TopologyError
    from ina.topology import load as load_fabric

    try:
        fabric = load_fabric(path)
    except TopologyError as e:
        raise SystemExit(f"bmv2_topologies.launch: {e}") from None
    if args.workload == "train":
        raise SystemExit("bmv2_topologies.launch: --workload train runs on one switch only")
    target = choose_target(args.target, args.lanes, args.mtu)
    log(
        f"topology {fabric.name}: switches {', '.join(fabric.top_down())} (top first), "
        f"workers {', '.join(fabric.workers)}"
    )
    log(f"switches: {target.kind} ({target.reason})")

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        net = TreeNetwork(
            fabric, target, state_dir=args.state_dir, pool_size=args.pool, verbose=args.verbose
        )
    except mnpath.MininetMissing as e:
        raise SystemExit(f"bmv2_topologies.launch: {e}") from None
    ok = True
    try:
        net.start()
        if args.workload == "allreduce":
            extra = ["--size", str(args.size), "--iters", str(args.iters), *args.extra]
            ok = run_workload(net, "allreduce", extra, args.timeout)
            print_tree_counters(net)
        if args.workload == "none" or args.cli:
            open_cli(net)
    except KeyboardInterrupt:
        log("interrupted")
        ok = False
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        log("tearing down")
        net.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
