"""BMv2 running the INA P4 program on veths: a small harness, and `ina bench bmv2`.

The harness (also used by the differential and PTF tests) is three pieces:

- `ensure_program` compiles ``ina/p4/ina.p4`` with ``p4c-bm2-ss`` into a directory, again
  only when the P4 sources changed since (a digest of them sits next to the outputs);
- `VethNamespace` makes veth pairs whose switch ends stay in this network namespace and whose
  host ends live in a new namespace of their own, so nothing else on the machine (IPv6
  autoconfiguration, other tests, Mininet) sends into them; `VethNamespace.raw_socket` opens
  an AF_PACKET socket on a host end from a thread that has entered that namespace (a socket
  stays in the namespace it was made in, whichever thread uses it afterwards);
- `Bmv2Switch` runs ``simple_switch_grpc`` with one ``-i PORT@IF`` per switch end, on free
  gRPC and Thrift ports (9090 may be taken), device id 1, pushes the program over P4Runtime
  and stops the process by its PID.

The benchmark (``ina bench bmv2``) drives BMv2 with the workload of `ina.bench.switch`: N
workers each reduce (SUM) ``arange(values) * (worker + 1)`` in chunks of ``P4_LANES`` = 32
int32 lanes, one slot per chunk, in a 1024-slot pool. The workers are raw sockets on the host
ends that send prebuilt frames open-loop at a paced rate: BMv2 drops what its capture buffers
cannot hold without a word, so the offered rate rises step by step (a fresh pipeline each
step) until the switch's own counters show a loss (PACKETS_IN < frames sent) or slots left
incomplete twice in a row, then a few rates in between are tried; the table reports the
highest rate without either. Rates are the switch's: its counted packets divided by the time
from the first frame sent until its counters stopped moving. The switch model's throughput
for the same workers and lanes comes from `ina.bench.switch.measure` in the same run
(closed-loop workers over UDP), and the last column is model / BMv2 in completed slots per
second.

Needs ``p4c-bm2-ss`` and ``simple_switch_grpc`` on PATH (``PATH=PREFIX/bin:$PATH``) and
root (veths, a namespace); otherwise it prints why it was skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import hashlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ina import p4build
from ina.control.counters import CounterSnapshot, read_counters
from ina.control.jobs import install_job, list_jobs, remove_job
from ina.control.p4rt import DELETE, SwitchConnection
from ina.p4.entities import POOL_SLOTS
from ina.procs import stop_process
from ina.protocol import (
    HEADER_DTYPE,
    LANE_DTYPE,
    P4_LANES,
    UDP_PORT,
    VERSION,
    Counter,
    Flag,
    Op,
)
from ina.switch_model.tables import JobSpec, WorkerAddress

SWITCH_BINARY = "simple_switch_grpc"
DEVICE_ID = 1
CLONE_NEWNET = 0x40000000
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20: a socket does not see its own transmissions
ETH_P_ALL = 0x0003
SWITCH_MAC, SWITCH_IP = "02:00:0a:00:00:fe", "10.0.0.254"

_libc = ctypes.CDLL(None, use_errno=True)
_names = itertools.count()


def bmv2_missing() -> str | None:
    """Why BMv2 cannot run here (a tool not on PATH, not root), or None if it can."""
    tools = [t for t in (p4build.COMPILER, SWITCH_BINARY) if shutil.which(t) is None]
    if tools:
        return (
            f"{' and '.join(tools)} not on PATH: put the bin folder of your p4c and "
            "behavioral-model build on PATH (docs/testing.md, 'BMv2 and p4c')"
        )
    if os.geteuid() != 0:
        return "needs root (veths and a network namespace)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


# -- the program ----------------------------------------------------------------------------


def _sources_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(p4build.P4_DIR.rglob("*.p4")):
        h.update(str(path.relative_to(p4build.P4_DIR)).encode() + b"\0" + path.read_bytes())
    h.update(str(p4build.find_compiler()).encode())
    return h.hexdigest()


def ensure_program(out_dir: Path = p4build.DEFAULT_OUT) -> p4build.BuildOutputs:
    """The program compiled into ``out_dir``; compiles only if the P4 sources (or the
    compiler) changed since the last call that compiled there. Raises as `p4build.build`."""
    out_dir = Path(out_dir)
    outputs = p4build.BuildOutputs.in_dir(out_dir)
    stamp = out_dir / "sources.sha256"
    digest = _sources_digest()
    fresh = outputs.json.exists() and outputs.p4info.exists()
    if fresh and stamp.exists() and stamp.read_text().strip() == digest:
        return outputs
    outputs = p4build.build(out_dir)
    stamp.write_text(digest + "\n")
    return outputs


# -- network --------------------------------------------------------------------------------


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")


def free_tcp_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_namespace(ns: str, fn, *args):
    """``fn(*args)`` on a thread that has entered network namespace ``ns``; its result."""
    box: dict = {}

    def body() -> None:
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({ns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            box["result"] = fn(*args)
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    t = threading.Thread(target=body, name=f"netns-{ns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _raw_socket(ifname: str, buffer_bytes: int) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        s.bind((ifname, ETH_P_ALL))
    except OSError:
        s.close()
        raise
    return s


class VethNamespace:
    """One veth pair per switch port: the switch end (``switch_ifs[port]``) in this network
    namespace, the host end (``host_ifs[port]``) in namespace ``ns``, made for this object.

    Names carry this process's id and a counter, so parallel runs never collide; `close`
    removes the namespace (and with it every pair). IPv6 is off on both ends before they go
    up, so the kernel sends nothing into the links by itself.
    """

    def __init__(self, ports: list[int] | tuple[int, ...]) -> None:
        prefix = f"n{os.getpid() % 100000}x{next(_names)}"
        self.ns = f"{prefix}ns"
        self.switch_ifs = {p: f"{prefix}s{p}" for p in ports}
        self.host_ifs = {p: f"{prefix}h{p}" for p in ports}
        self._made_ns = False
        try:
            _run("ip", "netns", "add", self.ns)
            self._made_ns = True
            x = ("ip", "netns", "exec", self.ns)
            _run(*x, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            _run(*x, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
            for p in ports:
                sw, host = self.switch_ifs[p], self.host_ifs[p]
                _run(
                    "ip", "link", "add", sw, "type", "veth", "peer", "name", host, "netns", self.ns
                )
                _run("sysctl", "-qw", f"net.ipv6.conf.{sw}.disable_ipv6=1")
                _run("ip", "link", "set", sw, "up")
                _run(*x, "ip", "link", "set", host, "up")
        except BaseException:
            self.close()
            raise

    def raw_socket(self, port: int, buffer_bytes: int = 4 << 20) -> socket.socket:
        """An AF_PACKET socket on the host end of ``port`` (blocking; sees every frame the
        switch sends to that host, not the ones sent on it)."""
        return in_namespace(self.ns, _raw_socket, self.host_ifs[port], buffer_bytes)

    def close(self) -> None:
        """Remove the namespace and the pairs (idempotent)."""
        if self._made_ns:
            subprocess.run(("ip", "netns", "del", self.ns), capture_output=True, check=False)
            self._made_ns = False
        for sw in self.switch_ifs.values():  # gone with their peers; make sure
            if Path(f"/sys/class/net/{sw}").exists():
                subprocess.run(("ip", "link", "del", sw), capture_output=True, check=False)

    def __enter__(self) -> VethNamespace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_all(conn: SwitchConnection) -> None:
    """Remove every job (`remove_job`, which deletes its multicast group) and every
    ``forward_table`` entry."""
    for job_id in list_jobs(conn):
        remove_job(conn, job_id)
    conn.write([conn.update(DELETE, e) for e in conn.read([conn.table_entry("forward_table")])])


@functools.cache
def _has_notifications(binary: str) -> bool:
    """Whether ``binary`` takes --notifications-addr (BMv2 built with nanomsg)."""
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--notifications-addr" in out.stdout + out.stderr


def notifications_args(directory: str | Path, binary: str = SWITCH_BINARY) -> list[str]:
    """``simple_switch_grpc`` options that put its notifications socket in ``directory``:
    the default one is shared per device id. None for a build without nanomsg, which has no
    such socket (and refuses the option)."""
    path = shutil.which(binary) or binary
    if not _has_notifications(path):
        return []
    return ["--notifications-addr", f"ipc://{directory}/notifications.ipc"]


class Bmv2Switch:
    """``simple_switch_grpc`` with our program on ``ports`` ({port number: interface}).

    `start` launches it on free gRPC/Thrift ports (its notifications socket in a private
    directory, as the default one is shared per device id), waits for P4Runtime and pushes
    the program. `connect` opens a primary P4Runtime session; `stop` ends the process by PID.
    """

    def __init__(
        self,
        ports: dict[int, str],
        program: p4build.BuildOutputs,
        log_path: Path | None = None,
        device_id: int = DEVICE_ID,
    ) -> None:
        self.ports = dict(ports)
        self.program = program
        self.device_id = device_id
        self.grpc_port = free_tcp_port()
        self.thrift_port = free_tcp_port()
        self.address = f"127.0.0.1:{self.grpc_port}"
        self._dir = tempfile.TemporaryDirectory(prefix="ina-bmv2-")
        self.log_path = Path(log_path) if log_path else Path(self._dir.name) / "switch.log"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        cmd = [SWITCH_BINARY, "--device-id", str(self.device_id)]
        cmd += ["--thrift-port", str(self.thrift_port)]
        cmd += notifications_args(self._dir.name)
        for port, ifname in sorted(self.ports.items()):
            cmd += ["-i", f"{port}@{ifname}"]
        return [*cmd, "--no-p4", "--", "--grpc-server-addr", self.address]

    def start(self, timeout: float = 30.0) -> Bmv2Switch:
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        try:
            with self.connect(timeout=timeout) as conn:
                conn.push_pipeline(self.program.p4info, self.program.json)
        except BaseException:
            self.stop()
            raise
        return self

    def reset(self, conn: SwitchConnection) -> None:
        """Back to the state right after `start`: no jobs, entries or groups, every counter
        and register zero.

        Removes the jobs, then pushes the program again. The push clears tables, counters
        and registers, but not BMv2's replication engine: a multicast group that is still
        installed at a push keeps its replicas there, invisible to P4Runtime, and a group
        created again with the same id afterwards replicates to the old replicas as well
        as to its own (every result leaves twice per port). Deleting the groups first
        (`remove_job`) avoids that.
        """
        remove_all(conn)
        conn.push_pipeline(self.program.p4info, self.program.json)

    def connect(self, timeout: float = 10.0) -> SwitchConnection:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{SWITCH_BINARY} exited: {self.log_tail()}")
        try:
            return SwitchConnection(self.address, device_id=self.device_id, timeout=timeout)
        except ConnectionError as e:
            raise RuntimeError(f"{e}; {SWITCH_BINARY} log: {self.log_tail()}") from None

    def log_tail(self, n: int = 800) -> str:
        try:
            return self.log_path.read_text()[-n:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None
        self._dir.cleanup()

    def __enter__(self) -> Bmv2Switch:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- the benchmark --------------------------------------------------------------------------


def bench_job(workers: int, pool_size: int = POOL_SLOTS) -> JobSpec:
    """Job 1: worker w on switch port w + 1 (host 10.0.1.(w+1), UDP 50000 + w)."""
    addrs = tuple(
        WorkerAddress(
            job_id=1,
            worker_id=w,
            ip=f"10.0.1.{w + 1}",
            udp_port=50000 + w,
            mac=f"02:00:0a:00:01:{w + 1:02x}",
            port=w + 1,
        )
        for w in range(workers)
    )
    return JobSpec(job_id=1, num_workers=workers, pool_base=0, pool_size=pool_size, workers=addrs)


def _ip_checksum(header: bytes) -> int:
    s = sum(int.from_bytes(header[i : i + 2], "big") for i in range(0, len(header), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def worker_frames(spec: JobSpec, worker: WorkerAddress, slots: int, lanes: int) -> np.ndarray:
    """(slots, frame bytes) uint8: the worker's SUM chunks 0..slots-1 of ``arange * (w+1)``
    as Ethernet/IPv4/UDP/INA frames to the switch (UDP checksum 0, as IPv4 allows)."""
    payload = HEADER_DTYPE.itemsize + 4 * lanes
    ip_len = 20 + 8 + payload
    ip = bytearray(
        bytes([0x45, 0])
        + ip_len.to_bytes(2, "big")
        + bytes([0, 1, 0, 0, 64, 17, 0, 0])
        + socket.inet_aton(worker.ip)
        + socket.inet_aton(SWITCH_IP)
    )
    ip[10:12] = _ip_checksum(bytes(ip)).to_bytes(2, "big")
    udp = worker.udp_port.to_bytes(2, "big") + UDP_PORT.to_bytes(2, "big")
    udp += (8 + payload).to_bytes(2, "big") + b"\0\0"
    eth = bytes.fromhex(SWITCH_MAC.replace(":", "")) + bytes.fromhex(worker.mac.replace(":", ""))
    head = np.frombuffer(eth + b"\x08\x00" + bytes(ip) + udp, np.uint8)

    seq = np.arange(slots, dtype=np.int64)
    hdr = np.zeros(slots, HEADER_DTYPE)
    hdr["version"] = VERSION
    hdr["op"] = Op.SUM
    hdr["flags"] = np.where((seq // spec.pool_size) % 2 == 1, int(Flag.SHADOW), 0)
    hdr["worker_id"] = worker.worker_id
    hdr["job_id"] = spec.job_id
    hdr["slot"] = seq % spec.pool_size
    hdr["seq"] = seq
    hdr["num_lanes"] = lanes
    values = np.arange(slots * lanes, dtype=np.int64).reshape(slots, lanes)
    values = (values * (worker.worker_id + 1)).astype(np.int32).astype(LANE_DTYPE)
    frames = np.empty((slots, head.size + payload), np.uint8)
    frames[:, : head.size] = head
    frames[:, head.size : head.size + HEADER_DTYPE.itemsize] = hdr.view(np.uint8).reshape(slots, -1)
    frames[:, head.size + HEADER_DTYPE.itemsize :] = values.view(np.uint8).reshape(slots, -1)
    return frames


def _settle(conn: SwitchConnection, expect: int, poll: float = 0.02) -> CounterSnapshot:
    """Counters once PACKETS_IN reached ``expect`` or stopped moving for 0.5 s; ``time`` is
    when they last moved."""
    snap = read_counters(conn, workers=False)
    last, moved = snap.packets(Counter.PACKETS_IN), snap.time
    while last < expect:
        time.sleep(poll)
        cur = read_counters(conn, workers=False)
        n = cur.packets(Counter.PACKETS_IN)
        if n != last:
            snap, last, moved = cur, n, cur.time
        elif cur.time - moved > 0.5:
            break
    return snap


def offer(
    switch: Bmv2Switch,
    conn: SwitchConnection,
    spec: JobSpec,
    socks: dict[int, socket.socket],
    frames: list[np.ndarray],
    rate: float,
) -> dict:
    """One step: fresh pipeline and job, then every worker's frames at ``rate`` packets/s
    in total (round robin over workers, one chunk each); returns the step's measurements."""
    switch.reset(conn)
    install_job(conn, spec)  # a fresh push zeroed the registers: no reset needed
    slots = frames[0].shape[0]
    workers = spec.workers
    sends = [socks[w.port].send for w in workers]
    rows = [[f.tobytes() for f in wf] for wf in frames]
    total = slots * len(workers)
    per_check = max(1, int(rate / 2000 / len(workers)))  # pace every ~0.5 ms of chunks
    t0 = time.perf_counter()
    mono0 = time.monotonic()
    for s in range(slots):
        for send, wrows in zip(sends, rows, strict=True):
            send(wrows[s])
        if s % per_check == per_check - 1:
            ahead = t0 + (s + 1) * len(sends) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
    send_seconds = time.perf_counter() - t0
    snap = _settle(conn, total)
    seconds = max(snap.time - mono0, send_seconds, 1e-9)
    packets_in = snap.packets(Counter.PACKETS_IN)
    results = snap.packets(Counter.RESULTS)
    return {
        "rate": rate,
        "offered": total / send_seconds,
        "sent": total,
        "packets_in": packets_in,
        "results": results,
        "slots": slots,
        "result_packets": snap.packets(Counter.RESULT_PACKETS),
        "lossless": packets_in == total and results == slots,  # see measure_bmv2
        "packets_in_per_s": packets_in / seconds,
        "slots_per_s": results / seconds,
    }


def measure_bmv2(
    workers: int,
    lanes: int = P4_LANES,
    seconds: float = 1.5,
    start_rate: float = 4000.0,
    step: float = 1.25,
    refine: int = 2,
    max_rate: float = 200_000.0,
    program: p4build.BuildOutputs | None = None,
    log=print,
) -> dict:
    """The highest offered rate at which BMv2 loses no packet and completes every slot.

    Raises the rate by ``step`` from ``start_rate`` until a step is lossy twice in a row
    (one lossy try can be another process taking the CPU for a moment), then tries
    ``refine`` rates halfway (geometrically) between the best lossless and the lossy one.
    Returns the best lossless step's measurements and the lowest lossy one's.
    """
    if lanes != P4_LANES:
        raise ValueError(f"the P4 program has {P4_LANES} lanes, not {lanes}")
    program = program or ensure_program()
    spec = bench_job(workers)
    ports = [w.port for w in spec.workers]
    best, lossy = None, None
    with VethNamespace(ports) as net, Bmv2Switch(net.switch_ifs, program) as switch:
        socks = {p: net.raw_socket(p, buffer_bytes=16 << 20) for p in ports}
        try:
            with switch.connect() as conn:

                def attempt(rate: float) -> dict:
                    slots = max(256, int(rate * seconds / workers))
                    frames = [worker_frames(spec, w, slots, lanes) for w in spec.workers]
                    r = offer(switch, conn, spec, socks, frames, rate)
                    r["lossless"] = r["lossless"] and r["offered"] >= 0.95 * rate  # kept up?
                    log(
                        f"  bmv2 {workers} workers: offered {r['offered']:,.0f} pkt/s -> "
                        f"in {r['packets_in']}/{r['sent']}, slots {r['results']}/{r['slots']}"
                        f", {r['packets_in_per_s']:,.0f} pkt/s"
                        + ("" if r["lossless"] else "  LOSS")
                    )
                    return r

                def lossless(rate: float) -> dict | None:
                    """The lossless try at ``rate``, or None after two lossy ones."""
                    nonlocal lossy
                    for _ in range(2):
                        r = attempt(rate)
                        if r["lossless"]:
                            return r
                    if lossy is None or rate < lossy["rate"]:
                        lossy = r
                    return None

                rate = start_rate
                while rate <= max_rate:
                    r = lossless(rate)
                    if r is None:
                        break
                    best = r
                    rate *= step
                for _ in range(refine if best and lossy else 0):
                    r = lossless((best["rate"] * lossy["rate"]) ** 0.5)
                    if r is not None:
                        best = r
        finally:
            for s in socks.values():
                s.close()
    return {"workers": workers, "lanes": lanes, "best": best, "first_loss": lossy}


TABLE_HEAD = (
    "| workers | lanes | BMv2 packets in/s | BMv2 slots/s | BMv2 gradient Gbit/s "
    "| BMv2 lossy from (offered pkt/s) | model packets in/s | model slots/s "
    "| model gradient Gbit/s | model / BMv2 |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def gbit_s(slots_per_s: float, lanes: int) -> float:
    return slots_per_s * lanes * 4 * 8 / 1e9


def row_md(b: dict, m: dict | None) -> str:
    best, loss = b["best"], b["first_loss"]
    if best is None:
        bm = "| - | - | - "
    else:
        bm = (
            f"| {best['packets_in_per_s']:,.0f} | {best['slots_per_s']:,.0f} "
            f"| {gbit_s(best['slots_per_s'], b['lanes']):.4f} "
        )
    lossy = f"{loss['offered']:,.0f}" if loss else "none up to max"
    if m is None:
        mm = "| - | - | - | - |"
    else:
        ratio = m["slots_per_s"] / best["slots_per_s"] if best and best["slots_per_s"] else 0
        mm = (
            f"| {m['packets_in_per_s']:,.0f} | {m['slots_per_s']:,.0f} | {m['gbit_s']:.4f} "
            f"| {ratio:.1f}x |"
        )
    return f"| {b['workers']} | {b['lanes']} {bm}| {lossy} {mm}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--seconds", type=float, default=1.5, help="duration of each rate step")
    p.add_argument("--start-rate", type=float, default=4000.0, help="first offered pkt/s")
    p.add_argument("--step", type=float, default=1.25, help="rate factor between steps")
    p.add_argument("--refine", type=int, default=2, help="rates tried between the last two")
    p.add_argument(
        "--megabytes", type=float, default=1.0, help="tensor per worker for the model's run"
    )
    p.add_argument("--rounds", type=int, default=3, help="allreduce rounds for the model's run")
    p.add_argument("--no-model", action="store_true", help="skip the switch model's run")


def main(args: argparse.Namespace) -> list[dict]:
    why = bmv2_missing()
    if why is not None:
        print(f"BMv2 benchmark skipped: {why}.", flush=True)
        return []
    program = ensure_program()
    rows = []
    lines = []
    for workers in args.workers:
        print(f"BMv2, {workers} workers, {P4_LANES} lanes: raising the offered rate", flush=True)
        b = measure_bmv2(
            workers,
            P4_LANES,
            seconds=args.seconds,
            start_rate=args.start_rate,
            step=args.step,
            refine=args.refine,
            program=program,
        )
        m = None
        if not args.no_model:
            from ina.bench.switch import measure

            values = int(args.megabytes * 1e6 / 4)
            m = measure(workers, P4_LANES, values, args.rounds)
            print(
                f"  model {workers} workers: {m['slots_per_s']:,.0f} slots/s, "
                f"exact {m['exact']}, retx {m['retx']}",
                flush=True,
            )
        rows.append({"bmv2": b, "model": m})
        lines.append(row_md(b, m))
    print()
    print(TABLE_HEAD)
    for line in lines:
        print(line, flush=True)
    return rows


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        parser = argparse.ArgumentParser(
            prog="python -m ina.bench.bmv2", description=__doc__.split("\n")[0]
        )
        add_arguments(parser)
        main(parser.parse_args())
