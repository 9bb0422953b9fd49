"""Runs of a job: a second run against the same switch never sees the first run's sums.

Every run of a job starts at seq 0. Before runs existed, the README's example run twice
against one `ina switch` was answered the second time from the slots the first run left
(exit 0, wrong sums). Now a worker's first call joins a run through the switch (JoinRun) and
every packet carries the run's epoch; these tests hold that on the pipeline itself, through
a switch process as users run it (library and CLI), and on the wire.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from ina.host.allreduce import Worker
from ina.host.allreduce_cmd import worker_configs
from ina.host.launch import LocalSwitch, local_jobs
from ina.host.transport import JoinRejected, Transport
from ina.protocol import Counter, Flag, Header, Op, decode_packet, encode_packet
from ina.switch_model.pipeline import MULTICAST, Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.tables import local_job, save_jobs

LANES = 8


def pipeline_with_job(num_workers: int = 3, pool_size: int = 4) -> Pipeline:
    p = Pipeline(lanes=LANES, pool_total=64)
    install_job_spec(p, local_job(job_id=1, num_workers=num_workers, pool_size=pool_size))
    return p


def join(p: Pipeline, w: int, nonce: int, retx: bool = False, pool_size: int = 4):
    h = Header(
        op=Op.JOIN,
        worker_id=w,
        job_id=1,
        seq=nonce,
        flags=Flag.RETX if retx else 0,
        slot=pool_size - 1,
        num_lanes=LANES,
    )
    return p.process(encode_packet(h, np.zeros(LANES, np.int32)))


def data(p: Pipeline, w: int, seq: int, epoch: int, value: int, pool_size: int = 4):
    flags = Flag.SHADOW if seq & pool_size else 0
    h = Header(
        worker_id=w, job_id=1, slot=seq % pool_size, seq=seq, flags=flags, epoch=epoch,
        num_lanes=LANES,
    )  # fmt: skip
    return p.process(encode_packet(h, np.full(LANES, value, np.int32)))


def counters(p: Pipeline) -> dict[str, int]:
    return {c.name.lower(): int(p.counters.stats[c, 0]) for c in Counter}


# -- the pipeline (the executable spec of the P4 program's JoinRun) ----------------------------


def test_the_last_join_completes_the_run_and_multicasts_its_epoch():
    p = pipeline_with_job()
    assert join(p, 2, 0xAAAA) == [] and join(p, 0, 0xBBBB) == []  # absorbed
    ((dest, _, group, payload),) = join(p, 1, 0xCCCC)
    h, _ = decode_packet(payload)
    assert dest == MULTICAST and group == p.tables.jobs[1].mcast_grp
    assert h.op == Op.JOIN and h.flags == Flag.RESULT
    assert h.epoch == 1 and h.bitmap == 0b111 and h.seq == 0xCCCC
    c = counters(p)
    assert c["joins"] == 3 and c["runs"] == 1 and c["aggregated"] == 0


def test_a_repeated_join_is_answered_with_its_own_nonce_never_counted_twice():
    p = pipeline_with_job()
    join(p, 0, 7)
    ((dest, _, _, payload),) = join(p, 0, 7, retx=True)  # the join is not complete yet
    h, _ = decode_packet(payload)
    assert dest == 0 and h.flags == Flag.PENDING and h.bitmap == 0b001 and h.seq == 7
    join(p, 1, 8)
    join(p, 2, 9)
    ((dest, _, _, payload),) = join(p, 0, 7, retx=True)  # complete: the run, by unicast
    h, _ = decode_packet(payload)
    assert dest == 0 and h.flags == Flag.RESULT and h.epoch == 1 and h.seq == 7
    c = counters(p)
    assert c["joins"] == 3 and c["duplicates"] == 2 and c["runs"] == 1


def test_a_worker_restarting_mid_join_starts_the_run_over():
    p = pipeline_with_job()
    join(p, 0, 1)
    join(p, 1, 2)
    join(p, 1, 3)  # worker 1 again with a new nonce: it restarted, so a new run begins
    assert p.runs.join_bitmap[0] == 0b010 and p.runs.job_epoch[0] == 2
    join(p, 0, 4)
    ((_, _, _, payload),) = join(p, 2, 5)
    assert decode_packet(payload)[0].epoch == 2


def test_an_old_runs_data_is_dropped_and_counted_never_added():
    p = pipeline_with_job(num_workers=2)
    for w, v in ((0, 5), (1, 6)):
        data(p, w, 0, 0, v)  # a run of clients that never joined: epoch 0, seq 0 = 11
    join(p, 0, 100)
    join(p, 1, 101)  # run 1
    before = counters(p)
    # the run just before, for its complete copy: answered with that run's sum, never added
    ((_, _, _, payload),) = data(p, 0, 0, 0, 1000)
    h, lanes = decode_packet(payload)
    assert h.epoch == 0 and lanes.tolist() == [11] * LANES
    assert counters(p)["retx_replies"] == before["retx_replies"] + 1
    assert data(p, 0, 1, 0, 1000) == []  # no complete copy of its seq: STALE
    assert counters(p)["drop_stale"] == before["drop_stale"] + 1
    # run 1's seq 0 meets run 0's complete copy of seq 0: a fresh aggregation, not run 0's 11
    assert data(p, 0, 0, 1, 1) == []
    ((_, _, _, payload),) = data(p, 1, 0, 1, 2)
    h, lanes = decode_packet(payload)
    assert h.epoch == 1 and lanes.tolist() == [3] * LANES


def test_installing_a_job_forgets_its_runs():
    p = pipeline_with_job(num_workers=1)
    join(p, 0, 1)
    join(p, 0, 2)
    assert p.runs.job_epoch[0] == 2
    install_job_spec(p, local_job(job_id=1, num_workers=1, pool_size=4))
    assert p.runs.job_epoch[0] == 0 and p.runs.join_count[0] == 0


# -- through a switch process, as users run it ------------------------------------------------


def readme_example_run(cfgs, grads) -> dict[int, tuple]:
    """The README's "From Python" example on every worker (threads), defaults as given."""
    out: dict[int, tuple] = {}

    def body(cfg):
        try:
            with Worker(cfg) as w:
                total = w.allreduce(grads[cfg.worker_id])
                out[cfg.worker_id] = (total, w.last_ints, w.last_int_sums, w.stats.joins)
        except Exception as e:  # examined by the test
            out[cfg.worker_id] = (e,)

    threads = [threading.Thread(target=body, args=(c,)) for c in cfgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a worker hung"
    return out


def check_exact(out: dict[int, tuple]) -> None:
    """Every worker decoded the same integers, the int32 sum of what every worker encoded."""
    for r in out.values():
        assert len(r) == 4, f"a worker failed: {r[0]!r}"
    expected = np.add.reduce([r[1] for r in out.values()], dtype=np.int32)
    for _, _, sums, joins in out.values():
        np.testing.assert_array_equal(sums, expected)
        assert joins == 1


@pytest.mark.network
@pytest.mark.parametrize("shards", [1, 2])  # 2: JOINs on shard 0, each run's data on both
def test_the_readme_example_twice_against_one_switch_gives_exact_sums_both_times(shards):
    jobs = local_jobs(2, 128)
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(5000).astype(np.float32) for _ in range(2)]
    with LocalSwitch(jobs, lanes=256, grpc=False, shards=shards) as sw:
        cfgs = worker_configs(jobs[0], sw.address, lanes=256, timeout=10.0)
        first = readme_example_run(cfgs, grads)
        check_exact(first)
        second = readme_example_run(cfgs, grads[::-1])  # the same job, values swapped
        check_exact(second)
        # same inputs swapped between workers: the same sum, found afresh (not replayed)
        np.testing.assert_allclose(first[0][0], second[0][0], rtol=0, atol=1e-5)
        third = readme_example_run(cfgs, [g * 3 for g in grads])
        check_exact(third)
        assert not np.allclose(third[0][0], first[0][0])
        counters = sw.stop()
    assert counters["runs"][0] == 3 and counters["joins"][0] == 6


@contextlib.contextmanager
def ina_allreduce_against_a_switch(tmp_path):
    """A 256-lane switch model with a job of 2 workers (pool 64); yields ``run(*args)``,
    which runs ``ina allreduce --switch`` against it with the job's file and ``args``."""
    jobs = local_jobs(2, 64)
    jobs_file = tmp_path / "jobs.json"
    save_jobs(jobs_file, jobs)
    with LocalSwitch(jobs, lanes=256, grpc=False) as sw:
        host, port = sw.address
        cmd = [sys.executable, "-m", "ina", "allreduce", "--switch", f"{host}:{port}"]
        cmd += ["--jobs", str(jobs_file)]
        yield lambda *args: subprocess.run(
            [*cmd, *args], capture_output=True, text=True, timeout=120
        )


@pytest.mark.network
def test_ina_allreduce_against_a_running_switch_works_twice_in_a_row(tmp_path):
    with ina_allreduce_against_a_switch(tmp_path) as run:
        for attempt in range(2):
            r = run("--size", "20000", "--iters", "2", "--timeout", "5")
            assert r.returncode == 0, f"run {attempt}:\n{r.stdout}\n{r.stderr}"
            assert "allreduce: OK, every sum exact" in r.stdout


@pytest.mark.network
def test_on_the_wire_an_old_runs_packet_is_dropped_and_counted(harness_factory):
    h = harness_factory(2, lanes=16, pool_size=4)
    x = [np.arange(40, dtype=np.int32) * (w + 1) for w in range(2)]

    def run_once(w: int, barrier: threading.Barrier, inject=None):
        with Transport(h.config(w)) as t:
            first = t.reduce(x[w]).values  # joins a run, then sums
            barrier.wait(10)
            if inject is not None and w == 0:
                inject(t)
            barrier.wait(10)
            second = t.reduce(x[w]).values
            return first, second, t.core.epoch, t.core.next_seq

    b1 = threading.Barrier(2)
    old = h.run(lambda w: run_once(w, b1))
    old_epoch, next_seq = old[0][2], old[0][3]

    def inject(t: Transport) -> None:
        # a packet of the finished run: its epoch, the seq the new run is about to use,
        # lanes that would wreck the sum if they were ever added
        hdr = Header(
            worker_id=1, job_id=1, slot=next_seq % 4, seq=next_seq, epoch=old_epoch,
            flags=Flag.SHADOW if next_seq & 4 else 0, num_lanes=16,
        )  # fmt: skip
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(encode_packet(hdr, np.full(16, 1 << 20, np.int32)), h.server.address)
        s.close()

    stale_before = int(h.pipeline.counters.stats[Counter.DROP_STALE, 0])
    b2 = threading.Barrier(2)
    new = h.run(lambda w: run_once(w, b2, inject))
    for w in range(2):
        assert not isinstance(new[w], BaseException), new[w]
        assert new[w][2] == old_epoch + 1
        np.testing.assert_array_equal(new[w][0], x[0] + x[1])
        np.testing.assert_array_equal(new[w][1], x[0] + x[1])
    assert int(h.pipeline.counters.stats[Counter.DROP_STALE, 0]) == stale_before + 1


@pytest.mark.network
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"pool_size": 8}, "a pool of 4 slots (this worker: 8)"),
        ({"lanes": 8}, "16 lanes per packet (this worker: 8)"),
        ({"lanes": 32}, "16 lanes per packet (this worker: 32)"),
        ({"lanes": 32, "pool_size": 2}, "a pool of 4 slots (this worker: 2) and 16 lanes"),
    ],
)
def test_a_worker_configured_otherwise_than_the_job_is_refused_naming_both(
    harness_factory, change, says
):
    # the join would wait 60 s for the missing worker: a JoinRejected can only come from
    # the switch's REJECT, on the first reply
    h = harness_factory(2, lanes=16, pool_size=4)
    cfg = h.config(0, timeout=60.0, rto=0.05, **change)
    with Worker(cfg) as worker, pytest.raises(JoinRejected, match=re.escape(says)) as e:
        worker.allreduce(np.ones(10, np.float32))
    assert worker.stats.retransmissions == 0
    assert "refused to join the run" in str(e.value)
    stats = h.pipeline.counters.stats
    assert stats[Counter.JOIN_REJECTS, 0] == 1 and stats[Counter.JOINS, 0] == 0
    # the job is untouched: its workers, configured right, still join and sum
    res = h.run(lambda w: Worker(h.config(w)).allreduce(np.full(10, w + 1, np.float32)))
    assert all(np.array_equal(r, np.full(10, 3, np.float32)) for r in res.values())


@pytest.mark.network
def test_ina_allreduce_with_other_lanes_than_the_switch_says_so_in_one_line(tmp_path):
    with ina_allreduce_against_a_switch(tmp_path) as run:
        r = run("--lanes", "32", "--timeout", "60")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "256 lanes per packet (this worker: 32)" in r.stderr
