"""Failures and values of the switch model's P4Runtime service.

Every module of the service (`ina.switch_model.p4runtime_server` and its ``p4rt_*`` parts)
reports a bad request by raising `P4RuntimeFailure` with a canonical gRPC code; the RPC that
caught it turns it into that status (``Write``: one ``p4.v1.Error`` per update). The values of
a request are P4Runtime bytestrings (spec, "Bytestrings"): `decode_uint` accepts padded ones
and refuses empty ones or ones that do not fit their width (OUT_OF_RANGE), `encode_uint`
gives the canonical (shortest) form that replies use. MAC and IPv4 helpers convert between
the program's integers and the strings `ina.switch_model.tables` keeps.
"""

from __future__ import annotations

import ipaddress

import grpc
from p4.v1 import p4runtime_pb2

SC = grpc.StatusCode


class P4RuntimeFailure(Exception):
    """A request (or one update of a batch) failed with a canonical gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def fail(code: grpc.StatusCode, message: str) -> P4RuntimeFailure:
    """The failure to raise: ``raise fail(SC.NOT_FOUND, "...")``."""
    return P4RuntimeFailure(code, message)


def rpc_code(code: grpc.StatusCode) -> int:
    """google.rpc.Code number of a grpc.StatusCode."""
    return code.value[0]


# -- bytestrings (P4Runtime spec, "Bytestrings") -----------------------------------------------


def encode_uint(value: int) -> bytes:
    """Canonical bytestring of an unsigned value: the shortest big-endian string, >= 1 byte."""
    value = int(value)
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_uint(data: bytes, bits: int, what: str) -> int:
    """Value of a bytestring that must fit ``bit<bits>``; leading zero bytes are allowed."""
    if not data:
        raise fail(SC.OUT_OF_RANGE, f"{what}: empty bytestring")
    value = int.from_bytes(data, "big")
    if value >> bits:
        raise fail(SC.OUT_OF_RANGE, f"{what}: {value:#x} does not fit bit<{bits}>")
    return value


def u128(msg: p4runtime_pb2.Uint128) -> int:
    """An election ID as one integer."""
    return (msg.high << 64) | msg.low


# -- addresses: the program's integers <-> the strings of the model's tables ------------------


def mac_str(value: int) -> str:
    """``aa:bb:cc:dd:ee:ff`` of a bit<48> MAC."""
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def mac_int(mac: str) -> int:
    """bit<48> of a MAC string (``:`` or ``-`` separated); 0 if it is not one."""
    try:
        return int(mac.replace(":", "").replace("-", ""), 16) & ((1 << 48) - 1)
    except ValueError:
        return 0


def ip_int(ip: str) -> int:
    """bit<32> of an IPv4 address string; 0 for anything else."""
    try:
        return int(ipaddress.IPv4Address(ip))
    except ValueError:  # a host name in a jobs file: the program only holds addresses
        return 0
