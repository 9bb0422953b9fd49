"""Collectives as NCCL runs them on a `ina.sim.cluster.Cluster`, with INA beside them.

A collective's time is a latency plus its bytes over an achievable bandwidth, per algorithm
and protocol, the way NCCL's own tuning model predicts it (and picks the fastest pair):

    time = latency(algorithm, protocol) + bytes / algbw(algorithm, protocol)

**Latency** is NCCL's: a base per algorithm and protocol plus a per-hop figure for the link
type (NVLink, PCIe, network) times the hops the algorithm takes; the constants are the ones
NCCL's tuning model states (`LATENCY_US`, from `src/graph/tuning.cc` of NCCL 2.8; facts,
in microseconds). A ring all-reduce takes 2(n-1) hops, 2(m-1) of them between the m nodes;
a tree 2((G-1) + log2 m); an in-network reduction 2(G-1) inside the node and one through
the switch.

**Bandwidth** comes from the links, not from a table of measured figures: the bus bandwidth
of a ring or tree is the slowest of the per-GPU link inside the node and the node's NICs
(all of them: a node's rings leave it through every NIC at once), each times the share of
its rate that NCCL reaches on it (`EFFICIENCY`, each from one named measurement), and the
NICs' share divided by the fabric's oversubscription when the job spans more than one leaf.
A protocol takes its share of that (NCCL's factors: LL a quarter, LL128 0.92, the tree 0.9).
The algorithm bandwidth a user sees is the bus bandwidth over the bytes each GPU moves per
byte of data: 2(n-1)/n for a ring all-reduce, (n-1)/n for a reduce-scatter or all-gather, 2
for a tree (every byte goes up and comes down).

**Hierarchical** algorithms reduce-scatter inside the node (NVLink; NVLS where the switch
reduces), run an inter-node stage on each rail's 1/G shard, and all-gather inside the node:

- ``hierarchical``: a ring per rail across the nodes (Horovod's hierarchical all-reduce);
- ``sharp``: the rail's switch reduces (NCCL's CollNet with SHARP): each byte crosses the
  NIC once each way, at the training precision;
- ``ina``: ina's switch reduces: as ``sharp``, but in int32 lanes whatever the precision
  (16-bit gradients double) and in ina's packets (header per `lanes` lanes). The step model
  runs this stage through the real transport and switch pipeline instead of this formula.

With one GPU per node the hierarchical algorithms are their inter-node stage alone.
`ina sim collectives` prints these as `nccl-tests` prints its measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ina.protocol import FRAME_OVERHEAD, packet_bytes
from ina.sim.cluster import Cluster

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
NCCL_ALGORITHMS = ("ring", "tree", "nvls")  # what NCCL picks among for an all-reduce
ALGORITHMS = (*NCCL_ALGORITHMS, "hierarchical", "sharp", "ina")
PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL's tuning model, in microseconds (NCCL 2.8, src/graph/tuning.cc): a base latency per
# algorithm and protocol, and a latency per hop per link type. "collnet" is NCCL's name for
# in-network reduction (SHARP); ina's switch is taken to cost what a SHARP hop does.
BASE_US = {
    "tree": (4.4, 4.4, 0.0),
    "ring": (3.6, 10.0, 8.4),
    "collnet": (4.4, 4.4, 0.0),
}
HOP_US = {
    "nvlink": {"tree": (0.52, 1.2, 28), "ring": (0.47, 1.9, 3.4), "collnet": (0.5, 1.2, 4.0)},
    "pcie": {"tree": (1.0, 1.9, 28), "ring": (1.0, 2.5, 5.7), "collnet": (1.0, 1.9, 5.5)},
    "net": {"tree": (5.0, 8.5, 50), "ring": (2.7, 4.0, 9.6), "collnet": (5.0, 5.0, 10.7)},
}
# NCCL's bandwidth factors per protocol (same file): LL sends 8-byte words of 4 data bytes
# and 4 flag bytes and is kept for small sizes; LL128 sends 120 of each 128 bytes.
PROTOCOL_SHARE = {
    "ring": {"LL": 1 / 4, "LL128": 0.92, "Simple": 1.0},
    "tree": {"LL": 0.9 / 3.8, "LL128": 0.9 * 0.915, "Simple": 0.9},
    "collnet": {"LL": 0.9 / 6, "LL128": 0.0, "Simple": 0.9},
}
# A simple-protocol ring across nodes slows at large sizes (NCCL's "plateau" factor).
RING_PLATEAU = 1.9

# The share of a link's data-sheet rate a collective reaches on it, each from one named
# measurement (docs/cluster.md lists them; none is a row of `ina sim published`).
EFFICIENCY = {
    # NVIDIA/nccl-tests issue 149, an NCCL maintainer: 8 A100s on NVSwitch reach ~230 GB/s
    # of all_reduce busbw, of NVLink 3's 300 GB/s per direction
    "nvswitch": 230 / 300,
    "nvlink-mesh": 230 / 300,  # the same NVLink figure (no separate calibration)
    "pcie": 230 / 300,  # the same share of the bus as NVLink (no separate calibration)
    # NVIDIA/nccl-tests issue 290, an NCCL maintainer: 'For NDR @ 400Gbps you should see
    # 46-48GB/s per NIC' of 50 GB/s: the middle, 47
    "rdma": 47 / 50,
    # NVIDIA/nccl-tests issue 212, an NCCL maintainer: 8 H100s with NVLS reach a busbw of
    # ~480 GB/s, algbw ~275 GB/s, of NVLink 4's 450 GB/s per direction
    "nvls": 275 / 450,
}


@dataclass(frozen=True)
class Estimate:
    """One collective's predicted time, with nccl-tests' two bandwidths (bytes/s)."""

    collective: str
    algorithm: str
    protocol: str
    nbytes: int
    seconds: float
    ranks: int

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else math.inf

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.collective, self.ranks)


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth: the bytes a rank moves per byte."""
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) / ranks if collective == "all_reduce" else (ranks - 1) / ranks


def _intra_hw(c: Cluster) -> str:
    return "pcie" if c.intra == "pcie" else "nvlink"


def intra_busbw(c: Cluster) -> float:
    """Bytes/s a ring reaches per GPU inside a node (inf with one GPU: no intra hop)."""
    if c.gpus_per_node == 1:
        return math.inf
    return c.intra_bw * EFFICIENCY[c.intra]


def net_share(c: Cluster) -> float:
    return EFFICIENCY["rdma"] if c.transport == "rdma" else c.tcp_share


def node_busbw(c: Cluster) -> float:
    """Bytes/s a node's NICs carry for a ring or tree leaving it (inf on one node)."""
    if c.nodes == 1:
        return math.inf
    bw = c.node_net_bw * net_share(c)
    return bw / c.oversubscription if c.spans_spine else bw


def rail_bw(c: Cluster) -> float:
    """Bytes/s of one rail (one GPU's share of its node's NICs), at the transport's share."""
    return c.node_net_bw / c.gpus_per_node * net_share(c)


def _latency(c: Cluster, kind: str, proto: int, collective: str, nbytes: int) -> float:
    """NCCL's latency model in seconds for a flat ``kind`` (ring, tree, collnet)."""
    intra = HOP_US[_intra_hw(c)][kind][proto]
    inter = HOP_US["net"][kind][proto]
    if c.nodes > 1 and proto == 0:
        intra *= 1.8  # LL's intra hops across nodes (NCCL's factor)
    n, m, g = c.gpus, c.nodes, c.gpus_per_node
    base = BASE_US[kind][proto]
    if kind == "ring":
        steps = 2 * (n - 1) if collective == "all_reduce" else n - 1
        inter_steps = 2 * (m - 1) if collective == "all_reduce" else m - 1
        lat = base + (steps - inter_steps) * intra + inter_steps * inter
        if proto == 2 and m > 1 and collective == "all_reduce" and nbytes >= n / 16 * 65536:
            lat *= RING_PLATEAU
    elif kind == "tree":
        lat = base + 2 * ((g - 1) * intra + (math.log2(m) if m > 1 else 0) * inter)
    else:  # collnet: up the node's chain, through the switch, back down
        lat = base + 2 * (g - 1) * intra + (inter if m > 1 else 0)
    return lat * 1e-6


def _flat(c: Cluster, kind: str, collective: str, nbytes: int, proto: int) -> float | None:
    """Seconds of a flat ring or tree (None where NCCL has no such pair)."""
    share = PROTOCOL_SHARE[kind][PROTOCOLS[proto]]
    if share == 0:
        return None
    bus = min(intra_busbw(c), node_busbw(c)) * share
    if kind == "ring":
        if proto == 0 and c.nodes == 1 and collective != "all_reduce":
            bus *= 4 / 3  # NCCL: LL inside one node, other than all-reduce, a third
        algbw = bus / bus_factor(collective, c.gpus)
    else:
        algbw = bus / 2  # the tree: every byte up, then down
    return _latency(c, kind, proto, collective, nbytes) + nbytes / algbw


def _nvls_allreduce(c: Cluster, nbytes: int) -> float:
    """An all-reduce inside one node by NVSwitch (each GPU sends and receives its bytes once)."""
    return _latency(c, "collnet", 2, "all_reduce", nbytes) + nbytes / (
        c.intra_bw * EFFICIENCY["nvls"]
    )


def intra_stage(c: Cluster, nbytes: int) -> tuple[float, float]:
    """(latency, seconds of bandwidth) of the two ends of a hierarchical all-reduce inside the
    node: a reduce-scatter and an all-gather of ``nbytes`` by NVLS where the node has it,
    else by rings (at the Simple protocol: a hierarchical stage moves large chunks)."""
    g = c.gpus_per_node
    if g == 1:
        return 0.0, 0.0
    if c.nvls:
        lat = _latency(replace(c, nodes=1), "collnet", 2, "all_reduce", nbytes)
        return lat, nbytes / (c.intra_bw * EFFICIENCY["nvls"])
    hop = HOP_US[_intra_hw(c)]["ring"][2] * 1e-6
    return 2 * (BASE_US["ring"][2] * 1e-6 + (g - 1) * hop), 2 * (g - 1) / g * nbytes / intra_busbw(
        c
    )


def _pipelined(c: Cluster, nbytes: int, inter_lat: float, inter_s: float) -> float:
    """A hierarchical all-reduce whose stages run at once on successive chunks (as NCCL's
    CollNet and NVLS-tree pipelines do): the latencies add, the slowest stage sets the pace."""
    lat, intra_s = intra_stage(c, nbytes)
    return lat + inter_lat + max(intra_s, inter_s)


def ina_wire_bytes(shard_bytes: float, elem_bytes: int, lanes: int) -> float:
    """Bytes on the wire for ``shard_bytes`` of gradients in ina's packets: int32 lanes
    (16-bit values double) plus each packet's headers and framing."""
    values = shard_bytes / elem_bytes
    return values / lanes * (packet_bytes(lanes) + FRAME_OVERHEAD)


def _in_network(
    c: Cluster, nbytes: int, algorithm: str, elem_bytes: int, lanes: int,
    collective: str = "all_reduce",
) -> float:  # fmt: skip
    """A hierarchical collective whose inter-node stage the rails' switches do. All-reduce:
    each byte of a rail's shard crosses its NIC once each way. Reduce-scatter: the switch
    sends each slot's sum to its owner only, but every rank still sends its whole shard up,
    so the uplink bounds it as a ring's would (no gain in bytes, only hops). All-gather: the
    switch multicasts each rank's part, but every rank still takes in the others' parts, as
    in a ring. Inside the node reduce-scatter and all-gather are a ring's."""
    shard = nbytes / c.gpus_per_node
    wire = ina_wire_bytes(shard, elem_bytes, lanes) if algorithm == "ina" else shard
    lat, intra_s = intra_stage(c, nbytes)
    if collective != "all_reduce":  # the node's half: a ring's (NVLS adds nothing to it)
        g = c.gpus_per_node
        hop = HOP_US[_intra_hw(c)]["ring"][2] * 1e-6
        lat = BASE_US["ring"][2] * 1e-6 + (g - 1) * hop if g > 1 else 0.0
        intra_s = (g - 1) / g * nbytes / intra_busbw(c) if g > 1 else 0.0
        if collective == "all_gather":  # what comes down: every other node's part
            wire *= (c.nodes - 1) / c.nodes
    inter_lat = HOP_US["net"]["collnet"][2] * 1e-6 if c.nodes > 1 else 0.0
    inter_s = wire / rail_bw(c) if c.nodes > 1 else 0.0
    return lat + inter_lat + max(intra_s, inter_s)


def _hierarchical(c: Cluster, nbytes: int) -> float:
    """Reduce-scatter in the node, a ring per rail across nodes, all-gather in the node."""
    if c.nodes == 1:
        return _pipelined(c, nbytes, 0.0, 0.0)
    rail = replace(
        c, gpus_per_node=1, intra="none", intra_bw=0.0, nvls=False, nics_per_node=1,
        nic_bw=c.node_net_bw / c.gpus_per_node,
    )  # fmt: skip
    shard = nbytes // c.gpus_per_node
    proto = 2  # Simple: the stage moves a node's large chunks
    lat = _latency(rail, "ring", proto, "all_reduce", shard)
    inter_s = shard * bus_factor("all_reduce", c.nodes) / node_busbw(rail)
    return _pipelined(c, nbytes, lat, inter_s)


def _all_to_all(c: Cluster, nbytes: int) -> float:
    """Every rank sends 1/n of its ``nbytes`` to each other rank, at once: the part bound for
    the node's other GPUs over NVLink, the part bound for other nodes through the node's NICs
    (all G GPUs' at once); one hop's latency, the slower part's bandwidth."""
    n, g, m = c.gpus, c.gpus_per_node, c.nodes
    hw = "net" if m > 1 else _intra_hw(c)
    lat = (BASE_US["ring"][2] + HOP_US[hw]["ring"][2]) * 1e-6
    intra_s = nbytes * (g - 1) / n / intra_busbw(c) if g > 1 else 0.0
    inter_s = g * nbytes * (n - g) / n / node_busbw(c) if m > 1 else 0.0
    return lat + max(intra_s, inter_s)


def available(c: Cluster, collective: str) -> tuple[str, ...]:
    """The algorithms that run ``collective`` on ``c``."""
    if collective == "all_to_all":
        return ("p2p",)  # every rank to every other at once: nothing for a switch to add
    if collective == "reduce_scatter":
        return ("ring", "sharp", "ina")
    if collective == "all_gather":
        return ("ring", "ina")  # the switch multicasts; SHARP reduces, it does not gather
    out = ["ring", "tree"]
    if c.nvls and c.nodes == 1:
        out.append("nvls")
    out += ["hierarchical", "sharp", "ina"]
    return tuple(out)


def estimate(
    c: Cluster,
    collective: str,
    algorithm: str,
    nbytes: int,
    elem_bytes: int = 4,
    lanes: int = 256,
) -> Estimate:
    """The time of one ``collective`` of ``nbytes`` per rank (an all-gather's output) by
    ``algorithm`` at its fastest protocol, as NCCL picks it."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if algorithm not in available(c, collective):
        raise ValueError(
            f"{algorithm} does not run {collective} on {c.name} ({c.nodes} nodes); "
            f"available: {', '.join(available(c, collective))}"
        )
    if c.gpus < 2 or nbytes <= 0:
        return Estimate(collective, algorithm, "-", nbytes, 0.0, c.gpus)
    if algorithm == "p2p":
        t, proto = _all_to_all(c, nbytes), "Simple"
    elif algorithm in ("ring", "tree"):
        times = [(t, PROTOCOLS[p]) for p in range(3)
                 if (t := _flat(c, algorithm, collective, nbytes, p)) is not None]  # fmt: skip
        t, proto = min(times)
    elif algorithm == "nvls":
        t, proto = _nvls_allreduce(c, nbytes), "Simple"
    elif algorithm == "hierarchical":
        t, proto = _hierarchical(c, nbytes), "Simple"
    else:
        t, proto = _in_network(c, nbytes, algorithm, elem_bytes, lanes, collective), "Simple"
    return Estimate(collective, algorithm, proto, nbytes, t, c.gpus)


def nccl_best(c: Cluster, collective: str, nbytes: int) -> Estimate:
    """What NCCL runs: the fastest of its own algorithms (no INA, no SHARP)."""
    if collective == "all_to_all":
        return estimate(c, collective, "p2p", nbytes)
    return min(
        (estimate(c, collective, a, nbytes) for a in available(c, collective)
         if a in NCCL_ALGORITHMS),
        key=lambda e: e.seconds,
    )  # fmt: skip
