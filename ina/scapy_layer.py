"""Scapy layers for INA packets, built from `ina.protocol.HEADER_FIELDS`.

    >>> from scapy.all import IP, UDP
    >>> from ina.scapy_layer import INA
    >>> pkt = IP(dst="10.0.0.254") / UDP(sport=50000) / INA(job_id=1, lanes=[1, 2, 3])
    >>> INA(bytes(pkt[INA])).lanes
    [1, 2, 3]

The header's fields come from the protocol definition, so this layer cannot drift from the
fast codec or the P4 headers. Lanes are a list of signed 32-bit integers after the header;
`INA.num_lanes` is filled in from the list when left unset. Importing this module binds the
layer to UDP port `ina.protocol.UDP_PORT` in both directions, so pcaps dissect.
"""

from __future__ import annotations

from scapy.fields import (
    ByteField,
    FieldListField,
    FlagsField,
    IntField,
    ShortField,
    SignedIntField,
    XIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from ina.protocol import FIELD_OFFSETS, HEADER_FIELDS, UDP_PORT, VERSION, Flag, Op

_BY_WIDTH = {8: ByteField, 16: ShortField, 32: IntField}


def _field(f):
    if f.name == "flags":
        return FlagsField("flags", 0, 8, [m.name for m in sorted(Flag, key=int)])
    if f.name == "version":
        return ByteField("version", VERSION)
    if f.name == "op":
        return ByteField("op", int(Op.SUM))
    if f.name == "bitmap":
        return XIntField("bitmap", 0)
    if f.name == "num_lanes":
        return ShortField("num_lanes", None)
    return _BY_WIDTH[f.bits](f.name, 0)


class INA(Packet):
    """INA header + int32 lanes."""

    name = "INA"
    fields_desc = [  # noqa: RUF012 (scapy's declarative API)
        *(_field(f) for f in HEADER_FIELDS),
        FieldListField("lanes", [], SignedIntField("lane", 0)),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.num_lanes is None:
            off = FIELD_OFFSETS["num_lanes"]
            pkt = pkt[:off] + len(self.lanes).to_bytes(2, "big") + pkt[off + 2 :]
        return pkt + pay


bind_layers(UDP, INA, dport=UDP_PORT)
bind_layers(UDP, INA, sport=UDP_PORT)
