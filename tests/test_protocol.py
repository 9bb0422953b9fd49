"""The wire format: golden bytes through the fast codec and the scapy layer, both ways."""

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ina.protocol import (
    FIELD_OFFSETS,
    HEADER_BYTES,
    HEADER_DTYPE,
    HEADER_FIELDS,
    UDP_PORT,
    Flag,
    Header,
    Op,
    decode_packet,
    encode_packet,
    packet_bytes,
)
from ina.scapy_layer import INA

# version 1, op MAX, flags RETX|SHADOW, worker 5, job 0x0102, slot 0x0304, seq 0x05060708,
# exp 9, level 10, num_lanes 2, bitmap 0x0b0c0d0e, epoch 0x0f101112, lanes 1 and -2
GOLDEN = bytes.fromhex("010306050102030405060708090a00020b0c0d0e0f10111200000001fffffffe")
GOLDEN_HEADER = Header(
    version=1,
    op=Op.MAX,
    flags=Flag.RETX | Flag.SHADOW,
    worker_id=5,
    job_id=0x0102,
    slot=0x0304,
    seq=0x05060708,
    exp=9,
    level=10,
    num_lanes=2,
    bitmap=0x0B0C0D0E,
    epoch=0x0F101112,
)


def test_header_size_and_offsets():
    assert HEADER_BYTES == 24 == HEADER_DTYPE.itemsize
    assert FIELD_OFFSETS["seq"] == 8 and FIELD_OFFSETS["bitmap"] == 16
    assert FIELD_OFFSETS["epoch"] == 20
    assert packet_bytes(32) == 24 + 128
    assert [f.name for f in HEADER_FIELDS] == list(HEADER_DTYPE.names)


def test_codec_golden_both_ways():
    assert encode_packet(GOLDEN_HEADER, np.array([1, -2])) == GOLDEN
    h, lanes = decode_packet(GOLDEN)
    assert h == GOLDEN_HEADER
    assert lanes.tolist() == [1, -2]


def test_scapy_golden_both_ways():
    pkt = INA(
        op=Op.MAX,
        flags="RETX+SHADOW",
        worker_id=5,
        job_id=0x0102,
        slot=0x0304,
        seq=0x05060708,
        exp=9,
        level=10,
        bitmap=0x0B0C0D0E,
        epoch=0x0F101112,
        lanes=[1, -2],
    )
    assert bytes(pkt) == GOLDEN
    back = INA(GOLDEN)
    assert back.lanes == [1, -2] and back.seq == 0x05060708 and back.num_lanes == 2
    assert back.flags == Flag.RETX | Flag.SHADOW


def test_scapy_dissects_frames_on_the_ina_port():
    frame = Ether() / IP(dst="10.0.0.254") / UDP(sport=50000, dport=UDP_PORT) / INA(lanes=[7])
    assert Ether(bytes(frame))[INA].lanes == [7]
    reply = Ether() / IP() / UDP(sport=UDP_PORT, dport=50000) / INA(flags="RESULT", lanes=[8])
    assert Ether(bytes(reply))[INA].lanes == [8]


@pytest.mark.parametrize("bad", [b"", b"\x01" * 23, GOLDEN + b"\x00"])
def test_decode_rejects_truncated_and_ragged(bad):
    with pytest.raises(ValueError):
        decode_packet(bad)
