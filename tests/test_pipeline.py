"""The switch model's pipeline: the slot state machine, ops, bad input and counters."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.protocol import Counter, Flag, Header, Op, decode_packet, encode_packet
from ina.switch_model.pipeline import MULTICAST, Outputs, Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import local_job

L = 4


def make(num_workers=3, pool_size=4, lanes=L):
    p = Pipeline(lanes=lanes, pool_total=16)
    install_job_spec(p, local_job(job_id=7, num_workers=num_workers, pool_size=pool_size))
    return p


def pkt(
    worker=0,
    seq=0,
    lanes=(1, 2, 3, 4),
    op=Op.SUM,
    slot=None,
    pool=4,
    flags=0,
    job=7,
    exp=0,
    level=0,
    **kw,
):
    if slot is None:
        slot = seq % pool
    if (seq // pool) % 2:
        flags |= Flag.SHADOW
    h = Header(
        op=op,
        flags=flags,
        worker_id=worker,
        job_id=job,
        slot=slot,
        seq=seq,
        exp=exp,
        level=level,
        num_lanes=len(lanes),
        **kw,
    )
    return encode_packet(h, np.array(lanes))


def stats(p):
    return {c: int(p.counters.stats[c, 0]) for c in Counter}


def test_sum_completes_on_last_worker_and_multicasts():
    p = make()
    assert p.process(pkt(0, lanes=(1, 2, 3, 2**31 - 1))) == []
    assert p.process(pkt(1, lanes=(10, 20, 30, 1))) == []
    out = p.process(pkt(2, lanes=(100, 200, 300, 0)))
    assert len(out) == 1
    dest, job, _group, payload = out[0]
    assert dest == MULTICAST and job == 7
    h, lanes = decode_packet(payload)
    assert lanes.tolist() == [111, 222, 333, -(2**31)]  # int32 wrap-around
    assert h.flags == Flag.RESULT and h.bitmap == 0b111 and h.worker_id == 2
    s = stats(p)
    assert s[Counter.AGGREGATED] == 3 and s[Counter.RESULTS] == 1
    assert s[Counter.RESULT_PACKETS] == 3  # one copy per worker in the group


@pytest.mark.parametrize(
    ("op", "expect"),
    [(Op.OR, [7, 0, -1, 6]), (Op.MAX, [4, 0, 5, 4])],
)
def test_or_and_signed_max(op, expect):
    p = make(num_workers=3)
    p.process(pkt(0, op=op, lanes=(1, 0, -5, 2)))
    p.process(pkt(1, op=op, lanes=(2, 0, 5, 4)))
    ((_, _, _, payload),) = p.process(pkt(2, op=op, lanes=(4, -0, -1, 0)))
    assert decode_packet(payload)[1].tolist() == expect


def test_exp_and_level_are_max_combined_whatever_the_op():
    p = make(num_workers=2)
    p.process(pkt(0, exp=130, level=3))
    ((_, _, _, payload),) = p.process(pkt(1, exp=120, level=9))
    h, _ = decode_packet(payload)
    assert (h.exp, h.level) == (130, 9)


def test_duplicate_into_open_slot_is_not_added_and_gets_pending_bitmap():
    p = make()
    p.process(pkt(0))
    out = p.process(pkt(0, flags=Flag.RETX))
    ((dest, _, _, payload),) = out
    h, _ = decode_packet(payload)
    assert dest == 0 and h.flags == Flag.PENDING and h.bitmap == 0b001
    p.process(pkt(1))
    ((_, _, _, payload),) = p.process(pkt(2))
    assert decode_packet(payload)[1].tolist() == [3, 6, 9, 12]  # worker 0 counted once
    s = stats(p)
    assert s[Counter.DUPLICATES] == 1 and s[Counter.PENDING_REPLIES] == 1


def test_retransmission_into_completed_slot_gets_stored_result_by_unicast():
    p = make(num_workers=2)
    p.process(pkt(0))
    p.process(pkt(1))
    ((dest, _, _, payload),) = p.process(pkt(1, flags=Flag.RETX))
    h, lanes = decode_packet(payload)
    assert dest == 1 and h.flags == Flag.RESULT and lanes.tolist() == [2, 4, 6, 8]
    assert stats(p)[Counter.RETX_REPLIES] == 1


def test_shadow_copies_reuse_slot_without_reset_and_keep_old_result():
    p = make(num_workers=2, pool_size=1)
    for seq, base in ((0, 1), (1, 10)):  # one slot: shadow copy 0, then 1
        p.process(pkt(0, seq=seq, pool=1, lanes=(base,) * 4))
        ((_, _, _, payload),) = p.process(pkt(1, seq=seq, pool=1, lanes=(base,) * 4))
        assert decode_packet(payload)[1].tolist() == [2 * base] * 4
    # worker 0 moves on to seq 2 (copy 0 again, no reset message); worker 1 lost the
    # result of seq 1: its retransmission still finds it in copy 1
    assert p.process(pkt(0, seq=2, pool=1, lanes=(100,) * 4)) == []
    ((dest, _, _, payload),) = p.process(pkt(1, seq=1, pool=1, flags=Flag.RETX, lanes=(10,) * 4))
    assert dest == 1 and decode_packet(payload)[1].tolist() == [20] * 4
    ((_, _, _, payload),) = p.process(pkt(1, seq=2, pool=1, lanes=(100,) * 4))
    assert decode_packet(payload)[1].tolist() == [200] * 4


def test_contribution_clears_worker_bit_in_other_shadow_copy():
    p = make(num_workers=2, pool_size=1)
    p.process(pkt(0, seq=0, pool=1))
    p.process(pkt(1, seq=0, pool=1))
    assert p.registers.bitmap[0] == 0b11
    p.process(pkt(0, seq=1, pool=1))
    assert p.registers.bitmap[0] == 0b10  # worker 0 moved on, worker 1 may still need seq 0


def test_late_copy_after_worker_moved_on_is_not_counted_again():
    # Found by the 10 % loss test: worker 0's bit in copy 0 is cleared when it contributes to
    # copy 1; a delayed copy of its seq-0 packet must not be added into the complete seq 0.
    p = make(num_workers=2, pool_size=1)
    p.process(pkt(0, seq=0, pool=1))
    p.process(pkt(1, seq=0, pool=1))
    p.process(pkt(0, seq=1, pool=1))
    ((dest, _, _, payload),) = p.process(pkt(0, seq=0, pool=1))  # the late copy
    assert dest == 0 and decode_packet(payload)[1].tolist() == [2, 4, 6, 8]
    assert p.registers.count[0] == 2
    ((_, _, _, payload),) = p.process(pkt(1, seq=0, pool=1, flags=Flag.RETX))
    assert decode_packet(payload)[1].tolist() == [2, 4, 6, 8]  # stored result intact


def test_generations_advance_by_exactly_two_pools_and_reinstall_restarts():
    p = make(num_workers=1, pool_size=2)
    assert len(p.process(pkt(0, seq=0, pool=2))) == 1
    assert p.process(pkt(0, seq=8, pool=2)) == []  # skips generation 4: forged or stale
    assert len(p.process(pkt(0, seq=4, pool=2))) == 1
    assert p.process(pkt(0, seq=0, pool=2)) == []  # a rerun from seq 0: stale ...
    job = p.tables.jobs[7]
    p.install_job(job)  # ... until the job is installed again
    assert len(p.process(pkt(0, seq=0, pool=2))) == 1


def test_a_rerun_from_another_seq_start_is_stale_never_answered_from_old_slots():
    p = make(num_workers=2, pool_size=2)
    for w in (0, 1):  # a short first run: seq 0 completes
        p.process(pkt(w, seq=0, pool=2, lanes=(5, 5, 5, 5)))
    # a second run of the job without re-installing it, from a different seq_start
    assert p.process(pkt(0, seq=4096, pool=2, flags=Flag.RETX)) == []
    assert stats(p)[Counter.DROP_STALE] == 1 and stats(p)[Counter.RETX_REPLIES] == 0


def test_pool_size_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power-of-two"):
        local_job(pool_size=6).entry()


def test_stale_duplicate_never_enters_a_later_sum():
    p = make(num_workers=2, pool_size=1)
    for seq in (0, 1, 2):
        p.process(pkt(0, seq=seq, pool=1))
        p.process(pkt(1, seq=seq, pool=1))
    p.process(pkt(0, seq=4, pool=1))  # generation 4 in shadow 0, open
    assert p.process(pkt(1, seq=2, pool=1, lanes=(999,) * 4)) == []  # delayed dup of seq 2
    ((_, _, _, payload),) = p.process(pkt(1, seq=4, pool=1))
    assert decode_packet(payload)[1].tolist() == [2, 4, 6, 8]
    assert stats(p)[Counter.DROP_STALE] == 1


@pytest.mark.parametrize(
    ("payload", "counter"),
    [
        (b"", Counter.DROP_MALFORMED),
        (b"\x01" * 25, Counter.DROP_MALFORMED),
        (pkt(0)[:-1], Counter.DROP_MALFORMED),
        (pkt(0) + b"\0", Counter.DROP_MALFORMED),
        (pkt(0, version=2), Counter.DROP_MALFORMED),
        (pkt(0, op=9), Counter.DROP_MALFORMED),
        (pkt(0, flags=Flag.RESULT), Counter.DROP_MALFORMED),
        (pkt(0, job=8), Counter.DROP_UNKNOWN_JOB),
        (pkt(3), Counter.DROP_BAD_WORKER),
        (pkt(0, slot=4), Counter.DROP_BAD_SLOT),
        (pkt(0, seq=5, slot=2), Counter.DROP_BAD_SLOT),  # seq 5 lives in slot 1
        (pkt(0, seq=1, flags=Flag.SHADOW), Counter.DROP_BAD_SLOT),  # and in copy 0
    ],
)
def test_bad_input_is_dropped_and_counted(payload, counter):
    p = make()
    assert p.process(payload) == []
    s = stats(p)
    assert s[counter] == 1 and s[Counter.PACKETS_IN] == 1 and s[Counter.AGGREGATED] == 0
    # and the switch keeps working
    for w in range(3):
        out = p.process(pkt(w))
    assert len(out) == 1


def test_counters_count_frame_bytes_and_per_worker_contributions():
    p = make(num_workers=2)
    p.process(pkt(0))
    p.process(pkt(1))
    frame = len(pkt(0)) + 42
    assert p.counters.stats[Counter.PACKETS_IN, 1] == 2 * frame
    assert p.counters.workers[0, 0] == 1 and p.counters.workers[1, 0] == 1


# -- a batch behaves exactly like the same packets one at a time ---------------------------

packet_st = st.builds(
    lambda w, seq, lanes, op, retx, job: pkt(
        w, seq=seq, lanes=lanes, op=op, flags=Flag.RETX if retx else 0, job=job
    ),
    st.integers(0, 3),
    st.integers(0, 12),
    st.tuples(*[st.integers(-(2**31), 2**31 - 1)] * L),
    st.sampled_from([Op.SUM, Op.OR, Op.MAX]),
    st.booleans(),
    st.sampled_from([7, 7, 7, 8]),
) | st.binary(max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(packet_st, max_size=40))
def test_batch_equals_one_at_a_time(packets):
    one, batch = make(), make()
    expected = [o for payload in packets for o in one.process(payload)]
    stride = max([len(x) for x in packets] + [24])
    data = np.zeros((max(len(packets), 1), stride), np.uint8)
    for i, x in enumerate(packets):
        data[i, : len(x)] = np.frombuffer(x, np.uint8)
    out = Outputs.allocate(max(len(packets), 1), stride)
    batch.process_batch(data, np.array([len(x) for x in packets], dtype=np.int64), out)
    got = [(d, j, g, x[: len(expected[0][3])] if expected else x) for d, j, g, x in out.packets()]
    assert got == expected
    assert np.array_equal(one.counters.stats, batch.counters.stats)
    assert np.array_equal(one.registers.values, batch.registers.values)
    assert one.registers.bitmap == batch.registers.bitmap


@pytest.mark.parametrize("seed", range(10))
def test_whole_batch_steps_equal_the_per_packet_loop(seed):
    """`Pipeline.vectorized` (the common batch in whole-batch steps) against the per-packet
    loop: workers filling slot copies generation after generation, with duplicates, losses,
    both shadow copies and other ops in some batches, cut into batches of random sizes."""
    rng = np.random.default_rng(seed)
    stream = []
    for gen in range(12):
        op = [Op.SUM, Op.SUM, Op.OR, Op.MAX][rng.integers(4)]
        for slot in range(4):
            for w in rng.permutation(3).tolist():
                if rng.random() < 0.05:
                    continue  # lost
                lanes = rng.integers(-(2**31), 2**31, L)
                exp, level = rng.integers(0, 9, 2).tolist()
                stream.append(pkt(w, seq=gen * 4 + slot, lanes=lanes, op=op, exp=exp, level=level))
                if rng.random() < 0.08:
                    stream.append(stream[rng.integers(len(stream))])  # a duplicate, maybe late
    vec, loop = make(), make()
    loop.vectorized = False
    stride = len(stream[0])
    outs = {}
    for p in (vec, loop):
        cut, got, i = np.random.default_rng(seed), [], 0
        while i < len(stream):
            batch = stream[i : i + int(cut.integers(1, 30))]
            i += len(batch)
            data = np.frombuffer(b"".join(batch), np.uint8).reshape(len(batch), stride)
            out = Outputs.allocate(len(batch), stride)
            p.process_batch(data, np.full(len(batch), stride), out)
            got += out.packets()
        outs[p] = got
    assert outs[vec] == outs[loop] and len(outs[vec]) > 20
    assert np.array_equal(vec.counters.stats, loop.counters.stats)
    assert np.array_equal(vec.counters.workers, loop.counters.workers)
    assert np.array_equal(vec.registers.values, loop.registers.values)
    for name in vec.registers.SCALARS:
        assert getattr(vec.registers, name) == getattr(loop.registers, name), name
