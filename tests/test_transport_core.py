"""The worker transport's sans-I/O core, driven with synthetic time and no sockets.

The cores talk to the switch model's `Pipeline` through a small in-test "wire" that can
lose, duplicate and reorder packets; time is a number the test advances. The UDP transport
and the simulator drive the same core, so what holds here holds for both.
"""

from __future__ import annotations

import numpy as np
import pytest

from ina.host.rounds import Round
from ina.host.transport_core import (
    RACK_WINDOW,
    JoinTimeout,
    ReduceTimeout,
    TransportCore,
    WorkerConfig,
)
from ina.protocol import HEADER_BYTES, HEADER_DTYPE, Counter, Flag, Op
from ina.switch_model.pipeline import MULTICAST, Outputs, Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import local_job

LANES = 16


def config(w: int, n: int, **kw) -> WorkerConfig:
    base = dict(job_id=1, worker_id=w, num_workers=n, pool_size=4, lanes=LANES)
    return WorkerConfig(**{**base, **kw})


class Wire:
    """N cores and a pipeline; every `step` moves all pending packets one hop, with seeded
    loss, duplication and reordering, and advances the clock by ``dt``."""

    def __init__(self, n: int, loss=0.0, dup=0.0, reorder=False, seed=0, dt=1e-3, pool=4, **kw):
        self.pipeline = Pipeline(lanes=LANES, pool_total=64)
        install_job_spec(self.pipeline, local_job(1, n, pool_size=pool))
        kw["pool_size"] = pool
        self.cores = [TransportCore(config(w, n, **kw), nonce=1000 + w) for w in range(n)]
        self.silent: set[int] = set()  # workers that neither send nor receive any more
        self.drop = None  # (worker, reply bytes) -> True to lose that reply on its way
        self.rng = np.random.default_rng(seed)
        self.loss, self.dup, self.reorder, self.dt = loss, dup, reorder, dt
        self.now = 0.0
        self.to_switch: list[bytes] = []
        self.out = Outputs.allocate(4096, self.pipeline.payload_bytes)

    def impair(self, packets: list) -> list:
        kept = [p for p in packets if self.rng.random() >= self.loss]
        kept += [p for p in kept if self.rng.random() < self.dup]
        if self.reorder:
            self.rng.shuffle(kept)
        return kept

    def collect(self) -> None:
        for w, core in enumerate(self.cores):
            if w in self.silent:
                continue
            for buf, rows, _ in core.pop_sends():
                self.to_switch += [buf[r].tobytes() for r in rows]

    def step(self) -> None:
        self.collect()
        packets, self.to_switch = self.impair(self.to_switch), []
        pb = self.pipeline.payload_bytes
        inbox: list[list[bytes]] = [[] for _ in self.cores]
        if packets:
            data = np.frombuffer(b"".join(packets), np.uint8).reshape(len(packets), pb)
            m = self.pipeline.process_batch(data, np.full(len(packets), pb), self.out)
            for i in range(m):
                payload = self.out.data[i, :pb].tobytes()
                dests = (
                    range(len(self.cores)) if self.out.dest[i] == MULTICAST else [self.out.dest[i]]
                )
                for d in dests:
                    if self.drop is None or not self.drop(d, payload):
                        inbox[d] += self.impair([payload])
        self.now += self.dt
        for w, (core, got) in enumerate(zip(self.cores, inbox, strict=True)):
            if w in self.silent:
                continue
            if got:
                rx = np.frombuffer(b"".join(got), np.uint8).reshape(len(got), pb)
                core.receive(rx, np.full(len(got), pb), self.now)
            core.tick(self.now)

    def reduce_all(self, values: list[np.ndarray], op: Op = Op.SUM, max_steps: int = 5000):
        for core, v in zip(self.cores, values, strict=True):
            core.start(Round(v, op), self.now)
        for _ in range(max_steps):
            if all(c.idle for w, c in enumerate(self.cores) if w not in self.silent):
                return [c.result() for c in self.cores]
            self.step()
        raise AssertionError("the reduction did not finish")


@pytest.mark.parametrize("loss,dup,reorder", [(0, 0, False), (0.1, 0.1, True), (0.3, 0.2, True)])
@pytest.mark.parametrize("n", [2, 5])
def test_exact_sums_under_loss_duplication_and_reordering(n, loss, dup, reorder):
    wire = Wire(
        n, loss=loss, dup=dup, reorder=reorder, seed=n, rto=0.003, min_rto=0.002, max_rto=0.02
    )
    rng = np.random.default_rng(7)
    for op in (Op.SUM, Op.OR, Op.MAX, Op.SUM):
        values = [rng.integers(-(2**31), 2**31, 150).astype(np.int32) for _ in range(n)]
        expected = {
            Op.SUM: np.add.reduce(values, dtype=np.int32),
            Op.OR: np.bitwise_or.reduce(values),
            Op.MAX: np.max(values, axis=0),
        }[op]
        for r in wire.reduce_all(values, op):
            np.testing.assert_array_equal(r.values, expected)
    if loss:
        assert sum(c.stats.retransmissions for c in wire.cores) > 0


def test_the_first_call_joins_a_run_and_every_packet_carries_its_epoch():
    wire = Wire(2)
    wire.reduce_all([np.ones(40, np.int32)] * 2)
    assert [c.epoch for c in wire.cores] == [1, 1]
    wire.reduce_all([np.ones(40, np.int32)] * 2)
    for c in wire.cores:
        assert c.stats.joins == 1 and c.next_seq == 2 * 3  # 40 values: 3 chunks per call
        c.start(Round(np.ones(40, np.int32)), wire.now)
        ((buf, rows, _),) = c.pop_sends()
        hdr = buf[rows, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
        assert set(hdr["epoch"].tolist()) == {1} and hdr["seq"].tolist()[0] == 6


def test_a_late_worker_gets_its_lost_last_result_after_another_began_the_next_run():
    """The runs race: worker 0 finishes a call and at once begins a new run (a new Worker,
    as `ina allreduce` run twice or a loop that recreates its Worker does), while worker 1
    still waits for its lost last result. The switch answers worker 1's retransmission from
    the completed copy of its run; then both run the next run."""
    n, kw = 2, dict(rto=0.003, min_rto=0.002, max_rto=0.02, timeout=0.5)
    wire = Wire(n, **kw)
    values = [np.arange(40, dtype=np.int32) * (w + 1) for w in range(n)]
    total = np.add.reduce(values, dtype=np.int32)
    wire.reduce_all(values)  # run 1: joined, one call
    last = wire.cores[1].next_seq + 2  # the second call's last chunk (40 values: 3 chunks)
    lost = []

    def drop(worker: int, payload: bytes) -> bool:
        h = np.frombuffer(payload[:HEADER_BYTES], HEADER_DTYPE)[0]
        if worker == 1 and int(h["seq"]) == last and h["flags"] & Flag.RESULT and not lost:
            lost.append(payload)
            return True
        return False

    wire.drop = drop
    for core, v in zip(wire.cores, values, strict=True):
        core.start(Round(v), wire.now)
    while not wire.cores[0].idle:
        wire.step()
    assert lost and not wire.cores[1].idle  # worker 1 waits for seq `last`
    wire.cores[0] = TransportCore(config(0, n, **kw), nonce=2000)  # a new run begins
    wire.cores[0].start(Round(values[0]), wire.now)
    for _ in range(400):
        if wire.cores[1].idle:
            break
        wire.step()
    np.testing.assert_array_equal(wire.cores[1].result().values, total)
    assert wire.pipeline.counters.stats[Counter.RETX_REPLIES, 0] >= 1
    wire.cores[1] = TransportCore(config(1, n, **kw), nonce=2001)  # and joins the new run
    wire.cores[1].start(Round(values[1]), wire.now)
    for _ in range(400):
        if all(c.idle for c in wire.cores):
            break
        wire.step()
    assert [c.epoch for c in wire.cores] == [2, 2]
    for c in wire.cores:
        np.testing.assert_array_equal(c.result().values, total)


def test_no_expired_chunk_is_put_off_while_lower_ones_keep_expiring():
    """Retransmissions go a window's worth at a time. With a window of 1 and 32 chunks
    waiting for a worker that has stopped, every chunk is sent again within 32 timeouts:
    lowest first would send chunk 0 every time and never the others (so a higher chunk
    whose first send was lost would starve, and the other workers wait for it)."""
    wire = Wire(2, pool=32, rto=0.004, min_rto=0.004, max_rto=0.004, timeout=60)
    wire.reduce_all([np.ones(LANES, np.int32)] * 2)  # the run is joined
    wire.silent = {1}  # worker 1 stops: no chunk completes
    wire.drop = lambda worker, payload: True  # and no reply reaches worker 0
    core = wire.cores[0]
    core.window = 32.0
    core.start(Round(np.ones(32 * LANES, np.int32)), wire.now)
    wire.step()  # all 32 sent
    core.window = 1.0  # as a queue would cut it
    retransmitted = set()
    for _ in range(40 * 4):  # 40 timeouts of 4 ms, 1 ms a step
        for buf, rows, _ in core.pop_sends():
            hdr = buf[rows, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
            retransmitted |= {int(q) for q, f in zip(hdr["seq"], hdr["flags"], strict=True)
                              if f & Flag.RETX}  # fmt: skip
        wire.now += wire.dt
        core.tick(wire.now)
    base = min(retransmitted)
    assert retransmitted == set(range(base, base + 32))


def test_rto_backs_off_to_the_maximum_and_a_silent_switch_times_out():
    core = TransportCore(config(0, 2, rto=0.01, max_rto=0.04, timeout=0.5), nonce=5)
    core.start(Round(np.ones(10, np.int32)), 0.0)
    sent = [0.0]
    core.pop_sends()
    now = 0.0
    with pytest.raises(JoinTimeout, match="never answered"):
        while True:
            now = core.deadline()
            core.tick(now)
            if core.pop_sends():
                sent.append(now)
    gaps = np.diff(sent)
    np.testing.assert_allclose(gaps[:3], [0.01, 0.02, 0.04])  # doubling ...
    assert gaps.max() == pytest.approx(0.04)  # ... up to max_rto
    assert now == pytest.approx(0.5, abs=0.05)


def test_karn_samples_only_chunks_never_retransmitted_at_their_own_arrival_times():
    wire = Wire(2, dt=0.001)
    wire.reduce_all([np.zeros(4, np.int32)] * 2)  # join first
    samples: list[list[np.ndarray]] = [[], []]
    for c, mine in zip(wire.cores, samples, strict=True):
        c.rtt_listener = lambda rtt, _t, mine=mine: mine.append(rtt)
    core0, core1 = wire.cores
    t0 = wire.now
    for c in wire.cores:
        c.start(Round(np.ones(3 * LANES, np.int32)), t0)  # 3 chunks
    wire.collect()
    # worker 1's chunk 2 is lost once: worker 1 retransmits it, so it may sample only
    # chunks 0 and 1 (Karn), never the ambiguous chunk 2
    chunk2 = core1.next_seq - 1
    lost = [p for p in wire.to_switch if p[3] == 1 and int.from_bytes(p[8:12], "big") == chunk2]
    wire.to_switch.remove(lost[0])
    while not (core0.idle and core1.idle):
        wire.step()
    assert core1.stats.retransmissions == 1
    worker1 = np.concatenate(samples[1])
    assert worker1.size == 2
    np.testing.assert_allclose(worker1, wire.dt)  # one step there and back
    # arrival times given per packet are used as given
    core = TransportCore(config(0, 1), nonce=9)
    core.epoch = 1
    core.start(Round(np.ones(2 * LANES, np.int32)), 10.0)
    ((buf, rows, at),) = core.pop_sends()
    np.testing.assert_array_equal(at, [10.0, 10.0])
    reply = buf[rows].copy()
    hdr = reply[:, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
    hdr["flags"] = Flag.RESULT
    reply[:, :HEADER_BYTES] = hdr.view(np.uint8).reshape(2, HEADER_BYTES)
    got: list[tuple[np.ndarray, np.ndarray]] = []
    core.rtt_listener = lambda rtt, t: got.append((rtt, t))
    core.receive(reply, np.full(2, core.pb), np.array([10.002, 10.005]))
    ((rtt, when),) = got
    np.testing.assert_allclose(rtt, [0.002, 0.005])
    np.testing.assert_array_equal(when, [10.002, 10.005])  # each sample's own arrival
    assert core.idle and core.finished_at == pytest.approx(10.005)


def test_a_missing_worker_is_named_from_the_pending_bitmap():
    wire = Wire(3, rto=0.002, min_rto=0.001, timeout=0.05)
    wire.reduce_all([np.zeros(4, np.int32)] * 3)  # everyone joins
    wire.silent.add(1)  # worker 1 stops answering
    for w, c in enumerate(wire.cores):
        if w != 1:
            c.start(Round(np.ones(10, np.int32)), wire.now)
    with pytest.raises(ReduceTimeout, match=r"missing workers \[1\]"):
        for _ in range(1000):
            wire.step()


def test_a_check_on_the_first_chunk_aborts_the_call_early():
    wire = Wire(2)
    wire.reduce_all([np.zeros(4, np.int32)] * 2)

    def check(lanes):
        raise ValueError("disagree")

    wire.cores[0].start(Round(np.ones(3 * LANES, np.int32), Op.MAX, check=check), wire.now)
    wire.cores[1].start(Round(np.ones(3 * LANES, np.int32), Op.MAX), wire.now)
    with pytest.raises(ValueError, match="disagree"):
        for _ in range(100):
            wire.step()


CHUNKS = 90


def _replies(core: TransportCore, sends, rtt) -> list[tuple[float, bytes]]:
    """The switch's RESULT for every datagram sent (one worker: each completes its slot),
    arriving ``rtt(chunk)`` after it left."""
    out = []
    for buf, rows, at in sends:
        at = np.broadcast_to(at, rows.shape)
        for r, t in zip(rows.tolist(), at.tolist(), strict=True):
            reply = buf[r].copy()
            hdr = reply[:HEADER_BYTES].copy().view(HEADER_DTYPE)
            hdr["flags"] = Flag.RESULT
            reply[:HEADER_BYTES] = hdr.view(np.uint8)
            out.append((t + rtt(r), reply.tobytes()))
    return out


def _send_log(batched: bool, rtt, horizon: float, pool: int = 32, **kw):
    """Every (chunk, send time, timeout deadline) of one call whose results come back after
    ``rtt(chunk)``, fed to the core per ``horizon`` of time in one batch, or one result per
    call; and the core's window and timer state at the end."""
    cfg = config(0, 1, pool_size=pool, rto=1.0, min_rto=1e-3, queue_target=0.2, **kw)
    core = TransportCore(cfg, nonce=1)
    core.epoch = 1  # joined already: the call starts sending at once
    core.start(Round(np.arange(CHUNKS * LANES, dtype=np.int32)), 0.0)
    log: list[tuple[int, float]] = []
    inflight: list[tuple[float, bytes]] = []
    now = 0.0
    for _ in range(1000):
        if core.idle:
            state = (core.window, core._slow_start, core._base_rtt, list(core._recent))
            return log, (*state, core.rto, core._srtt, core._rttvar)
        sends = core.pop_sends()
        for _, rows, at in sends:
            deadline = core._call.deadline[rows].tolist()
            at = np.broadcast_to(at, rows.shape).tolist()
            log += zip(rows.tolist(), at, deadline, strict=True)
        inflight = sorted(inflight + _replies(core, sends, rtt))
        now += horizon
        due = [p for p in inflight if p[0] < now]
        inflight = inflight[len(due) :]
        batches = ([due] if due else []) if batched else [[p] for p in due]
        for batch in batches:
            rx = np.frombuffer(b"".join(p for _, p in batch), np.uint8).reshape(len(batch), -1)
            core.receive(rx, np.full(len(batch), core.pb), np.array([t for t, _ in batch]))
    raise AssertionError("the call did not finish")


def _rtt(c: int) -> float:
    """2 ms for the first chunks, then 2.25-2.35 ms: past half the queueing target (0.4 ms:
    slow start ends), never past it (the window never shrinks); out of order."""
    return 2e-3 if c < 8 else 2.25e-3 + 2.5e-5 * ((c * 7) % 5)


@pytest.mark.parametrize("pool", [32, 8])
def test_a_batch_of_results_sends_exactly_what_one_result_at_a_time_sends(pool):
    # A batch spans 2 ms of arrivals. Pool 32: the window starts at 8 chunks and grows a
    # chunk per result, then a chunk per window of results; a chunk the window lets out
    # leaves when the result that made room for it arrives, not at the batch's first
    # arrival. Pool 8: the window is the pool from the start (the core's vectorized case).
    one_by_one, end_one = _send_log(False, _rtt, 2e-3, pool)
    batched, end_batched = _send_log(True, _rtt, 2e-3, pool)
    assert len(one_by_one) == CHUNKS and [c for c, *_ in one_by_one] != sorted(range(CHUNKS))
    assert batched == one_by_one
    assert end_batched == end_one and end_one[1] is False  # slow start ended in both
    if pool == 32:  # the window let chunks out at several arrival times within one batch
        assert len({t for _, t, _ in batched}) > 10 and end_one[0] < pool
    # and each chunk's timeout is the one in force when it left (RFC 6298 per sample, as
    # one by one), so retransmissions too leave at the same times
    assert len({round(d - t, 12) for _, t, d in batched}) > 3


def _queueing_rtt(c: int) -> float:
    """A queue that builds: round trips from 2 ms up to 5 ms past the queueing target (0.4
    ms), so the window is cut, at most once per smoothed round trip."""
    return 2e-3 + 3e-3 * min(c, 60) / 60 + 2.5e-5 * ((c * 7) % 5)


def test_a_batch_of_results_cuts_the_window_as_one_result_at_a_time_does():
    # The cuts are paced by the smoothed round trip as of each result; batched, the whole
    # batch's estimate was used for every result and the window came out different.
    one_by_one, end_one = _send_log(False, _queueing_rtt, 2e-3)
    batched, end_batched = _send_log(True, _queueing_rtt, 2e-3)
    assert end_one[0] < 16  # cut from the 32-chunk pool
    assert batched == one_by_one
    assert end_batched == end_one


def _deep_queue_rtt(c: int) -> float:
    """Round trips from 2 ms to 42 ms: far past the queueing target, as host jitter on a
    loaded machine looks to the delay-based control."""
    return 2e-3 + 40e-3 * min(c, 60) / 60


@pytest.mark.parametrize("early", [True, False])
def test_with_early_retransmission_the_window_keeps_room_to_see_a_loss(early):
    # A loss shows only by later chunks' results: below RACK_WINDOW chunks in flight every
    # loss waits for the timeout (a slow worker on a loaded machine fell a pool behind so).
    _, end = _send_log(False, _deep_queue_rtt, 2e-3, early_retransmit=early, tail_probe=early)
    window = end[0]
    if early:
        assert RACK_WINDOW <= window < RACK_WINDOW + 1  # cut to the floor, grown a little
    else:
        assert window < RACK_WINDOW


def test_the_estimator_over_a_batch_equals_one_sample_at_a_time():
    """`_update_rto` on a batch with retransmitted chunks' results mixed in gives, after each
    result, exactly the timeout and smoothed round trip that feeding the results one by one
    gives (Karn: an unclean result changes nothing), and leaves the same state."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        rtt = rng.uniform(1e-5, 5e-3, n)
        clean = rng.random(n) < (0.0 if trial % 10 == 0 else 0.8)  # some with none clean
        batch, single = (TransportCore(config(0, 2), nonce=1) for _ in range(2))
        for core in (batch, single):  # the estimator running, as after a first sample
            core._update_rto(np.array([2e-3]), np.array([True]))
        rto, srtt = batch._update_rto(rtt, clean)
        for i in range(n):
            r1, s1 = single._update_rto(rtt[i : i + 1], clean[i : i + 1])
            assert (r1[0], s1[0]) == (rto[i], srtt[i]), (trial, i)
        assert (batch.rto, batch._srtt, batch._rttvar) == (single.rto, single._srtt, single._rttvar)
