"""Command-line options of the simulated network, shared by every simulated command
(`ina sim allreduce`, `ina sim validate`, `ina train --sim`, experiments).

`add_network_arguments(parser)` adds them; `network_spec(args, workers, lanes, pool)` turns
them into a `NetworkSpec`, raising ValueError with a one-line message for anything that
does not parse or is out of range (the commands print it and exit 2).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from ina import units
from ina.host.transport_core import WALL_MIN_RTO, WALL_RTO
from ina.sim import cluster as clusters
from ina.sim.backends import check
from ina.sim.engine import ENGINES
from ina.sim.network import BACKENDS, LinkSpec, NetworkSpec, SwitchSpec, link_spec, parse_link


def add_network_arguments(p: argparse.ArgumentParser, train: bool = False) -> None:
    """The network model: links both ways alike unless ``--up-*``/``--down-*`` say
    otherwise, the switch, the engine and the transport's timers. ``train``: for `ina
    train`, which has its own ``--link-rate`` and ``--delay`` (the link profile)."""
    g = p.add_argument_group("simulated network (with --sim)" if train else "simulated network")
    if not train:
        g.add_argument(
            "--link-rate", default="100G", help="link rate with its unit (100G, 25G, 10M)"
        )
        g.add_argument(
            "--delay",  # the name `ina train` has; --link-profile is the older one
            "--link-profile",
            dest="link_profile",
            metavar="PROFILE",
            default="none",
            help="extra delay per packet from an ina.netem profile (none, constant, low, "
            "high, trace:PATH; with parameters, e.g. high:episode_on_s=5)",
        )
    g.add_argument("--prop-delay", default="1us", help="one-way propagation delay per link")
    g.add_argument("--link-loss", type=float, default=0.0, help="loss probability per packet")
    g.add_argument("--buffer", default="none", help="queue size per link direction (e.g. 1MB)")
    g.add_argument(
        "--capacity",
        help="cross traffic on the worker links: episodes[:share=0.1:on_s=1:off_s=3"
        "[:fixed=1]] or trace:PATH (lines 'TIME_S SHARE')",
    )
    g.add_argument(
        "--cross",
        help="cross traffic as packets in the worker links' queues: episodes:rate=5G"
        "[:size=1500:on_s=1:off_s=3:fixed=1] or trace:PATH (lines 'TIME_S BYTES [LINK]', "
        "LINK the worker; `ina sim fidelity --cross-dir` writes ns-3's TCP as such traces)",
    )
    g.add_argument("--up-rate", help="uplink (worker to switch) rate, if not --link-rate")
    g.add_argument("--down-rate", help="downlink (switch to worker) rate, if not --link-rate")
    g.add_argument(
        "--switch-rate",
        default="none",
        help="how fast the switch pipeline takes packets, bit/s (none: line rate)",
    )
    g.add_argument("--switch-latency", default="1us", help="switch pipeline latency")
    g.add_argument("--engine", default="simpy", choices=sorted(ENGINES), help="event kernel")
    g.add_argument(
        # `ina train --backend` is ina or gloo; --backend stays an alias elsewhere
        *(["--sim-backend"] if train else ["--sim-backend", "--backend"]),
        dest="sim_backend",
        default="fast",
        choices=BACKENDS,
        help="fast: our engine and link models; ns3: ns-3's links, queues and TCP cross "
        "traffic, packet by packet (needs the ns3 extra; --engine does not apply)",
    )
    g.add_argument("--sim-seed", type=int, help="seed of the network's random streams")
    # The transport's timers follow the simulated path (`NetworkSpec.timers`: a few round
    # trips); with compute or codec times measured on this host, workers are late by its
    # scheduling jitter, so they are then the wall clock's (WorkerConfig's), sized for it.
    wall = f"{WALL_RTO * 1e3:g} ms and {WALL_MIN_RTO * 1e3:g} ms"
    g.add_argument(
        "--rto",
        help="initial retransmission timeout (default: 8 of the path's round trips with a "
        f"pool in flight; {wall} (--min-rto) with --compute or --codec measured, whose "
        "host jitter enters the simulated time)",
    )
    g.add_argument(
        "--min-rto",
        help="lower bound of the adaptive timeout (default: 5 of the path's round trips, at "
        "least 20 us; see --rto)",
    )
    g.add_argument(
        "--early-retransmit",
        action="store_true",
        help="resend a chunk once later chunks' results show it lost, and probe a call's "
        "last window (RACK, RFC 8985), before the timeout",
    )


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """``--system`` (a preset or a cluster file) and its size: shared by every command that
    runs on a cluster."""
    g = p.add_argument_group("cluster")
    g.add_argument(
        "--system",
        metavar="PRESET|FILE",
        help=f"the cluster: {', '.join(clusters.PRESET_NAMES)} or a cluster file (JSON; "
        "docs/cluster.md); hosts: --workers hosts of one GPU at --link-rate",
    )
    g.add_argument("--nodes", type=int, help="nodes of the system (default: 1)")
    g.add_argument("--gpus", type=int, help="GPUs in all (a multiple of the node's GPUs)")


def cluster_of(args: argparse.Namespace, workers: int, link_rate: str, gpu: str):
    """The cluster the options name (ValueError in one line); None without ``--system``."""
    if args.system is None:
        if args.nodes is not None or args.gpus is not None:
            raise ValueError("--nodes and --gpus size a --system")
        return None
    if args.system == "hosts":
        n = args.gpus or args.nodes or workers
        if args.nodes is not None and args.gpus is not None and args.nodes != args.gpus:
            raise ValueError("hosts have one GPU each: --nodes and --gpus must agree")
        return clusters.hosts(n, link_bps(link_rate), gpu)
    return clusters.load(args.system, args.nodes, args.gpus)


MIN_POOL = 64  # the pool `ina sim allreduce` and the wall clock use
UNLIMITED_BPS = 1e13  # --link-rate none: a rate no collective here comes near


def link_bps(text: str, option: str = "--link-rate") -> float:
    """Bits per second of a rate option; ``none``/``inf`` (no limit) as `UNLIMITED_BPS`."""
    return UNLIMITED_BPS if text in ("none", "inf") else units.rate(text, option)


def auto_pool(rate_bps: float, prop_s: float, switch_s: float, lanes: int) -> int:
    """Slots enough to cover the path's bandwidth-delay product, as SwitchML sizes its pool:
    a packet's round trip (two propagation delays, the switch's latency, a packet's
    serialization each way) at the link's rate, in packets, rounded up to a power of two and
    at least `MIN_POOL` (at 100 Gbit/s and 1 us links the product is about 40 packets of 256
    lanes: 64; a 400 Gbit/s rail needs 256), at most the switch's 1,024 slots."""
    from ina.protocol import FRAME_OVERHEAD, packet_bytes

    frame = packet_bytes(lanes) + FRAME_OVERHEAD
    rtt = 2 * prop_s + switch_s + 2 * frame * 8 / rate_bps
    need = rate_bps * rtt / 8 / frame
    pool = MIN_POOL
    while pool < need and pool < 1024:
        pool *= 2
    return pool


def network_spec(
    args: argparse.Namespace,
    workers: int,
    lanes: int,
    pool_size: int,
    seed: int = 0,
    rate: str | None = None,
    profile: str | None = None,
    timing_only: bool = False,
    topology=None,
) -> NetworkSpec:
    """The `NetworkSpec` the options describe (ValueError: a one-line reason); ``rate`` and
    ``profile`` replace ``--link-rate``/``--link-profile`` (`ina train`'s own options)."""
    rate = rate or args.link_rate
    profile = profile or args.link_profile
    if not 0 <= args.link_loss < 1:  # also NaN
        raise ValueError(f"--link-loss must be in [0, 1), got {args.link_loss}")

    def link(own_rate: str | None):
        return parse_link(
            rate=own_rate or rate,
            delay=args.prop_delay,
            profile=profile,
            loss=args.link_loss,
            buffer=args.buffer,
            capacity=args.capacity,
            cross=getattr(args, "cross", None),
        )

    switch_rate = None if args.switch_rate in ("none", "inf") else units.rate(args.switch_rate)
    # host jitter in simulated time: the wall clock's timers (unless named)
    measured = any(
        str(getattr(args, name, None) or "").startswith("measured") for name in ("compute", "codec")
    )
    rto = units.seconds(args.rto, "rto") if args.rto else (WALL_RTO if measured else None)
    min_rto = (
        units.seconds(args.min_rto, "min rto")
        if args.min_rto
        else (WALL_MIN_RTO if measured else None)
    )
    spec = NetworkSpec(
        workers=workers,
        up=link(args.up_rate),
        down=link(args.down_rate),
        switch=SwitchSpec(switch_rate, units.seconds(args.switch_latency, "switch latency")),
        lanes=lanes,
        pool_size=pool_size,
        seed=seed if args.sim_seed is None else args.sim_seed,
        engine=args.engine,
        backend=getattr(args, "sim_backend", "fast"),
        rto_s=rto,
        min_rto_s=min_rto,
        early_retransmit=getattr(args, "early_retransmit", False),
        timing_only=timing_only,
        topology=topology,
    )
    check(spec)  # what the backend cannot model, before anything runs
    return spec


def describe(spec: NetworkSpec) -> str:
    """One line naming the model and its parameters (every result says what made it)."""

    def rate(r: float | None) -> str:
        return "unlimited" if r is None else units.format_rate(r)

    up, down, sw = spec.up, spec.down, spec.switch
    extra = [
        f"profile {up.profile}" if up.profile != "none" else "",
        f"loss {up.loss:g}" if up.loss else "",
        f"buffer {up.buffer_bytes:g} B" if up.buffer_bytes else "",
        f"capacity {up.capacity}" if up.capacity else "",
        f"cross traffic {up.cross}" if up.cross else "",
        f"downlink cross traffic {down.cross}" if down.cross and down.cross != up.cross else "",
    ]
    tree = "" if spec.topology is None else f"topology {spec.topology.name}, "
    links = (
        f"{rate(up.rate_bps)} each way"
        if up.rate_bps == down.rate_bps
        else f"{rate(up.rate_bps)} up, {rate(down.rate_bps)} down"
    )
    return (
        tree + f"{spec.workers} workers, links {links}, "
        f"{up.prop_delay_s * 1e6:g} us propagation"
        + "".join(f", {e}" for e in extra if e)
        + f"; switch {'at line rate' if sw.rate_bps is None else 'at ' + rate(sw.rate_bps)}, "
        f"{sw.latency_s * 1e6:g} us latency; "
        f"{spec.lanes} lanes, pool {spec.pool_size}; "
        + ("ns-3 backend" if spec.backend == "ns3" else f"engine {spec.engine}")
        + f", seed {spec.seed}"
    )


# Per-link conditions (`--link`, `--rack`): KEY=VALUE items for a topology's links, each
# into the field of `ina.topology.Link` that a topology file's link object sets.
LINK_KEYS = ("rate", "delay", "loss", "profile", "capacity", "cross", "buffer")


def _conditions(text: str, option: str) -> tuple[str, dict]:
    """``NODE:KEY=VALUE[,KEY=VALUE...]`` -> (NODE, changes to a topology `Link`)."""
    node, _, rest = text.partition(":")
    if not node or not rest:
        raise ValueError(f"{option} {text!r}: use NODE:KEY=VALUE[,KEY=VALUE...]")
    changes: dict = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or key not in LINK_KEYS:
            raise ValueError(
                f"{option} {text!r}: {item!r} is not KEY=VALUE with KEY one of {', '.join(LINK_KEYS)}"
            )
        if key == "rate":
            changes["bw"] = units.rate(value, f"{option} rate") / 1e6
        elif key == "loss":
            try:
                changes["loss"] = float(value)
            except ValueError:
                raise ValueError(f"{option} {text!r}: loss {value!r} is not a number") from None
        else:
            changes[key] = value
    return node, changes


def with_link_conditions(fabric, links: list[str] = (), racks: list[str] = ()):
    """``fabric`` with ``--link NODE:...`` applied to the link above NODE (a worker host, or
    a switch below the top: its uplink) and ``--rack SWITCH:...`` to every link below
    SWITCH; ValueError (one line) for a node that is not there or a condition that does
    not parse. Later items win over earlier ones, --link over --rack."""
    new = list(fabric.links)
    targets = []
    for text in racks:
        switch, changes = _conditions(text, "--rack")
        if switch not in fabric.switches:
            raise ValueError(
                f"--rack {text!r}: topology {fabric.name} has no switch {switch!r} "
                f"(switches: {', '.join(list(fabric.switches)[:6])}...)"
            )
        below = [h for h in fabric.workers if _under(fabric, h, switch)]
        below += [s for s in fabric.switches if s != switch and _under(fabric, s, switch)]
        targets += [(node, changes) for node in below]
    for text in links:
        node, changes = _conditions(text, "--link")
        fabric.uplink(node)  # TopologyError (one line) for a link that is not there
        targets.append((node, changes))
    named = fabric.uplinks()
    for node, changes in targets:
        i = named[node]
        new[i] = replace(new[i], **changes)
        try:
            link_spec(LinkSpec(), new[i])  # every value checked now, with its link's name
        except ValueError as e:
            raise ValueError(f"link {node}: {e}") from None
    return replace(fabric, links=new)


def _under(fabric, node: str, switch: str) -> bool:
    """Whether ``node`` (a host or switch) is in the subtree of ``switch``."""
    up = fabric.host_switch[node][0] if node in fabric.hosts else fabric.switches[node].parent
    while up is not None:
        if up == switch:
            return True
        up = fabric.switches[up].parent
    return False
