"""`ina sim fidelity`: the fast engine against the ns-3 backend on shared scenarios.

Each scenario runs the same allreduce (`ina.sim.allreduce.run`: same tensors, same workers,
same switch) on both backends and compares the step time (one allreduce call, the mean over
calls) and the mean queueing delay of the INA packets (their one-way delay beyond an
unloaded path, per direction). Scenarios: the worker ports as the bottleneck, lossless; the
same with TCP cross traffic through the switch's ports in episodes; the same with random
loss; a two-level tree of switches (hierarchical aggregation), lossless.

Each fast-engine run is also repeated with one packet per event (a 1 ns lookahead), as ns-3
delivers them: what differs between that row and ns-3 is the model, what differs between
it and the plain fast row is the fast engine's lookahead batching.

Cross traffic differs in kind between the backends: ns-3 runs real TCP flows (BulkSend)
while an episode is on. The fast engine is given it two ways, both measured from the ns-3
run: as a ``share`` of the rate taken away during the episodes (the share TCP left the INA
traffic, from the bytes its sinks received), a fluid that slows the link but queues nothing
ahead of INA's packets; and as TCP's own packets replayed into its FIFOs (every TCP segment
and ACK that entered a worker link's queue in ns-3, `ns3net.write_cross_traces`, consumed
by `ina.netem.CrossTrace`), which occupy the buffer as they did in ns-3. The replay is open
loop: the segments arrive when they did in ns-3, whatever the fast engine's INA packets do.
A third row gives it packets without TCP's dynamics: constant-rate 1,502-byte packets at the
rate TCP took, in the same episodes (`ina.netem.CrossEpisodes`).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from ina import topology
from ina.errors import output_dir
from ina.sim import allreduce as sim_allreduce
from ina.sim.network import LinkSpec, NetworkSpec, capacity_model

TCP_FRAME = 1448 + 52 + 2  # a full TCP segment on the wire in ns-3 (IPv4, TCP + timestamps, PPP)
TCP_WIRE = TCP_FRAME / 1448  # a TCP segment's bytes on the wire per byte of payload
SHORT = ("bottleneck", "tcp", "loss", "tree")  # --scenario names, in `scenarios` order
PER_PACKET = 1e-9  # the fast engine's lookahead for one packet per event, as ns-3 delivers


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--size", type=float, default=200_000, help="float32 values per tensor")
    p.add_argument("--iters", type=int, default=2, help="allreduce calls per scenario")
    p.add_argument("--link-rate", default="10G")
    p.add_argument("--prop-delay", default="5us")
    p.add_argument("--buffer", default="200KB", help="port buffer per direction")
    p.add_argument("--loss", type=float, default=0.001, help="loss of the lossy scenario")
    p.add_argument(
        "--episodes",
        default="episodes:on_s=400e-6:off_s=50e-6:fixed=1",
        help="cross traffic schedule on the downlinks (the switch's ports)",
    )
    p.add_argument(
        "--topology",
        metavar="FILE",
        help="the tree of the two-level scenario (default: two leaves of --workers / 2 "
        "workers under one spine, as bmv2_topologies/two_level_2x2.json)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=SHORT,
        help="run only this scenario (repeatable; default: all)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="runs per scenario and backend (seeds SEED..SEED+N-1), averaged: random loss "
        "draws differ between the backends, so only their means can agree",
    )
    p.add_argument(
        "--cross-dir",
        metavar="DIR",
        help="keep the TCP cross traffic ns-3 recorded (trace files the fast engine replays, "
        "--cross trace:PATH) in DIR/SCENARIO-seedN/ (default: a temporary directory)",
    )


def scenarios(args) -> dict[str, NetworkSpec]:
    from ina import units

    link = LinkSpec(
        rate_bps=units.rate(args.link_rate),
        prop_delay_s=units.seconds(args.prop_delay),
        buffer_bytes=units.size(args.buffer),
    )
    base = NetworkSpec(
        workers=args.workers,
        up=link,
        down=link,
        lanes=256,
        pool_size=64,
        seed=args.seed,
        # timers for a microsecond fabric: a loss costs about a round trip, not 20 ms
        rto_s=1e-3,
        min_rto_s=200e-6,
    )
    if getattr(args, "topology", None):
        fabric = topology.load(args.topology)
    else:
        per_leaf = max(args.workers // 2, 1)
        fabric = topology.parse(topology.two_level(2, per_leaf), f"two_level_2x{per_leaf}")
    return {
        "bottleneck": base,
        "bottleneck + TCP": replace(base, down=replace(link, capacity=args.episodes)),
        f"loss {args.loss:g}": base.with_links(loss=args.loss),
        f"tree {fabric.name}": replace(base, workers=len(fabric.workers), topology=fabric),
    }


def tcp_share(spec: NetworkSpec, ns3_result: dict, cross_bytes: int) -> float:
    """The share of each downlink that ns-3's TCP flows left to the INA traffic while their
    episodes were on (the fast engine's ``share``)."""
    end = ns3_result["sim_seconds"]
    starts, ends = capacity_model(spec.down.capacity, spec.seed).episodes_until(end)
    on = float(np.clip(np.minimum(ends, end) - starts, 0, None).sum())
    if on <= 0:
        return 1.0
    tcp_rate = cross_bytes * TCP_WIRE * 8 / (on * spec.workers)
    return float(min(max(1 - tcp_rate / spec.down.rate_bps, 0.01), 1.0))


def fast_variants(spec: NetworkSpec, ns3_result: dict, traces: dict | None) -> list[tuple]:
    """The fast-engine runs to compare with one ns-3 run: (label, spec, lookahead_s).

    Without cross traffic: the fast engine as it runs, and with one packet per event (the
    difference is its lookahead batching, not its models). With TCP cross traffic: the
    capacity abstraction given the share TCP left (``share``), and ns-3's TCP packets
    replayed into the fast engine's FIFOs (``traces``: `ns3net.write_cross_traces`), as it
    runs and with one packet per event."""
    from ina.sim import ns3net

    if not spec.down.capacity:
        return [("fast", spec, None), ("fast, 1 packet/event", spec, PER_PACKET)]
    share = tcp_share(spec, ns3_result, int(ns3net.load().CrossBytes()))
    episodes = re.sub(r":share=[^:]*", "", spec.down.capacity)  # ns-3 ignores the share
    shared = replace(spec, down=replace(spec.down, capacity=f"{episodes}:share={share:.4f}"))
    # the same episodes, as packets of TCP's size at the rate TCP took (open loop, no sawtooth)
    tcp_rate = (1 - share) * spec.down.rate_bps
    steady = []
    if tcp_rate > 0:  # (a short run may end before TCP got going)
        cross = episodes.replace(
            "episodes", f"episodes:rate={tcp_rate:.6g}bit/s:size={TCP_FRAME}", 1
        )
        down = replace(spec.down, capacity=None, cross=cross)
        steady = [("fast, constant-rate packets", replace(spec, down=down), None)]
    replay = replace(
        spec,
        up=replace(spec.up, capacity=None, cross=f"trace:{traces['up']}"),
        down=replace(spec.down, capacity=None, cross=f"trace:{traces['down']}"),
    )
    return [
        (f"fast, share {share:.3f}", shared, None),
        *steady,
        ("fast, TCP replayed", replay, None),
        ("fast, TCP replayed, 1 packet/event", replay, PER_PACKET),
    ]


def compare(args) -> list[dict]:
    from ina.sim import ns3net

    rows = []
    keep = getattr(args, "cross_dir", None)
    with tempfile.TemporaryDirectory(prefix="ina-fidelity-") as tmp:
        for short, name in zip(SHORT, scenarios(args), strict=True):
            if args.scenario and short not in args.scenario:
                continue
            runs: dict[str, list[dict]] = {}
            for seed in range(args.seed, args.seed + args.seeds):
                spec = scenarios(argparse.Namespace(**{**vars(args), "seed": seed}))[name]
                ns3 = sim_allreduce.run(
                    replace(spec, backend="ns3"), int(args.size), args.iters, seed=seed
                )
                runs.setdefault("ns-3", []).append(ns3)
                traces = None
                if spec.down.capacity:
                    where = Path(keep or tmp) / f"{_slug(name)}-seed{seed}"
                    traces = ns3net.write_cross_traces(where)
                for label, fast_spec, lookahead in fast_variants(spec, ns3, traces):
                    label = re.sub(r"share [0-9.]+", "share", label) if args.seeds > 1 else label
                    runs.setdefault(label, []).append(
                        sim_allreduce.run(
                            fast_spec, int(args.size), args.iters, seed=seed, lookahead_s=lookahead
                        )
                    )
            for backend, rs in runs.items():
                rows.append(
                    {
                        "scenario": name,
                        "backend": backend,
                        "step_s": float(np.mean([np.mean(r["call_seconds"]) for r in rs])),
                        "queue_up_s": float(np.mean([r["queue_delay_up_s"] for r in rs])),
                        "queue_down_s": float(np.mean([r["queue_delay_down_s"] for r in rs])),
                        "retransmissions": int(sum(r["retransmissions"] for r in rs)),
                        "exact": all(r["exact"] for r in rs),
                        "wall_s": float(sum(r["wall_seconds"] for r in rs)),
                    }
                )
    return rows


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _diff(a: float, b: float) -> str:
    if max(a, b) < 1e-9:  # both below a nanosecond: nothing queued
        return "-"
    return f"{(b - a) / a * 100:+.1f} %" if a else "-"


def print_table(rows: list[dict]) -> None:
    print(
        "| scenario | backend | step us | queueing up us | queueing down us | retx | exact "
        "| wall s |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(
            f"| {r['scenario']} | {r['backend']} | {r['step_s'] * 1e6:.2f} | "
            f"{r['queue_up_s'] * 1e6:.3f} | {r['queue_down_s'] * 1e6:.3f} | "
            f"{r['retransmissions']} | {'yes' if r['exact'] else 'NO'} | {r['wall_s']:.1f} |"
        )
    print()
    print("| scenario | fast engine | step vs ns-3 | queueing up | queueing down |")
    print("|---|---|---:|---:|---:|")
    ns3 = {}
    for r in rows:
        if r["backend"] == "ns-3":
            ns3[r["scenario"]] = r
            continue
        ref = ns3[r["scenario"]]
        print(
            f"| {r['scenario']} | {r['backend']} | {_diff(ref['step_s'], r['step_s'])} | "
            f"{_diff(ref['queue_up_s'], r['queue_up_s'])} | "
            f"{_diff(ref['queue_down_s'], r['queue_down_s'])} |"
        )


def main(args: argparse.Namespace) -> int:
    from ina.sim import ns3net

    try:
        if args.size < 1 or args.iters < 1 or args.seeds < 1 or not 0 <= args.loss < 1:
            raise ValueError("--size, --iters and --seeds must be >= 1, --loss in [0, 1)")
        scenarios(args)
        if args.cross_dir:
            output_dir(args.cross_dir, "--cross-dir")  # before the runs, not after them
    except ValueError as e:  # (UsageError too)
        print(f"ina sim fidelity: {e}", file=sys.stderr)
        return 2
    why = ns3net.unavailable()
    if why:
        print(f"ina sim fidelity: the ns-3 backend is unavailable: {why}", file=sys.stderr)
        return 2
    rows = compare(args)
    print_table(rows)
    return 0 if all(r["exact"] for r in rows) else 1
