"""The targets that replay a trace: the switch model in this process, and switches on veths.

Every target is driven by the same control plane (`ina.control`, P4Runtime): `reset` gives a
clean switch (no jobs or entries, counters and registers zero), `install_topology` writes the
jobs (`install_job`) and the ``forward_table`` entries, `run` feeds frames in one at a time
and returns what left each port, in order, and the counters are read with `read_counters`.

- `ModelTarget`: `FramePipeline` (the P4 program's parser, ingress and egress in Python)
  called frame by frame in this process, with its P4Runtime service on a free local port.
- `VethTarget`: a switch process that owns the switch ends of a `VethNamespace`, fed through
  raw sockets on the host ends: `Bmv2OnVeths` (``simple_switch_grpc`` with the compiled
  program) or `ModelOnVeths` (``python -m ina.switch_model.rawio``).

Frames must reach a switch on veths one after another, as the model sees them: BMv2 takes
frames from its ports in whatever order its capture threads deliver them, so two frames sent
back to back on two ports may swap, and with them the slot state they meet. So every frame is
followed by a probe on the same port (same FIFO): a frame to `PROBE_MAC`, which
``forward_table`` sends out of `PROBE_PORT`, a port no trace uses. Once the probe is out, the
switch has taken the frame in, and the next one can go. Outputs keep their order per port
(one FIFO per egress port), which is what the tests compare.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scapy.layers.l2 import Ether

from ina import p4build
from ina.bench.bmv2 import (
    Bmv2Switch,
    VethNamespace,
    bmv2_missing,
    ensure_program,
    free_tcp_port,
    remove_all,
)
from ina.control.counters import read_counters
from ina.control.jobs import install_job
from ina.control.p4rt import INSERT, SwitchConnection
from ina.p4.entities import POOL_SLOTS
from ina.packet_socket import keep_vlan_tags, recv_frame
from ina.procs import stop_process
from ina.protocol import MAX_WORKERS, P4_LANES
from ina.switch_model.frames import FramePipeline
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.rawio import READY, start_p4runtime

from .traces import Topology, Trace

DEVICE_ID = 1
PROBE_PORT = 15
PROBE_MAC = "02:00:0a:00:00:0f"
PROBE_ETHERTYPE = 0x88B5  # IEEE local experimental
PROBE_TIMEOUT = 5.0  # seconds a probe may take through a busy switch
SETTLE = 0.1  # seconds without output that end a run


@functools.cache
def veth_problem() -> str | None:
    """Why this process cannot make veths and namespaces (not root, no ``ip``, no
    CAP_NET_ADMIN as in most containers), or None; probed once."""
    if os.geteuid() != 0:
        return "needs root (veths and a network namespace)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    try:
        VethNamespace([]).close()
    except RuntimeError as e:
        return f"cannot make a network namespace: {e}"
    return None


def compiled_program(config, tmp_path_factory) -> p4build.BuildOutputs:
    """The compiled program, kept in pytest's cache between runs and compiled again only
    when the P4 sources change (p4c takes 10-40 s). ``config``: pytest's."""
    cache = getattr(config, "cache", None)
    out = cache.mkdir("ina-p4") if cache is not None else tmp_path_factory.mktemp("p4")
    return ensure_program(out)


@dataclass
class Replay:
    """What a target did with a trace."""

    outputs: dict[int, list[bytes]]  # egress port -> frames, in order
    counters: dict[str, tuple[int, int]]  # CounterSnapshot.as_dict(): (packets, bytes)


def install_topology(
    conn: SwitchConnection, topo: Topology, thrift_port: int | None = None
) -> None:
    """The topology's jobs (`install_job`) and its ``forward_table`` entries."""
    for spec in topo.jobs:
        install_job(conn, spec, thrift_port=thrift_port)
    add_forward(conn, topo.forward_entries())


def add_forward(conn: SwitchConnection, entries: dict[str, int]) -> None:
    conn.write(
        [
            conn.update(
                INSERT, conn.table_entry("forward_table", {"dst_mac": mac}, "forward", {"port": p})
            )
            for mac, p in entries.items()
        ]
    )


class Target:
    """What the tests need of a target (see the module docstring)."""

    name = "target"
    conn: SwitchConnection
    thrift_port: int | None = None  # BMv2's, for install_job's pool reset

    def reset(self) -> None:
        raise NotImplementedError

    def run(self, frames) -> dict[int, list[bytes]]:
        raise NotImplementedError

    def counters(self) -> dict[str, tuple[int, int]]:
        return read_counters(self.conn).as_dict()

    def replay(self, topo: Topology, trace: Trace) -> Replay:
        """A clean switch, the topology, the trace's frames; what came out, the counters."""
        self.reset()
        install_topology(self.conn, topo)  # right after a reset: pools are zero already
        outputs = self.run(trace.frames)
        return Replay(outputs, self.counters())

    def close(self) -> None:
        self.conn.close()


class ModelTarget(Target):
    """The frame-level switch model in this process (``frames.py``), P4Runtime on loopback."""

    name = "model"

    def __init__(self, lanes: int = P4_LANES, pool: int = POOL_SLOTS) -> None:
        self.frames = FramePipeline(Pipeline(lanes=lanes, pool_total=pool))
        self.lock = threading.Lock()
        self.server = start_p4runtime(self.frames, "127.0.0.1:0", self.lock, DEVICE_ID)
        self.conn = SwitchConnection(f"127.0.0.1:{self.server.port}", device_id=DEVICE_ID)

    def reset(self) -> None:
        remove_all(self.conn)
        self.conn.push_pipeline()  # the model: our P4Info; zeroes counters and registers

    def local_counters(self) -> dict[str, tuple[int, int]]:
        """The counters read in this process, in `read_counters`' shape (no P4Runtime: the
        model's service takes ~0.3 s to serve all 2048 worker_contributions cells)."""
        c = self.frames.pipeline.counters
        out = c.snapshot()
        for i in np.flatnonzero(c.workers.any(axis=1)).tolist():
            j, w = divmod(i, MAX_WORKERS)
            out[f"worker_contributions[{j}][{w}]"] = (int(c.workers[i, 0]), int(c.workers[i, 1]))
        return out

    def run(self, frames, batch: bool = False) -> dict[int, list[bytes]]:
        """Frames one at a time (as BMv2 takes them), or all as one batch."""
        out: dict[int, list[bytes]] = {}
        chunks = [list(frames)] if batch else [[f] for f in frames]
        for chunk in chunks:
            with self.lock:
                sent = self.frames.process_frames(chunk)
            for port, data in sent:
                out.setdefault(port, []).append(data)
        return out

    def close(self) -> None:
        super().close()
        self.server.stop(0)


class VethTarget(Target):
    """A switch process on the switch ends of a `VethNamespace`; frames go in and come out
    through raw sockets on the host ends (one probe per frame, see the module docstring).
    With ``wire=False`` the host ends are left to someone else (PTF's dataplane)."""

    def __init__(self, ports: tuple[int, ...], wire: bool = True) -> None:
        self.ports = tuple(ports)
        self.net = VethNamespace([*self.ports, PROBE_PORT])
        self.socks: dict[int, socket.socket] = {}
        try:
            for p in (*self.ports, PROBE_PORT) if wire else ():
                s = self.net.raw_socket(p)
                keep_vlan_tags(s)  # frames compare with their 802.1Q tags (see _drain)
                s.setblocking(False)
                self.socks[p] = s
        except BaseException:
            self._close_net()
            raise
        self._probe_seq = 0

    # -- the switch ------------------------------------------------------------------------

    def reset(self) -> None:
        raise NotImplementedError

    # -- frames ----------------------------------------------------------------------------

    def run(self, frames) -> dict[int, list[bytes]]:
        """Send each frame and its probe on its port; wait for the probe each time."""
        if not self.socks:
            raise RuntimeError(f"{self.name}: made with wire=False, the host ends are not ours")
        self._ensure_probe_entry()
        got: dict[int, list[bytes]] = {}
        for port, data in frames:
            self.socks[port].send(data)
            self._probe_seq += 1
            self.socks[port].send(self._probe(self._probe_seq))
            self._collect(got, {self._probe_seq})
        self._collect(got, None)
        return {p: f for p, f in got.items() if f}

    def run_flushed(self, frames, flush: dict[int, str]) -> dict[int, list[bytes]]:
        """Like `run`, without its quiet wait at the end (`SETTLE`): each frame is followed,
        on its own port, by one probe per port of ``flush`` ({port: a MAC that
        ``forward_table`` sends out of it}). Once every probe is out, so is every output of
        the frame (one FIFO per port, in and out), and the next frame can go. The
        differential fuzzer's steps (`differential.fuzz`) go through here."""
        if not self.socks:
            raise RuntimeError(f"{self.name}: made with wire=False, the host ends are not ours")
        got: dict[int, list[bytes]] = {}
        for port, data in frames:
            self.socks[port].send(data)
            waiting = set()
            for mac in flush.values():
                self._probe_seq += 1
                waiting.add(self._probe_seq)
                self.socks[port].send(self._probe(self._probe_seq, mac))
            self._collect(got, waiting, anywhere=True)
        return {p: f for p, f in got.items() if f}

    def _ensure_probe_entry(self) -> None:
        entries = self.conn.read([self.conn.table_entry("forward_table", {"dst_mac": PROBE_MAC})])
        if not entries:
            add_forward(self.conn, {PROBE_MAC: PROBE_PORT})

    @staticmethod
    def _probe(seq: int, dst: str = PROBE_MAC) -> bytes:
        mac = bytes.fromhex(PROBE_MAC.replace(":", ""))
        to = bytes.fromhex(dst.replace(":", ""))
        frame = to + mac + PROBE_ETHERTYPE.to_bytes(2, "big") + b"probe" + seq.to_bytes(8, "big")
        return frame.ljust(60, b"\0")

    def _collect(
        self, got: dict[int, list[bytes]], waiting: set[int] | None, anywhere: bool = False
    ) -> None:
        """Read every socket until the probes numbered ``waiting`` are all out (None: until
        the switch has been quiet for `SETTLE` seconds). Probes come out of `PROBE_PORT`,
        or with ``anywhere`` out of any port, and are left out of ``got``."""
        fds = {s.fileno(): p for p, s in self.socks.items()}
        deadline = time.monotonic() + PROBE_TIMEOUT
        while True:
            wait = SETTLE if waiting is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(list(fds), [], [], wait)
            if not ready:
                if waiting is None:
                    return
                raise TimeoutError(
                    f"{self.name}: probes {sorted(waiting)} did not come out within "
                    f"{PROBE_TIMEOUT} s"
                )
            for fd in ready:
                port = fds[fd]
                for data in self._drain(self.socks[port]):
                    seq = self._probe_number(data) if anywhere or port == PROBE_PORT else None
                    if seq is not None:
                        if waiting:
                            waiting.discard(seq)
                        continue
                    got.setdefault(port, []).append(data)
            if waiting is not None and not waiting:
                return  # (having read this round whole)

    @staticmethod
    def _probe_number(data: bytes) -> int | None:
        if data[12:14] != PROBE_ETHERTYPE.to_bytes(2, "big") or data[14:19] != b"probe":
            return None
        return int.from_bytes(data[19:27], "big")

    @staticmethod
    def _drain(sock: socket.socket) -> list[bytes]:
        """Every frame waiting on ``sock``, each with the VLAN tag the kernel took off it
        (a plain recv would lose the tag, and a tagged and an untagged frame compare equal)."""
        out = []
        while True:
            try:
                out.append(recv_frame(sock))
            except BlockingIOError:
                return out

    def _close_net(self) -> None:
        for s in self.socks.values():
            s.close()
        self.socks = {}
        self.net.close()

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self._close_net()


class Bmv2OnVeths(VethTarget):
    """BMv2 ``simple_switch_grpc`` running the compiled program (`program`)."""

    name = "bmv2"

    def __init__(
        self, ports: tuple[int, ...], program: p4build.BuildOutputs, wire: bool = True
    ) -> None:
        super().__init__(ports, wire)
        try:
            self.switch = Bmv2Switch(self.net.switch_ifs, program).start()
            self.thrift_port = self.switch.thrift_port
            self.conn = self.switch.connect()
        except BaseException:
            self._close_net()
            raise

    def reset(self) -> None:
        self.switch.reset(self.conn)  # removes jobs before the push: see Bmv2Switch.reset

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.switch.stop()


class ModelOnVeths(VethTarget):
    """The switch model as a process on the veths: ``python -m ina.switch_model.rawio``."""

    name = "model-veth"

    def __init__(self, ports: tuple[int, ...], log_path: Path, wire: bool = True) -> None:
        super().__init__(ports, wire)
        address = f"127.0.0.1:{free_tcp_port()}"
        where = ",".join(f"{p}@{i}" for p, i in sorted(self.net.switch_ifs.items()))
        cmd = [sys.executable, "-m", "ina.switch_model.rawio", "--ports", where]
        cmd += ["--lanes", str(P4_LANES), "--pool", str(POOL_SLOTS)]
        cmd += ["--grpc", address, "--device-id", str(DEVICE_ID)]
        self.log_path = log_path
        self._log = open(log_path, "w")  # closed in _stop()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        try:
            line = self.proc.stdout.readline()
            if not line.startswith(READY):
                raise RuntimeError(f"rawio did not start: {line!r}; see {log_path}")
            self.conn = SwitchConnection(address, device_id=DEVICE_ID, timeout=15)
        except BaseException:
            self._stop()
            self._close_net()
            raise

    def reset(self) -> None:
        remove_all(self.conn)
        self.conn.push_pipeline()

    def _stop(self) -> None:
        stop_process(self.proc)
        self.proc.stdout.close()
        self._log.close()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._stop()


__all__ = [
    "PROBE_PORT",
    "Bmv2OnVeths",
    "ModelOnVeths",
    "ModelTarget",
    "Replay",
    "Target",
    "VethTarget",
    "compiled_program",
    "install_topology",
    "veth_problem",
]


def describe(frame: bytes) -> str:
    try:
        return Ether(frame).summary()
    except Exception:  # a frame scapy cannot parse is still worth showing
        return f"{len(frame)} bytes"


def differences(got: Replay, want: Replay, who: str) -> list[str]:
    """What ``got`` (target ``who``) did differently from the model's ``want``: frames per
    port in order, byte for byte, and counters."""
    out = []
    for port in sorted(set(got.outputs) | set(want.outputs)):
        g, w = got.outputs.get(port, []), want.outputs.get(port, [])
        for i, (a, b) in enumerate(zip(g, w, strict=False)):
            if a != b:
                at = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
                out.append(
                    f"port {port}, frame {i}: first difference at byte {at} (lengths "
                    f"{len(a)} vs {len(b)})\n  {who}:  {describe(a)}\n    {a.hex()}\n"
                    f"  model: {describe(b)}\n    {b.hex()}"
                )
                break
        if len(g) != len(w):
            out.append(f"port {port}: {who} sent {len(g)} frames, the model {len(w)}")
    for key in sorted(set(got.counters) | set(want.counters)):
        a, b = got.counters.get(key, (0, 0)), want.counters.get(key, (0, 0))
        if a != b:
            out.append(f"counter {key}: {who} {a}, model {b} (packets, bytes)")
    return out


def veth_target_for(kind: str, topo, config, tmp_path_factory) -> Target:
    """A switch on veths for ``topo``'s ports: ``model-veth`` (the model as a process, root)
    or ``bmv2`` (root, tools on PATH); the test is skipped, with the reason, where it cannot
    run."""
    import pytest

    why = veth_problem()
    if why is not None:
        pytest.skip(f"{kind}: {why}")
    if kind == "bmv2":
        why = bmv2_missing()
        if why is not None:
            pytest.skip(f"bmv2: {why}")
        return Bmv2OnVeths(topo.ports, compiled_program(config, tmp_path_factory))
    return ModelOnVeths(topo.ports, tmp_path_factory.mktemp("rawio") / "rawio.log")
