"""A simulated INA network from a description: N workers, one switch or a tree of switches.

Several jobs (``jobs``, ATP's setting) share the switch: each has its own N workers, job id,
pool of slots and multicast group, installed as the control plane installs jobs, and the
pools together must fit the switch's slot memory (``switch_slots``). ``placement`` says
where their workers sit: ``separate`` (every worker its own host and link) or ``shared``
(worker w of every job on host w, so a host's link carries every job's traffic both ways).

`NetworkSpec` says what the network is (rates, delays, buffers, loss, cross traffic, the
switch's rate and latency, the job's pool and lanes) in SI units; `build` wires the engine,
the switch model's pipeline with the job installed exactly as the control plane installs it
on a real switch, each worker's transport core and its up and down links; `SimNetwork.run`
runs one program per worker to completion in simulated time.

With a topology (`ina.topology.Fabric`, from a topology file) the switches form a tree: each
worker hangs off its leaf switch, each switch below the top is one contributor of its
parent's job (hierarchical aggregation, docs/protocol.md), one pipeline per switch, links
as the file says (its ``bw`` and ``delay``, else the spec's up and down links).

Seeds: every random stream (each link's loss and delay draws, each worker's JOIN nonce) is
spawned from ``NetworkSpec.seed``, so the same spec runs the same way every time.
Capacity episodes (cross traffic) are drawn from their own seed, shared by every link that
has them: one bottleneck that all of the job's traffic crosses (the switch's ports).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from ina import units
from ina.host.allreduce import CompressionConfig, Worker
from ina.host.transport_core import TransportCore, TransportStats, WorkerConfig
from ina.netem import (
    PROFILES,
    CapacityEpisodes,
    CapacityModel,
    CapacityTrace,
    CrossEpisodes,
    CrossTrace,
    CrossTraffic,
    LinkEmulator,
    OffsetDelay,
    check_profile,
    make_link,
    parse_profile,
)
from ina.p4.entities import MAX_JOBS, POOL_SLOTS
from ina.protocol import (
    FRAME_OVERHEAD,
    HEADER_DTYPE,
    MAX_JOB_WORKERS,
    MAX_LANES,
    MAX_WORKERS,
    packet_bytes,
)
from ina.sim.classes import Classes
from ina.sim.classes import find as find_classes
from ina.sim.engine import Engine, make_engine
from ina.sim.nodes import Link, OrderedLink, Program, SwitchNode, WorkerNode
from ina.switch_model.pipeline import PARENT, Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import local_job
from ina.topology import Fabric
from ina.topology import Link as TopoLink

JOB_ID = 1  # the first job's id; job k (from 0) is JOB_ID + k
PLACEMENTS = ("separate", "shared")
MAX_TIMING_WORKERS = 1 << 16  # timing only: workers are a multiplier, not bitmap bits
BACKENDS = ("fast", "ns3")
# The transport's timers in simulated time (issue 30), unless a spec names them. The wall
# clock's (`WALL_RTO`, `WALL_MIN_RTO`: tens of milliseconds) ride out a busy host's
# scheduling jitter; a modelled clock has none, so here they follow the path: a chunk's round
# trip with a whole pool in flight (`NetworkSpec.round_trip`), a few times over, and never
# under an absolute floor (the timer of a switch-local fabric of microseconds). The window
# takes queueing above a quarter of min_rto for congestion (`TransportCore._adapt_window`):
# 5 round trips let a pool queue at the path's bottleneck (about one) and more without a cut
# (with 3, 8 workers at 10 Gbit/s cut their windows below the pool).
MIN_RTO_ROUND_TRIPS = 5.0  # min_rto, in round trips (the estimator also keeps 2 x srtt)
INITIAL_RTO_ROUND_TRIPS = 8.0  # the timeout before any sample (the join's, the first window's)
MIN_RTO_FLOOR_S = 20e-6
DETERMINISTIC = ("none", "constant")  # the delay profiles that draw no random numbers


@dataclass(frozen=True)
class LinkSpec:
    """One direction of every worker's link to the switch.

    ``profile`` is an `ina.netem` delay profile (``none``, ``constant``, ``low``, ``high``,
    ``trace:PATH``, with parameters) added to the propagation delay; ``capacity`` is cross
    traffic: ``episodes:share=0.1:on_s=1:off_s=3[:fixed=1][:seed=N]`` or
    ``trace:PATH`` (see `capacity_model`): a share of the rate taken away; ``cross`` is cross
    traffic as packets in the link's FIFO: ``episodes:rate=R:size=B:on_s=A:off_s=B[:fixed=1]
    [:seed=N]`` or ``trace:PATH`` (lines ``TIME_S BYTES [LINK]``, see `cross_model`).
    """

    rate_bps: float | None = 100e9
    prop_delay_s: float = 1e-6
    profile: str = "none"
    loss: float = 0.0
    buffer_bytes: float | None = None
    capacity: str | None = None
    cross: str | None = None

    def __post_init__(self) -> None:
        if self.rate_bps is not None and not self.rate_bps > 0:
            raise ValueError(f"link rate must be > 0, got {self.rate_bps}")
        if not self.prop_delay_s >= 0:
            raise ValueError(f"propagation delay must be >= 0, got {self.prop_delay_s}")
        if self.rate_bps is None and self.prop_delay_s == 0:
            # a packet would cross the link in no time: the engine's lookahead is zero and
            # the simulation cannot advance
            raise ValueError("a link without a rate limit needs a propagation delay > 0")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss must be in [0, 1), got {self.loss}")
        if self.buffer_bytes is not None and not self.buffer_bytes > 0:
            raise ValueError(f"buffer must be > 0 bytes, got {self.buffer_bytes}")
        check_profile(self.profile)  # a profile that cannot be made is an error now
        if self.capacity is not None:
            capacity_model(self.capacity, seed=0)
        if self.cross is not None:
            if self.rate_bps is None:
                raise ValueError("cross traffic needs a link rate")
            cross_model(self.cross, seed=0)


@dataclass(frozen=True)
class SwitchSpec:
    """The switch: how fast its pipeline takes packets (None: at line rate, the ports are
    the limit) and its latency."""

    rate_bps: float | None = None
    latency_s: float = 1e-6

    def __post_init__(self) -> None:
        if self.rate_bps is not None and not self.rate_bps > 0:
            raise ValueError(f"switch rate must be > 0, got {self.rate_bps}")
        if not self.latency_s >= 0:
            raise ValueError(f"switch latency must be >= 0, got {self.latency_s}")


@dataclass(frozen=True)
class NetworkSpec:
    """Everything that determines a simulated network (and, with the programs, a run)."""

    workers: int = 8
    up: LinkSpec = field(default_factory=LinkSpec)
    down: LinkSpec = field(default_factory=LinkSpec)
    switch: SwitchSpec = field(default_factory=SwitchSpec)
    lanes: int = 256
    pool_size: int = 64
    seed: int = 0
    engine: str = "simpy"
    # "fast": our engine and link models; "ns3": ns-3's links, queues and TCP cross traffic
    # (packet-level fidelity, `ina.sim.ns3net`), the same workers and switch
    backend: str = "fast"
    # the transport's timers (WorkerConfig), in simulated seconds; None: from the path
    # (`NetworkSpec.timers`; `ina sim` gives WALL_RTO/WALL_MIN_RTO where host jitter enters
    # the simulated time: compute or codec times measured on this host)
    rto_s: float | None = None
    min_rto_s: float | None = None
    max_rto_s: float = 1.0
    early_retransmit: bool = False  # RACK and tail loss probes (WorkerConfig)
    timeout_s: float = 10.0
    # Timing only: one representative worker stands for all ``workers`` (see `build`); needs
    # every worker's links alike and deterministic, allows any number of workers.
    timing_only: bool = False
    # A tree of switches (hierarchical aggregation) instead of one switch; ``workers`` must
    # be its worker count.
    topology: Fabric | None = None
    # Several jobs on the switch, alike (each ``workers`` workers, a pool of ``pool_size``):
    # their pools share ``switch_slots``; ``placement`` puts their workers on hosts.
    jobs: int = 1
    placement: str = "separate"
    switch_slots: int = POOL_SLOTS

    def __post_init__(self) -> None:
        # one switch's bitmap, unless the job spreads over a tree's leaves (or timing only,
        # where the workers are a multiplier)
        most, why = MAX_WORKERS, ""
        if self.timing_only:
            most, why = MAX_TIMING_WORKERS, " (timing only)"
        elif self.topology is not None:
            most, why = MAX_JOB_WORKERS, " (on a tree)"
        if not 1 <= self.workers <= most:
            raise ValueError(f"workers must be 1..{most} per job{why}, got {self.workers}")
        if self.timing_only and self.topology is None:
            # (on a tree, a link with a random stream of its own is a class of its own)
            for link in (self.up, self.down):
                name, _ = parse_profile(link.profile)
                if link.loss or name not in DETERMINISTIC:
                    raise ValueError(
                        "timing only needs deterministic links (no loss, delay profile none or "
                        "constant): one worker stands for all, so all must see the same"
                    )
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        if self.topology is not None:
            if self.jobs != 1:
                raise ValueError("a topology runs one job (its file's); --jobs needs one switch")
            if self.workers != len(self.topology.workers):
                raise ValueError(
                    f"topology {self.topology.name} has {len(self.topology.workers)} workers, "
                    f"not {self.workers}"
                )
        if not 1 <= self.lanes <= MAX_LANES:
            raise ValueError(f"lanes must be 1..{MAX_LANES}, got {self.lanes}")
        if self.pool_size < 1 or self.pool_size & (self.pool_size - 1):
            raise ValueError(f"pool size must be a power of two, got {self.pool_size}")
        if not 1 <= self.jobs <= MAX_JOBS:
            raise ValueError(
                f"jobs must be 1..{MAX_JOBS} (the switch's job table), got {self.jobs}"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if self.jobs * self.pool_size > self.switch_slots:
            raise ValueError(
                f"{self.jobs} jobs x a pool of {self.pool_size} slots need "
                f"{self.jobs * self.pool_size}; the switch has {self.switch_slots}"
            )
        self.worker_config(0)  # the transport's own checks (timers)

    def round_trip(self, fabric: Fabric | None = None, worker: int = 0) -> float:
        """A chunk's round trip, in seconds, on the path of worker ``worker`` (of a
        ``fabric``'s, else any: on one switch all paths are alike) with a whole pool in
        flight: each link's typical delay (`typical_delay`) and one frame's serialization
        both ways, each switch's latency, and a pool's serialization on the path's slowest
        hop (a link carries a pool per window, a switch's pipeline a pool per contributor)."""
        frame = packet_bytes(self.lanes) + FRAME_OVERHEAD
        sw = self.switch

        def serialize(rate: float | None, packets: float = 1.0) -> float:
            return 0.0 if rate is None else packets * frame * 8 / rate

        if fabric is None:  # one switch: every worker's link, both ways, and the switch
            hops = [(self.up, self.down)]
            shared = self.jobs if self.placement == "shared" else 1  # a host's link
            pool = [serialize(link.rate_bps, shared) for link in (self.up, self.down)]
            switches = [self.workers * self.jobs]
        else:
            host = fabric.workers[worker]
            # (on the whole tree: a timing-only build passes its representative path, whose
            # switches have one contributor each)
            fabric = self.topology or fabric
            wired = {lower: (up, down) for lower, _, up, down in tree_links(self, fabric)}
            hops, switches = [], []
            node, above = host, fabric.host_switch[host][0]
            while above is not None:  # up to the top switch
                hops.append(wired[node])
                switches.append(len(fabric.contributors(above)))
                node, above = above, fabric.switches[above].parent
            pool = [serialize(link.rate_bps) for hop in hops for link in hop]
        base = sum(
            typical_delay(link.profile) + link.prop_delay_s + serialize(link.rate_bps)
            for hop in hops
            for link in hop
        ) + len(switches) * (sw.latency_s + serialize(sw.rate_bps))
        slowest = max(pool + [serialize(sw.rate_bps, n) for n in switches])
        return base + self.pool_size * slowest

    def timers(self, fabric: Fabric | None = None, worker: int = 0) -> tuple[float, float]:
        """(rto, min_rto) of worker ``worker``: the spec's, else from its path's round trip
        (`MIN_RTO_ROUND_TRIPS`, `INITIAL_RTO_ROUND_TRIPS`, `MIN_RTO_FLOOR_S`)."""
        if self.rto_s is not None and self.min_rto_s is not None:
            return self.rto_s, self.min_rto_s
        rtt = self.round_trip(fabric, worker)
        min_rto = max(MIN_RTO_ROUND_TRIPS * rtt, MIN_RTO_FLOOR_S)
        if self.min_rto_s is not None:
            min_rto = self.min_rto_s
        rto = max(INITIAL_RTO_ROUND_TRIPS * rtt, min_rto) if self.rto_s is None else self.rto_s
        return rto, min_rto

    def worker_config(
        self, worker_id: int, job: int = 0, fabric: Fabric | None = None, worker: int = 0
    ) -> WorkerConfig:
        """Worker ``worker_id`` of job ``job`` (counted from 0); on a ``fabric``, its
        worker ``worker`` (whose path sets the timers, unless the spec names them)."""
        rto, min_rto = self.timers(fabric, worker)
        return WorkerConfig(
            job_id=JOB_ID + job,
            worker_id=worker_id,
            num_workers=min(self.workers, MAX_WORKERS),
            switch=("sim", 0),
            bind=("sim", worker_id),
            pool_size=self.pool_size,
            lanes=self.lanes,
            rto=rto,
            min_rto=min_rto,
            # a path slower than max_rto's round trip (kbit/s links, a full pool of big
            # packets) raises the ceiling rather than the timeouts failing their check
            max_rto=max(self.max_rto_s, rto, min_rto),
            early_retransmit=self.early_retransmit,
            tail_probe=self.early_retransmit,
            timeout=self.timeout_s,
        )

    def with_links(self, **changes) -> NetworkSpec:
        """The same spec with both directions' links changed alike."""
        return replace(self, up=replace(self.up, **changes), down=replace(self.down, **changes))


def _params(text: str, rest: str, known: set[str], what: str) -> dict[str, float]:
    """``NAME=NUMBER`` items of ``rest`` (``:``-separated); numbers may carry SI units."""
    params: dict[str, float] = {}
    for item in (i for i in rest.split(":") if i):
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            params[key] = float(units.rate(value)) if key == "rate" else float(value)
        except ValueError:
            raise ValueError(f"bad {what} parameter {item!r} in {text!r}: NAME=NUMBER") from None
    unknown = set(params) - known
    if unknown:
        raise ValueError(f"{what} {text!r}: unknown parameters {sorted(unknown)}")
    return params


def capacity_model(text: str, seed: int) -> CapacityModel:
    """``episodes[:share=S][:on_s=A][:off_s=B][:fixed=1][:seed=N]`` or ``trace:PATH``."""
    name, _, rest = text.partition(":")
    if name == "trace":
        if not rest:
            raise ValueError("capacity 'trace' needs a file: trace:PATH")
        return CapacityTrace(rest)
    if name != "episodes":
        raise ValueError(f"unknown capacity model {text!r}: use episodes:... or trace:PATH")
    params = _params(text, rest, {"share", "on_s", "off_s", "fixed", "seed"}, "capacity")
    return CapacityEpisodes(
        share=params.get("share", 0.1),
        on_s=params.get("on_s", 1.0),
        off_s=params.get("off_s", 3.0),
        seed=int(params.get("seed", seed)),
        fixed=bool(params.get("fixed", 0)),
    )


def cross_model(text: str, seed: int, link: int | None = None) -> CrossTraffic:
    """Cross traffic as packets in a link's FIFO (`ina.netem.CrossTraffic`):
    ``episodes:rate=R[:size=B][:on_s=A][:off_s=B][:fixed=1][:seed=N]`` (R bit/s, e.g. 5G, in
    B-byte packets, default 1500, while the episodes are on; the schedule of the same
    parameters as ``capacity``) or ``trace:PATH`` (lines ``TIME_S BYTES [LINK]``: this is
    link ``link``, the worker's index)."""
    name, _, rest = text.partition(":")
    if name == "trace":
        if not rest:
            raise ValueError("cross traffic 'trace' needs a file: trace:PATH")
        return CrossTrace(rest, link)
    if name != "episodes":
        raise ValueError(f"unknown cross traffic {text!r}: use episodes:rate=R:... or trace:PATH")
    known = {"rate", "size", "on_s", "off_s", "fixed", "seed"}
    params = _params(text, rest, known, "cross traffic")
    if "rate" not in params:
        raise ValueError(f"cross traffic {text!r} needs its rate: episodes:rate=R:...")
    schedule = CapacityEpisodes(
        share=1.0,
        on_s=params.get("on_s", 1.0),
        off_s=params.get("off_s", 3.0),
        seed=int(params.get("seed", seed)),
        fixed=bool(params.get("fixed", 0)),
    )
    return CrossEpisodes(params["rate"], params.get("size", 1500), schedule)


def link_emulator(
    spec: LinkSpec, seed: np.random.SeedSequence, cap_seed: int, index: int | None = None
) -> LinkEmulator:
    """The `LinkEmulator` of one direction of one worker's link (``index``: the worker's,
    which a cross-traffic trace's LINK column names)."""
    link_seed = int(seed.generate_state(1)[0])
    emu = make_link(
        spec.profile,
        seed=link_seed,
        rate_bps=spec.rate_bps,
        loss=spec.loss,
        buffer_bytes=spec.buffer_bytes,
        capacity=capacity_model(spec.capacity, cap_seed) if spec.capacity else None,
        cross=cross_model(spec.cross, cap_seed, index) if spec.cross else None,
    )
    emu.delay = OffsetDelay(emu.delay, spec.prop_delay_s)
    return emu


@lru_cache(maxsize=64)
def typical_delay(profile: str) -> float:
    """The median of a delay profile's first 257 delays (seed 0, all at time 0: no
    congestion episode), seconds: the path delay the transport's timers follow."""
    name, params = parse_profile(profile)
    return float(
        np.median(PROFILES[name](np.random.SeedSequence(0), **params).delays(np.zeros(257)))
    )


def min_latency(emu: LinkEmulator, frame_bytes: int) -> float:
    """The least time a frame can take through the link: its shortest delay plus its
    serialization at the full rate."""
    serialize = 0.0 if emu.rate_bps is None else frame_bytes * 8 / emu.rate_bps
    return emu.delay.min_delay() + serialize


class SimTransport:
    """What `ina.host.allreduce.Worker` needs of a transport, in the simulator: the core.
    Rounds are driven by the `WorkerNode`, never by a blocking call."""

    def __init__(self, core: TransportCore) -> None:
        self.core = core

    @property
    def stats(self) -> TransportStats:
        return self.core.stats

    def reduce_round(self, rnd):
        raise RuntimeError("in the simulator, rounds are driven by the simulation (a program)")

    def close(self) -> None:
        pass


@dataclass
class SimNetwork:
    """A built network: run programs on its workers with `run`."""

    spec: NetworkSpec
    engine: Engine
    pipeline: Pipeline  # the (top) switch's
    switch: SwitchNode
    workers: list[WorkerNode]  # every job's, job by job
    job_of: list[int] = field(default_factory=list)  # each worker's job (from 0)
    switches: dict[str, SwitchNode] = field(default_factory=dict)  # a topology's, by name
    # the workers each simulated worker stands for (timing only: its class; else itself),
    # as indices into the job's workers (a topology's ``workers`` order)
    members: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.members:
            self.members = [[w] for w in range(len(self.workers))]

    def links(self) -> list[Link]:
        """Every link, once (a shared host's link carries several workers; a topology's
        switch-to-switch links too)."""
        seen: dict[int, Link] = {}
        switches = list(self.switches.values()) or [self.switch]
        ports = [p for s in switches for p in s.ports.values()]
        for link in [n.uplink for n in self.workers] + ports:
            seen.setdefault(id(link), link)
        return list(seen.values())

    def run(self, programs: list[Program], until: float = math.inf) -> list[object]:
        """Run ``programs[w]`` on worker ``w`` until all are done; their return values.
        The first failure (e.g. a `ReduceTimeout`) is raised."""
        if len(programs) != len(self.workers):
            raise ValueError(f"{len(programs)} programs for {len(self.workers)} workers")
        done = [False] * len(self.workers)
        place = {id(node): w for w, node in enumerate(self.workers)}

        def finished(node: WorkerNode, _value: object) -> None:
            done[place[id(node)]] = True
            if node.error is not None or all(done):
                self.engine.stop()

        for node, program in zip(self.workers, programs, strict=True):
            node.on_done = finished
            node.run(program, at=self.engine.now)
        self.engine.run(until)
        for node in self.workers:
            if node.error is not None:
                raise node.error
        if not all(done):
            raise RuntimeError(f"the simulation stopped at {self.engine.now:.6f} s unfinished")
        return [node.result for node in self.workers]

    @property
    def now(self) -> float:
        return self.engine.now


def workers_for(net: SimNetwork, density: float = 1.0) -> list[Worker]:
    """One `Worker` per simulated worker node, on its simulated transport and clock."""
    comp = CompressionConfig(density=density)
    return [
        Worker(n.core.cfg, transport=SimTransport(n.core), compression=comp, clock=lambda: net.now)
        for n in net.workers
    ]


def build(
    spec: NetworkSpec,
    codec_time: Callable[[float], float] = lambda wall: 0.0,
    worker_key: Callable[[int], Hashable] = lambda w: None,
) -> SimNetwork:
    """Wire the network of ``spec`` (see the module docstring).

    Timing only (``spec.timing_only``): with every worker's links alike and deterministic,
    workers that run alike programs (``worker_key(w)``: what differs in worker ``w``'s, e.g.
    its compute factor; None for the same as all) send and receive at the same times, so one
    worker of each such class, running the real transport core and program, stands for all
    of its class (`ina.sim.classes`; on a tree, links make classes too). The switch's job has
    one worker per class, its processing queue counts each of their packets as many times
    as the class has workers, and a result leaves on one downlink of the class's identical
    ones. Same simulated times as every worker (tests compare them), with one worker's
    memory and work per class. With several jobs (alike), one representative per job (on
    one host, when the jobs share hosts).
    """
    if spec.backend != "fast":
        raise ValueError(f"backend {spec.backend!r}: build it with ina.sim.backends.build")
    if spec.topology is not None:
        return _build_tree(spec, spec.topology, codec_time, worker_key)
    engine = make_engine(spec.engine)
    groups = [[w] for w in range(spec.workers)]
    if spec.timing_only:
        alike: dict[Hashable, list[int]] = {}
        for w in range(spec.workers):
            alike.setdefault(worker_key(w), []).append(w)
        groups = list(alike.values())
        if len(groups) > MAX_WORKERS or (spec.jobs > 1 and len(groups) > 1):
            raise ValueError(
                f"timing only on one switch: {len(groups)} classes of workers; one switch "
                f"simulates 1..{MAX_WORKERS} classes of one job (use a --topology)"
            )
    per_job = len(groups)
    modelled = spec.jobs * per_job
    hosts = per_job if spec.placement == "shared" else modelled
    pipeline = Pipeline(lanes=spec.lanes, pool_total=max(spec.switch_slots, spec.pool_size))
    for k in range(spec.jobs):  # disjoint pools out of the switch's slots, as ATP's jobs
        job = local_job(JOB_ID + k, per_job, spec.pool_size, spec.pool_size * k, job_index=k)
        install_job_spec(pipeline, job)
    root = np.random.SeedSequence(spec.seed)
    nonce_seed, *link_seeds = root.spawn(1 + 2 * hosts)
    nonces = np.random.default_rng(nonce_seed).integers(0, 1 << 32, modelled, dtype=np.uint64)
    cap_seed = spec.seed
    frame = packet_bytes(spec.lanes) + FRAME_OVERHEAD
    ups = [link_emulator(spec.up, link_seeds[2 * h], cap_seed, h) for h in range(hosts)]
    downs = [link_emulator(spec.down, link_seeds[2 * h + 1], cap_seed, h) for h in range(hosts)]
    up_min = min(min_latency(e, frame) for e in ups)
    down_min = min(min_latency(e, frame) for e in downs)
    switch_min = spec.switch.latency_s + (
        0.0 if spec.switch.rate_bps is None else frame * 8 / spec.switch.rate_bps
    )
    switch = SwitchNode(
        engine,
        pipeline,
        up_min,
        rate_bps=spec.switch.rate_bps,
        latency=spec.switch.latency_s,
        weight=[len(g) for g in groups],
    )
    workers, job_of = [], []
    host_nodes: list[dict[int, WorkerNode]] = [{} for _ in range(hosts)]
    for k in range(spec.jobs):
        for w in range(per_job):
            cfg = spec.worker_config(w, k)
            if spec.timing_only:  # the representatives are the job's members on the switch
                cfg = replace(cfg, num_workers=per_job)
            core = TransportCore(cfg, nonce=int(nonces[len(workers)]))
            node = WorkerNode(engine, core, up_min + switch_min + down_min, codec_time)
            host = w if spec.placement == "shared" else len(workers)
            host_nodes[host][cfg.job_id] = node
            workers.append(node)
            job_of.append(k)
    for h, nodes in enumerate(host_nodes):
        if len(nodes) == 1:  # a host of its own: its link hands packets straight over
            ((job_id, node),) = nodes.items()
            node.uplink = switch.attach(Link(ups[h], switch.arrive))
            switch.ports[(job_id, node.core.cfg.worker_id)] = Link(downs[h], node.deliver)
            continue
        # a shared host: its workers' packets enter its uplink in time order, and what comes
        # down its link goes to the worker of the packet's job
        uplink = switch.attach(OrderedLink(engine, ups[h], switch.arrive))
        downlink = Link(downs[h], _by_job(nodes))
        for port, (job_id, node) in enumerate(nodes.items()):
            node.uplink, node.port = uplink, port
            switch.ports[(job_id, node.core.cfg.worker_id)] = downlink
    return SimNetwork(spec, engine, pipeline, switch, workers, job_of, members=groups * spec.jobs)


_JOB_FIELD = HEADER_DTYPE.fields["job_id"][1]  # the job id's byte offset in the header


def _by_job(nodes: dict[int, WorkerNode]) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """Deliver a shared host's packets to the worker of each packet's job."""

    def deliver(times: np.ndarray, data: np.ndarray, lengths: np.ndarray) -> None:
        job = data[:, _JOB_FIELD].astype(np.int64) << 8 | data[:, _JOB_FIELD + 1]
        for job_id, node in nodes.items():
            mine = job == job_id
            if mine.any():
                node.deliver(times[mine], data[mine], lengths[mine])

    return deliver


def link_spec(base: LinkSpec, link: TopoLink) -> LinkSpec:
    """``base`` with what a topology's ``link`` says: its ``bw`` (Mbit/s), ``delay`` and the
    simulator's models (loss, delay profile, capacity, cross traffic, buffer)."""
    changes: dict = {}
    if link.bw is not None:
        changes["rate_bps"] = float(link.bw) * 1e6
    if link.delay is not None:
        changes["prop_delay_s"] = units.seconds(link.delay, "link delay")
    if link.loss is not None:
        changes["loss"] = float(link.loss)
    for key in ("profile", "capacity", "cross"):
        if getattr(link, key) is not None:
            changes[key] = getattr(link, key)
    if link.buffer is not None:
        changes["buffer_bytes"] = units.size(link.buffer, "buffer")
    return replace(base, **changes) if changes else base


def simulated_workers(
    spec: NetworkSpec, worker_key: Callable[[int], Hashable] = lambda w: None
) -> int:
    """How many workers `build` would simulate: all of them, or (timing only) one per
    class of alike workers; cheap next to building them (to refuse a run beyond memory)."""
    if not spec.timing_only:
        return spec.workers * spec.jobs
    if spec.topology is None:
        return spec.jobs * len({worker_key(w) for w in range(spec.workers)})
    workers = spec.topology.workers
    index = {h: g for g, h in enumerate(workers)}
    return link_classes(spec, spec.topology, lambda host: worker_key(index[host])).count


def link_classes(
    spec: NetworkSpec, fabric: Fabric, worker_key: Callable[[str], Hashable] = lambda h: None
) -> Classes:
    """The workers' equivalence classes on ``fabric`` (`ina.sim.classes`): a link is described
    by its two directions' `LinkSpec`s, one that draws random numbers (loss, a random delay
    profile) by its own name, since every link has a stream of its own."""
    wired = {lower: (up, down) for lower, _, up, down in tree_links(spec, fabric)}

    def key(node: str) -> Hashable:
        up, down = wired[node]
        if any(
            link.loss or parse_profile(link.profile)[0] not in DETERMINISTIC for link in (up, down)
        ):
            return ("own random stream", node)
        return (up, down)

    return find_classes(fabric, key, worker_key)


def tree_links(spec: NetworkSpec, fabric: Fabric) -> list[tuple[str, str, LinkSpec, LinkSpec]]:
    """Each link of a topology, oriented: (lower end, upper end, the link going up, coming
    down), from the file's ``bw``, ``delay`` and ``loss``, else the spec's up and down links
    (both backends build their trees from this)."""
    wired = []
    for link in fabric.links:
        if link.a_port is None:  # host - switch
            lower, upper = link.a, link.b
        elif fabric.switches[link.a].parent == link.b:
            lower, upper = link.a, link.b
        else:
            lower, upper = link.b, link.a
        up, down = link_spec(spec.up, link), link_spec(spec.down, link)
        wired.append((lower, upper, up, down))
    return wired


def tree_pipelines(spec: NetworkSpec, fabric: Fabric) -> dict[str, Pipeline]:
    """One pipeline per switch, top down, with its job (and, below the top, its
    parent_table entry) installed as the control plane installs it."""
    pipelines = {}
    for s in fabric.top_down():
        pipeline = Pipeline(lanes=spec.lanes, pool_total=max(1024, spec.pool_size))
        install_job_spec(pipeline, replace(fabric.job_spec(s), pool_size=spec.pool_size))
        pipelines[s] = pipeline
    return pipelines


def tree_worker_config(spec: NetworkSpec, fabric: Fabric, g: int) -> WorkerConfig:
    """Worker ``g`` of a topology: its id on its leaf switch, the job's total worker count."""
    _, local = fabric.leaf_of(g)
    cfg = spec.worker_config(local, fabric=fabric, worker=g)
    return replace(cfg, job_id=fabric.job_id, num_workers=len(fabric.workers))


def _build_tree(
    spec: NetworkSpec,
    fabric: Fabric,
    codec_time,
    worker_key: Callable[[int], Hashable] = lambda w: None,
) -> SimNetwork:
    """`build` for a tree of switches: a pipeline per switch (`tree_pipelines`), workers on
    their leaves with their ids there, each link both ways. A switch's lookahead is the
    shortest latency of the links into it; a worker's the shortest worker-leaf-worker round
    trip. Timing only: the reduced tree of the workers' classes (`link_classes`), each link
    with the random stream it has in the whole tree."""
    engine = make_engine(spec.engine)
    job = fabric.job_id
    full = fabric
    index = {h: g for g, h in enumerate(full.workers)}  # a worker's place in the whole tree
    classes = None
    if spec.timing_only:
        classes = link_classes(spec, fabric, lambda host: worker_key(index[host]))
        fabric = classes.fabric
    # every link's and worker's random numbers as in the whole tree, whatever is kept
    root = np.random.SeedSequence(spec.seed)
    nonce_seed, *link_seeds = root.spawn(1 + 2 * len(full.links))
    seed_of = {(link.a, link.b): i for i, link in enumerate(full.links)}
    nonces = np.random.default_rng(nonce_seed).integers(
        0, 1 << 32, len(full.workers), dtype=np.uint64
    )
    frame = packet_bytes(spec.lanes) + FRAME_OVERHEAD
    switch_min = spec.switch.latency_s + (
        0.0 if spec.switch.rate_bps is None else frame * 8 / spec.switch.rate_bps
    )
    # Each link: (lower end, upper end, emulator going up, emulator coming down).
    wired = []
    for link, (lower, upper, up, down) in zip(fabric.links, tree_links(spec, fabric), strict=True):
        i = seed_of[(link.a, link.b)]
        wired.append(
            (
                lower,
                upper,
                link_emulator(up, link_seeds[2 * i], spec.seed),
                link_emulator(down, link_seeds[2 * i + 1], spec.seed),
            )
        )
    into: dict[str, list[float]] = {s: [] for s in fabric.switches}
    for lower, upper, up, down in wired:
        into[upper].append(min_latency(up, frame))
        if lower in fabric.switches:
            into[lower].append(min_latency(down, frame))
    pipelines = tree_pipelines(spec, fabric)
    switches = {
        s: SwitchNode(
            engine,
            pipeline,
            min(into[s]),
            rate_bps=spec.switch.rate_bps,
            latency=spec.switch.latency_s,
            weight=1 if classes is None else classes.switch_weights(s),
        )
        for s, pipeline in pipelines.items()
    }
    rtt = min(
        min_latency(up, frame) + switch_min + min_latency(down, frame)
        for lower, _, up, down in wired
        if lower in fabric.hosts
    )
    nodes: dict[str, WorkerNode] = {}
    for g, host in enumerate(fabric.workers):
        cfg = replace(tree_worker_config(spec, fabric, g), num_workers=len(full.workers))
        core = TransportCore(cfg, nonce=int(nonces[index[host]]))
        nodes[host] = WorkerNode(engine, core, rtt, codec_time)
    for lower, upper, up, down in wired:
        if lower in fabric.hosts:
            if lower not in nodes:  # a host that is not a worker
                continue
            node = nodes[lower]
            node.uplink = switches[upper].attach(Link(up, switches[upper].arrive))
            switches[upper].ports[(job, node.core.cfg.worker_id)] = Link(down, node.deliver)
        else:
            child = fabric.contributors(upper).index(lower)
            upper_in = switches[upper].attach(Link(up, switches[upper].arrive))
            lower_in = switches[lower].attach(Link(down, switches[lower].arrive))
            switches[lower].ports[(job, PARENT)] = upper_in
            switches[upper].ports[(job, child)] = lower_in
    top = fabric.root
    workers = [nodes[h] for h in fabric.workers]
    members = [[index[m] for m in (classes.members[h] if classes else [h])] for h in fabric.workers]
    return SimNetwork(
        spec, engine, pipelines[top], switches[top], workers, switches=switches, members=members
    )


def parse_link(
    rate: str | None = "100G",
    delay: str = "1us",
    profile: str = "none",
    loss: float = 0.0,
    buffer: str | None = None,
    capacity: str | None = None,
    cross: str | None = None,
) -> LinkSpec:
    """A `LinkSpec` from command-line strings (``100G``, ``1us``, ``4MB``)."""
    return LinkSpec(
        rate_bps=None if rate in (None, "inf", "none") else units.rate(rate, "link rate"),
        prop_delay_s=units.seconds(delay, "propagation delay"),
        profile=profile,
        loss=loss,
        buffer_bytes=None if buffer in (None, "inf", "none") else units.size(buffer, "buffer"),
        capacity=capacity,
        cross=cross,
    )
