"""`ina.switch_model.p4rt_wire`: Read replies encoded with numpy are byte for byte what the
protobuf runtime serializes, cut into messages at entity boundaries."""

from __future__ import annotations

import numpy as np
import pytest
from p4.v1 import p4runtime_pb2

from ina.switch_model import p4rt_wire

# Values at every varint and bytestring length boundary, and the extremes.
EDGES = [0, 1, 127, 128, 255, 256, 2**14 - 1, 2**14, 2**21, 2**31 - 1, 2**31, 2**32 - 1]


def _bitstring(v: int) -> bytes:
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def _cells(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.choice([1, 127, 128, 0x12000001, 0x16000001, 0x16000030], n)
    idx = np.concatenate([EDGES, rng.integers(0, 1 << 20, n - len(EDGES))])
    return ids, idx, rng


def test_register_records_equal_protobufs_bytes():
    ids, idx, rng = _cells(3000)
    vals = np.concatenate([EDGES, rng.integers(0, 1 << 32, len(ids) - len(EDGES))])
    want = p4runtime_pb2.ReadResponse()
    for r, i, v in zip(ids.tolist(), idx.tolist(), vals.tolist(), strict=True):
        e = want.entities.add().register_entry
        e.register_id, e.index.index, e.data.bitstring = r, i, _bitstring(v)
    got = p4rt_wire.register_records(ids, idx, vals)
    assert got.data.tobytes() == want.SerializeToString()
    assert len(got) == len(ids)


def test_counter_records_equal_protobufs_bytes():
    ids, idx, rng = _cells(3000, seed=1)
    n = len(ids)
    big = [2**62, 2**63 - 1, 0, 5]
    packets = np.concatenate([EDGES, big, rng.integers(0, 1 << 40, n - len(EDGES) - 4)])
    bytes_ = np.concatenate([big, EDGES, rng.integers(0, 1 << 50, n - len(EDGES) - 4)])
    bytes_[-1] = -1  # int64 fields: negative values are 10-byte varints in protobuf
    want = p4runtime_pb2.ReadResponse()
    for c, i, p, b in zip(
        ids.tolist(), idx.tolist(), packets.tolist(), bytes_.tolist(), strict=True
    ):
        e = want.entities.add().counter_entry
        e.counter_id, e.index.index = c, i
        e.data.packet_count, e.data.byte_count = p, b
    got = p4rt_wire.counter_records(ids, idx, packets, bytes_)
    assert got.data.tobytes() == want.SerializeToString()


@pytest.mark.parametrize("max_bytes", [1, 50, 1000, 1 << 20])
def test_chunks_cut_at_entity_boundaries(max_bytes):
    ids, idx, rng = _cells(500, seed=2)
    vals = rng.integers(0, 1 << 32, len(ids))
    records = p4rt_wire.register_records(ids, idx, vals)
    chunks = list(records.chunks(max_bytes))
    assert b"".join(chunks) == records.data.tobytes()
    entities = []
    for c in chunks:
        reply = p4runtime_pb2.ReadResponse.FromString(c)
        assert len(c) <= max_bytes or len(reply.entities) == 1
        entities.extend(reply.entities)
    assert [e.register_entry.index.index for e in entities] == idx.tolist()


def test_reply_messages_mix_parts_in_order():
    group = p4runtime_pb2.Entity()
    group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 7
    parts = [
        p4rt_wire.RegisterCells(0x16000001, 10, [1, 2**32 - 1, -1 & 0xFF], bits=8),
        p4rt_wire.Entities((lambda: group,)),
        p4rt_wire.CounterCells(0x12000001, 3, np.array([[4, 400], [0, 0]], np.int64)),
        p4rt_wire.RegisterCells(0x16000010, 0, np.array([-1, 5], np.int32), bits=32),
    ]
    messages = list(p4rt_wire.reply_messages(parts, max_bytes=40))
    assert len(messages) > 1 and all(len(m) <= 40 for m in messages)
    got = [e for m in messages for e in p4runtime_pb2.ReadResponse.FromString(m).entities]
    regs = [(e.register_entry.index.index, e.register_entry.data.bitstring) for e in got[:3]]
    assert regs == [(10, b"\x01"), (11, b"\xff"), (12, b"\xff")]  # masked to bit<8>
    assert got[3] == group
    assert [(e.counter_entry.index.index, e.counter_entry.data.byte_count) for e in got[4:6]] == [
        (3, 400),
        (4, 0),
    ]
    assert [e.register_entry.data.bitstring for e in got[6:]] == [b"\xff\xff\xff\xff", b"\x05"]


def test_an_empty_reply_is_one_empty_message():
    assert list(p4rt_wire.reply_messages([p4rt_wire.Entities(())], 100)) == [b""]
