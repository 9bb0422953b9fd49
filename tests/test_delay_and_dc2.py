"""Delay emulation on the worker's path and DC2 levels agreed through the switch."""

import numpy as np
import pytest

from ina.control.dc2 import DC2Controller, index_to_density
from ina.host.allreduce import Worker
from ina.host.emulated_path import EmulatedPath

pytestmark = pytest.mark.network


def test_emulated_delay_shows_in_rtt_samples(harness_factory):
    h = harness_factory(2, lanes=64, pool_size=8)
    samples = {0: [], 1: []}

    def work(w):
        path = EmulatedPath.from_profile("constant", seed=1, worker_id=w, delay_s=0.004)

        def listen(rtt, _times):
            samples[w].append(rtt)

        with Worker(h.config(w), link=path, rtt_listener=listen) as worker:
            return worker.allreduce(np.ones(2000, np.float32))

    for out in h.run(work).values():
        assert np.all(out == 2.0)
    rtts = np.concatenate(samples[0])
    assert rtts.min() >= 0.008  # 4 ms up + 4 ms down, at least
    assert np.median(rtts) < 0.2


def test_emulated_loss_is_recovered_exactly(harness_factory):
    h = harness_factory(3, lanes=32, pool_size=8)

    def work(w):
        path = EmulatedPath.from_profile("constant", seed=2, worker_id=w, delay_s=0.001, loss=0.05)
        with Worker(h.config(w, rto=0.01), link=path) as worker:
            return worker.allreduce(np.full(3000, float(w), np.float32)), path

    res = h.run(work)
    assert sum(p.up.dropped + p.down.dropped for _, p in res.values()) > 0
    for out, _ in res.values():
        assert np.all(out == 3.0)


@pytest.mark.slow
def test_dc2_compresses_under_delay_and_workers_agree(harness_factory):
    h = harness_factory(2, lanes=64, pool_size=8)
    x = np.random.default_rng(0).standard_normal(20_000).astype(np.float32)

    def work(w):
        # worker 1's path is congested half-way through: its RTT quadruples
        ctrl = DC2Controller(law="aimd", warmup_samples=4)
        path = EmulatedPath.from_profile("constant", seed=3, worker_id=w, delay_s=0.002)
        with Worker(h.config(w), link=path, controller=ctrl) as worker:
            levels = []
            for step in range(10):
                if step == 4 and w == 1:
                    path.up.delay.delay_s = path.down.delay.delay_s = 0.02
                worker.allreduce(x, key="b0")
                worker.control_step()
                levels.append(worker.level)
        return levels

    res = h.run(work, timeout=300)
    assert res[0] == res[1]  # every step, the same agreed level on every worker
    # once worker 1's path is congested (RTT 4 ms -> 40 ms), the agreed level compresses;
    # before it, the level depends on this machine's own queueing, so it is not asserted
    assert min(res[0][6:]) > 0
    assert index_to_density(res[0][-1]) < 1.0
