"""The switch model on Ethernet frames (`ina.switch_model.frames`): frames in, frames out.

Expected frames are built independently with scapy (``ina.scapy_layer`` binds INA to its UDP
port), following the P4 program's rules: WorkerRewrite's addresses, a zero UDP checksum, a
recomputed IPv4 checksum, everything else as the request had it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from ina.protocol import HEADER_BYTES, UDP_PORT, Flag
from ina.scapy_layer import INA
from ina.switch_model.frames import FramePipeline, ipv4_checksum, mac_to_int
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import JobSpec, WorkerAddress

LANES = 8
SWITCH_IP, SWITCH_MAC = "10.0.0.254", "00:00:0a:00:00:fe"
FRAME = 42 + HEADER_BYTES + 4 * LANES


def mac(i: int) -> str:
    return f"00:00:0a:00:00:{i:02x}"


def spec(n: int = 3) -> JobSpec:
    """Job 1: worker w at 10.0.0.(w+1):(50000+w), switch port w+1."""
    workers = tuple(
        WorkerAddress(1, w, f"10.0.0.{w + 1}", 50000 + w, mac(w + 1), w + 1) for w in range(n)
    )
    return JobSpec(job_id=1, num_workers=n, pool_base=0, pool_size=4, workers=workers)


def switch(n: int = 3, lanes: int = LANES) -> FramePipeline:
    p = Pipeline(lanes=lanes, pool_total=16)
    install_job_spec(p, spec(n))
    fp = FramePipeline(p)
    for i in range(1, n + 1):
        fp.add_forward(mac(i), i)
    return fp


def request(w: int, lanes, seq: int = 0, flags: int = 0, ttl: int = 64, ip_id: int = 1, **kw):
    """A worker's INA packet to the switch, as scapy builds it."""
    slot = seq % 4
    if (seq // 4) % 2:
        flags |= Flag.SHADOW
    return (
        Ether(dst=SWITCH_MAC, src=mac(w + 1))
        / IP(src=f"10.0.0.{w + 1}", dst=SWITCH_IP, ttl=ttl, id=ip_id)
        / UDP(sport=50000 + w, dport=UDP_PORT)
        / INA(worker_id=w, job_id=1, slot=slot, seq=seq, flags=flags, lanes=list(lanes), **kw)
    )


def reply(req, to: int, flags: int, lanes, bitmap: int, **kw) -> bytes:
    """The P4 program's reply to ``req`` for worker ``to``: WorkerRewrite + new INA fields."""
    ina = req[INA]
    shadow = int(ina.flags) & Flag.SHADOW
    return bytes(
        Ether(dst=mac(to + 1), src=req[Ether].dst, type=0x0800)
        / IP(
            src=req[IP].dst,
            dst=f"10.0.0.{to + 1}",
            ttl=req[IP].ttl,
            id=req[IP].id,
            tos=req[IP].tos,
            flags=req[IP].flags,
        )
        / UDP(sport=UDP_PORT, dport=50000 + to, chksum=0)
        / INA(
            version=ina.version,
            op=ina.op,
            flags=flags | shadow,
            worker_id=ina.worker_id,
            job_id=ina.job_id,
            slot=ina.slot,
            seq=ina.seq,
            exp=kw.get("exp", ina.exp),
            level=kw.get("level", ina.level),
            num_lanes=ina.num_lanes,
            bitmap=bitmap,
            lanes=list(lanes),
        )
    )


def ints(x) -> list[int]:
    return [int(v) for v in np.asarray(x, dtype=np.int64)]


# -- INA: replication, rewrite, unicast replies --------------------------------------------


def test_result_is_multicast_with_one_rewritten_copy_per_worker():
    fp = switch(3)
    a, b, c = (np.arange(LANES) * (w + 1) for w in range(3))
    reqs = [request(0, a, exp=130), request(1, b, ip_id=7, ttl=9), request(2, c, exp=131)]
    out = fp.process_frames([(w + 1, bytes(r)) for w, r in enumerate(reqs)])
    total = a + b + c
    last = reqs[2]
    # the replicas in descending rid (worker id), as BMv2 sends them (`Tables.replicas`)
    want = [(w + 1, reply(last, w, Flag.RESULT, total, 0b111, exp=131)) for w in (2, 1, 0)]
    assert out == want
    c = fp.pipeline.counters.snapshot()
    assert c["packets_in"] == (3, 3 * FRAME)
    assert c["aggregated"] == (3, 3 * FRAME)
    assert c["results"] == (1, FRAME)
    assert c["result_packets"] == (3, 3 * FRAME)
    assert fp.counters.copies_out == 3


def test_a_retransmission_into_a_complete_slot_gets_the_result_back_by_its_ingress_port():
    fp = switch(2)
    a, b = np.arange(LANES), np.full(LANES, 5)
    fp.process_frames([(1, bytes(request(0, a))), (2, bytes(request(1, b)))])
    retx = request(1, b, flags=Flag.RETX, ip_id=99, ttl=3)
    # arriving on port 9, not the worker's own port 2: the reply goes back out of port 9
    out = fp.process_frames([(9, bytes(retx))])
    assert out == [(9, reply(retx, 1, Flag.RESULT, a + b, 0b11))]
    c = fp.pipeline.counters.snapshot()
    assert c["retx_replies"][0] == 1 and c["duplicates"][0] == 1
    assert c["result_packets"] == (3, 3 * FRAME)


def test_a_retransmission_into_an_incomplete_slot_gets_pending_with_its_own_lanes():
    fp = switch(3)
    a = np.arange(LANES) - 3
    fp.process_frames([(1, bytes(request(0, a)))])
    retx = request(0, a, flags=Flag.RETX)
    out = fp.process_frames([(1, bytes(retx))])
    assert out == [(1, reply(retx, 0, Flag.PENDING, a, 0b001))]
    c = fp.pipeline.counters.snapshot()
    assert c["pending_replies"][0] == 1 and c["result_packets"][0] == 0


def test_shadow_copy_and_a_negative_sum_survive_the_rewrite():
    fp = switch(2)
    a, b = np.full(LANES, -(2**31)), np.full(LANES, -1)
    seq = 4  # slot 0, shadow copy 1
    fp.process_frames([(1, bytes(request(0, a, seq=seq)))])
    last = request(1, b, seq=seq)
    out = fp.process_frames([(2, bytes(last))])
    wrapped = ints(np.full(LANES, 2**31 - 1))  # int32 wrap-around
    assert out == [(w + 1, reply(last, w, Flag.RESULT, wrapped, 0b11)) for w in (1, 0)]


def test_ipv4_checksum_of_every_copy_is_valid():
    fp = switch(3)
    frames = [(w + 1, bytes(request(w, np.arange(LANES), ip_id=1000 * w))) for w in range(3)]
    for port, data in fp.process_frames(frames):
        ip = Ether(data)[IP]
        expected = ip.chksum
        del ip.chksum
        assert IP(bytes(ip)).chksum == expected, port
        assert Ether(data)[UDP].chksum == 0


def test_checksum_helper_matches_scapy():
    rng = np.random.default_rng(0)
    for _ in range(20):
        hdr = IP(
            src=".".join(map(str, rng.integers(0, 256, 4))),
            dst=".".join(map(str, rng.integers(0, 256, 4))),
            ttl=int(rng.integers(1, 256)),
            id=int(rng.integers(0, 65536)),
            len=int(rng.integers(20, 1500)),
        )
        raw = bytearray(bytes(hdr)[:20])
        want = int.from_bytes(raw[10:12], "big")
        raw[10:12] = b"\0\0"
        got = ipv4_checksum(np.frombuffer(bytes(raw), np.uint8).reshape(1, 20))[0]
        assert got == want


def test_a_copy_for_a_worker_without_worker_table_entry_is_dropped_and_not_counted():
    fp = switch(2)
    del fp.pipeline.tables.workers[(1, 0)]
    a = np.arange(LANES)
    last = request(1, a)
    out = fp.process_frames([(1, bytes(request(0, a))), (2, bytes(last))])
    assert out == [(2, reply(last, 1, Flag.RESULT, 2 * a, 0b11))]
    c = fp.pipeline.counters.snapshot()
    assert c["result_packets"] == (1, FRAME)  # as the P4 EgressStats counts
    assert fp.counters.no_worker == 1


def test_trailing_bytes_after_the_ina_packet_leave_with_every_copy():
    """The P4 deparser emits the unparsed rest of the packet after the headers."""
    fp = switch(2)
    a = np.arange(LANES)
    tail = b"\xaa\xbb\xcc"
    last = request(1, a)
    out = fp.process_frames([(1, bytes(request(0, a))), (2, bytes(last) + tail)])
    assert [p for p, _ in out] == [2, 1]  # descending rid
    for port, data in out:
        assert data == reply(last, port - 1, Flag.RESULT, 2 * a, 0b11) + tail
    assert fp.pipeline.counters.snapshot()["packets_in"] == (2, 2 * FRAME + len(tail))


# -- plain traffic ---------------------------------------------------------------------------


def test_plain_frames_are_forwarded_unchanged_by_destination_mac():
    fp = switch(3)
    udp = bytes(
        Ether(dst=mac(3), src=mac(1)) / IP(src="10.0.0.1", dst="10.0.0.3") / UDP(dport=9) / b"x"
    )
    to_switch_mac = bytes(Ether(dst=SWITCH_MAC, src=mac(1)) / IP(dst=SWITCH_IP) / b"ping")
    arp = bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=mac(1)) / ARP(pdst="10.0.0.2"))
    out = fp.process_frames([(1, udp), (1, to_switch_mac), (1, arp)])
    assert out == [(3, udp)]
    assert fp.counters.forwarded == 1 and fp.counters.forward_miss == 2
    assert fp.pipeline.counters.snapshot()["packets_in"] == (0, 0)
    fp.remove_forward(mac(3))
    assert fp.process_frames([(1, udp)]) == []


def test_only_ipv4_without_options_and_udp_to_the_ina_port_is_ina():
    fp = switch(2)
    a = np.arange(LANES)
    with_options = bytes(
        Ether(dst=mac(2), src=mac(1))
        / IP(dst=SWITCH_IP, options=b"\x01\x01\x01\x00")  # ihl 6: the parser stops there
        / UDP(dport=UDP_PORT)
        / INA(job_id=1, lanes=list(a))
    )
    other_port = bytes(
        Ether(dst=mac(2), src=mac(1)) / IP(dst=SWITCH_IP) / UDP(dport=UDP_PORT + 1) / b"y"
    )
    short_udp = bytes(Ether(dst=mac(2), src=mac(1)) / IP(dst=SWITCH_IP, proto=17))[:38]
    out = fp.process_frames([(1, with_options), (1, other_port), (1, short_udp)])
    assert out == [(2, with_options), (2, other_port), (2, short_udp)]
    assert fp.pipeline.counters.snapshot()["packets_in"][0] == 0


def test_outputs_leave_in_input_order():
    fp = switch(2)
    a = np.arange(LANES)
    plain = bytes(Ether(dst=mac(1), src=mac(2)) / IP() / b"between")
    last = request(1, a)
    out = fp.process_frames([(1, bytes(request(0, a))), (2, plain), (2, bytes(last)), (2, plain)])
    result = [reply(last, w, Flag.RESULT, 2 * a, 0b11) for w in range(2)]
    assert out == [(1, plain), (2, result[1]), (1, result[0]), (1, plain)]  # replicas: rid 1, 0


# -- bad input is counted ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda f: f[:-1], id="truncated lanes"),
        pytest.param(lambda f: f[:50], id="truncated header"),
        pytest.param(lambda f: f[:38] + (0).to_bytes(2, "big") + f[40:], id="udp length 0"),
        pytest.param(
            lambda f: f[:38] + (len(f) - 34 - 4).to_bytes(2, "big") + f[40:], id="udp length"
        ),
        pytest.param(lambda f: f[:42] + b"\x09" + f[43:], id="version"),
        pytest.param(lambda f: f[:43] + b"\x07" + f[44:], id="op"),
        pytest.param(lambda f: f[:44] + bytes([Flag.RESULT]) + f[45:], id="RESULT to switch"),
    ],
)
def test_malformed_ina_frames_are_dropped_and_counted_with_their_length(mangle):
    fp = switch(2)
    bad = mangle(bytes(request(0, np.arange(LANES))))
    assert fp.process_frames([(1, bad)]) == []
    c = fp.pipeline.counters.snapshot()
    assert c["drop_malformed"] == (1, len(bad))
    assert c["packets_in"] == (1, len(bad))


def test_runts_unknown_jobs_and_bad_workers_are_counted():
    fp = switch(2)
    unknown = request(0, np.arange(LANES))
    unknown[INA].job_id = 9
    bad_worker = request(0, np.arange(LANES))
    bad_worker[INA].worker_id = 5
    out = fp.process_frames([(1, b"\x01\x02"), (1, bytes(unknown)), (1, bytes(bad_worker))])
    assert out == []
    c = fp.pipeline.counters.snapshot()
    assert c["drop_unknown_job"] == (1, FRAME) and c["drop_bad_worker"] == (1, FRAME)
    assert fp.counters.runts == 1


# -- batches ---------------------------------------------------------------------------------


def test_a_duplicate_in_the_same_batch_is_answered_like_one_at_a_time():
    a, b = np.arange(LANES), np.arange(LANES) * 3
    frames = [
        (1, bytes(request(0, a, ip_id=1))),
        (1, bytes(request(0, a, ip_id=2, flags=Flag.RETX))),  # same key, same batch
        (2, bytes(request(1, b, ip_id=3))),
        (2, bytes(request(1, b, ip_id=4, flags=Flag.RETX))),
    ]
    batch, single = switch(2), switch(2)
    got = batch.process_frames(frames)
    want = [o for f in frames for o in single.process_frames([f])]
    assert got == want
    assert len(got) == 1 + 2 + 1  # pending, result x2, retx result
    assert batch.pipeline.counters.snapshot() == single.pipeline.counters.snapshot()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # worker
            st.integers(0, 9),  # seq
            st.booleans(),  # retransmission flag
            st.sampled_from(["ina", "plain", "runt", "short"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_any_batch_equals_the_same_frames_one_at_a_time(items):
    frames = []
    for i, (w, seq, retx, kind) in enumerate(items):
        lanes = (np.arange(LANES) + 7 * w + seq) % 97
        if kind == "ina":
            f = bytes(request(w, lanes, seq=seq, flags=Flag.RETX if retx else 0, ip_id=i))
        elif kind == "plain":
            f = bytes(Ether(dst=mac((w + 1) % 3 + 1), src=mac(w + 1)) / IP(id=i) / b"p")
        elif kind == "runt":
            f = b"\x00" * (i % 14)
        else:
            f = bytes(request(w, lanes, seq=seq))[: 42 + i % 30]
        frames.append((w + 1, f))
    batch, single = switch(3), switch(3)
    assert batch.process_frames(frames) == [o for f in frames for o in single.process_frames([f])]
    assert batch.pipeline.counters.snapshot() == single.pipeline.counters.snapshot()
    assert (batch.pipeline.counters.workers == single.pipeline.counters.workers).all()


# -- control plane ---------------------------------------------------------------------------


def test_forward_entries_load_from_runtime_json(tmp_path):
    path = tmp_path / "forward.json"
    path.write_text(
        '{"target": "bmv2", "table_entries": ['
        '{"table": "MyIngress.forward_table", "match": {"dst_mac": "00:00:0a:00:00:07"},'
        ' "action_name": "MyIngress.forward", "action_params": {"port": 7}},'
        '{"table": "job_table", "match": {"job_id": 1}, "action_name": "set_job",'
        ' "action_params": {}}]}'
    )
    fp = FramePipeline(Pipeline(lanes=LANES, pool_total=4))
    assert fp.load_forward(path) == 1
    assert fp.forward == {mac_to_int("00:00:0a:00:00:07"): 7}
    with pytest.raises(ValueError):
        fp.add_forward("00:00:0a:00:00:07", 512)
    with pytest.raises(ValueError):
        mac_to_int("00:00:0a")
