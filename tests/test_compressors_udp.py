"""GRACE's compressors through the real switch model over UDP, with loss.

The switch model runs as its own process (`LocalSwitch`) with seeded loss, duplication and
reordering; each worker is a thread with its own `Transport`, driving the same round
generators as the in-process tests (`Communicator.step_steps`) with a blocking round
function around the public ``Transport.reduce``. Every method's decode must be bit for bit the
one `LocalGroup` (the switch's arithmetic in-process) gives, and the switch's sums must equal
the host-side sums of what the workers encoded.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ina.compressors import COMPRESSORS, Aggregation, make_communicator
from ina.host.compression import LocalGroup
from ina.host.launch import LocalSwitch, local_jobs
from ina.host.rounds import plain, run_blocking
from ina.host.transport import Transport, WorkerConfig

pytestmark = pytest.mark.network

LANES = 64
# a few methods per aggregation path, with settings that make them send something
METHODS = [
    ("qsgd", {"levels": 7}),  # MAX of norms, SUM of 4-bit fields
    ("terngrad", {}),  # MAX of the scaler, SUM of ternary fields
    ("signsgd", {}),  # SUM of 1-bit fields only
    ("onebit", {"block": 512}),  # MAX, SUM of bits + fixed-point sums + counts
    ("fp16", {}),  # MAX of block exponents, SUM of 16-bit fields
    ("randomk", {"ratio": 0.1}),  # shared positions: MAX, dense SUM of k lanes
    ("topk", {"ratio": 0.05, "coding": "support"}),  # union path: OR, SUM
    ("dgc", {"ratio": 0.05, "sample": 0.2}),  # union path with the sketch
    ("powersgd", {"rank": 2}),  # MAX, SUM (P), MAX, SUM (Q)
    ("natural", {}),  # all-gather: one SUM round of N slices
]


def tensors(workers: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(n) * np.exp(rng.standard_normal(n))).astype(np.float32)
        for _ in range(workers)
    ]


def run_threads(workers: int, fn) -> dict[int, object]:
    results: dict[int, object] = {}

    def body(w: int) -> None:
        try:
            results[w] = fn(w)
        except BaseException as e:  # examined by the test
            results[w] = e

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
        assert not t.is_alive(), "a worker thread hung"
    return results


def udp_run(
    workers: int, loss: float, work, timeout: float = 30.0, shards: int = 1
) -> dict[int, object]:
    """``work(w, round_fn)`` on every worker against a switch process with impairments."""
    jobs = local_jobs(workers, pool_size=16)
    spec = jobs[0]
    impair = ("--loss", str(loss), "--dup", "0.02", "--reorder", "0.3", "--seed", str(workers))
    extra = impair if loss else ()
    with LocalSwitch(jobs, lanes=LANES, grpc=False, extra_args=extra, shards=shards) as sw:

        def body(w: int):
            addr = spec.workers[w]
            cfg = WorkerConfig(
                job_id=spec.job_id,
                worker_id=w,
                num_workers=workers,
                switch=sw.address,
                bind=(addr.ip, addr.udp_port),
                pool_size=spec.pool_size,
                lanes=LANES,
                rto=0.01,
                min_rto=0.005,
                max_rto=0.05,  # loss is frequent here: keep retrying fast
                timeout=timeout,
            )
            with Transport(cfg) as t:
                round_fn = plain(
                    lambda v, op, e=0, lv=0: (
                        (r := t.reduce(v, op, exp=e, level=lv)).values,
                        r.exp,
                        r.level,
                    )
                )
                return work(w, round_fn), t.stats

        return run_threads(workers, body)


@pytest.mark.parametrize(("workers", "shards"), [(2, 1), (5, 1), (16, 1), (5, 2)])
def test_methods_exact_through_the_udp_switch_under_loss(workers, shards):
    n = 2000
    xs = tensors(workers, n, seed=workers)

    def comms(w):
        return [make_communicator(name, workers, w, seed=3, args=a) for name, a in METHODS]

    def work(w, round_fn):
        return [run_blocking(c.step_steps(xs[w], "b"), round_fn) for c in comms(w)]

    got = udp_run(workers, 0.05, work, shards=shards)
    for w, r in got.items():
        assert not isinstance(r, BaseException), f"worker {w}: {r!r}"
    assert sum(stats.retransmissions for _, stats in got.values()) > 0  # loss happened

    local = LocalGroup(workers, timeout=60).run(
        lambda w, reduce: [c.step(xs[w], "b", reduce) for c in comms(w)]
    )
    for i, (name, _) in enumerate(METHODS):
        per = [got[w][0][i] for w in range(workers)]
        for s in range(len(per[0].encoded)):
            if COMPRESSORS[name].aggregation is Aggregation.ALLGATHER:
                host = np.concatenate([r.encoded[s] for r in per])
            else:
                host = np.sum([r.encoded[s] for r in per], axis=0)
            for r in per:
                assert np.array_equal(r.summed[s], host), (name, s)
        for w, r in enumerate(per):
            assert np.array_equal(r.grad, per[0].grad), name
            assert np.array_equal(r.grad, local[w][i].grad), name  # same as in-process
            assert r.rounds == local[w][i].rounds, name


def test_length_disagreement_is_a_clear_error_over_udp():
    def work(w, round_fn):
        comm = make_communicator("qsgd", 2, w, args={"levels": 7})
        x = np.ones(100 + 50 * w, np.float32)
        return run_blocking(comm.step_steps(x, "b"), round_fn)

    got = udp_run(2, 0.0, work, timeout=5.0)
    for r in got.values():
        assert isinstance(r, ValueError), r
        assert "workers disagree on the tensor length (between 100 and 150)" in str(r)
