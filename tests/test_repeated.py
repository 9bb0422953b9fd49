"""A gradient that is one block repeated (`ina.host.repeated`): a `Repeated` is the values of
``np.resize(block, n)``, its `EncodedLanes` are ``quantize.encode``'s, and a round of them
sends the same packets as the arrays and gets the same times (issue 47)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ina.host import quantize, repeated
from ina.host.repeated import EncodedLanes, Repeated
from ina.host.rounds import Round
from ina.host.transport_core import TransportCore, WorkerConfig
from ina.protocol import Op
from ina.sim.backends import build
from ina.sim.network import LinkSpec, NetworkSpec, workers_for


def padded(x: np.ndarray, lanes: int) -> np.ndarray:
    out = np.zeros(-(-x.size // lanes) * lanes, x.dtype)
    out[: x.size] = x
    return out.reshape(-1, lanes)


@pytest.mark.parametrize("lanes", [64, 100])  # dividing the block, and not
@pytest.mark.parametrize("n", [1, 700, 1024, 5 * 1024 + 37])
def test_repeated_is_np_resize_and_its_lanes_are_encode(monkeypatch, lanes, n):
    monkeypatch.setattr(repeated, "PIECE", 256)  # several passes where not periodic
    rng = np.random.default_rng(1)
    block = (rng.standard_normal(1024, dtype=np.float32) * 1e-2).astype(np.float32)
    block[300:400] *= 1e3  # blocks of different exponents
    grad, full = Repeated(block, n), np.resize(block, n)
    chunks = np.arange(-(-n // lanes))
    assert np.array_equal(grad.chunk_values(chunks, lanes), padded(full, lanes))
    assert np.array_equal(grad.values(3, min(n, 2000)), full[3:2000])
    assert grad.peak() == float(np.abs(full).max())
    exps = quantize.block_exponents(full, lanes)
    assert np.array_equal(grad.block_exponents(lanes), exps)
    ints = EncodedLanes(grad, exps, lanes, 8)
    want = padded(quantize.encode(full, exps, lanes, 8), lanes)
    picked = chunks[::-1][::2]  # any chunks, in any order
    assert np.array_equal(ints.rows(picked, lanes), want[picked])
    assert np.array_equal(block, Repeated(block, n).block)  # the block is never written
    with pytest.raises(ValueError, match="sent in"):
        ints.rows(chunks, lanes * 2)


def sent(core: TransportCore) -> list[bytes]:
    return [bytes(row) for buf, rows, _ in core.pop_sends() for row in buf[rows]]


def test_a_lane_source_sends_the_arrays_packets_first_and_again():
    cfg = WorkerConfig(job_id=1, worker_id=0, num_workers=2, pool_size=8, lanes=16)
    block = np.random.default_rng(2).standard_normal(96, dtype=np.float32)
    n = 1000
    exps = quantize.block_exponents(np.resize(block, n), 16)
    array = TransportCore(cfg, nonce=7)
    lazy = TransportCore(cfg, nonce=7)
    for core in (array, lazy):
        core.epoch = 3  # joined
    array.start(Round(quantize.encode(np.resize(block, n), exps, 16, 2), Op.SUM), 0.0)
    lazy.start(Round(EncodedLanes(Repeated(block, n), exps, 16, 2), Op.SUM, keep=False), 0.0)
    first = sent(array)
    assert first and sent(lazy) == first
    for core in (array, lazy):
        core.tick(1.0)  # every chunk in flight timed out: sent again, flag RETX
    again = sent(array)
    assert again and again != first[: len(again)] and sent(lazy) == again
    assert lazy.stats == array.stats
    with pytest.raises(ValueError, match="keeps its result"):
        TransportCore(cfg, nonce=1).start(Round(np.ones(4, np.int32), check=len, keep=False), 0)


def run_buckets(lazy: bool, spec: NetworkSpec, sizes: list[int]):
    net = build(spec)
    workers = workers_for(net)
    digests = [hashlib.blake2b() for _ in workers]
    for node, h in zip(net.workers, digests, strict=True):
        pop = node.core.pop_sends

        def recording(pop=pop, h=h):
            out = pop()
            for buf, rows, _ in out:
                h.update(np.ascontiguousarray(buf[rows]).tobytes())
            return out

        node.core.pop_sends = recording
    block = np.random.default_rng(0).standard_normal(1 << 12, dtype=np.float32) * 1e-2

    def program(w: int):
        for n in sizes:
            if lazy:
                yield from workers[w].timing_steps(Repeated(block, n))
            else:
                yield from workers[w].allreduce_steps(np.resize(block, n))

    net.run([program(w) for w in range(len(workers))])
    return net.now, [w.stats for w in workers], [h.hexdigest() for h in digests]


@pytest.mark.parametrize("loss", [0.0, 0.02])
def test_timing_steps_give_the_arrays_times_bytes_and_packets(loss):
    link = LinkSpec(rate_bps=10e9, loss=loss)
    spec = NetworkSpec(workers=3, up=link, down=link, lanes=64, pool_size=16, seed=5,
                       rto_s=1e-3, min_rto_s=2e-4)  # fmt: skip
    sizes = [10_000, 1, 3 * 4096 + 5]
    lazy, arrays = run_buckets(True, spec, sizes), run_buckets(False, spec, sizes)
    assert lazy == arrays
    if loss:
        assert sum(s.retransmissions for s in lazy[1]) > 0
