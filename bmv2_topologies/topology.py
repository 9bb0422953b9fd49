"""Topology files: the p4lang tutorials' ``topology.json``, and what INA derives from them.

A topology is data, never code. The file format is the one of the
p4lang tutorials (``utils/run_exercise.py``), plus an optional ``"ina"`` section::

    {
      "hosts": {
        "h1": {"ip": "10.0.0.1/24", "mac": "00:00:0a:00:00:01", "commands": []},
        ...
      },
      "switches": {"s1": {}},
      "links": [["h1", "s1-p1"], ["h2", "s1-p2", "0ms", 100], ...],
      "ina": {"switch_ip": "10.0.0.254", "switch_mac": "00:00:0a:00:00:fe",
              "job_id": 1, "pool_size": 128, "udp_port_base": 50000,
              "workers": ["h1", "h2", ...]}
    }

A link is ``[node1, node2]``, ``[node1, node2, delay]`` or ``[node1, node2, delay, bw]`` as
in the tutorials, or an object ``{"node1", "node2", "delay", "bw"}``; ``bw`` is in Mbit/s,
``delay`` like ``"2ms"``. A switch end is ``s1-p3`` (switch s1, port 3); a host has one
interface. ``commands`` run on the host once the network is up (tutorial convention).

What INA derives (`Topology.job`, `Topology.forward_entries`):

- the job: its workers are the ``ina.workers`` hosts (default: every host, in natural name
  order), worker id = position in that list; each worker listens on ``udp_port_base +
  worker_id`` at its host's IP, reached through the switch port its link names;
- the switch's INA address (``switch_ip``/``switch_mac``, default 10.0.0.254 and
  00:00:0a:00:00:fe): what workers send to. Hosts get a static ARP entry for it; the switch
  answers INA packets (UDP to `ina.protocol.UDP_PORT`) whatever address they carry and uses
  this one as the source of its replies (it is the requests' destination);
- ``forward_table``: every host's MAC -> the switch port it hangs off, so that hosts reach
  each other (ping, the gloo ring of the benchmark). There is no flooding: hosts get static
  ARP entries for each other too.

One switch per topology: the program aggregates every INA packet it parses, so a second
switch on the path would aggregate too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ina.switch_model.tables import JobSpec, WorkerAddress

HERE = Path(__file__).resolve().parent
DEFAULT_SWITCH_IP = "10.0.0.254"
DEFAULT_SWITCH_MAC = "00:00:0a:00:00:fe"
DEFAULT_UDP_PORT_BASE = 50000
DEFAULT_POOL_SIZE = 128

_PORT = re.compile(r"^(?P<switch>[A-Za-z_][\w]*)-p(?P<port>\d+)$")


def natural_key(name: str) -> list:
    """h2 < h10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class HostSpec:
    name: str
    ip: str  # without prefix length
    prefix: int
    mac: str
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkSpec:
    host: str  # host name, or a switch end for switch-switch links (not supported)
    switch: str
    port: int
    bw: float | None = None  # Mbit/s
    delay: str | None = None


@dataclass
class Topology:
    """A parsed topology file."""

    name: str
    hosts: dict[str, HostSpec]
    switch: str
    links: list[LinkSpec]
    switch_ip: str = DEFAULT_SWITCH_IP
    switch_mac: str = DEFAULT_SWITCH_MAC
    job_id: int = 1
    pool_size: int = DEFAULT_POOL_SIZE
    udp_port_base: int = DEFAULT_UDP_PORT_BASE
    workers: list[str] = field(default_factory=list)

    def port_of(self, host: str) -> int:
        for link in self.links:
            if link.host == host:
                return link.port
        raise KeyError(f"host {host} has no link to {self.switch}")

    def job(self, pool_size: int | None = None) -> JobSpec:
        """The INA job over the worker hosts (worker id = order in ``workers``)."""
        workers = tuple(
            WorkerAddress(
                job_id=self.job_id,
                worker_id=w,
                ip=self.hosts[h].ip,
                udp_port=self.udp_port_base + w,
                mac=self.hosts[h].mac,
                port=self.port_of(h),
            )
            for w, h in enumerate(self.workers)
        )
        return JobSpec(
            job_id=self.job_id,
            num_workers=len(workers),
            pool_base=0,
            pool_size=pool_size or self.pool_size,
            workers=workers,
        )

    def forward_entries(self) -> dict[str, int]:
        """forward_table: host MAC -> switch port."""
        return {self.hosts[link.host].mac: link.port for link in self.links}

    def runtime_json(self) -> dict:
        """forward_table entries in the p4lang tutorials' runtime JSON form."""
        return {
            "target": "bmv2",
            "table_entries": [
                {
                    "table": "forward_table",
                    "match": {"dst_mac": mac},
                    "action_name": "forward",
                    "action_params": {"port": port},
                }
                for mac, port in sorted(self.forward_entries().items(), key=lambda kv: kv[1])
            ],
        }


def _link(raw) -> tuple[str, str, str | None, float | None]:
    if isinstance(raw, dict):
        return raw["node1"], raw["node2"], raw.get("delay"), raw.get("bw")
    if not isinstance(raw, list) or not 2 <= len(raw) <= 4:
        raise ValueError(f"link {raw!r}: expected [node1, node2, delay?, bw?] or an object")
    a, b = raw[0], raw[1]
    delay = raw[2] if len(raw) > 2 else None
    bw = raw[3] if len(raw) > 3 else None
    return a, b, delay, bw


def _delay(value) -> str | None:
    if value is None:
        return None
    text = f"{value}ms" if isinstance(value, int | float) else str(value)
    return None if re.fullmatch(r"0+(\.0*)?(ms|us|s)?", text) else text


def parse(data: dict, name: str = "topology") -> Topology:
    """Validate a topology (the JSON's dict) and resolve what INA needs."""
    hosts: dict[str, HostSpec] = {}
    for hname, h in data.get("hosts", {}).items():
        ip, _, prefix = str(h["ip"]).partition("/")
        hosts[hname] = HostSpec(
            name=hname,
            ip=ip,
            prefix=int(prefix or 24),
            mac=str(h["mac"]).lower(),
            commands=tuple(h.get("commands", ())),
        )
    switches = list(data.get("switches", {}))
    if len(switches) != 1:
        raise ValueError(
            f"{name}: INA topologies have exactly one (aggregating) switch, got {switches}"
        )
    switch = switches[0]
    links: list[LinkSpec] = []
    for raw in data.get("links", []):
        a, b, delay, bw = _link(raw)
        ends = sorted((a, b), key=lambda n: n in hosts)  # switch end first
        m = _PORT.match(ends[0])
        if ends[1] not in hosts or m is None or m["switch"] != switch:
            raise ValueError(f"{name}: link {raw!r} must join a host and {switch}-pN")
        links.append(LinkSpec(ends[1], switch, int(m["port"]), bw, _delay(delay)))
    ports = [link.port for link in links]
    if len(set(ports)) != len(ports):
        raise ValueError(f"{name}: a switch port is used twice: {sorted(ports)}")
    linked = [link.host for link in links]
    if len(set(linked)) != len(linked):
        raise ValueError(f"{name}: a host has two links (hosts have one interface)")
    ina = data.get("ina", {})
    workers = list(ina.get("workers") or sorted(linked, key=natural_key))
    for w in workers:
        if w not in linked:
            raise ValueError(f"{name}: worker {w} is not a linked host")
    macs = [h.mac for h in hosts.values()]
    if len(set(macs)) != len(macs):
        raise ValueError(f"{name}: two hosts share a MAC address")
    topo = Topology(
        name=name,
        hosts=hosts,
        switch=switch,
        links=links,
        switch_ip=ina.get("switch_ip", DEFAULT_SWITCH_IP),
        switch_mac=ina.get("switch_mac", DEFAULT_SWITCH_MAC).lower(),
        job_id=int(ina.get("job_id", 1)),
        pool_size=int(ina.get("pool_size", DEFAULT_POOL_SIZE)),
        udp_port_base=int(ina.get("udp_port_base", DEFAULT_UDP_PORT_BASE)),
        workers=workers,
    )
    topo.job()  # validates the job (worker count, pool size)
    return topo


def resolve(name_or_path: str) -> Path:
    """``single_4`` -> bmv2_topologies/single_4.json; a path stays a path."""
    p = Path(name_or_path)
    if p.suffix == ".json" and p.exists():
        return p
    candidate = HERE / f"{name_or_path}.json"
    if candidate.exists():
        return candidate
    names = sorted(q.stem for q in HERE.glob("*.json"))
    raise FileNotFoundError(f"no topology {name_or_path!r}: try one of {names} or a path")


def load(name_or_path: str) -> Topology:
    path = resolve(name_or_path)
    return parse(json.loads(path.read_text()), name=path.stem)


def single(n: int, bw: float | None = None) -> dict:
    """The ``single_N`` topology as data: N hosts on one switch (used to write the files)."""
    hosts = {
        f"h{i}": {"ip": f"10.0.0.{i}/24", "mac": f"00:00:0a:00:00:{i:02x}", "commands": []}
        for i in range(1, n + 1)
    }
    links = [
        [f"h{i}", f"s1-p{i}"] if bw is None else [f"h{i}", f"s1-p{i}", "0ms", bw]
        for i in range(1, n + 1)
    ]
    return {
        "hosts": hosts,
        "switches": {"s1": {}},
        "links": links,
        "ina": {
            "switch_ip": DEFAULT_SWITCH_IP,
            "switch_mac": DEFAULT_SWITCH_MAC,
            "job_id": 1,
            "pool_size": DEFAULT_POOL_SIZE,
            "udp_port_base": DEFAULT_UDP_PORT_BASE,
        },
    }
