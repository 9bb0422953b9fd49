"""The sharded switch model (`ina switch --shards K`, `ina.switch_model.shards`).

In process: shard pipelines fed by the steering rule answer every packet byte for byte as
the single pipeline does, with the same registers and summed counters, and the P4Runtime
front reads and writes all shards. As processes on loopback: the kernel's SO_REUSEPORT
steering spreads the slots as the rule says, sums stay exact under loss for two jobs at
once, and P4Runtime writes, reads and counter resets reach every shard.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ina.control import jobs as control_jobs
from ina.control.counters import read_counters, reset_counters
from ina.control.p4rt import SwitchConnection
from ina.host.launch import LocalSwitch, free_udp_ports, local_jobs
from ina.host.transport import Transport, WorkerConfig
from ina.protocol import Flag, Header, Op, encode_packet
from ina.switch_model.p4runtime_server import start_server
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.shards import (
    FrontLock,
    SharedState,
    shard_of,
    shard_of_payload,
    steering_program,
)
from ina.switch_model.tables import JobSpec, local_job

LANES = 8


def two_jobs(workers: int = 3, pool: int = 8) -> list[JobSpec]:
    """Two jobs with disjoint pools on freshly reserved loopback ports."""
    out = []
    for j in range(2):
        spec = local_job(job_id=j + 1, num_workers=workers, pool_size=pool, pool_base=j * pool)
        spec = dataclasses.replace(spec, job_index=j)
        ports = free_udp_ports(workers)
        ws = tuple(
            dataclasses.replace(w, udp_port=p) for w, p in zip(spec.workers, ports, strict=True)
        )
        out.append(dataclasses.replace(spec, workers=ws))
    return out


# -- in process: same answers as one pipeline -------------------------------------------


def packet_stream(specs: list[JobSpec], ref: Pipeline, rng: np.random.Generator, n: int):
    """Joins, contributions (a window of seqs that moves on), duplicates, stale and bad-slot
    packets, restarts (new runs), runts. Yields payloads; ``ref`` supplies each job's current
    epoch, so that most data packets belong to the run."""
    for spec in specs:
        for w in range(spec.num_workers):
            h = Header(op=Op.JOIN, worker_id=w, job_id=spec.job_id, seq=100 + w)
            h = dataclasses.replace(h, num_lanes=LANES, slot=spec.pool_size - 1)
            yield encode_packet(h, np.zeros(LANES))
    base = {s.job_id: 0 for s in specs}
    for _ in range(n):
        spec = specs[int(rng.integers(len(specs)))]
        p = spec.pool_size
        r = rng.random()
        if r < 0.003:  # a worker restarts: a new run
            w = int(rng.integers(spec.num_workers))
            nonce = int(rng.integers(1 << 31))
            h = Header(
                op=Op.JOIN,
                worker_id=w,
                job_id=spec.job_id,
                seq=nonce,
                num_lanes=LANES,
                slot=spec.pool_size - 1,
            )
        elif r < 0.02:
            yield rng.integers(0, 256, int(rng.integers(0, 12)), np.uint8).tobytes()
            continue
        else:
            base[spec.job_id] += int(rng.random() < 0.2)
            seq = base[spec.job_id] + int(rng.integers(0, p))
            slot = seq % p if r > 0.03 else int(rng.integers(0, p))  # some bad slots
            epoch = ref.runs.job_epoch[spec.entry().job_index] + int(rng.random() < 0.05)
            h = Header(
                op=Op(int(rng.choice([Op.SUM, Op.SUM, Op.OR, Op.MAX]))),
                flags=Flag.SHADOW if seq & p else 0,
                worker_id=int(rng.integers(spec.num_workers)),
                job_id=spec.job_id,
                slot=slot,
                seq=seq,
                epoch=epoch,
                num_lanes=LANES,
            )
        yield encode_packet(h, rng.integers(-1000, 1000, LANES))


@pytest.mark.parametrize("shards", [2, 3])
def test_sharded_pipelines_answer_as_one_pipeline(shards):
    specs = two_jobs(workers=3, pool=8)
    ref = Pipeline(lanes=LANES, pool_total=32)
    state = SharedState(LANES, 32, shards)
    for spec in specs:
        install_job_spec(ref, spec)
        install_job_spec(state.front, spec)
    state.publish()
    pipes = [state.shard_pipeline(i) for i in range(shards)]
    syncs = [state.syncer(p.tables) for p in pipes]
    seen = [0] * shards
    for pkt in packet_stream(specs, ref, np.random.default_rng(7), 4000):
        i = shard_of_payload(pkt, shards)
        seen[i] += 1
        syncs[i]()
        assert pipes[i].process(pkt) == ref.process(pkt)
    assert min(seen) > 4000 // shards // 2  # the slots spread
    assert state.counters.snapshot() == ref.counters.snapshot()
    assert (state.counters.workers == ref.counters.workers).all()
    assert ref.counters.snapshot()["results"][0] > 100  # slots did complete
    for name in ("seq", "epoch", "bitmap", "count", "exp", "level"):
        assert list(getattr(state.front.registers, name)) == getattr(ref.registers, name)
    assert (state.front.registers.values == ref.registers.values).all()
    assert list(state.front.runs.job_epoch) == ref.runs.job_epoch


def test_steering_rule_matches_the_bpf_program():
    # the program in words: JOIN -> 0, else big-endian slot % K; a runt -> 0
    assert shard_of(Op.JOIN, 5, 4) == 0 and shard_of(Op.SUM, 7, 4) == 3
    assert shard_of_payload(b"\x01", 4) == 0
    prog = steering_program(4)
    assert prog[-3][3] == 4 and len(prog) == 6


def test_front_reads_and_writes_every_shard_over_p4runtime():
    state = SharedState(LANES, 64, 2)
    locks = [threading.Lock(), threading.Lock()]
    srv = start_server(state.front, "127.0.0.1:0", FrontLock(state, locks))
    conn = SwitchConnection(srv.address, timeout=5)
    try:
        spec = local_job(job_id=3, num_workers=2, pool_size=16, pool_base=8, job_index=2)
        control_jobs.install_job(conn, spec)  # a P4Runtime write: must reach both shards
        pipes = [state.shard_pipeline(i) for i in range(2)]
        for i, p in enumerate(pipes):
            with locks[i]:
                state.syncer(p.tables)()
            assert set(p.tables.jobs) == {3} and len(p.tables.workers) == 2
        for seq in (4, 5):  # slot 4 -> shard 0, slot 5 -> shard 1
            for w in range(2):
                pkt = encode_packet(
                    Header(worker_id=w, job_id=3, slot=seq, seq=seq, num_lanes=LANES),
                    np.full(LANES, w + 1),
                )
                pipes[shard_of(Op.SUM, seq, 2)].process(pkt)
        snap = read_counters(conn)
        assert snap.stats["aggregated"][0] == 4 and snap.stats["results"][0] == 2
        per_shard = [c.snapshot()["aggregated"][0] for c in state.counters.shards]
        assert per_shard == [2, 2]
        for slot in (4, 5):
            row = (8 + slot) * 2
            assert conn.read_register("slot_count", row) == 2
            assert conn.read_register("slot_lane_0", row) == 3
        conn.write_register("slot_lane_0", 9, (8 + 5) * 2)  # a cell shard 1 owns
        assert pipes[1].registers.values[(8 + 5) * 2, 0] == 9
        reset_counters(conn)  # a counter write: the sum over shards becomes 0
        assert read_counters(conn).stats["aggregated"] == (0, 0)
        assert not any(c.stats.any() for c in state.counters.shards)
    finally:
        conn.close()
        srv.stop(0)


# -- processes on loopback ----------------------------------------------------------------


def reduce_all(spec: JobSpec, switch, lanes: int, values: int, pool: int) -> dict:
    out = {}

    def run(w):
        cfg = WorkerConfig(
            job_id=spec.job_id,
            worker_id=w.worker_id,
            num_workers=spec.num_workers,
            switch=switch,
            bind=(w.ip, w.udp_port),
            pool_size=pool,
            lanes=lanes,
            timeout=10.0,
        )
        try:
            with Transport(cfg) as t:
                x = np.arange(values, dtype=np.int32) * (w.worker_id + 1) + spec.job_id
                out[w.worker_id] = t.reduce(x, Op.SUM).values
        except Exception as e:  # examined by the caller
            out[w.worker_id] = e

    ts = [threading.Thread(target=run, args=(w,)) for w in spec.workers]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


def expected(spec: JobSpec, values: int) -> np.ndarray:
    n = spec.num_workers
    base = np.arange(values, dtype=np.int64)
    return (base * (n * (n + 1) // 2) + n * spec.job_id).astype(np.int32)


@pytest.mark.network
def test_kernel_steering_spreads_slots_as_the_rule_says():
    lanes, pool, values = 32, 16, 32 * 101  # 101 chunks: slots 0..15, 51 even, 50 odd
    jobs = local_jobs(2, pool)
    with LocalSwitch(jobs, lanes=lanes, grpc=False, shards=2) as sw:
        out = reduce_all(jobs[0], sw.address, lanes, values, pool)
        sw.stop()
    for r in out.values():
        assert not isinstance(r, Exception), r
        np.testing.assert_array_equal(r, expected(jobs[0], values))
    s0, s1 = sw.final_shard_counters
    assert (s0["results"][0], s1["results"][0]) == (51, 50)  # slot % 2 == seq % 2
    assert (s0["aggregated"][0], s1["aggregated"][0]) == (2 * 51, 2 * 50)
    assert (s0["joins"][0], s1["joins"][0]) == (2, 0)  # every JOIN to shard 0
    total = sw.final_counters
    assert all(total[k][0] == s0[k][0] + s1[k][0] for k in total)


@pytest.mark.network
def test_two_jobs_exact_under_loss_through_three_shards():
    specs = two_jobs(workers=3, pool=16)
    values = 64 * 150
    impair = ("--loss", "0.05", "--dup", "0.02", "--reorder", "0.1", "--seed", "5")
    sw = LocalSwitch(specs, lanes=64, pool=64, grpc=False, shards=3, extra_args=impair)
    with sw:
        outs = {}
        ts = [
            threading.Thread(
                target=lambda s=s: outs.__setitem__(
                    s.job_id, reduce_all(s, sw.address, 64, values, 16)
                )
            )
            for s in specs
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join(180)
        sw.stop()
    for spec in specs:
        for r in outs[spec.job_id].values():
            assert not isinstance(r, Exception), r
            np.testing.assert_array_equal(r, expected(spec, values))
    shards = sw.final_shard_counters
    assert len(shards) == 3 and all(s["aggregated"][0] > 0 for s in shards)
    assert sum(s["retx_replies"][0] + s["pending_replies"][0] for s in shards) > 0  # lossy
    # every chunk of both jobs completed exactly once per copy generation
    assert sw.final_counters["aggregated"][0] == sum(s["aggregated"][0] for s in shards)


@pytest.mark.network
def test_p4runtime_in_front_of_sharded_processes():
    lanes, pool, values = 32, 16, 32 * 40
    jobs = local_jobs(2, pool)
    with LocalSwitch([], lanes=lanes, grpc=True, shards=2) as sw:
        conn = SwitchConnection(sw.grpc_address, timeout=5)
        try:
            control_jobs.install_job(conn, jobs[0])  # only P4Runtime installs the job
            out = reduce_all(jobs[0], sw.address, lanes, values, pool)
            for r in out.values():
                assert not isinstance(r, Exception), r
                np.testing.assert_array_equal(r, expected(jobs[0], values))
            snap = read_counters(conn)
            assert snap.stats["results"][0] == 40 and snap.stats["aggregated"][0] == 80
            counts = conn.read_register("slot_count")[: 2 * pool]
            assert sorted(set(counts)) == [2]  # every copy of every slot, on both shards
            conn.write_register("slot_seq", 0)
            assert not any(conn.read_register("slot_seq"))
            reset_counters(conn)
            out = reduce_all(jobs[0], sw.address, lanes, values, pool)  # a second run
            assert all(np.array_equal(r, expected(jobs[0], values)) for r in out.values())
            assert read_counters(conn).stats["results"][0] == 40
        finally:
            conn.close()
        final = sw.stop()
    assert final["results"][0] == 40  # counted since the reset: summed over shards
    assert [s["results"][0] for s in sw.final_shard_counters] == [20, 20]


@pytest.mark.network
def test_shards_exit_when_their_parent_is_killed():
    jobs = local_jobs(2, 16)
    sw = LocalSwitch(jobs, lanes=8, grpc=False, shards=2)
    try:
        sw.proc.kill()  # no SIGTERM handler runs: the shards must notice on their own
        sw.proc.wait(10)
        deadline = time.monotonic() + 20
        while True:  # the port is free once every shard closed its socket
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                probe.bind(sw.address)
                break
            except OSError:
                assert time.monotonic() < deadline, "shards still hold the port"
                time.sleep(0.1)
            finally:
                probe.close()
    finally:
        sw.stop()


def test_shards_out_of_range_is_a_usage_error():
    r = subprocess.run(
        [sys.executable, "-m", "ina", "switch", "--shards", "0", "--grpc", ""],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.strip() == "ina switch: --shards 0: run 1..64 shards"
