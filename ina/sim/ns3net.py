"""The packet-level fidelity backend: the same workers and switch over ns-3's network.

`build` wires the network of a `NetworkSpec` as `ina.sim.network.build` does, with the same
`WorkerNode` (the sans-I/O `TransportCore` and its program) and the same `SwitchNode` (the
switch model's `Pipeline`), but the links are ns-3's (PyPI ``ns3``, the simulator with
cppyy bindings), and so is the clock (`Ns3Engine`):

- each worker is an ns-3 node joined to the switch node by a point-to-point link: each
  direction its own rate, the propagation delay, a device queue of ``buffer_bytes`` with tail
  drop (no queue disc: the device queue is the port buffer) and a receive error model for
  ``loss``; INA datagrams travel over UDP/IPv4 between real ns-3 sockets;
- cross traffic is ns-3's TCP: for every direction whose `LinkSpec` has ``capacity``
  episodes, a `BulkSend` flow runs through that direction's queue while an episode is on
  (worker to a sink behind the switch, or a source behind the switch to the worker), with
  the episodes' own schedule (`ina.netem.CapacityEpisodes`); the bandwidth it takes is
  whatever TCP takes, not the episodes' ``share``. Every TCP packet entering a worker link's
  queue is recorded (its time and size on the wire: data one way, ACKs the other), and
  `write_cross_traces` writes them as the fast engine's cross-traffic traces
  (`ina.netem.CrossTrace`), so the fast engine can replay the same arrivals into its FIFO;
- frames on the wire have the fast engine's size (see ``ns3_glue.cpp``), so an unloaded
  path takes the same time in both.

The C++ seam is ``ns3_glue.cpp``, compiled once per process. ns-3's simulator is one
global object: one ns-3 network at a time per process (`build` tears the previous one down).
Only the ns-3 modules the backend uses are loaded (``ns.py``'s own loader loads every
module: ~50 s here against ~10 s).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ina.host.transport_core import TransportCore
from ina.netem import CapacityEpisodes, parse_profile
from ina.protocol import FRAME_OVERHEAD, packet_bytes
from ina.sim.engine import Engine
from ina.sim.network import (
    JOB_ID,
    LinkSpec,
    NetworkSpec,
    SimNetwork,
    capacity_model,
    tree_links,
    tree_pipelines,
    tree_worker_config,
)
from ina.sim.nodes import SwitchNode, WorkerNode
from ina.switch_model.pipeline import PARENT, Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import local_job

MODULES = ("core", "network", "stats", "bridge", "traffic-control", "internet")
MODULES += ("point-to-point", "applications")
INA_PORT = 9000  # the switch's and the workers' UDP port inside the ns-3 network
CROSS_PORT = 5001  # TCP sinks of the cross traffic
NS3_OVERHEAD = 2 + 20 + 8  # PPP + IPv4 + UDP: the rest of FRAME_OVERHEAD is the trailer

_glue = None  # the loaded C++ namespace (ina_ns3), once per process
# the last network's watches (the glue's ids of the worker links' queues), by direction and
# worker: what `write_cross_traces` reads; one ns-3 network at a time per process
_watches: dict[str, list[int]] = {"up": [], "down": []}


def unavailable() -> str | None:
    """Why the backend cannot run here (None: it can)."""
    if importlib.util.find_spec("ns3") is None:
        return "the ns3 package is not installed (pip install 'ina[ns3]')"
    if importlib.util.find_spec("cppyy") is None:
        return "cppyy (ns3's bindings) is not installed"
    return None


def load():
    """Load ns-3 (the modules the backend needs) and the glue; the glue's namespace."""
    global _glue
    if _glue is not None:
        return _glue
    why = unavailable()
    if why:
        raise RuntimeError(f"the ns-3 backend is unavailable: {why}")
    import cppyy

    prefix = Path(next(iter(importlib.util.find_spec("ns3").submodule_search_locations)))
    libdirs = [d for d in (prefix / "lib64", prefix / "lib") if d.is_dir()]
    cppyy.add_include_path(str(prefix / "include"))
    # libraries first, then headers: the other order leaves static initializers unresolved
    for module in MODULES:
        found = [f for d in libdirs for f in glob.glob(str(d / f"libns3*-{module}.so"))]
        if not found:
            raise RuntimeError(f"the ns-3 backend is unavailable: no ns-3 library {module!r}")
        cppyy.load_library(found[0])
    for module in MODULES:
        cppyy.include(f"ns3/{module}-module.h")
    # Picoseconds, not ns-3's default nanoseconds: a frame takes a fraction of a nanosecond
    # more than whole ones (322 bytes at 10 Gbit/s: 257.6 ns), which ns-3 would round to
    # 258 ns, every link a little slower than configured; the fast engine's serializer
    # counts whole picoseconds too (`ina.netem.to_ps`). Set once, before any time is made.
    time = cppyy.gbl.ns3.Time
    if time.GetResolution() != time.PS:
        time.SetResolution(time.PS)
    cppyy.cppdef((Path(__file__).parent / "ns3_glue.cpp").read_text())
    _glue = cppyy.gbl.ina_ns3
    return _glue


def _ticks(t: float) -> int:
    """Seconds to ns-3 time steps (picoseconds, the resolution `load` sets), rounded up so
    that no event runs before the time it was asked for (as the glue's ``Ticks``)."""
    x = t * 1e12
    return math.ceil(x - max(1e-3, x * 4e-16))


class Ns3Engine(Engine):
    """ns-3's scheduler behind `Engine`: each `at` is an ns-3 event calling back into Python.

    ``now`` is the time an event was scheduled for, exactly (as `SimPyEngine`), or a packet's
    arrival time in ns-3's nanoseconds; the two may differ by less than a nanosecond within
    one ns-3 time step, which `at` tolerates."""

    def __init__(self, glue) -> None:
        self.glue = glue
        self._now = 0.0
        self._pending: dict[int, tuple[float, Callable[[], None]]] = {}
        self._next_id = 0
        self._stopped = False
        self.events = 0
        glue.fire = self._fire

    @property
    def now(self) -> float:
        return self._now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        if t < self._now - 1e-9:
            raise ValueError(f"cannot schedule at {t} before now ({self._now})")
        self._next_id += 1
        self._pending[self._next_id] = (t, fn)
        self.glue.ScheduleAt(_ticks(t), self._next_id)

    def _fire(self, event_id: int) -> None:
        t, fn = self._pending.pop(event_id)
        if self._stopped:
            return
        self._now = t
        self.events += 1
        fn()
        if self._stopped:
            _ns3().Simulator.Stop()

    def advance(self, t: float) -> None:
        """A packet arrived at ``t`` (ns-3's clock)."""
        self._now = t

    def run(self, until: float = math.inf) -> None:
        self._stopped = False
        simulator = _ns3().Simulator
        if until < math.inf:
            simulator.Stop(_ns3().TimeStep(max(_ticks(until) - _ticks(self._now), 0)))
        simulator.Run()
        if until < math.inf and not self._stopped:
            self._now = max(self._now, until)

    def stop(self) -> None:
        self._stopped = True


def _ns3():
    import cppyy

    return cppyy.gbl.ns3


class Ns3Link:
    """One direction of a worker's link, in ns-3: what `ina.sim.nodes.Link` is to the fast
    engine (``send`` a batch of timed packets; counters), plus the queueing delay of the
    packets it delivered."""

    def __init__(self, net: _Wiring, link_id: int, endpoint: int, dst: int, spec: LinkSpec):
        self.net = net
        self.id = link_id
        self.endpoint = endpoint
        self.dst = dst
        self.spec = spec
        self.deliver: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None
        self.width = 0  # the receiving node's row width
        self.packets = 0  # delivered
        self.bytes = 0
        self.queue_delay_sum = 0.0  # seconds beyond an unloaded path, over delivered packets

    def send(self, times: np.ndarray, data: np.ndarray, lengths: np.ndarray, port: int = 0) -> None:
        if not times.size:
            return
        times = np.ascontiguousarray(times, dtype=np.float64)
        data = np.ascontiguousarray(data, dtype=np.uint8)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        self.net.glue.SendBatch(
            self.endpoint,
            self.id,
            self.dst,
            INA_PORT,
            times.size,
            times.ctypes.data,
            data.ctypes.data,
            data.strides[0],
            lengths.ctypes.data,
        )

    def arrived(self, now: float, payload: bytes, sent: float) -> None:
        n = len(payload)
        frame = n + FRAME_OVERHEAD
        unloaded = frame * 8 / self.spec.rate_bps + self.spec.prop_delay_s
        self.packets += 1
        self.bytes += frame
        self.queue_delay_sum += max(now - sent - unloaded, 0.0)
        row = np.zeros((1, max(self.width, n)), np.uint8)
        row[0, :n] = np.frombuffer(payload, np.uint8)
        self.deliver(np.array([now]), row, np.array([n], np.int64))

    @property
    def mean_queue_delay(self) -> float:
        return self.queue_delay_sum / self.packets if self.packets else 0.0


class _Wiring:
    """The ns-3 side of one network: links by id, and the arrival callback."""

    def __init__(self, glue, engine: Ns3Engine) -> None:
        self.glue = glue
        self.engine = engine
        self.links: list[Ns3Link] = []
        glue.arrive = self._arrive

    def _arrive(self, link_id: int, ptr: int, length: int, sent: float) -> None:
        now = _ns3().Simulator.Now().GetSeconds()
        self.engine.advance(now)
        self.links[link_id].arrived(now, ctypes.string_at(ptr, length), sent)


def check(spec: NetworkSpec) -> None:
    """What the ns-3 backend models, and whether it can run here, as one-line errors
    (`NetworkSpec` calls it for ``backend="ns3"``)."""
    why = unavailable()
    if why:
        raise ValueError(f"the ns-3 backend is unavailable: {why}")
    if spec.timing_only:
        raise ValueError("the ns-3 backend simulates every worker: no --timing-only")
    if spec.jobs != 1:
        raise ValueError("the ns-3 backend runs one job: no --jobs")
    for name, link in (("up", spec.up), ("down", spec.down)):
        profile, _ = parse_profile(link.profile)
        if profile != "none":
            raise ValueError(
                f"the ns-3 backend's links have a propagation delay only: {name}link delay "
                f"profile {link.profile!r} is not modelled (use --link-profile none)"
            )
        if link.rate_bps is None:
            raise ValueError(f"the ns-3 backend needs a finite {name}link rate")
        if link.cross is not None:
            raise ValueError(
                "the ns-3 backend's cross traffic is TCP in capacity episodes (--capacity "
                "episodes:...), not --cross"
            )
        if link.capacity is not None and not isinstance(
            capacity_model(link.capacity, 0), CapacityEpisodes
        ):
            raise ValueError("the ns-3 backend's cross traffic needs episodes:..., not a trace")
    if spec.topology is not None and (spec.up.capacity or spec.down.capacity):
        raise ValueError("the ns-3 backend's TCP cross traffic runs on one switch, not a tree")
    if spec.up.prop_delay_s != spec.down.prop_delay_s:
        raise ValueError("the ns-3 backend's links have one propagation delay both ways")


def build(spec: NetworkSpec, codec_time: Callable[[float], float] = lambda wall: 0.0) -> SimNetwork:
    """The network of ``spec`` in ns-3 (see the module docstring); run it with `SimNetwork.run`.
    ``spec`` was checked (`check`) when it was made."""
    if spec.topology is not None:
        return _build_tree(spec, spec.topology, codec_time)
    glue = load()
    glue.Reset()  # one ns-3 network per process at a time: drop the previous one
    glue.Setup(spec.seed)
    ns = _ns3()
    engine = Ns3Engine(glue)
    wiring = _Wiring(glue, engine)
    n = spec.workers
    pipeline = Pipeline(lanes=spec.lanes, pool_total=max(1024, spec.pool_size))
    install_job_spec(pipeline, local_job(JOB_ID, n, spec.pool_size))
    nonces = np.random.default_rng(np.random.SeedSequence(spec.seed).spawn(1)[0]).integers(
        0, 1 << 32, n, dtype=np.uint64
    )
    frame = packet_bytes(spec.lanes) + FRAME_OVERHEAD
    mtu = max(1500, frame - 14)  # the IP packet: frame less Ethernet
    nodes = ns.NodeContainer()
    nodes.Create(n + 2)  # workers, the switch, the cross-traffic host behind the switch
    sw, cross = nodes.Get(n), nodes.Get(n + 1)
    ns.InternetStackHelper().Install(nodes)

    def buffer(link: LinkSpec) -> int:
        return _queue_bytes(link, frame)

    addrs = []
    _watches["up"], _watches["down"] = [], []
    for w in range(n):  # worker side: up rate, up buffer; receives with down loss
        a = glue.Connect(
            nodes.Get(w),
            sw,
            spec.up.rate_bps,
            spec.down.rate_bps,
            spec.up.prop_delay_s,
            buffer(spec.up),
            buffer(spec.down),
            spec.down.loss,
            spec.up.loss,
            mtu,
            (10 << 24) + 4 * (w + 1),
        )
        addrs.append((int(a[0]), int(a[1])))
        _watches["up"].append(int(a[2]))  # the worker's device: its uplink queue
        _watches["down"].append(int(a[3]))  # the switch's port to it
    fast = 10 * max(spec.up.rate_bps, spec.down.rate_bps)  # never the bottleneck
    c = glue.Connect(
        cross, sw, fast, fast, spec.up.prop_delay_s, 1 << 40, 1 << 40, 0.0, 0.0, mtu,
        (11 << 24) + 4,
    )  # fmt: skip
    cross_addr = int(c[0])
    glue.Routes()
    sw_ep = glue.AddEndpoint(sw, INA_PORT)
    up_min = frame * 8 / spec.up.rate_bps + spec.up.prop_delay_s
    down_min = frame * 8 / spec.down.rate_bps + spec.down.prop_delay_s
    switch_min = spec.switch.latency_s + (
        0.0 if spec.switch.rate_bps is None else frame * 8 / spec.switch.rate_bps
    )
    switch = SwitchNode(
        engine, pipeline, up_min, rate_bps=spec.switch.rate_bps, latency=spec.switch.latency_s
    )
    workers = []
    for w in range(n):
        core = TransportCore(spec.worker_config(w), nonce=int(nonces[w]))
        node = WorkerNode(engine, core, up_min + switch_min + down_min, codec_time)
        ep = glue.AddEndpoint(nodes.Get(w), INA_PORT)
        up = Ns3Link(wiring, len(wiring.links), ep, addrs[w][1], spec.up)
        up.deliver, up.width = switch.arrive, switch.inbox.width
        wiring.links.append(up)
        down = Ns3Link(wiring, len(wiring.links), sw_ep, addrs[w][0], spec.down)
        down.deliver, down.width = node.deliver, node.inbox.width
        wiring.links.append(down)
        node.uplink = up
        switch.ports[(JOB_ID, w)] = down
        workers.append(node)
    for direction, link in (("up", spec.up), ("down", spec.down)):
        if link.capacity:
            _cross_traffic(engine, glue, nodes, n, cross, cross_addr, addrs, direction, link, spec)
    net = SimNetwork(spec, engine, pipeline, switch, workers)
    return net


def _build_tree(spec: NetworkSpec, fabric, codec_time) -> SimNetwork:
    """`build` for a topology's tree of switches, as `ina.sim.network` builds it for the fast
    engine (`tree_links`, `tree_pipelines`, `tree_worker_config`: the same pipelines, the
    same worker configurations and nonces), with every link, leaf-spine links included, an
    ns-3 point-to-point link: each switch is an ns-3 node with one UDP endpoint, a leaf sends
    its partial sums to its parent's address on their link, the parent sends down to the
    leaf's."""
    glue = load()
    glue.Reset()
    glue.Setup(spec.seed)
    ns = _ns3()
    engine = Ns3Engine(glue)
    wiring = _Wiring(glue, engine)
    job = fabric.job_id
    n = len(fabric.workers)
    nonces = np.random.default_rng(np.random.SeedSequence(spec.seed).spawn(1)[0]).integers(
        0, 1 << 32, n, dtype=np.uint64
    )
    frame = packet_bytes(spec.lanes) + FRAME_OVERHEAD
    mtu = max(1500, frame - 14)
    names = list(fabric.hosts) + list(fabric.switches)
    nodes = ns.NodeContainer()
    nodes.Create(len(names))
    node_of = {name: nodes.Get(i) for i, name in enumerate(names)}
    ns.InternetStackHelper().Install(nodes)
    wired = tree_links(spec, fabric)
    addrs = []  # per link: (lower end's address, upper end's)
    for i, (lower, upper, up, down) in enumerate(wired):
        a = glue.Connect(
            node_of[lower], node_of[upper], up.rate_bps, down.rate_bps, up.prop_delay_s,
            _queue_bytes(up, frame), _queue_bytes(down, frame), down.loss, up.loss, mtu,
            (10 << 24) + 4 * (i + 1),
        )  # fmt: skip
        addrs.append((int(a[0]), int(a[1])))
    glue.Routes()
    endpoints = {s: glue.AddEndpoint(node_of[s], INA_PORT) for s in fabric.switches}

    def latency(link: LinkSpec) -> float:
        return frame * 8 / link.rate_bps + link.prop_delay_s

    switch_min = spec.switch.latency_s + (
        0.0 if spec.switch.rate_bps is None else frame * 8 / spec.switch.rate_bps
    )
    into: dict[str, list[float]] = {s: [] for s in fabric.switches}
    for lower, upper, up, down in wired:
        into[upper].append(latency(up))
        if lower in fabric.switches:
            into[lower].append(latency(down))
    pipelines = tree_pipelines(spec, fabric)
    switches = {
        s: SwitchNode(
            engine, p, min(into[s]), rate_bps=spec.switch.rate_bps, latency=spec.switch.latency_s
        )
        for s, p in pipelines.items()
    }
    rtt = min(
        latency(up) + switch_min + latency(down)
        for lower, _, up, down in wired
        if lower in fabric.hosts
    )
    workers: dict[str, WorkerNode] = {}
    for g, host in enumerate(fabric.workers):
        core = TransportCore(tree_worker_config(spec, fabric, g), nonce=int(nonces[g]))
        workers[host] = WorkerNode(engine, core, rtt, codec_time)

    def link(sender: int, dst: int, ls: LinkSpec, deliver, width: int) -> Ns3Link:
        made = Ns3Link(wiring, len(wiring.links), sender, dst, ls)
        made.deliver, made.width = deliver, width
        wiring.links.append(made)
        return made

    for (lower, upper, up, down), (lower_addr, upper_addr) in zip(wired, addrs, strict=True):
        top = switches[upper]
        if lower in fabric.hosts:
            if lower not in workers:  # a host that is not a worker
                continue
            node = workers[lower]
            ep = glue.AddEndpoint(node_of[lower], INA_PORT)
            node.uplink = link(ep, upper_addr, up, top.arrive, top.inbox.width)
            top.ports[(job, node.core.cfg.worker_id)] = link(
                endpoints[upper], lower_addr, down, node.deliver, node.inbox.width
            )
        else:
            child, leaf = fabric.contributors(upper).index(lower), switches[lower]
            leaf.ports[(job, PARENT)] = link(
                endpoints[lower], upper_addr, up, top.arrive, top.inbox.width
            )
            top.ports[(job, child)] = link(
                endpoints[upper], lower_addr, down, leaf.arrive, leaf.inbox.width
            )
    root = fabric.root
    return SimNetwork(
        spec,
        engine,
        pipelines[root],
        switches[root],
        [workers[h] for h in fabric.workers],
        switches=switches,
    )


def _queue_bytes(link: LinkSpec, frame: int) -> int:
    """ns-3's device queue for a port buffer of ``link.buffer_bytes``: the fast engine's
    buffer holds the packets waiting and the one being sent, ns-3's device queue only those
    waiting (it dequeues a packet to send it): one INA frame less, so both admit the same
    INA packets."""
    if not link.buffer_bytes:
        return 1 << 40
    if link.buffer_bytes < frame:
        raise ValueError(f"a buffer of {link.buffer_bytes:g} B holds no {frame}-byte frame")
    return int(link.buffer_bytes) - frame


def cross_arrivals(direction: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per worker, the times and sizes (bytes on the wire) of the TCP packets that entered
    that worker's ``direction`` link's queue in the last network built (before tail drop)."""
    glue = load()
    out = []
    for watch in _watches[direction]:
        count = int(glue.WatchCount(watch))
        times, sizes = np.zeros(count), np.zeros(count, np.int64)
        if count:
            glue.WatchCopy(watch, times.ctypes.data, sizes.ctypes.data)
        out.append((times, sizes))
    return out


def write_cross_traces(directory: str | Path) -> dict[str, Path]:
    """The last network's cross traffic as `ina.netem.CrossTrace` files, one per direction
    (``DIRECTORY/cross_up.txt``, ``cross_down.txt``: lines ``TIME_S BYTES LINK``, LINK the
    worker), for the fast engine's ``LinkSpec.cross`` (``trace:PATH``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for direction in ("up", "down"):
        rows = [
            np.column_stack([t, s, np.full(t.size, w)])
            for w, (t, s) in enumerate(cross_arrivals(direction))
        ]
        table = np.concatenate(rows) if rows else np.zeros((0, 3))
        table = table[np.argsort(table[:, 0], kind="stable")]
        paths[direction] = directory / f"cross_{direction}.txt"
        with open(paths[direction], "w") as f:
            f.write(f"# TCP packets entering each worker's {direction}link queue in ns-3\n")
            f.write("# TIME_S BYTES LINK\n")
            f.writelines(f"{t:.12g} {int(b)} {int(w)}\n" for t, b, w in table)
    return paths


def _cross_traffic(engine, glue, nodes, n, cross, cross_addr, addrs, direction, link, spec):
    """TCP bulk flows through every ``direction`` link while its episodes are on, one flow
    per link: worker to the cross host (up), or the cross host to the worker (down)."""
    episodes = capacity_model(link.capacity, spec.seed)
    if direction == "up":
        glue.Sink(cross, CROSS_PORT)
    else:
        for w in range(n):
            glue.Sink(nodes.Get(w), CROSS_PORT)
    # episodes are drawn as the run reaches them: each start schedules its flows and the
    # next start
    count = [0]

    def next_episode() -> None:
        i = count[0]
        starts, ends = episodes.episodes_until(0.0)
        while len(starts) <= i:  # each call past the last end draws one more episode
            starts, ends = episodes.episodes_until(float(ends[-1]))
        count[0] = i + 1
        end = float(ends[i])
        engine.at(max(float(starts[i]), engine.now), lambda: begin(end))

    def begin(end: float) -> None:
        now = engine.now
        for w in range(n):
            if direction == "up":
                glue.BulkFlow(nodes.Get(w), cross_addr, CROSS_PORT, 0.0, end - now)
            else:
                glue.BulkFlow(cross, addrs[w][0], CROSS_PORT, 0.0, end - now)
        next_episode()

    next_episode()
