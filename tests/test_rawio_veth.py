"""The switch model on real interfaces: `ina.switch_model.rawio` on veths to namespaces.

Each test builds its own little network (names carry this process's id, so parallel runs
and leftovers of other tools never collide), serves it with a `RawSwitch` in a thread of
this process, and removes every namespace and interface it made:

    namespace ina<pid>h1: h1 (10.0.0.1) --veth-- i<pid>p1  port 1 \\
    namespace ina<pid>h2: h2 (10.0.0.2) --veth-- i<pid>p2  port 2  -> RawSwitch (this process)
    namespace ina<pid>h3: h3 (10.0.0.3) --veth-- i<pid>p3  port 3 /

The hosts reach the switch's INA address 10.0.0.254 through a static ARP entry (as with the
p4lang tutorials' hosts), and each other through ``forward_table``. Host code runs in a
thread that has entered the host's namespace (setns), so sockets and workers are real.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ina.procs import stop_process
from ina.protocol import HEADER_BYTES, UDP_PORT, Flag, Header, encode_packet
from ina.switch_model.frames import FramePipeline
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.rawio import RawSwitch
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import JobSpec, WorkerAddress

pytestmark = [
    pytest.mark.root,
    pytest.mark.network,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates namespaces and veths"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip"),
    pytest.mark.skipif(shutil.which("sysctl") is None, reason="needs procps's sysctl"),
]
# With checksum offload on (the veth default), a host's UDP datagram leaves with only a
# partial checksum; a switch that copies plain frames as they are (the model, BMv2) then
# delivers a frame the receiving host drops. INA frames are rebuilt, so only plain traffic
# needs the offload off, which takes ethtool.
needs_ethtool = pytest.mark.skipif(
    shutil.which("ethtool") is None,
    reason="needs ethtool to turn checksum offload off (apt-get install ethtool)",
)

SWITCH_IP, SWITCH_MAC = "10.0.0.254", "00:00:0a:00:00:fe"
CLONE_NEWNET = 0x40000000
LANES = 64
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def host_mac(i: int) -> str:
    return f"00:00:0a:00:00:{i:02x}"


class VethNet:
    """``n`` host namespaces, each linked by a veth pair to a port interface in this one."""

    def __init__(self, n: int) -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns = [f"ina{tag}h{i}" for i in range(1, n + 1)]
        self.ports = {i: f"i{tag}p{i}" for i in range(1, n + 1)}
        self.made_ns: list[str] = []
        self.made_if: list[str] = []
        try:
            for i, ns in enumerate(self.ns, start=1):
                self._host(i, ns, self.ports[i])
        except BaseException:
            self.remove()
            raise

    def _host(self, i: int, ns: str, port: str) -> None:
        sh("ip", "netns", "add", ns)
        self.made_ns.append(ns)
        sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.made_if.append(port)
        for args in (
            ("ip", "link", "set", port, "up"),
            ("sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=1"),
        ):
            sh(*args)
        x = ("ip", "netns", "exec", ns)
        sh(*x, "ip", "link", "set", "eth0", "address", host_mac(i))
        sh(*x, "ip", "addr", "add", f"10.0.0.{i}/24", "dev", "eth0")
        sh(*x, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh(*x, "ip", "link", "set", "eth0", "up")
        sh(*x, "ip", "link", "set", "lo", "up")
        sh(*x, "ip", "neigh", "add", SWITCH_IP, "lladdr", SWITCH_MAC, "dev", "eth0")
        for j in range(1, len(self.ns) + 1):
            if j != i:
                sh(*x, "ip", "neigh", "add", f"10.0.0.{j}", "lladdr", host_mac(j), "dev", "eth0")
        if shutil.which("ethtool"):
            for dev, pre in ((port, ()), ("eth0", x)):
                subprocess.run(
                    (*pre, "ethtool", "-K", dev, "rx", "off", "tx", "off", "sg", "off"),
                    capture_output=True,
                )

    def remove(self) -> None:
        for ns in self.made_ns:
            subprocess.run(("ip", "netns", "del", ns), capture_output=True)
        for port in self.made_if:  # gone with their peers; make sure
            subprocess.run(("ip", "link", "del", port), capture_output=True)

    def leftovers(self) -> list[str]:
        links = subprocess.run(("ip", "-o", "link"), capture_output=True, text=True).stdout
        nss = subprocess.run(("ip", "netns", "list"), capture_output=True, text=True).stdout
        return [n for n in self.made_if if f" {n}:" in links or f" {n}@" in links] + [
            ns for ns in self.made_ns if ns in nss.split()
        ]


def in_netns_all(calls: list[tuple]) -> list:
    """Run each ``(ns, fn, *args)`` at once, each on a thread that has entered namespace
    ``ns``; their results in order (the first exception is raised)."""
    boxes: list[dict] = [{} for _ in calls]

    def body(box: dict, ns: str, fn, *args) -> None:
        fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {ns}")
            box["result"] = fn(*args)
        except BaseException as e:
            box["error"] = e
        finally:
            os.close(fd)

    threads = [
        threading.Thread(target=body, args=(box, *call), daemon=True)
        for box, call in zip(boxes, calls, strict=True)
    ]
    for t in threads:
        t.start()
    for t, call in zip(threads, calls, strict=True):
        t.join(120)
        assert not t.is_alive(), f"host code in {call[0]} hung"
    for box in boxes:
        if "error" in box:
            raise box["error"]
    return [box["result"] for box in boxes]


def in_netns(ns: str, fn, *args):
    """Run ``fn(*args)`` on a thread that has entered namespace ``ns``; its result."""
    return in_netns_all([(ns, fn, *args)])[0]


def job(n: int, lanes_port_base: int = 50000) -> JobSpec:
    workers = tuple(
        WorkerAddress(1, w, f"10.0.0.{w + 1}", lanes_port_base + w, host_mac(w + 1), w + 1)
        for w in range(n)
    )
    return JobSpec(job_id=1, num_workers=n, pool_base=0, pool_size=16, workers=workers)


@contextlib.contextmanager
def network(n: int, lanes: int = LANES):
    net = VethNet(n)
    spec = job(n)
    pipeline = Pipeline(lanes=lanes, pool_total=64)
    install_job_spec(pipeline, spec)
    frames = FramePipeline(pipeline)
    for i in range(1, n + 1):
        frames.add_forward(host_mac(i), i)
    try:
        switch = RawSwitch(frames, net.ports, batch=64)
    except BaseException:
        net.remove()
        raise
    t = threading.Thread(target=switch.serve_forever, kwargs={"poll": 0.01}, daemon=True)
    t.start()
    try:
        yield net, spec, switch
    finally:
        switch.stop()
        t.join(5)
        switch.close()
        net.remove()
        assert not net.leftovers(), f"left behind: {net.leftovers()}"


def udp_socket(ip: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))
    s.settimeout(5)
    return s


def test_ina_packets_aggregate_across_namespaces():
    with network(3) as (net, spec, switch):
        socks = [in_netns(net.ns[w.worker_id], udp_socket, w.ip, w.udp_port) for w in spec.workers]
        try:
            lanes = [np.arange(LANES, dtype=np.int32) * (w + 1) for w in range(3)]
            for w, s in enumerate(socks):
                h = Header(worker_id=w, job_id=1, slot=0, seq=0, num_lanes=LANES)
                s.sendto(encode_packet(h, lanes[w]), (SWITCH_IP, UDP_PORT))
            for w, s in enumerate(socks):
                data, sender = s.recvfrom(4096)
                assert sender == (SWITCH_IP, UDP_PORT)
                got = Header.unpack(data)
                assert got.flags & Flag.RESULT and got.bitmap == 0b111
                vals = np.frombuffer(data[HEADER_BYTES:], ">i4")
                assert np.array_equal(vals, np.arange(LANES) * 6), w
            # a retransmission into the completed slot: the stored result, by unicast
            h = Header(worker_id=1, job_id=1, slot=0, seq=0, num_lanes=LANES, flags=Flag.RETX)
            socks[1].sendto(encode_packet(h, lanes[1]), (SWITCH_IP, UDP_PORT))
            data, _ = socks[1].recvfrom(4096)
            assert np.array_equal(np.frombuffer(data[HEADER_BYTES:], ">i4"), np.arange(LANES) * 6)
        finally:
            for s in socks:
                s.close()
        snap = switch.snapshot()
        c = snap["counters"]
        assert c["packets_in"][0] == 4 and c["aggregated"][0] == 3 and c["results"][0] == 1
        assert c["result_packets"][0] == 4 and c["retx_replies"][0] == 1
        frame = 42 + HEADER_BYTES + 4 * LANES
        assert c["packets_in"][1] == 4 * frame  # whole frames
        assert snap["frames"]["copies_out"] == 4


@needs_ethtool
def test_plain_traffic_is_forwarded_by_mac():
    with network(2) as (net, _spec, switch):
        rx = in_netns(net.ns[1], udp_socket, "10.0.0.2", 40000)
        tx = in_netns(net.ns[0], udp_socket, "10.0.0.1", 40001)
        try:
            tx.sendto(b"hello through the model", ("10.0.0.2", 40000))
            data, sender = rx.recvfrom(100)
            assert data == b"hello through the model" and sender == ("10.0.0.1", 40001)
        finally:
            rx.close()
            tx.close()
        assert switch.snapshot()["frames"]["forwarded"] >= 1
        assert switch.snapshot()["counters"]["packets_in"][0] == 0


def test_frames_on_the_wire_are_the_models_byte_for_byte():
    """A raw INA frame in at port 1; what h1 and h2 capture equals `process_frames`."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ina.scapy_layer import INA

    def frame(w: int) -> bytes:
        return bytes(
            Ether(dst=SWITCH_MAC, src=host_mac(w + 1))
            / IP(src=f"10.0.0.{w + 1}", dst=SWITCH_IP, ttl=17, id=4242 + w)
            / UDP(sport=50000 + w, dport=UDP_PORT)
            / INA(worker_id=w, job_id=1, slot=1, seq=1, exp=130 + w, lanes=list(range(LANES)))
        )

    def raw(ifname: str) -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        s.bind((ifname, 3))
        s.settimeout(5)
        return s

    # the oracle: a fresh model with the same tables
    oracle = Pipeline(lanes=LANES, pool_total=64)
    install_job_spec(oracle, job(2))
    # the result's copies by port (between ports their order is not seen on the wire)
    expected = dict(FramePipeline(oracle).process_frames([(1, frame(0)), (2, frame(1))]))
    assert sorted(expected) == [1, 2]

    with network(2) as (net, _spec, _switch):
        caps = [in_netns(ns, raw, "eth0") for ns in net.ns]
        try:
            for w, s in enumerate(caps):
                s.send(frame(w))
                time.sleep(0.05)  # in order: worker 0's contribution first
            got = {}
            for w, s in enumerate(caps):
                while w not in got:
                    data, addr = s.recvfrom(4096)
                    if addr[2] != socket.PACKET_OUTGOING:
                        got[w] = data
        finally:
            for s in caps:
                s.close()
    assert got[0] == expected[1]
    assert got[1] == expected[2]


def test_workers_allreduce_through_the_switch_on_veths():
    """The worker library, unchanged, in three namespaces: exact sums through rawio."""
    from ina.host import quantize
    from ina.host.allreduce import Worker
    from ina.host.transport import WorkerConfig

    size = 5000
    xs = [np.random.default_rng(w).standard_normal(size).astype(np.float32) for w in range(3)]

    def work(w: int, spec: JobSpec):
        me = spec.workers[w]
        cfg = WorkerConfig(
            job_id=1,
            worker_id=w,
            num_workers=3,
            switch=(SWITCH_IP, UDP_PORT),
            bind=(me.ip, me.udp_port),
            pool_size=spec.pool_size,
            lanes=LANES,
            timeout=20.0,
        )
        with Worker(cfg) as worker:
            worker.allreduce(xs[w])
            return worker.last_int_sums.copy(), worker.last.exponents.copy()

    with network(3) as (net, spec, switch):
        got = in_netns_all([(net.ns[w], work, w, spec) for w in range(3)])
    exps = got[0][1]
    want = sum(quantize.encode(x, exps, LANES, 3) for x in xs)
    for sums, e in got:
        assert np.array_equal(e, exps)
        assert np.array_equal(sums, want)
    assert switch.snapshot()["counters"]["drop_malformed"][0] == 0


# -- the same frames through BMv2 running the P4 program (differential) -------------------------


@contextlib.contextmanager
def bmv2(ports: dict[int, str], spec: JobSpec, n: int, logdir: Path, program):
    """simple_switch_grpc on ``ports`` with our program, programmed over P4Runtime."""
    from ina.control.jobs import install_job
    from ina.control.p4rt import INSERT, SwitchConnection
    from ina.host.launch import free_tcp_port

    grpc_addr, thrift = f"127.0.0.1:{free_tcp_port()}", free_tcp_port()
    cmd = ["simple_switch_grpc", "--device-id", "1", "--thrift-port", str(thrift), "--no-p4"]
    for num, ifname in sorted(ports.items()):
        cmd += ["-i", f"{num}@{ifname}"]
    cmd += ["--", "--grpc-server-addr", grpc_addr]
    with open(logdir / "bmv2.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    conn = None
    try:
        conn = SwitchConnection(grpc_addr, device_id=1, timeout=30.0)
        conn.push_pipeline(p4info=program.p4info, device_config=program.json)
        install_job(conn, spec)  # the push just zeroed every register: no pool reset
        conn.write(
            [
                conn.update(
                    INSERT,
                    conn.table_entry(
                        "forward_table", {"dst_mac": host_mac(i)}, "forward", {"port": i}
                    ),
                )
                for i in range(1, n + 1)
            ]
        )
        yield conn
    finally:
        if conn is not None:
            conn.close()
        stop_process(proc)


@pytest.mark.bmv2
@pytest.mark.skipif(
    shutil.which("simple_switch_grpc") is None, reason="needs simple_switch_grpc (BMv2) on PATH"
)
def test_bmv2_sends_the_models_frames_and_counts_the_same(tmp_path, p4_program):
    """One sequence of frames into BMv2 and into `FramePipeline`: the frames each host
    receives and the ``ina_stats`` counters must be identical."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ina.control.counters import read_counters
    from ina.protocol import P4_LANES
    from ina.scapy_layer import INA

    def req(w: int, seq: int, flags: int = 0, ip_id: int = 1) -> bytes:
        return bytes(
            Ether(dst=SWITCH_MAC, src=host_mac(w + 1))
            / IP(src=f"10.0.0.{w + 1}", dst=SWITCH_IP, ttl=20 + w, id=ip_id)
            / UDP(sport=50000 + w, dport=UDP_PORT)
            / INA(
                worker_id=w,
                job_id=1,
                slot=seq % 16,
                seq=seq,
                flags=flags,
                exp=120 + w + seq,
                lanes=[(w + 1) * (i - 9) for i in range(P4_LANES)],
            )
        )

    plain = bytes(Ether(dst=host_mac(2), src=host_mac(1)) / IP(id=77) / UDP(dport=9) / b"hi")
    stray = bytes(Ether(dst="00:00:0a:00:00:99", src=host_mac(1)) / IP() / b"nobody")
    sequence = [
        (1, req(0, 1, ip_id=10)),  # absorbed
        (2, req(1, 1, ip_id=11)),  # completes slot 1: RESULT to both
        (2, req(1, 1, Flag.RETX, ip_id=12)),  # stored result back to port 2
        (1, req(0, 2, ip_id=13)),  # absorbed
        (1, req(0, 2, Flag.RETX, ip_id=14)),  # PENDING back to port 1
        (1, req(0, 3)[:-6]),  # truncated: MALFORMED
        (1, plain),  # forwarded to port 2
        (1, stray),  # no entry: dropped
    ]
    oracle = Pipeline(lanes=P4_LANES, pool_total=64)
    spec = job(2)
    install_job_spec(oracle, spec)
    model = FramePipeline(oracle)
    for i in (1, 2):
        model.add_forward(host_mac(i), i)
    expected: dict[int, list[bytes]] = {1: [], 2: []}
    for port, data in [o for f in sequence for o in model.process_frames([f])]:
        expected[port].append(data)
    # port 1: RESULT, PENDING; port 2: RESULT, the stored RESULT again, the plain frame
    assert [len(expected[1]), len(expected[2])] == [2, 3]

    def raw(ifname: str) -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        s.bind((ifname, 3))
        s.settimeout(1.5)
        return s

    net = VethNet(2)
    try:
        with bmv2(net.ports, spec, 2, tmp_path, p4_program) as conn:
            caps = {i: in_netns(net.ns[i - 1], raw, "eth0") for i in (1, 2)}
            try:
                for port, data in sequence:
                    caps[port].send(data)
                    time.sleep(0.1)  # BMv2 keeps order per port, not across ports
                got: dict[int, list[bytes]] = {1: [], 2: []}
                for i, s in caps.items():
                    with contextlib.suppress(TimeoutError):
                        while True:
                            data, addr = s.recvfrom(4096)
                            if addr[2] != socket.PACKET_OUTGOING:
                                got[i].append(data)
            finally:
                for s in caps.values():
                    s.close()
            counters = read_counters(conn).stats
    finally:
        net.remove()
    assert got == expected
    assert counters == oracle.counters.snapshot()
