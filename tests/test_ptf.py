"""PTF data-plane tests: one class per behaviour, on the switch model and on BMv2.

Each switch owns the switch ends of veth pairs whose host ends live in a network namespace
the test makes (and removes); PTF's dataplane (`ptf.dataplane.DataPlane`, raw sockets) sits
on the host ends and the tests use PTF's own checks, ``send_packet``, ``verify_packet``,
``verify_packets`` and ``verify_no_other_packets``. The switches:

- ``model``: ``python -m ina.switch_model.rawio`` on the veths, 32 lanes;
- ``bmv2``: ``simple_switch_grpc`` with ``ina/p4/ina.p4`` compiled by ``p4c-bm2-ss``
  (skipped unless both are on PATH: ``PATH=PREFIX/bin:$PATH, docs/testing.md``).

Both get their jobs, multicast groups, worker addresses and ``forward_table`` entries from
the same P4Runtime control plane (`ina.control.jobs.install_job`), before every test, on a
switch reset to a clean state. Expected packets are written here from the protocol's rules
(docs/protocol.md, docs/p4.md) with scapy, not taken from the model.

Why pytest drives PTF's dataplane directly rather than through the ``ptf`` runner: the runner
imports every module of its test directory and owns the process (config, logging, the
dataplane), while these tests need pytest's fixtures to start the switches and build the
namespace, and its skips. PTF's checks only need an object with a ``dataplane`` and a
``fail`` (`PtfTest`), so the dataplane is made in a thread that has entered the hosts'
namespace (its sockets stay there) and handed to the tests. Runs as root only (veths).
"""

from __future__ import annotations

import numpy as np
import ptf
import ptf.ptfutils
import pytest
from differential.targets import (
    Bmv2OnVeths,
    ModelOnVeths,
    compiled_program,
    install_topology,
    veth_problem,
)
from differential.traces import Topology, default_topology
from ptf.dataplane import DataPlane
from ptf.testutils import send_packet, verify_no_other_packets, verify_packet, verify_packets
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from ina.bench.bmv2 import bmv2_missing, in_namespace
from ina.control.counters import read_counters
from ina.protocol import P4_LANES, UDP_PORT, Flag, Op
from ina.scapy_layer import INA

pytestmark = [pytest.mark.root, pytest.mark.network]

TOPO: Topology = default_topology()
POSITIVE_TIMEOUT = 2.0  # seconds verify_packet waits for a packet that should come
NEGATIVE_TIMEOUT = 0.3  # seconds verify_no_other_packets waits for one that should not


class PtfTest:
    """What ``ptf.testutils`` needs of a test: the dataplane, its two hooks and ``fail``."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    def before_send(self, pkt, device_number=0, port_number=-1) -> None:
        pass

    def at_receive(self, pkt, device_number=0, port_number=-1) -> None:
        pass

    def fail(self, msg: str) -> None:
        pytest.fail(msg, pytrace=False)


@pytest.fixture(scope="module", params=["model", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def switch(request, tmp_path_factory):
    """The switch on veths, with nobody on the host ends yet."""
    why = veth_problem()
    if why is not None:
        pytest.skip(f"{request.param}: {why}")
    if request.param == "bmv2":
        why = bmv2_missing()
        if why is not None:
            pytest.skip(f"bmv2: {why}")
        program = compiled_program(request.config, tmp_path_factory)
        sw = Bmv2OnVeths(TOPO.ports, program, wire=False)
    else:
        log = tmp_path_factory.mktemp("rawio") / "rawio.log"
        sw = ModelOnVeths(TOPO.ports, log, wire=False)
    yield sw
    sw.close()


@pytest.fixture(scope="module")
def dataplane(switch):
    """PTF's dataplane on the host ends: port number = the switch port it faces."""
    ports = {p: switch.net.host_ifs[p] for p in TOPO.ports}
    ptf.config.update(
        {
            "platform": "local",
            "relax": False,
            "qlen": 1000,
            "log_dir": None,
            "port_map": {(0, p): ifname for p, ifname in ports.items()},
        }
    )
    ptf.ptfutils.default_timeout = POSITIVE_TIMEOUT
    ptf.ptfutils.default_negative_timeout = NEGATIVE_TIMEOUT

    def make() -> DataPlane:
        dp = DataPlane(ptf.config)
        for p, ifname in ports.items():
            dp.port_add(ifname, 0, p)
        return dp

    dp = in_namespace(switch.net.ns, make)
    yield dp
    dp.kill()


@pytest.fixture
def test(switch, dataplane) -> PtfTest:
    """A clean switch with the topology installed, and an empty dataplane."""
    switch.reset()
    install_topology(switch.conn, TOPO)
    dataplane.flush()
    return PtfTest(dataplane)


# -- packets, from the protocol's rules ----------------------------------------------------


def request(job_id: int, worker_id: int, seq: int, lanes, op=Op.SUM, flags=0, **fields):
    """A worker's INA packet to the switch."""
    spec = TOPO.job(job_id)
    w = TOPO.worker(job_id, worker_id)
    if seq & spec.pool_size:
        flags |= Flag.SHADOW
    return (
        Ether(src=w.mac, dst=TOPO.switch_mac)
        / IP(src=w.ip, dst=TOPO.switch_ip, id=0x1000 + seq, ttl=64)
        / UDP(sport=w.udp_port, dport=UDP_PORT)
        / INA(
            **{
                "op": int(op),
                "flags": int(flags),
                "worker_id": worker_id,
                "job_id": job_id,
                "slot": seq % spec.pool_size,
                "seq": seq,
                "num_lanes": P4_LANES,
                **fields,
            },
            lanes=[int(v) for v in lanes],
        )
    )


def reply(req, to: int, flags: int, lanes, bitmap: int, **fields) -> Ether:
    """The switch's reply to ``req`` for worker ``to`` of the request's job: addressed from
    the switch's INA address to the worker, UDP from the INA port with checksum 0, the
    request's INA header with the new flags (RETX cleared, SHADOW kept) and bitmap."""
    ina = req[INA]
    w = TOPO.worker(ina.job_id, to)
    return (
        Ether(src=TOPO.switch_mac, dst=w.mac)
        / IP(src=TOPO.switch_ip, dst=w.ip, id=req[IP].id, ttl=req[IP].ttl)
        / UDP(sport=UDP_PORT, dport=w.udp_port, chksum=0)
        / INA(
            op=ina.op,
            flags=int(flags) | (int(ina.flags) & Flag.SHADOW),
            worker_id=ina.worker_id,
            job_id=ina.job_id,
            slot=ina.slot,
            seq=ina.seq,
            exp=fields.get("exp", ina.exp),
            level=fields.get("level", ina.level),
            num_lanes=ina.num_lanes,
            bitmap=bitmap,
            lanes=[int(v) for v in lanes],
        )
    )


def int32(values) -> np.ndarray:
    """Wrap-around int32, as the switch adds."""
    return (np.asarray(values, np.int64) + 2**31) % 2**32 - 2**31


def lanes_of(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-(2**31), 2**31, P4_LANES, dtype=np.int64)


def absorbed(test: PtfTest, port: int, pkt) -> None:
    """Send a contribution that does not complete its slot: nothing may come out. Waiting
    for that also puts it before the next packet, which may enter by another port (a switch
    owes no order to packets that reach two of its ports at the same time, and the reply to
    the one that completes the slot carries that one's header)."""
    send_packet(test, port, pkt)
    verify_no_other_packets(test)


def counters(switch) -> dict[str, int]:
    return {k: v[0] for k, v in read_counters(switch.conn).stats.items()}


# -- behaviours ---------------------------------------------------------------------------


class TestAggregationMulticast:
    """The contribution that completes a slot leaves as RESULT to every worker of the job,
    by its multicast group; the ones before it are absorbed."""

    @pytest.mark.parametrize("op", [Op.SUM, Op.OR, Op.MAX], ids=lambda o: o.name)
    def test_result_to_every_worker(self, test, switch, op):
        values = [lanes_of(w) for w in range(3)]
        reqs = [request(1, w, 5, values[w], op=op, exp=10 + w, level=3 - w) for w in range(3)]
        for w in (0, 1):
            absorbed(test, TOPO.worker(1, w).port, reqs[w])
        send_packet(test, TOPO.worker(1, 2).port, reqs[2])
        stacked = np.stack(values)
        result = {
            Op.SUM: int32(stacked.sum(axis=0)),
            Op.OR: np.bitwise_or.reduce(stacked, axis=0),
            Op.MAX: stacked.max(axis=0),
        }[op]
        for w in range(3):
            want = reply(reqs[2], w, Flag.RESULT, result, 0b111, exp=12, level=3)
            verify_packet(test, want, TOPO.worker(1, w).port)
        verify_no_other_packets(test)
        c = counters(switch)
        assert (c["aggregated"], c["results"], c["result_packets"]) == (3, 1, 3)

    def test_groups_of_two_jobs_share_a_port(self, test, switch):
        """Host 1 works for jobs 1 and 3: each job's result reaches it at that job's UDP
        port, and nobody else's."""
        a, b = lanes_of(10), lanes_of(11)
        r0, r1 = request(3, 0, 0, a), request(3, 1, 0, b)
        absorbed(test, TOPO.worker(3, 0).port, r0)
        send_packet(test, TOPO.worker(3, 1).port, r1)
        total = int32(a + b)
        verify_packet(test, reply(r1, 0, Flag.RESULT, total, 0b11), 1)
        verify_packet(test, reply(r1, 1, Flag.RESULT, total, 0b11), 4)
        verify_no_other_packets(test)


class TestRetransmissionIntoCompleteSlot:
    """A retransmission into a completed slot gets the stored result back, by unicast, out
    of the port it came in on."""

    def test_unicast_result(self, test, switch):
        values = [lanes_of(20 + w) for w in range(3)]
        reqs = [request(1, w, 2, values[w]) for w in range(3)]
        absorbed(test, 1, reqs[0])
        absorbed(test, 2, reqs[1])
        send_packet(test, 3, reqs[2])
        total = int32(np.sum(values, axis=0))
        for w in range(3):
            verify_packet(test, reply(reqs[2], w, Flag.RESULT, total, 0b111), w + 1)
        verify_no_other_packets(test)
        retx = request(1, 1, 2, values[1], flags=Flag.RETX)
        send_packet(test, 2, retx)
        verify_packets(test, reply(retx, 1, Flag.RESULT, total, 0b111), [2])
        c = counters(switch)
        assert (c["duplicates"], c["retx_replies"], c["result_packets"]) == (1, 1, 4)


class TestPendingReply:
    """A retransmission into a slot still open gets PENDING with the bitmap of the workers
    counted so far and its own lanes; nothing is added twice."""

    def test_pending_with_bitmap(self, test, switch):
        a, b, c = lanes_of(30), lanes_of(31), lanes_of(32)
        absorbed(test, 1, request(1, 0, 6, a))  # seq 6: slot 2, the SHADOW copy
        absorbed(test, 2, request(1, 1, 6, b))
        retx = request(1, 0, 6, a, flags=Flag.RETX)
        send_packet(test, 1, retx)
        verify_packets(test, reply(retx, 0, Flag.PENDING, a, 0b011), [1])
        last = request(1, 2, 6, c)
        send_packet(test, 3, last)
        total = int32(a + b + c)  # the retransmission was not added again
        for w in range(3):
            verify_packet(test, reply(last, w, Flag.RESULT, total, 0b111), w + 1)
        verify_no_other_packets(test)
        n = counters(switch)
        assert (n["pending_replies"], n["duplicates"], n["aggregated"]) == (1, 1, 3)


class TestMalformedDrop:
    """Malformed INA packets are dropped and counted as MALFORMED; the switch keeps going."""

    def test_dropped_and_counted(self, test, switch):
        good = request(1, 0, 0, lanes_of(40))
        bad = [
            request(1, 0, 0, lanes_of(41), version=2),
            request(1, 0, 0, lanes_of(41), op=7),
            request(1, 0, 0, lanes_of(41), flags=Flag.RESULT),
            request(1, 0, 0, lanes_of(41), num_lanes=P4_LANES + 1),
            Ether(bytes(good)[:-4]),  # truncated: one lane short
            good.copy() / Raw(bytes(4)),  # one lane too many (UDP length includes it)
        ]
        for pkt in bad:
            send_packet(test, 1, pkt)
        verify_no_other_packets(test)
        c = counters(switch)
        assert c["drop_malformed"] == len(bad) and c["packets_in"] == len(bad)
        assert c["aggregated"] == 0
        reqs = [request(1, w, 0, lanes_of(50 + w)) for w in range(3)]
        absorbed(test, 1, reqs[0])
        absorbed(test, 2, reqs[1])
        send_packet(test, 3, reqs[2])
        total = int32(sum(lanes_of(50 + w) for w in range(3)))
        for w in range(3):
            verify_packet(test, reply(reqs[2], w, Flag.RESULT, total, 0b111), w + 1)
        verify_no_other_packets(test)


class TestL2Forwarding:
    """Frames that are not INA are forwarded unchanged by destination MAC (forward_table);
    an unknown MAC is dropped (no flooding)."""

    def test_forwarded_by_destination_mac(self, test, switch):
        h1, h2, h3, h4 = (TOPO.host(f"h{i}") for i in range(1, 5))
        frames = [
            (1, Ether(src=h1.mac, dst=h2.mac) / ARP(op=2, hwsrc=h1.mac, psrc=h1.ip, pdst=h2.ip), 2),
            (2, Ether(src=h2.mac, dst=h3.mac) / IP(src=h2.ip, dst=h3.ip) / ICMP(), 3),
            (
                3,
                Ether(src=h3.mac, dst=h4.mac)
                / IP(src=h3.ip, dst=h4.ip)
                / UDP(sport=UDP_PORT, dport=9)
                / Raw(b"not INA: to port 9"),
                4,
            ),
        ]
        for ingress, pkt, egress in frames:
            send_packet(test, ingress, pkt)
            verify_packets(test, pkt, [egress])
        send_packet(test, 4, Ether(src=h4.mac, dst="02:00:0a:00:00:99") / Raw(bytes(46)))
        verify_no_other_packets(test)
        assert counters(switch)["packets_in"] == 0
