"""Read replies for counter and register cells, encoded straight to protobuf wire format.

A wildcard ``Read`` of every register returns one ``Entity`` per cell (80,064 with our
P4Info); built as protobuf objects with the pure-Python protobuf runtime that p4runtime-shell pins
(protobuf < 3.21) that is about 150 us per cell, 10-20 s in all, and the gRPC thread holds
the GIL most of that time. Counter and register entities are tiny fixed-shape messages, so
here they are encoded with numpy for a whole array of cells at once (a few ms for all
registers), byte for byte what ``ReadResponse.SerializeToString`` produces (tests compare).

A record is one ``ReadResponse.entities`` field: ``0x0a len Entity``. Records concatenate
into a serialized ``ReadResponse``, so a reply can be cut into messages at any record end.
The layout, with proto3's rules (zero scalars omitted, a set sub-message always present)::

    Entity        register_entry = 11 | counter_entry = 7        (length-delimited)
    RegisterEntry register_id = 1 (varint), index = 2 (Index), data = 3 (P4Data)
    CounterEntry  counter_id = 1 (varint), index = 2 (Index), data = 3 (CounterData)
    Index         index = 1 (varint, omitted when 0)
    P4Data        bitstring = 1 (bytes: canonical, big-endian, >= 1 byte)
    CounterData   byte_count = 1, packet_count = 2 (varints, omitted when 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_RESPONSE_ENTITY = 0x0A  # ReadResponse.entities: field 1, length-delimited
_REGISTER_ENTRY = 0x5A  # Entity.register_entry: field 11
_COUNTER_ENTRY = 0x3A  # Entity.counter_entry: field 7
_ID, _INDEX, _DATA = 0x08, 0x12, 0x1A  # fields 1 (varint), 2 and 3 (length-delimited)
_INDEX_VALUE = 0x08  # Index.index: field 1, varint
_BITSTRING = 0x0A  # P4Data.bitstring: field 1, length-delimited
_BYTE_COUNT, _PACKET_COUNT = 0x08, 0x10  # CounterData fields 1 and 2, varints
_U64 = np.uint64


@dataclass(frozen=True)
class Records:
    """Serialized ``ReadResponse.entities`` records, back to back: ``data[ends[i-1]:ends[i]]``
    is record ``i``."""

    data: np.ndarray  # uint8
    ends: np.ndarray  # int64, end offset of each record

    def __len__(self) -> int:
        return int(self.ends.size)

    def chunks(self, max_bytes: int):
        """Serialized ``ReadResponse`` messages of whole records, each at most ``max_bytes``
        (or one record, if a record is larger)."""
        start, first = 0, 0
        while first < self.ends.size:
            last = int(np.searchsorted(self.ends, start + max_bytes, side="right"))
            last = max(last, first + 1)
            end = int(self.ends[last - 1])
            yield self.data[start:end].tobytes()
            start, first = end, last


def _u64(values) -> np.ndarray:
    """Values as uint64; negative int64 become their two's complement, as protobuf does."""
    a = np.asarray(values)
    return a.astype(np.int64).view(_U64) if a.dtype.kind == "i" else a.astype(_U64)


def varint_len(x: np.ndarray) -> np.ndarray:
    """Bytes of each value's base-128 varint (1..10)."""
    n = np.ones(x.shape, np.int64)
    for k in range(1, 10):
        n += x >= _U64(1 << (7 * k))
    return n


def bitstring_len(x: np.ndarray) -> np.ndarray:
    """Bytes of each value's canonical P4Runtime bytestring: the shortest, at least 1."""
    n = np.ones(x.shape, np.int64)
    for k in range(1, 8):
        n += x >= _U64(1 << (8 * k))
    return n


def _put_byte(buf: np.ndarray, pos: np.ndarray, byte: int | np.ndarray) -> None:
    buf[pos] = byte


def _put_varint(buf: np.ndarray, pos: np.ndarray, x: np.ndarray, n: np.ndarray) -> None:
    for k in range(int(n.max(initial=0))):
        m = n > k
        byte = (x[m] >> _U64(7 * k)) & _U64(0x7F)
        byte |= np.where(n[m] > k + 1, _U64(0x80), _U64(0))
        buf[pos[m] + k] = byte.astype(np.uint8)


def _put_big_endian(buf: np.ndarray, pos: np.ndarray, x: np.ndarray, n: np.ndarray) -> None:
    for k in range(int(n.max(initial=0))):
        m = n > k
        shift = ((n[m] - 1 - k) * 8).astype(_U64)
        buf[pos[m] + k] = ((x[m] >> shift) & _U64(0xFF)).astype(np.uint8)


def _index_field(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index as uint64, bytes of the Index message's body: 0 for index 0)."""
    ix = _u64(index)
    return ix, np.where(ix == 0, 0, 1 + varint_len(ix))


def _records(n_cells: int, entity_tag: int, body_len: np.ndarray):
    """Buffer and offsets for ``n_cells`` records whose entry body is ``body_len`` bytes:
    ``0x0a E entity_tag B body`` with E = B + 2 (B < 128, so one length byte each)."""
    if n_cells and int(body_len.max()) > 125:
        raise ValueError("entity too long for one-byte lengths")  # cannot happen: <= 42
    size = body_len + 4
    ends = np.cumsum(size)
    start = ends - size
    buf = np.empty(int(ends[-1]) if n_cells else 0, np.uint8)
    _put_byte(buf, start, _RESPONSE_ENTITY)
    _put_byte(buf, start + 1, (body_len + 2).astype(np.uint8))
    _put_byte(buf, start + 2, entity_tag)
    _put_byte(buf, start + 3, body_len.astype(np.uint8))
    return buf, ends, start + 4


def _put_id_and_index(buf, pos, ids, id_len, ix, ix_len) -> np.ndarray:
    """Write fields 1 (id) and 2 (Index) of an entry at ``pos``; the position after them."""
    _put_byte(buf, pos, _ID)
    _put_varint(buf, pos + 1, ids, id_len)
    pos = pos + 1 + id_len
    _put_byte(buf, pos, _INDEX)
    _put_byte(buf, pos + 1, ix_len.astype(np.uint8))
    has = ix_len > 0
    _put_byte(buf, pos[has] + 2, _INDEX_VALUE)
    _put_varint(buf, pos[has] + 3, ix[has], ix_len[has] - 1)
    return pos + 2 + ix_len


def register_records(register_ids, indices, values) -> Records:
    """Records of ``RegisterEntry`` cells: ``values`` already masked to the register's
    width (unsigned), encoded as canonical bitstrings."""
    ids = _u64(register_ids)
    ix, ix_len = _index_field(indices)
    v = _u64(values)
    id_len, v_len = varint_len(ids), bitstring_len(v)
    body = (1 + id_len) + (2 + ix_len) + (4 + v_len)
    buf, ends, pos = _records(ids.size, _REGISTER_ENTRY, body)
    pos = _put_id_and_index(buf, pos, ids, id_len, ix, ix_len)
    _put_byte(buf, pos, _DATA)
    _put_byte(buf, pos + 1, (v_len + 2).astype(np.uint8))
    _put_byte(buf, pos + 2, _BITSTRING)
    _put_byte(buf, pos + 3, v_len.astype(np.uint8))
    _put_big_endian(buf, pos + 4, v, v_len)
    return Records(buf, ends)


def counter_records(counter_ids, indices, packets, bytes_) -> Records:
    """Records of ``CounterEntry`` cells with their packet and byte counts."""
    ids = _u64(counter_ids)
    ix, ix_len = _index_field(indices)
    pk, by = _u64(packets), _u64(bytes_)
    id_len = varint_len(ids)
    by_len = np.where(by == 0, 0, 1 + varint_len(by))
    pk_len = np.where(pk == 0, 0, 1 + varint_len(pk))
    data_len = by_len + pk_len
    body = (1 + id_len) + (2 + ix_len) + (2 + data_len)
    buf, ends, pos = _records(ids.size, _COUNTER_ENTRY, body)
    pos = _put_id_and_index(buf, pos, ids, id_len, ix, ix_len)
    _put_byte(buf, pos, _DATA)
    _put_byte(buf, pos + 1, data_len.astype(np.uint8))
    pos = pos + 2
    has = by_len > 0
    _put_byte(buf, pos[has], _BYTE_COUNT)
    _put_varint(buf, pos[has] + 1, by[has], by_len[has] - 1)
    pos = pos + by_len
    has = pk_len > 0
    _put_byte(buf, pos[has], _PACKET_COUNT)
    _put_varint(buf, pos[has] + 1, pk[has], pk_len[has] - 1)
    return Records(buf, ends)


def entity_record(serialized_entity: bytes) -> bytes:
    """One record from an ``Entity`` serialized by protobuf (tables, multicast groups)."""
    n = len(serialized_entity)
    length = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        length.append(byte | (0x80 if n else 0))
        if not n:
            break
    return bytes([_RESPONSE_ENTITY]) + bytes(length) + serialized_entity


# -- a Read reply: parts copied under the pipeline lock, encoded after it ------------------------

CELLS_PER_BLOCK = 8192  # cells encoded at once: bounded memory, and the GIL changes hands


@dataclass(frozen=True)
class RegisterCells:
    """Consecutive cells of one register, copied under the pipeline lock (``values``: the
    raw cell values, a list or array) and encoded after it, masked to ``bits``."""

    register_id: int
    first_index: int
    values: object
    bits: int

    def pieces(self, max_bytes: int):
        v = np.asarray(self.values, dtype=np.int64) & ((1 << self.bits) - 1)
        for a in range(0, v.size, CELLS_PER_BLOCK):
            b = min(a + CELLS_PER_BLOCK, v.size)
            idx = np.arange(self.first_index + a, self.first_index + b)
            yield from register_records(np.full(b - a, self.register_id), idx, v[a:b]).chunks(
                max_bytes
            )


@dataclass(frozen=True)
class CounterCells:
    """Consecutive cells of one counter: ``data[i] = (packets, bytes)``, a copy."""

    counter_id: int
    first_index: int
    data: np.ndarray

    def pieces(self, max_bytes: int):
        for a in range(0, len(self.data), CELLS_PER_BLOCK):
            d = self.data[a : a + CELLS_PER_BLOCK]
            idx = np.arange(self.first_index + a, self.first_index + a + len(d))
            yield from counter_records(
                np.full(len(d), self.counter_id), idx, d[:, 0], d[:, 1]
            ).chunks(max_bytes)


@dataclass(frozen=True)
class Entities:
    """Entities built by protobuf after the lock: each builder holds its own copy of the
    state it needs (table entries, multicast groups: few, so per-entity cost is fine)."""

    builders: tuple

    def pieces(self, max_bytes: int):
        for build in self.builders:
            yield entity_record(build().SerializeToString())


def reply_messages(parts, max_bytes: int):
    """Serialized ``ReadResponse`` messages of every part's records, in order, each at
    most ``max_bytes`` (unless one record is larger); always at least one (maybe empty)."""
    pending: list[bytes] = []
    size = 0
    sent = False
    for part in parts:
        for piece in part.pieces(max_bytes):
            if pending and size + len(piece) > max_bytes:
                yield b"".join(pending)
                sent = True
                pending, size = [], 0
            pending.append(piece)
            size += len(piece)
    if pending or not sent:
        yield b"".join(pending)


__all__ = [
    "CounterCells",
    "Entities",
    "Records",
    "RegisterCells",
    "bitstring_len",
    "counter_records",
    "entity_record",
    "register_records",
    "reply_messages",
    "varint_len",
]
