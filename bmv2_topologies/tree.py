"""A Mininet network with a tree of INA switches: hierarchical aggregation on the wire.

`bmv2_topologies.launch.InaNetwork` builds one switch; this builds every switch of a
topology file whose switches have parents (`ina.topology`, e.g. ``two_level_2x2``): one
switch process per switch node (BMv2 running our program, or the switch model on the same
interfaces), each owning its node's veths in the root namespace and served on its own
P4Runtime address, programmed by the same control plane: the job's entries for that switch
(`ina.topology.Fabric.job_spec`: its contributors as workers, below the top its
``parent_table`` entry) and ``forward_table`` entries (each host's MAC -> the port towards
it) so that hosts ping across the tree.

Leaves aggregate their hosts and send the partial sum to the spine as one of its workers;
the spine's result comes back down by multicast (docs/protocol.md, "Hierarchical
aggregation"). Each worker host sends to its leaf's INA address (a static ARP entry) with
its id on that leaf, and knows the job's total worker count and its rank (`ina allreduce
--world N --rank R`). Process handling, the state file and teardown are `InaNetwork`'s.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from bmv2_topologies.network import (
    DEVICE_ID,
    MTU,
    REPO_ROOT,
    STATE_DIR,
    InaNetwork,
    Target,
    _offload_off,
    _port_only_switch,
    log,
)
from ina.host.launch import free_tcp_port
from ina.procs import stop_process
from ina.protocol import UDP_PORT
from ina.switch_model.tables import save_jobs
from ina.topology import Fabric


class TreeNetwork(InaNetwork):
    """`InaNetwork` for a tree of switches (see the module docstring)."""

    def __init__(
        self,
        fabric: Fabric,
        target: Target,
        state_dir: Path = STATE_DIR,
        pool_size: int | None = None,
        verbose: bool = False,
        prefix: str = "",
    ) -> None:
        from bmv2_topologies import mnpath

        mnpath.ensure_mininet()
        from mininet.log import setLogLevel

        setLogLevel("info" if verbose else "warning")
        if target.kind == "model" and not target.control_plane:
            raise SystemExit("a tree of switches is programmed over P4Runtime: needs ina.control")
        self.topo = fabric
        self.fabric = fabric
        self.target = target
        self.bw = None
        self.mtu = MTU
        self.switch_nice = 0
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        from bmv2_topologies.network import State

        self.state = State(self.state_dir / "state.json")
        self.pool_size = pool_size or fabric.pool_size
        # Mininet node names: a prefix keeps a test's interfaces apart from a user's network
        self.names = {s: f"{prefix}{s}" for s in fabric.switches}
        self.specs = {
            s: dataclasses.replace(fabric.job_spec(s), pool_size=self.pool_size)
            for s in fabric.switches
        }
        self.jobs_files = {s: self.state_dir / f"jobs_{s}.json" for s in fabric.switches}
        self.grpc = {s: f"127.0.0.1:{free_tcp_port()}" for s in fabric.switches}
        self.thrift = {s: free_tcp_port() for s in fabric.switches}
        self.net = None
        self.switch_procs: dict[str, subprocess.Popen] = {}
        self.conns: dict = {}
        self.procs: list[subprocess.Popen] = []
        self.conn = None
        self.final_counters = None
        self.switch_proc = None
        self._switch_lines: queue.Queue[str] = queue.Queue()

    # -- build ---------------------------------------------------------------------------

    def start(self) -> TreeNetwork:
        from mininet.link import TCLink
        from mininet.net import Mininet
        from mininet.node import Host
        from mininet.topo import Topo

        f = self.fabric
        names = self.names
        for s, path in self.jobs_files.items():
            save_jobs(path, [self.specs[s]])

        class TreeTopo(Topo):
            def build(self):
                for i, s in enumerate(f.top_down()):
                    self.addSwitch(names[s], dpid=f"{i + 1:016x}")
                for h in f.hosts.values():
                    self.addHost(h.name, ip=f"{h.ip}/{h.prefix}", mac=h.mac)
                for link in f.links:
                    opts = {"bw": link.bw} if link.bw else {}  # htb shaping, as on one switch
                    if link.a_port is None:
                        self.addLink(link.a, names[link.b], port2=link.b_port, **opts)
                    else:
                        a, b = names[link.a], names[link.b]
                        self.addLink(a, b, port1=link.a_port, port2=link.b_port, **opts)

        for link in f.links:
            if link.delay or link.loss:
                log(f"{link.a}-{link.b}: delay/loss ignored here (no netem on this kernel)")
        self.state.save()
        self.net = Mininet(
            topo=TreeTopo(),
            switch=_port_only_switch(),
            host=Host,
            link=TCLink,
            controller=None,
            autoSetMacs=False,
            autoStaticArp=True,
            build=False,
        )
        try:
            self.net.build()
            self.state.interfaces = [
                i.name
                for s in f.switches
                for i in self.net.get(names[s]).intfList()
                if i.name != "lo"
            ]
            for h in self.net.hosts:
                self.state.add(h.pid, f"host {h.name} shell")
            self.net.start()
            self._configure()
            for s in f.top_down():
                self._start_one(s)
            for s in f.top_down():
                self._program_one(s)
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self) -> None:
        f = self.fabric
        for s in f.switches:
            node = self.net.get(self.names[s])
            for intf in node.intfList():
                if intf.name != "lo":
                    _offload_off(node.cmd, intf.name)
                    node.cmd(f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1")
        for h in self.net.hosts:
            h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
            _offload_off(h.cmd, h.defaultIntf().name)
            if h.name in f.host_switch:
                leaf = f.switches[f.host_switch[h.name][0]]
                h.setARP(leaf.ina_ip, leaf.ina_mac)
            for c in f.hosts[h.name].commands:
                h.cmd(c)

    def switch_ports(self, s: str) -> dict[int, str]:
        node = self.net.get(self.names[s])
        return {node.ports[i]: i.name for i in node.intfList() if i.name != "lo"}

    def _start_one(self, s: str) -> None:
        ports = self.switch_ports(s)
        spec = ",".join(f"{n}@{name}" for n, name in sorted(ports.items()))
        logfile = self.state_dir / f"{s}.log"
        if self.target.kind == "bmv2":
            cmd = ["simple_switch_grpc", "--device-id", str(DEVICE_ID)]
            for n, name in sorted(ports.items()):
                cmd += ["-i", f"{n}@{name}"]
            cmd += [
                "--thrift-port", str(self.thrift[s]), "--no-p4",
                "--", "--grpc-server-addr", self.grpc[s],
            ]  # fmt: skip
        else:
            cmd = [
                sys.executable, "-m", "ina.switch_model.rawio", "--ports", spec,
                "--lanes", str(self.target.lanes), "--device-id", str(DEVICE_ID),
                "--grpc", self.grpc[s],
            ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(logfile, "w") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=REPO_ROOT
            )
        self.switch_procs[s] = proc
        self.state.add(proc.pid, f"switch {s} ({self.target.kind})", cmd)
        if self.target.kind == "model":
            # _wait_ready reads self.switch_proc's lines: point it at this switch for now
            self.switch_proc, self._switch_lines = proc, queue.Queue()
            threading.Thread(target=self._read_switch, daemon=True).start()
            self._wait_ready(logfile)
            self.switch_proc = None
        log(f"switch {s}: {self.target.kind} on {spec} (log {logfile})")

    def forward_entries(self, s: str) -> dict[str, int]:
        """Every host's MAC -> ``s``'s port towards it (down its subtree, else up)."""
        f = self.fabric
        out = {}
        for h, (leaf, port) in f.host_switch.items():
            if leaf == s:
                out[f.hosts[h].mac] = port
                continue
            up = leaf  # climb from the host's leaf until just below s, if s is above it
            while f.switches[up].parent not in (None, s):
                up = f.switches[up].parent
            if f.switches[up].parent == s:
                out[f.hosts[h].mac] = f.port(s, up)
            elif f.switches[s].parent is not None:
                out[f.hosts[h].mac] = f.port(s, f.switches[s].parent)
        return out

    def _program_one(self, s: str) -> None:
        from ina.control.jobs import install_job
        from ina.control.p4rt import INSERT, SwitchConnection

        conn = SwitchConnection(self.grpc[s], device_id=DEVICE_ID, timeout=30.0)
        self.conns[s] = conn
        if self.target.kind == "bmv2":
            bmv2_json, p4info = self.target.program
            conn.push_pipeline(p4info=p4info, device_config=bmv2_json)
        else:
            conn.push_pipeline()
        # Right after the pipeline push every register is zero, so BMv2's missing register
        # writes (install_job's warning about the pool reset) do not matter here.
        jobs_log = logging.getLogger("ina.control.jobs")
        level = jobs_log.level
        jobs_log.setLevel(logging.ERROR)
        try:
            install_job(conn, self.specs[s])
        finally:
            jobs_log.setLevel(level)
        conn.write(
            [
                conn.update(
                    INSERT,
                    conn.table_entry("forward_table", {"dst_mac": mac}, "forward", {"port": p}),
                )
                for mac, p in self.forward_entries(s).items()
            ]
        )
        spec = self.specs[s]
        up = (
            f", up to {spec.parent.ip} as its worker {spec.parent.worker_id}" if spec.parent else ""
        )
        log(f"{s}: job {spec.job_id} with {spec.num_workers} contributors{up} ({self.grpc[s]})")

    # -- use -----------------------------------------------------------------------------

    def worker_cmd(self, command: str, worker_id: int, extra: list[str]) -> list[str]:
        """``ina allreduce`` for global worker ``worker_id``, on its leaf."""
        leaf, local = self.fabric.leaf_of(worker_id)
        return [
            sys.executable, "-m", "ina", command,
            "--switch", f"{self.fabric.switches[leaf].ina_ip}:{UDP_PORT}",
            "--jobs", str(self.jobs_files[leaf]), "--worker-id", str(local),
            "--world", str(len(self.fabric.workers)), "--rank", str(worker_id),
            "--lanes", str(self.target.lanes), *extra,
        ]  # fmt: skip

    def all_counters(self) -> dict[str, dict]:
        """Every switch's ``ina_stats`` and per-worker contributions, over P4Runtime."""
        from ina.control.counters import read_counters

        return {s: read_counters(c).as_dict() for s, c in self.conns.items()}

    def counters(self) -> dict | None:
        return self.all_counters()[self.fabric.root]

    # -- teardown ------------------------------------------------------------------------

    def stop_switch(self) -> None:
        for conn in self.conns.values():
            try:
                conn.close()
            except Exception:  # a half-open connection must not stop the teardown
                pass
        self.conns = {}
        for p in self.switch_procs.values():
            stop_process(p)
            self.state.forget(p.pid)
        self.switch_procs = {}


def print_tree_counters(net: TreeNetwork) -> None:
    for s, c in net.all_counters().items():
        print(f"switch {s} counters (packets):")
        print("  " + json.dumps({k: v[0] for k, v in c.items() if not k.startswith("worker_")}))
