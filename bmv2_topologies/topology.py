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

One switch per topology here: the program aggregates every INA packet it parses, so a second
switch on the path would aggregate too, unless it is configured as the first one's parent:
files whose switches form a tree (``"parent"``) are hierarchical aggregation, read by
`ina.topology` and run by `bmv2_topologies.tree`. `parse` is `ina.topology.parse` (one parser
of the format, its one-line errors) seen as one switch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ina import topology as ina_topology
from ina.switch_model.tables import JobSpec, WorkerAddress

HERE = Path(__file__).resolve().parent
DEFAULT_SWITCH_IP = "10.0.0.254"
DEFAULT_SWITCH_MAC = "00:00:0a:00:00:fe"
DEFAULT_UDP_PORT_BASE = 50000
DEFAULT_POOL_SIZE = 128

# A host as the topology file gives it (the same record `ina.topology` reads).
HostSpec = ina_topology.Host
natural_key = ina_topology.natural_key


@dataclass(frozen=True)
class LinkSpec:
    host: str  # host name
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


def parse(data: dict, name: str = "topology") -> Topology:
    """Validate a one-switch topology (the JSON's dict) and resolve what INA needs; a
    `ValueError` (`ina.topology.TopologyError`) says what is wrong in one line."""
    fabric = ina_topology.parse(data, name)
    if fabric.hierarchical:
        raise ina_topology.TopologyError(
            f"topology {name}: switches {', '.join(fabric.top_down())} form a tree: one "
            "(aggregating) switch here; bmv2_topologies.tree runs a tree"
        )
    switch = fabric.root
    top = fabric.switches[switch]
    topo = Topology(
        name=name,
        hosts=dict(fabric.hosts),
        switch=switch,
        links=[LinkSpec(k.a, k.b, k.b_port, k.bw, k.delay) for k in fabric.links],
        switch_ip=top.ina_ip,
        switch_mac=top.ina_mac,
        job_id=fabric.job_id,
        pool_size=fabric.pool_size,
        udp_port_base=fabric.udp_port_base,
        workers=list(fabric.workers),
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
