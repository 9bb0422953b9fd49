"""Aggregation trees from data: topology files with one switch or a tree of switches.

A topology file follows the p4lang tutorials' ``topology.json`` (hosts, switches, links;
`bmv2_topologies/topology.py` reads the single-switch form for Mininet) and extends it with
*parent links* between switches::

    {
      "hosts": {"h1": {"ip": "10.0.0.1/24", "mac": "00:00:0a:00:00:01"}, ...},
      "switches": {
        "s1": {},                                      the spine: no parent
        "l1": {"parent": "s1"}, "l2": {"parent": "s1"} leaves: their partial sums go up
      },
      "links": [["h1", "l1-p1"], ["h2", "l1-p2"], ["h3", "l2-p1"], ["h4", "l2-p2"],
                ["l1-p3", "s1-p1"], ["l2-p3", "s1-p2"]],
      "ina": {"job_id": 1, "pool_size": 128, "udp_port_base": 50000,
              "workers": ["h1", "h2", "h3", "h4"]}
    }

Hierarchical aggregation (docs/protocol.md, "Hierarchical aggregation"): every switch runs
the same job. A switch's *contributors* are the worker hosts linked to it (in ``workers``
order), then its child switches (in name order); a contributor's worker id on that switch is
its position. A switch with a parent is one contributor of the parent's job: its
``parent_table`` entry names its worker id there. A worker talks only to its own switch (its
*leaf*) with its id there; every worker knows the total worker count (for the scale that
keeps the int32 sum from overflowing, and for the mean).

A link is ``[a, b]``, ``[a, b, delay]`` or ``[a, b, delay, bw]`` (bw in Mbit/s, delay like
``"2ms"``), or an object ``{"node1", "node2", "delay", "bw", "loss"}`` (``loss``: the
probability that a packet is dropped, each way; used by the simulator). A switch end is ``s-pN``. A
switch's INA address (what its contributors send to) is ``"ina_ip"``/``"ina_mac"`` in its
entry, by default ``10.0.0.254`` (or the ``ina`` section's ``switch_ip``) for the top switch,
then ``.253``, ``.252``, ... in switch name order.

`parse` refuses, with one line naming the culprit (`TopologyError`): a link to an unknown
node, a parent that is not a switch, a loop of parents, more or fewer than one top-level
switch, a switch without a link to its parent or with nothing below it, a link between
switches that are not parent and child, a worker on no switch, and more workers or
contributors on a switch than its 32-bit bitmap holds (a job may have more workers in all,
up to ``MAX_JOB_WORKERS``, spread over leaves).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ina.errors import UsageError
from ina.protocol import MAX_JOB_WORKERS, MAX_WORKERS, UDP_PORT
from ina.switch_model.tables import JobSpec, ParentEntry, WorkerAddress

DEFAULT_POOL_SIZE = 128
DEFAULT_UDP_PORT_BASE = 50000
_PORT = re.compile(r"^(?P<switch>[A-Za-z_]\w*)-p(?P<port>\d+)$")


MAX_SWITCHES = 4096


def _switch_address(i: int) -> tuple[str, str]:
    """The default INA IP and MAC of the ``i``-th switch (the top is 0): 10.0.0.253, .252,
    ... for the first 100 (the files Mininet runs), then from 10.254.0.100 and
    00:00:0c:00:00:64 on (the simulator's bigger trees)."""
    if i < 100:
        return f"10.0.0.{254 - i}", f"00:00:0a:00:00:{254 - i:02x}"
    return f"10.254.{i >> 8}.{i & 255}", f"00:00:0c:00:{i >> 8:02x}:{i & 255:02x}"


class TopologyError(UsageError):
    """A topology file that cannot be used; the message names the file and the culprit."""


def natural_key(name: str) -> list:
    """h2 < h10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class Host:
    name: str
    ip: str  # without prefix length
    prefix: int
    mac: str
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    """A link between a host or a switch port (``switch``, ``port``) and a switch port."""

    a: str  # a host name, or a switch name when a_port is not None
    a_port: int | None
    b: str  # always a switch
    b_port: int
    delay: str | None = None
    bw: float | None = None  # Mbit/s
    # the simulator's link models, each way (`ina.sim.network.LinkSpec`): loss per packet, a
    # delay profile, cross traffic as a capacity share or as packets, a queue size
    loss: float | None = None
    profile: str | None = None
    capacity: str | None = None
    cross: str | None = None
    buffer: str | None = None


@dataclass(frozen=True)
class Switch:
    name: str
    parent: str | None
    ina_ip: str
    ina_mac: str


@dataclass
class Fabric:
    """A parsed topology: hosts, switches (a tree by their parents), links, the job."""

    name: str
    hosts: dict[str, Host]
    switches: dict[str, Switch]
    links: list[Link]
    workers: list[str]  # worker hosts; global worker index = position
    job_id: int = 1
    pool_size: int = DEFAULT_POOL_SIZE
    udp_port_base: int = DEFAULT_UDP_PORT_BASE
    host_switch: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> (sw, port)

    # -- the tree ------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return next(s for s in self.switches.values() if s.parent is None).name

    def children(self, switch: str) -> list[str]:
        return sorted(
            (s.name for s in self.switches.values() if s.parent == switch), key=natural_key
        )

    def top_down(self) -> list[str]:
        """Switches, every parent before its children."""
        order, todo = [], [self.root]
        while todo:
            s = todo.pop(0)
            order.append(s)
            todo += self.children(s)
        return order

    def contributors(self, switch: str) -> list[str]:
        """Worker hosts on ``switch`` (in ``workers`` order), then its child switches."""
        hosts = [h for h in self.workers if self.host_switch[h][0] == switch]
        return hosts + self.children(switch)

    def port(self, switch: str, towards: str) -> int:
        """``switch``'s port on its link to host or switch ``towards``."""
        for link in self.links:
            if link.b == switch and link.a == towards:
                return link.b_port
            if link.a == switch and link.b == towards and link.a_port is not None:
                return link.a_port
        raise KeyError(f"{switch} has no link to {towards}")

    def uplinks(self) -> dict[str, int]:
        """Each link's index in ``links`` by its lower end (a link is named by it): a worker
        host for its link to its switch, a switch for its link to its parent."""
        named = {}
        for i, link in enumerate(self.links):
            if link.a_port is None:
                named[link.a] = i
            else:
                named[link.a if self.switches[link.a].parent == link.b else link.b] = i
        return named

    def uplink(self, node: str) -> int:
        """The index in ``links`` of the link above ``node``; `TopologyError` (one line,
        naming what links there are) for a node with none."""
        named = self.uplinks()
        if node in named:
            return named[node]
        below = [s for s in self.switches if self.switches[s].parent is not None]
        raise TopologyError(
            f"topology {self.name} has no link {node!r}: a link is named by its lower end, a "
            f"worker host ({self.workers[0]}..{self.workers[-1]}) or a switch below the top"
            + (f" ({', '.join(below[:4])}{', ...' if len(below) > 4 else ''})" if below else "")
        )

    def leaf_of(self, worker: int) -> tuple[str, int]:
        """(switch, worker id there) of global worker ``worker``."""
        host = self.workers[worker]
        switch = self.host_switch[host][0]
        return switch, self.contributors(switch).index(host)

    @property
    def hierarchical(self) -> bool:
        return len(self.switches) > 1

    # -- what each switch gets installed ---------------------------------------------------

    def job_spec(
        self,
        switch: str,
        addresses: dict[str, tuple[str, int, str]] | None = None,
        hosts: dict[str, tuple[str, int]] | None = None,
    ) -> JobSpec:
        """The `JobSpec` of ``switch``: its contributors as workers and, below the root,
        its ``parent_table`` entry. ``addresses`` maps a switch to the (ip, udp_port, mac)
        its neighbours reach it at (default: its INA address on `UDP_PORT`); ``hosts`` a
        worker host to its (ip, udp_port) (default: its IP, ``udp_port_base`` + index)."""

        def address(s: str) -> tuple[str, int, str]:
            if addresses is not None and s in addresses:
                return addresses[s]
            sw = self.switches[s]
            return sw.ina_ip, UDP_PORT, sw.ina_mac

        workers = []
        for i, c in enumerate(self.contributors(switch)):
            if c in self.hosts:
                h = self.hosts[c]
                ip, udp, mac = h.ip, self.udp_port_base + self.workers.index(c), h.mac
                if hosts is not None and c in hosts:
                    ip, udp = hosts[c]
            else:
                ip, udp, mac = address(c)
            workers.append(WorkerAddress(self.job_id, i, ip, udp, mac, self.port(switch, c)))
        parent = None
        up = self.switches[switch].parent
        if up is not None:
            ip, udp, mac = address(up)
            parent = ParentEntry(
                self.job_id,
                self.contributors(up).index(switch),
                ip,
                udp,
                mac,
                self.port(switch, up),
            )
        return JobSpec(
            job_id=self.job_id,
            num_workers=len(workers),
            pool_base=0,
            pool_size=self.pool_size,
            workers=tuple(workers),
            parent=parent,
        )


MODELS = ("profile", "capacity", "cross", "buffer")  # a link object's simulator models, text


def _link(raw, where: str) -> tuple[str, str, str | None, float | None, dict]:
    """(node1, node2, delay, bw, the simulator's models: loss and `MODELS`)."""
    if isinstance(raw, dict):
        if "node1" not in raw or "node2" not in raw:
            raise TopologyError(f"{where}: link {raw!r} needs node1 and node2")
        unknown = set(raw) - {"node1", "node2", "delay", "bw", "loss", *MODELS}
        if unknown:
            raise TopologyError(f"{where}: link {raw!r}: unknown keys {sorted(unknown)}")
        loss = raw.get("loss")
        if loss is not None and not (isinstance(loss, int | float) and 0 <= loss < 1):
            raise TopologyError(f"{where}: link {raw!r}: loss must be in [0, 1)")
        models = {k: str(raw[k]) for k in MODELS if raw.get(k) is not None}
        return (
            raw["node1"],
            raw["node2"],
            raw.get("delay"),
            raw.get("bw"),
            dict(loss=loss, **models),
        )
    if not isinstance(raw, list) or not 2 <= len(raw) <= 4:
        raise TopologyError(f"{where}: link {raw!r}: expected [node1, node2, delay?, bw?]")
    delay, bw = (raw[2] if len(raw) > 2 else None), (raw[3] if len(raw) > 3 else None)
    return raw[0], raw[1], delay, bw, {}


def _delay(value) -> str | None:
    if value is None:
        return None
    text = f"{value}ms" if isinstance(value, int | float) else str(value)
    return None if re.fullmatch(r"0+(\.0*)?(ms|us|s)?", text) else text


def parse(data: object, name: str = "topology") -> Fabric:
    """Validate a topology (the JSON's value) and resolve its aggregation tree."""
    where = f"topology {name}"
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a JSON object with hosts, switches, links")
    hosts: dict[str, Host] = {}
    for hname, h in (data.get("hosts") or {}).items():
        if not isinstance(h, dict) or "ip" not in h or "mac" not in h:
            raise TopologyError(f"{where}: host {hname} needs an ip and a mac")
        ip, _, prefix = str(h["ip"]).partition("/")
        hosts[hname] = Host(
            hname, ip, int(prefix or 24), str(h["mac"]).lower(), tuple(h.get("commands", ()))
        )
    raw_switches = data.get("switches") or {}
    if not isinstance(raw_switches, dict) or not raw_switches:
        raise TopologyError(f"{where}: no switches")
    switches: dict[str, Switch] = {}
    if len(raw_switches) > MAX_SWITCHES:
        raise TopologyError(f"{where}: more than {MAX_SWITCHES} switches")
    # default INA addresses 10.0.0.254, .253, ...: the top switch first, as on one switch
    order = sorted(
        raw_switches,
        key=lambda s: ((raw_switches[s] or {}).get("parent") is not None, natural_key(s)),
    )
    ina = data.get("ina") or {}
    top_ip = ina.get("switch_ip", "10.0.0.254")  # a single-switch file's own address
    top_mac = ina.get("switch_mac", "00:00:0a:00:00:fe")
    for i, sname in enumerate(order):
        s = raw_switches[sname] or {}
        if sname in hosts:
            raise TopologyError(f"{where}: {sname} is both a host and a switch")
        if not isinstance(s, dict):
            raise TopologyError(f"{where}: switch {sname}: expected an object")
        switches[sname] = Switch(
            sname,
            s.get("parent"),
            s.get("ina_ip", top_ip if i == 0 else _switch_address(i)[0]),
            str(s.get("ina_mac", top_mac if i == 0 else _switch_address(i)[1])).lower(),
        )
    for s in switches.values():
        if s.parent is not None and s.parent not in switches:
            raise TopologyError(f"{where}: switch {s.name}'s parent {s.parent!r} is not a switch")
    for s in switches.values():  # a loop of parents never reaches a root
        seen = [s.name]
        up = s.parent
        while up is not None:
            if up in seen:
                loop = " -> ".join([*seen[seen.index(up) :], up])
                raise TopologyError(
                    f"{where}: parents form a loop {loop}: aggregation needs a tree"
                )
            seen.append(up)
            up = switches[up].parent
    roots = [s.name for s in switches.values() if s.parent is None]
    if len(roots) != 1:
        raise TopologyError(f"{where}: exactly one switch has no parent (the top), got {roots}")

    links: list[Link] = []
    host_switch: dict[str, tuple[str, int]] = {}
    used_ports: set[tuple[str, int]] = set()

    def end(node: str, raw) -> tuple[str, int | None]:
        if node in hosts:
            return node, None
        m = _PORT.match(str(node))
        if m is None or m["switch"] not in switches:
            raise TopologyError(f"{where}: link {raw!r} names unknown node {node!r}")
        key = (m["switch"], int(m["port"]))
        if key in used_ports:
            raise TopologyError(f"{where}: a switch port is used twice: {node}")
        used_ports.add(key)
        return key

    for raw in data.get("links") or []:
        a, b, delay, bw, models = _link(raw, where)
        (an, ap), (bn, bp) = end(a, raw), end(b, raw)
        if ap is None and bp is None:
            raise TopologyError(f"{where}: link {raw!r} joins two hosts; hosts hang off switches")
        if bp is None:  # the host end first
            (an, ap), (bn, bp) = (bn, bp), (an, ap)
        if ap is None:
            if an in host_switch:
                raise TopologyError(f"{where}: host {an} has two links (hosts have one interface)")
            host_switch[an] = (bn, bp)
        elif switches[an].parent != bn and switches[bn].parent != an:
            raise TopologyError(
                f"{where}: link {raw!r} joins switches {an} and {bn}, neither the other's parent"
            )
        links.append(Link(an, ap, bn, bp, _delay(delay), bw, **models))
    for s in switches.values():
        if s.parent is not None and not any(
            {link.a, link.b} == {s.name, s.parent} and link.a_port is not None for link in links
        ):
            raise TopologyError(f"{where}: switch {s.name} has no link to its parent {s.parent}")

    workers = list(ina.get("workers") or sorted(host_switch, key=natural_key))
    for w in workers:
        if w not in hosts:
            raise TopologyError(f"{where}: worker {w!r} is not a linked host (no such host)")
        if w not in host_switch:
            raise TopologyError(f"{where}: worker {w} is on no switch (it has no link)")
    if len(set(workers)) != len(workers):
        raise TopologyError(f"{where}: a worker is listed twice")
    if not 1 <= len(workers) <= MAX_JOB_WORKERS:
        raise TopologyError(
            f"{where}: {len(workers)} workers; a job has 1..{MAX_JOB_WORKERS} (every worker's "
            "scale keeps the int32 sum of all of them from overflowing)"
        )
    macs = [h.mac for h in hosts.values()] + [s.ina_mac for s in switches.values()]
    if len(set(macs)) != len(macs):
        raise TopologyError(f"{where}: two hosts or switches share a MAC address")
    fabric = Fabric(
        name=name,
        hosts=hosts,
        switches=switches,
        links=links,
        workers=workers,
        job_id=int(ina.get("job_id", 1)),
        pool_size=int(ina.get("pool_size", DEFAULT_POOL_SIZE)),
        udp_port_base=int(ina.get("udp_port_base", DEFAULT_UDP_PORT_BASE)),
        host_switch=host_switch,
    )
    for s in fabric.top_down():
        if not fabric.contributors(s):
            raise TopologyError(f"{where}: switch {s} has no workers below it")
        if len(fabric.contributors(s)) > MAX_WORKERS:
            raise TopologyError(f"{where}: switch {s} has more than {MAX_WORKERS} contributors")
    try:
        for s in switches:
            fabric.job_spec(s).entry()  # the job_table checks (pool size, ids)
    except ValueError as e:
        raise TopologyError(f"{where}: {e}") from None
    return fabric


GENERATED = re.compile(r"(two_level|three_level):(\d+(?:x\d+)+)")


def load(path: str | Path) -> Fabric:
    """Read a topology file, or build ``two_level:LxW`` (a spine over L leaves of W
    workers each, `two_level`) or ``three_level:AxLxW`` (a top switch over A switches, each
    over L leaves of W workers, `tree`); `TopologyError` (one line) if it cannot be used."""
    m = GENERATED.fullmatch(str(path))
    if m:
        fanouts = [int(x) for x in m[2].split("x")]
        if len(fanouts) != (2 if m[1] == "two_level" else 3):
            raise TopologyError(
                f"topology {path}: use two_level:LEAVESxWORKERS or three_level:AxLEAVESxWORKERS"
            )
        if not all(1 <= f <= MAX_WORKERS for f in fanouts):
            raise TopologyError(
                f"topology {path}: every level has 1..{MAX_WORKERS} switches or workers below "
                "each switch (one bitmap)"
            )
        return parse(tree(fanouts), name=f"{m[1]}_{'x'.join(map(str, fanouts))}")
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TopologyError(f"topology file {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"topology file {path}: not valid JSON: {e}") from None
    return parse(data, name=p.stem)


def _host_address(n: int, hosts: int) -> dict:
    """Host ``n``'s IP and MAC: 10.0.0.n/24 while they fit (the files Mininet runs), else
    from 10.1.0.0 and 00:00:0b:... on (the simulator's bigger trees; clear of the
    switches' 10.0.0.25x and 00:00:0a:00:00:fx)."""
    if hosts <= 250:
        return {"ip": f"10.0.0.{n}/24", "mac": f"00:00:0a:00:00:{n:02x}"}
    return {
        "ip": f"10.{1 + (n >> 16)}.{n >> 8 & 255}.{n & 255}/8",
        "mac": f"00:00:0b:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}",
    }


def two_level(leaves: int, per_leaf: int, bw: float | None = None) -> dict:
    """The ``two_level_LxW`` topology as data: a spine s1 over ``leaves`` leaf switches,
    ``per_leaf`` worker hosts on each (used to write the files, and by `load`)."""
    return tree([leaves, per_leaf], bw)


def tree(fanouts: list[int], bw: float | None = None) -> dict:
    """A tree as topology data: the top switch s1 over ``fanouts[0]`` switches, each over
    ``fanouts[1]``, ..., the last number the worker hosts on each leaf. Two levels name the
    leaves l1, l2, ... (as the shipped two-level files do); three, the middle switches
    m1, m2, ... and their leaves l1, l2, ... across the tree."""
    hosts, links, switches = {}, [], {"s1": {}}
    total = math.prod(fanouts)
    n = 0
    made = {"m": 0, "l": 0}

    def wire(a: str, b: str) -> None:
        links.append([a, b] if bw is None else [a, b, "0ms", bw])

    def below(parent: str, level: int) -> None:
        nonlocal n
        if level == len(fanouts) - 1:  # worker hosts
            for p in range(1, fanouts[level] + 1):
                n += 1
                hosts[f"h{n}"] = _host_address(n, total)
                wire(f"h{n}", f"{parent}-p{p}")
            return
        kind = "l" if level == len(fanouts) - 2 else "m"
        for i in range(1, fanouts[level] + 1):
            made[kind] += 1
            name = f"{kind}{made[kind]}"
            switches[name] = {"parent": parent}
            below(name, level + 1)
            wire(f"{name}-p{fanouts[level + 1] + 1}", f"{parent}-p{i}")

    below("s1", 0)
    return {
        "hosts": hosts,
        "switches": switches,
        "links": links,
        "ina": {"job_id": 1, "pool_size": DEFAULT_POOL_SIZE, "udp_port_base": 50000},
    }
