"""The INA network in Mininet: one switch node (BMv2 running our program, or the switch model
on the same interfaces) and its worker hosts, programmed through P4Runtime, and the state
file that lets a killed run be cleaned up (`bmv2_topologies.launch` is the command around it;
`bmv2_topologies.tree` builds a tree of these switch nodes)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    from bmv2_topologies import mnpath, topology
except ImportError:  # run as a script: python bmv2_topologies/network.py
    import mnpath  # type: ignore[no-redef]
    import topology  # type: ignore[no-redef]

from ina.host.launch import free_tcp_port
from ina.procs import stop_process
from ina.protocol import HEADER_BYTES, P4_LANES, UDP_PORT

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = REPO_ROOT / "build" / "topo"
P4_BUILD = REPO_ROOT / "build" / "p4"
DEVICE_ID = 1  # P4Runtime device id of the switch (both targets are started with it)
MODEL_LANES = 256  # lanes per packet on the model; a 1500-byte MTU carries up to 363
MTU = 1500  # Mininet's veths; --mtu 9000 for jumbo frames
READY_TIMEOUT = 60.0


def log(msg: str) -> None:
    print(f"*** {msg}", flush=True)


# -- which switch -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The switch to start: ``kind`` is "bmv2" or "model"; ``reason`` says why."""

    kind: str
    reason: str
    lanes: int
    program: tuple[Path, Path] | None = None  # BMv2 JSON, P4Info
    control_plane: bool = True  # program through P4Runtime (else files, model only)


def have_control_plane() -> bool:
    try:
        return all(
            importlib.util.find_spec(m) is not None
            for m in ("ina.control.jobs", "ina.control.p4rt")
        )
    except ImportError:
        return False


def max_lanes(mtu: int) -> int:
    """The most lanes an INA packet can have in an MTU (IPv4 20 + UDP 8 + INA header)."""
    return (mtu - 28 - HEADER_BYTES) // 4


def choose_target(
    requested: str, lanes: int | None, mtu: int = MTU, program: tuple[Path, Path] | None = None
) -> Target:
    """BMv2 when asked or available with a compiled program; the switch model otherwise.

    ``program`` (BMv2 JSON, P4Info) is the compiled program to run; by default build/p4's,
    compiled first when p4c is there and it is missing."""
    cp = have_control_plane()
    model_lanes = lanes or MODEL_LANES
    if model_lanes > max_lanes(mtu):
        raise SystemExit(
            f"--lanes {model_lanes}: an MTU of {mtu} carries at most {max_lanes(mtu)} lanes"
        )
    if requested == "model":
        return Target("model", "asked for (--target model)", model_lanes, control_plane=cp)
    ssg = shutil.which("simple_switch_grpc")
    why_not = None
    given = program is not None
    program = program or (P4_BUILD / "ina.json", P4_BUILD / "ina.p4info.txtpb")
    if ssg is None:
        why_not = "simple_switch_grpc (BMv2) is not on PATH"
    elif not cp:
        why_not = "the P4Runtime control plane (ina.control) is missing"
    elif not all(p.exists() for p in program):
        if shutil.which("p4c-bm2-ss") and not given:
            log("compiling the P4 program (python -m ina.p4build)")
            subprocess.run([sys.executable, "-m", "ina.p4build"], cwd=REPO_ROOT, check=False)
        if not all(p.exists() for p in program):
            why_not = f"the compiled program is missing ({program[0]}: run `make p4`)"
    if why_not is not None:
        if requested == "bmv2":
            raise SystemExit(f"--target bmv2: {why_not}")
        how = "programmed over P4Runtime" if cp else "programmed from the jobs file"
        return Target(
            "model", f"{why_not}; the switch model stands in ({how})", model_lanes, control_plane=cp
        )
    if lanes not in (None, P4_LANES):
        log(f"BMv2 runs the P4 program's {P4_LANES} lanes per packet, not {lanes}")
    return Target("bmv2", f"simple_switch_grpc at {ssg} runs {program[0]}", P4_LANES, program)


# -- state file (for --stop) ------------------------------------------------------------------


def cmdline_of(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass
class State:
    """What a running launcher started, written to ``build/topo/state.json``."""

    path: Path
    processes: list[dict] = field(default_factory=list)  # {"pid", "cmdline", "what"}
    interfaces: list[str] = field(default_factory=list)

    def add(self, pid: int, what: str, argv: list[str] | None = None) -> None:
        """Record a process: ``argv`` as started (a just-forked child may not show it in
        /proc yet), else its command line now."""
        cmdline = list(argv) if argv is not None else cmdline_of(pid) or []
        self.processes.append({"pid": pid, "cmdline": cmdline, "what": what})
        self.save()

    def forget(self, pid: int) -> None:
        self.processes = [p for p in self.processes if p["pid"] != pid]
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "launcher": {"pid": os.getpid(), "cmdline": cmdline_of(os.getpid()) or []},
            "processes": self.processes,
            "interfaces": self.interfaces,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def same_process(rec: dict) -> bool:
    """Is the recorded PID still the process we started (not a reused PID)? Its command
    line must be the recorded one (possibly still behind Mininet's ``mnexec -da PID``)."""
    now = cmdline_of(rec["pid"])
    want = rec.get("cmdline") or []
    if not now or not want:
        return False
    return now == want or (now[0] == "mnexec" and now[-len(want) :] == want)


def stop_pid(pid: int, grace: float = 3.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and cmdline_of(pid) is not None:
        time.sleep(0.05)
    if cmdline_of(pid) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def interface_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def stop_leftovers(state_dir: Path = STATE_DIR) -> int:
    """Clean up after a previous run from its state file: its launcher, then its processes
    (PID and command line must both match), then its interfaces. Returns what was stopped."""
    path = state_dir / "state.json"
    if not path.exists():
        log(f"nothing to stop: no {path}")
        return 0
    data = json.loads(path.read_text())
    n = 0
    launcher = data.get("launcher", {})
    if launcher.get("pid") not in (None, os.getpid()) and same_process(launcher):
        log(f"stopping the launcher (pid {launcher['pid']}); it tears its network down")
        stop_pid(launcher["pid"], grace=20.0)
        n += 1
    for rec in reversed(data.get("processes", [])):
        if same_process(rec):
            log(f"stopping {rec['what']} (pid {rec['pid']})")
            stop_pid(rec["pid"])
            n += 1
    time.sleep(0.2)  # namespaces go with their last process; their veths with them
    for name in data.get("interfaces", []):
        if interface_exists(name):
            log(f"deleting interface {name}")
            subprocess.run(["ip", "link", "del", name], check=False)
            n += 1
    path.unlink(missing_ok=True)
    log(f"stopped {n} leftover(s)")
    return n


# -- the network ------------------------------------------------------------------------------


def _offload_off(run, ifname: str) -> None:
    """Checksums and segmentation done in software, so that frames on the wire are whole
    (the switch copies plain frames as they are, like BMv2)."""
    run(f"ethtool -K {ifname} rx off tx off sg off tso off gso off gro off >/dev/null 2>&1")


class InaNetwork:
    """A Mininet network with an INA switch, built from a `topology.Topology`.

    Use as a context manager; `stop` (or leaving the block) tears down exactly what it made.
    """

    def __init__(
        self,
        topo: topology.Topology,
        target: Target,
        bw: float | None = None,
        state_dir: Path = STATE_DIR,
        switch_name: str | None = None,
        pool_size: int | None = None,
        verbose: bool = False,
        mtu: int = MTU,
        switch_nice: int = 0,
    ) -> None:
        mnpath.ensure_mininet()
        from mininet.log import setLogLevel

        # Building the network quietly (Mininet's "*** Adding hosts" chatter off); the CLI
        # gets Mininet's own level back (see `open_cli`).
        setLogLevel("info" if verbose else "warning")
        self.topo = topo
        self.target = target
        self.bw = bw
        self.mtu = mtu
        # < 0: the switch gets the CPU first, as if it were a device of its own (here the
        # hosts and the switch share two cores)
        self.switch_nice = switch_nice
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state = State(self.state_dir / "state.json")
        self.switch_name = switch_name or topo.switch
        self.spec = topo.job(pool_size)
        self.jobs_file = self.state_dir / "jobs.json"
        self.forward_file = self.state_dir / "forward.json"
        self.grpc_address = f"127.0.0.1:{free_tcp_port()}"
        self.thrift_port = free_tcp_port()
        self.net = None
        self.switch_proc: subprocess.Popen | None = None
        self._switch_lines: queue.Queue[str] = queue.Queue()
        self.final_counters: dict | None = None
        self.conn = None
        self.procs: list[subprocess.Popen] = []

    # -- build -----------------------------------------------------------------------------

    def start(self) -> InaNetwork:
        from mininet.link import TCIntf, TCLink
        from mininet.net import Mininet
        from mininet.node import Host
        from mininet.topo import Topo

        from ina.switch_model.tables import save_jobs

        save_jobs(self.jobs_file, [self.spec])
        self.forward_file.write_text(json.dumps(self.topo.runtime_json(), indent=2) + "\n")
        tp = self.topo
        sw = self.switch_name

        class JsonTopo(Topo):
            """The topology file's hosts and links around one switch."""

            def build(self, links_bw):
                self.addSwitch(sw)
                for h in tp.hosts.values():
                    self.addHost(h.name, ip=f"{h.ip}/{h.prefix}", mac=h.mac)
                for link, bw in links_bw:
                    opts = {"bw": bw} if bw else {}
                    self.addLink(link.host, sw, port2=link.port, **opts)

        links_bw = []
        for link in tp.links:
            bw = self.bw if self.bw is not None else link.bw
            if link.delay:
                log(f"{link.host}-{sw}: delay {link.delay} ignored (no netem on this kernel)")
            links_bw.append((link, bw))

        class QuietTCIntf(TCIntf):
            """htb's warning that a 100 Mbit/s class has a big quantum is not an error."""

            def tc(self, cmd, tc="tc"):
                out = super().tc(cmd, tc)
                return "" if "quantum of class" in out else out

        class QuietTCLink(TCLink):
            def __init__(self, *args, **kwargs):
                kwargs.setdefault("cls1", QuietTCIntf)
                kwargs.setdefault("cls2", QuietTCIntf)
                super().__init__(*args, **kwargs)

        self.state.save()
        self.net = Mininet(
            topo=JsonTopo(links_bw=links_bw),
            switch=_port_only_switch(),
            host=Host,
            link=QuietTCLink,
            controller=None,
            autoSetMacs=False,
            autoStaticArp=True,
            build=False,
        )
        try:
            self.net.build()
            switch = self.net.get(sw)
            self.state.interfaces = [i.name for i in switch.intfList() if i.name != "lo"]
            for h in self.net.hosts:
                self.state.add(h.pid, f"host {h.name} shell")
            self.net.start()
            self._configure()
            self._start_switch()
            self._program()
        except BaseException:
            self.stop()
            raise
        return self

    def _configure(self) -> None:
        switch = self.net.get(self.switch_name)
        for intf in switch.intfList():
            if intf.name == "lo":
                continue
            _offload_off(switch.cmd, intf.name)
            switch.cmd(f"sysctl -qw net.ipv6.conf.{intf.name}.disable_ipv6=1")
            if self.mtu != MTU:
                switch.cmd(f"ip link set dev {intf.name} mtu {self.mtu}")
        for h in self.net.hosts:
            spec = self.topo.hosts[h.name]
            h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
            h.cmd("sysctl -qw net.ipv6.conf.default.disable_ipv6=1")
            _offload_off(h.cmd, h.defaultIntf().name)
            if self.mtu != MTU:
                h.cmd(f"ip link set dev {h.defaultIntf().name} mtu {self.mtu}")
            h.setARP(self.topo.switch_ip, self.topo.switch_mac)
            for c in spec.commands:
                h.cmd(c)

    def ports(self) -> dict[int, str]:
        switch = self.net.get(self.switch_name)
        return {switch.ports[i]: i.name for i in switch.intfList() if i.name != "lo"}

    def _start_switch(self) -> None:
        ports = self.ports()
        spec = ",".join(f"{n}@{name}" for n, name in sorted(ports.items()))
        logfile = self.state_dir / f"{self.switch_name}.log"
        if self.target.kind == "bmv2":
            cmd = ["simple_switch_grpc", "--device-id", str(DEVICE_ID)]
            for n, name in sorted(ports.items()):
                cmd += ["-i", f"{n}@{name}"]
            cmd += [
                "--thrift-port", str(self.thrift_port), "--no-p4",
                "--", "--grpc-server-addr", self.grpc_address,
            ]  # fmt: skip
        else:
            cmd = [
                sys.executable, "-m", "ina.switch_model.rawio", "--ports", spec,
                "--lanes", str(self.target.lanes), "--device-id", str(DEVICE_ID),
            ]  # fmt: skip
            if self.target.control_plane:
                cmd += ["--grpc", self.grpc_address]
            else:
                cmd += ["--jobs", str(self.jobs_file), "--forward", str(self.forward_file)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(logfile, "w") as err:
            self.switch_proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=REPO_ROOT
            )
        what = f"switch {self.switch_name} ({self.target.kind})"
        self.state.add(self.switch_proc.pid, what, cmd)
        if self.switch_nice:
            os.setpriority(os.PRIO_PROCESS, self.switch_proc.pid, self.switch_nice)
        threading.Thread(target=self._read_switch, daemon=True).start()
        if self.target.kind == "model":
            self._wait_ready(logfile)
        log(f"switch {self.switch_name}: {self.target.kind} on {spec} (log {logfile})")

    def _read_switch(self) -> None:
        for line in self.switch_proc.stdout:
            self._switch_lines.put(line.rstrip("\n"))

    def _wait_ready(self, logfile: Path) -> None:
        from ina.switch_model.rawio import READY

        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            try:
                line = self._switch_lines.get(timeout=0.2)
            except queue.Empty:
                if self.switch_proc.poll() is not None:
                    break
                continue
            if line.startswith(READY):
                return
        raise RuntimeError(f"the switch model did not start: {logfile.read_text().strip()[-2000:]}")

    def _program(self) -> None:
        if not self.target.control_plane:
            log(f"programmed from {self.jobs_file} and {self.forward_file}")
            return
        from ina.control.jobs import install_job
        from ina.control.p4rt import INSERT, SwitchConnection

        self.conn = SwitchConnection(self.grpc_address, device_id=DEVICE_ID, timeout=30.0)
        self.state.save()
        if self.target.kind == "bmv2":
            bmv2_json, p4info = self.target.program
            self.conn.push_pipeline(p4info=p4info, device_config=bmv2_json)
        else:
            self.conn.push_pipeline()
        # The push just zeroed every register, so no pool reset (BMv2's goes over Thrift,
        # which a build without Thrift does not serve).
        install_job(self.conn, self.spec)
        self.conn.write(
            [
                self.conn.update(
                    INSERT,
                    self.conn.table_entry(
                        "forward_table", {"dst_mac": mac}, "forward", {"port": port}
                    ),
                )
                for mac, port in self.topo.forward_entries().items()
            ]
        )
        log(
            f"programmed over P4Runtime ({self.grpc_address}): job {self.spec.job_id} with "
            f"{self.spec.num_workers} workers, {len(self.topo.forward_entries())} forwarding "
            "entries"
        )

    # -- use -------------------------------------------------------------------------------

    def host(self, name: str):
        return self.net.get(name)

    def popen(self, host: str, cmd: list[str], **kw) -> subprocess.Popen:
        """Start ``cmd`` on ``host`` (recorded for teardown and --stop)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        env.update(kw.pop("env", {}))
        p = self.host(host).popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            cwd=REPO_ROOT, **kw,
        )  # fmt: skip
        self.procs.append(p)
        self.state.add(p.pid, f"{host}: {' '.join(cmd[:4])}", cmd)
        return p

    def run_on_hosts(
        self,
        cmds: dict[str, list[str]],
        timeout: float,
        fail_fast: bool = True,
        env: dict[str, dict[str, str]] | None = None,
    ) -> dict[str, tuple]:
        """Run one command per host at once (``env``: extra variables per host); {host:
        (exit code, output)}. A command still running at ``timeout`` is killed (exit -9);
        with ``fail_fast`` the first one that fails stops the others (they would wait for
        it forever)."""
        env = env or {}
        started = {h: self.popen(h, c, env=env.get(h, {})) for h, c in cmds.items()}
        texts: dict[str, list[str]] = {h: [] for h in started}
        readers = [
            threading.Thread(target=lambda p=p, h=h: texts[h].extend(p.stdout), daemon=True)
            for h, p in started.items()
        ]
        for t in readers:
            t.start()
        deadline = time.monotonic() + timeout
        note = {}
        while any(p.poll() is None for p in started.values()):
            failed = [h for h, p in started.items() if p.returncode not in (None, 0)]
            late = time.monotonic() > deadline
            if late or (fail_fast and failed):
                why = f"timed out after {timeout:.0f} s" if late else f"{failed[0]} failed"
                for h, p in started.items():
                    if p.poll() is None:
                        p.kill()
                        note[h] = f"[killed: {why}]"
                break
            time.sleep(0.05)
        out: dict[str, tuple] = {}
        for (h, p), t in zip(started.items(), readers, strict=True):
            p.wait()
            t.join(5)
            text = "".join(texts[h]) + (f"\n{note[h]}" if h in note else "")
            out[h] = (p.returncode, text)
            self.state.forget(p.pid)
        self.procs = [p for p in self.procs if p not in started.values()]
        return out

    def counters(self) -> dict | None:
        """The switch's ``ina_stats`` (and per-worker contributions): over P4Runtime when
        connected; else the model's final counters (this stops the switch)."""
        if self.conn is not None:
            from ina.control.counters import read_counters

            return read_counters(self.conn).as_dict()
        self.stop_switch()
        return self.final_counters

    def worker_cmd(self, command: str, worker_id: int, extra: list[str]) -> list[str]:
        return [
            sys.executable, "-m", "ina", command,
            "--switch", f"{self.topo.switch_ip}:{UDP_PORT}",
            "--jobs", str(self.jobs_file), "--worker-id", str(worker_id),
            "--lanes", str(self.target.lanes), *extra,
        ]  # fmt: skip

    # -- teardown --------------------------------------------------------------------------

    def stop_switch(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
        p = self.switch_proc
        if p is None:
            return
        stop_process(p)
        time.sleep(0.1)
        while not self._switch_lines.empty():
            line = self._switch_lines.get()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self.final_counters = json.loads(line).get("counters")
        self.state.forget(p.pid)
        self.switch_proc = None

    def stop(self) -> None:
        """Stop our processes (by PID), then the network (interfaces, namespaces)."""
        for p in self.procs:
            stop_process(p, 3)
        self.procs = []
        self.stop_switch()
        if self.net is not None:
            self.net.stop()
            self.net = None
        self.state.remove()

    def __enter__(self) -> InaNetwork:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _port_only_switch():
    """Mininet's Switch base class, used as a mere holder of the switch's interfaces: the
    switch process is started by `InaNetwork` once the links exist."""
    mnpath.ensure_mininet()
    from mininet.node import Switch

    class PortOnlySwitch(Switch):
        def start(self, controllers) -> None:
            pass

    return PortOnlySwitch


# -- workloads --------------------------------------------------------------------------------
