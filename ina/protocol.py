"""The INA wire protocol, defined once.

Everything else derives from this module: the fast numpy codec used on the data path, the
scapy layer (`ina.scapy_layer`), the P4 header and constant definitions
(`ina/p4/generated/headers_gen.p4` and `constants_gen.p4`, generated from here by
`ina.p4gen`; a test checks that regeneration is a no-op) and docs/protocol.md.

An INA packet is Ethernet / IPv4 / UDP (destination port ``UDP_PORT`` towards the switch,
the worker's own port back) / INA header / ``lanes`` int32 values, all in network byte
order::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +---------------+---------------+---------------+---------------+
    |    version    |      op       |     flags     |   worker_id   |
    +---------------+---------------+---------------+---------------+
    |            job_id             |             slot              |
    +-------------------------------+-------------------------------+
    |                              seq                              |
    +---------------+---------------+-------------------------------+
    |      exp      |     level     |           num_lanes           |
    +---------------+---------------+-------------------------------+
    |                            bitmap                             |
    +---------------------------------------------------------------+
    |                             epoch                             |
    +---------------------------------------------------------------+
    |                   lane[0] ... lane[L-1] (int32)               |
    +---------------------------------------------------------------+

``op`` says how the switch combines the lanes (SUM: int32 wrap-around add, OR: bitwise or,
MAX: signed max). ``exp`` and ``level`` are always MAX-combined, whatever ``op`` is: workers
use them to agree on a scale (exponent) and on a compression level (DC2). ``slot`` and the
SHADOW flag name one of the two shadow copies of a slot in the job's pool (SwitchML); ``seq`` is
the job-wide chunk number and lets the switch reject stale duplicates. ``bitmap`` is filled in
by the switch on replies: the workers that contributed to the slot so far. ``epoch`` names
the *run* of the job the packet belongs to: a worker's first call JOINs a run (op JOIN, its
random nonce in ``seq``), the switch answers with the run's epoch, and it drops packets of
any other epoch as STALE, so no run ever sees another run's sums (docs/protocol.md, "Runs").

The number of lanes ``L`` is fixed per deployment: ``P4_LANES`` for the P4 program (BMv2),
any value up to ``MAX_LANES`` for the switch model, which accepts larger packets for speed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

VERSION = 1
UDP_PORT = 47000  # destination port of INA packets towards the switch (unbound in scapy)
P4_LANES = 32  # lanes per packet in the P4 program; see ina/p4/configuration.p4 for why
MAX_LANES = 4096  # largest packet the switch model accepts: 16 KiB of lanes + header
MAX_WORKERS = 32  # one bit per worker in the slot bitmap (bit<32>)
# A job's workers in all: one switch holds MAX_WORKERS contributors, a tree of switches more
# (each leaf is one contributor of its parent). The bound keeps 18 bits of every value's
# mantissa after the headroom for the int32 sum of all of them (ina.host.quantize).
MAX_JOB_WORKERS = 4096
LANE_BYTES = 4

# Frame overhead of an INA packet on Ethernet: Ethernet 14 + IPv4 20 + UDP 8. Byte counters
# count whole frames, so the switch model adds this when it serves INA over UDP sockets.
FRAME_OVERHEAD = 14 + 20 + 8


class Op(enum.IntEnum):
    """How the switch combines the lanes of the packets of one slot."""

    SUM = 1  # int32 add with wrap-around
    OR = 2  # bitwise or (index bitmaps of the homomorphic compressor)
    MAX = 3  # signed int32 max (per-chunk exponents)
    # join a new run of the job: ``seq`` is the worker's nonce, ``slot`` its pool's last slot
    # (pool_size - 1) and ``num_lanes`` its lanes per packet, which the switch checks against
    # the job's (else REJECT); lanes are ignored
    JOIN = 4


class Flag(enum.IntFlag):
    """Bits of the ``flags`` field."""

    RESULT = 0x01  # switch -> worker: the lanes hold the aggregate of the slot
    RETX = 0x02  # worker -> switch: a retransmission (diagnostic; the switch does not need it)
    SHADOW = 0x04  # which of the slot's two shadow copies this packet belongs to
    PENDING = 0x08  # switch -> worker: reply to a retransmission into a slot still incomplete
    # switch -> worker: a JOIN refused because the worker's pool or lanes are not the job's;
    # a header without lanes whose ``slot`` and ``num_lanes`` hold the switch's values
    REJECT = 0x10


@dataclass(frozen=True)
class Field:
    """One header field: its name, width in bits and meaning."""

    name: str
    bits: int
    doc: str


HEADER_FIELDS: tuple[Field, ...] = (
    Field("version", 8, "protocol version, VERSION"),
    Field("op", 8, "Op: how lanes are combined"),
    Field("flags", 8, "Flag bits"),
    Field("worker_id", 8, "bit index of the sender in the job's worker bitmap, < num_workers"),
    Field("job_id", 16, "job, installed by the control plane"),
    Field("slot", 16, "slot index in the job's pool, < pool_size"),
    Field("seq", 32, "job-wide chunk sequence number (generation of the slot)"),
    Field("exp", 8, "MAX-combined: biased exponent for the agreed scale"),
    Field("level", 8, "MAX-combined: compression level the workers agree on (DC2)"),
    Field("num_lanes", 16, "lanes that carry data (the rest are padding)"),
    Field("bitmap", 32, "switch -> worker: workers that contributed to the slot"),
    Field("epoch", 32, "run of the job, assigned by the switch when the workers JOIN"),
)

HEADER_BYTES = sum(f.bits for f in HEADER_FIELDS) // 8  # 24
# Byte offset of each field in the header.
FIELD_OFFSETS = {
    f.name: sum(g.bits for g in HEADER_FIELDS[:i]) // 8 for i, f in enumerate(HEADER_FIELDS)
}

# Big-endian structured dtype for zero-copy parsing of batches of packets.
HEADER_DTYPE = np.dtype([(f.name, {8: "u1", 16: ">u2", 32: ">u4"}[f.bits]) for f in HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == HEADER_BYTES

LANE_DTYPE = np.dtype(">i4")  # lanes on the wire


class DropReason(enum.IntEnum):
    """Why the switch dropped an INA packet; each has a counter."""

    MALFORMED = 0  # wrong version/op/length, or a REJECT (or, to a switch with no parent for
    # the job, a RESULT/PENDING) sent to the switch
    UNKNOWN_JOB = 1  # job_id not installed
    BAD_WORKER = 2  # worker_id >= the job's num_workers
    BAD_SLOT = 3  # slot >= the job's pool_size, or slot/SHADOW not those of seq
    STALE = 4  # another run's epoch, or a seq older than the slot's current generation


class Counter(enum.IntEnum):
    """Indices of the switch's ``ina_stats`` counter array (packets and bytes each).

    The P4 program and the switch model use the same indices and meanings.
    """

    PACKETS_IN = 0  # INA packets that reached the aggregation stage (valid or not)
    AGGREGATED = 1  # contributions added into a slot
    DUPLICATES = 2  # contributions that had been counted already (retransmissions, dups)
    RESULTS = 3  # slots completed (one per slot, however many workers get the result)
    RESULT_PACKETS = 4  # result copies sent out (multicast replicas + unicast replies)
    RETX_REPLIES = 5  # stored results sent again by unicast to a retransmitting worker
    PENDING_REPLIES = 6  # replies to retransmissions into an incomplete slot
    DROP_MALFORMED = 7
    DROP_UNKNOWN_JOB = 8
    DROP_BAD_WORKER = 9
    DROP_BAD_SLOT = 10
    DROP_STALE = 11
    JOINS = 12  # JOIN requests counted into a run's join (not duplicates)
    RUNS = 13  # runs whose workers all joined (one per run, like RESULTS per slot)
    UP_PACKETS = 14  # packets a leaf sent to its parent switch (partial sums, re-sends, joins)
    JOIN_REJECTS = 15  # JOINs refused (REJECT): the worker's pool or lanes differ from the job's


NUM_COUNTERS = len(Counter)
DROP_COUNTER = {
    DropReason.MALFORMED: Counter.DROP_MALFORMED,
    DropReason.UNKNOWN_JOB: Counter.DROP_UNKNOWN_JOB,
    DropReason.BAD_WORKER: Counter.DROP_BAD_WORKER,
    DropReason.BAD_SLOT: Counter.DROP_BAD_SLOT,
    DropReason.STALE: Counter.DROP_STALE,
}

# Exponents travel biased so that they fit an unsigned byte (header ``exp``) and compare the
# same way signed or unsigned (MAX lanes): ``e`` such that every |x| < 2**e, clamped to
# [EXP_MIN, EXP_MAX] (float32 spans -148..128; a whole block below 2**-126 is quantized
# relative to 2**-126), stored as e + EXP_BIAS in 1..255. EXP_ZERO marks "all zeros": any
# real exponent beats it in a MAX.
EXP_BIAS = 127
EXP_MIN = -126
EXP_MAX = 128
EXP_ZERO = 0


def packet_bytes(lanes: int) -> int:
    """Size of the UDP payload of an INA packet with ``lanes`` lanes."""
    return HEADER_BYTES + LANE_BYTES * lanes


def packet_dtype(lanes: int) -> np.dtype:
    """Structured dtype of a whole INA payload (header + lanes), for batches."""
    return np.dtype([("hdr", HEADER_DTYPE), ("lanes", LANE_DTYPE, (lanes,))])


@dataclass(frozen=True)
class Header:
    """A decoded INA header (convenience for tests, tools and the control path)."""

    version: int = VERSION
    op: int = Op.SUM
    flags: int = 0
    worker_id: int = 0
    job_id: int = 0
    slot: int = 0
    seq: int = 0
    exp: int = 0
    level: int = 0
    num_lanes: int = 0
    bitmap: int = 0
    epoch: int = 0

    def pack(self) -> bytes:
        a = np.zeros(1, HEADER_DTYPE)
        for f in HEADER_FIELDS:
            a[f.name] = getattr(self, f.name)
        return a.tobytes()

    @classmethod
    def unpack(cls, data: bytes) -> Header:
        if len(data) < HEADER_BYTES:
            raise ValueError(f"INA header needs {HEADER_BYTES} bytes, got {len(data)}")
        a = np.frombuffer(data[:HEADER_BYTES], HEADER_DTYPE)[0]
        return cls(**{f.name: int(a[f.name]) for f in HEADER_FIELDS})


def encode_packet(header: Header, lanes: np.ndarray) -> bytes:
    """Header + lanes as wire bytes (big-endian int32 lanes)."""
    return header.pack() + np.asarray(lanes, dtype=np.int32).astype(LANE_DTYPE).tobytes()


def decode_packet(data: bytes) -> tuple[Header, np.ndarray]:
    """Wire bytes -> (header, native int32 lanes). Raises ValueError if malformed."""
    if (len(data) - HEADER_BYTES) % LANE_BYTES or len(data) < HEADER_BYTES:
        raise ValueError(f"INA payload of {len(data)} bytes is not header + whole lanes")
    lanes = np.frombuffer(data, LANE_DTYPE, offset=HEADER_BYTES).astype(np.int32)
    return Header.unpack(data), lanes
