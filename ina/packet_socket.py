"""802.1Q tags on AF_PACKET sockets: read frames with their VLAN tags, as they were on the wire.

Linux takes the outer VLAN tag off every received frame before a packet socket sees it
(``skb_vlan_untag`` in the receive path, offload or not) and keeps it beside the frame. A
socket reading with plain ``recv`` gets the frame without its tag and cannot tell that it had
one. With ``PACKET_AUXDATA`` on, every read carries a ``struct tpacket_auxdata`` control
message whose ``tp_vlan_tci`` / ``tp_vlan_tpid`` hold the removed tag (``TP_STATUS_VLAN_VALID``
says there was one). Putting the 4 bytes back after the two MAC addresses gives the frame
as sent. libpcap does the same, so BMv2 (which reads its ports through libpcap) sees tagged
frames with their tags. The switch model on raw sockets (`ina.switch_model.rawio`) and the
differential tests' host ends (`tests/differential/targets.py`) need this too (issue 11).

Frames written to a packet socket go out as they are, tag included: only reading needs this.
"""

from __future__ import annotations

import socket

import numpy as np

SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
ETH_P_8021Q = 0x8100
TAG_AT = 12  # the tag goes after the destination and source MAC addresses
TAG_BYTES = 4

# One control message as the kernel writes it for PACKET_AUXDATA (LP64): struct cmsghdr
# { size_t len; int level; int type; } and struct tpacket_auxdata { u32 tp_status, tp_len,
# tp_snaplen; u16 tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid; }, padded to 8 bytes.
AUXDATA_CMSG = np.dtype(
    [
        ("len", "<u8"),
        ("level", "<i4"),
        ("type", "<i4"),
        ("status", "<u4"),
        ("tp_len", "<u4"),
        ("snaplen", "<u4"),
        ("mac", "<u2"),
        ("net", "<u2"),
        ("vlan_tci", "<u2"),
        ("vlan_tpid", "<u2"),
        ("_pad", "<u4"),
    ]
)
assert AUXDATA_CMSG.itemsize == 40
AUXDATA_SPACE = AUXDATA_CMSG.itemsize  # CMSG_SPACE(sizeof(struct tpacket_auxdata))


def keep_vlan_tags(sock: socket.socket) -> None:
    """Have every read of ``sock`` (an AF_PACKET socket) report the tag the kernel removed."""
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)


def tag_bytes(status: int, tci: int, tpid: int) -> bytes | None:
    """The 4 tag bytes a frame lost (TPID, TCI), or None if it had no tag. Like libpcap, a
    non-zero TCI counts as a tag even where an old kernel did not set TP_STATUS_VLAN_VALID."""
    if not (status & TP_STATUS_VLAN_VALID or tci):
        return None
    if not status & TP_STATUS_VLAN_TPID_VALID or not tpid:
        tpid = ETH_P_8021Q
    return tpid.to_bytes(2, "big") + tci.to_bytes(2, "big")


def with_tag(frame: bytes, tag: bytes | None) -> bytes:
    """``frame`` with ``tag`` put back after its MAC addresses (as it is if ``tag`` is None)."""
    return frame if tag is None else frame[:TAG_AT] + tag + frame[TAG_AT:]


def recv_frame(sock: socket.socket, size: int = 65536) -> bytes:
    """One frame from ``sock`` (`keep_vlan_tags` on), with its VLAN tag if it had one."""
    data, ancillary, _, _ = sock.recvmsg(size, AUXDATA_SPACE)
    for level, kind, payload in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(payload) >= 20:
            status = int.from_bytes(payload[0:4], "little")
            tci = int.from_bytes(payload[16:18], "little")
            tpid = int.from_bytes(payload[18:20], "little")
            return with_tag(data, tag_bytes(status, tci, tpid))
    return data


def restore_tags(
    frames: np.ndarray, lengths: np.ndarray, control: np.ndarray, control_len: np.ndarray
) -> int:
    """Put back the tags of a batch read with recvmmsg: ``frames`` (n, stride) uint8 with
    ``lengths`` (updated in place), ``control`` the n control buffers (`AUXDATA_CMSG` each)
    and ``control_len`` the kernel's msg_controllen of each. Each frame needs `TAG_BYTES` of
    room past its length. Returns how many frames had a tag."""
    have = (control_len >= AUXDATA_CMSG.itemsize - 4) & (control["level"] == SOL_PACKET)
    have &= control["type"] == PACKET_AUXDATA
    tagged = have & (((control["status"] & TP_STATUS_VLAN_VALID) != 0) | (control["vlan_tci"] != 0))
    rows = np.flatnonzero(tagged)
    for i in rows.tolist():  # tagged frames are rare on an INA fabric: one by one is fine
        n = int(lengths[i])
        c = control[i]
        tag = tag_bytes(int(c["status"]), int(c["vlan_tci"]), int(c["vlan_tpid"]))
        frames[i, TAG_AT + TAG_BYTES : n + TAG_BYTES] = frames[i, TAG_AT:n].copy()
        frames[i, TAG_AT : TAG_AT + TAG_BYTES] = np.frombuffer(tag, np.uint8)
        lengths[i] = n + TAG_BYTES
    return int(rows.size)


__all__ = [
    "AUXDATA_CMSG",
    "AUXDATA_SPACE",
    "TAG_BYTES",
    "keep_vlan_tags",
    "recv_frame",
    "restore_tags",
    "tag_bytes",
    "with_tag",
]
