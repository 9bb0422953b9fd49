"""`ina.packet_socket`: VLAN tags the kernel took off are put back where they were.

The real sockets are exercised by the differential ``vlan_tagged`` trace on veths
(tests/test_differential.py); here the tag arithmetic, on golden bytes built with scapy.
"""

from __future__ import annotations

import numpy as np
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

from ina.packet_socket import (
    AUXDATA_CMSG,
    PACKET_AUXDATA,
    SOL_PACKET,
    TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
    restore_tags,
    tag_bytes,
    with_tag,
)

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
INNER = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / b"payload"
VALID = TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID


def test_tag_bytes():
    assert tag_bytes(0, 0, 0) is None  # no tag
    assert tag_bytes(VALID, 10, 0x8100) == b"\x81\x00\x00\x0a"
    assert tag_bytes(TP_STATUS_VLAN_VALID, 0xA00A, 0) == b"\x81\x00\xa0\x0a"  # old kernel: 8100
    assert tag_bytes(VALID, 100, 0x88A8) == b"\x88\xa8\x00\x64"
    assert tag_bytes(0, 7, 0) == b"\x81\x00\x00\x07"  # a TCI without the flag: libpcap's rule


def test_with_tag_gives_back_the_frame_as_sent():
    sent = bytes(ETH / Dot1Q(vlan=10, prio=3) / INNER)
    stripped = bytes(ETH / INNER)  # what the kernel hands over
    assert with_tag(stripped, tag_bytes(VALID, 3 << 13 | 10, 0x8100)) == sent
    assert with_tag(stripped, None) == stripped


def test_restore_tags_in_a_batch():
    frames = [
        (bytes(ETH / Dot1Q(vlan=10) / INNER), (VALID, 10, 0x8100)),
        (bytes(ETH / INNER), None),
        (bytes(ETH / Dot1AD(vlan=100) / Dot1Q(vlan=20) / INNER), (VALID, 100, 0x88A8)),
    ]
    stride = 128
    buf = np.zeros((len(frames), stride), np.uint8)
    lengths = np.zeros(len(frames), np.int64)
    ctl = np.zeros(len(frames), AUXDATA_CMSG)
    ctl_len = np.zeros(len(frames), np.uint64)
    for i, (frame, aux) in enumerate(frames):
        got = frame[:12] + frame[16:] if aux else frame  # the outer tag taken off
        buf[i, : len(got)] = np.frombuffer(got, np.uint8)
        lengths[i] = len(got)
        ctl_len[i] = AUXDATA_CMSG.itemsize
        ctl[i]["level"], ctl[i]["type"] = SOL_PACKET, PACKET_AUXDATA
        if aux:
            ctl[i]["status"], ctl[i]["vlan_tci"], ctl[i]["vlan_tpid"] = aux
    assert restore_tags(buf, lengths, ctl, ctl_len) == 2
    for i, (frame, _) in enumerate(frames):
        assert bytes(buf[i, : lengths[i]]) == frame
