"""Loss recovery at data-center round trips (issue 30): in simulated time the transport's
timers follow the path, and a chunk whose later neighbours' results are in goes again before
its timeout (RACK), so 1 % loss costs a fraction of a lossless call, not a hundred times it.
Simulated time is deterministic: these tests assert it."""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pytest

from ina.host.rounds import Round
from ina.host.transport_core import (
    WALL_MIN_RTO,
    WALL_RTO,
    TransportCore,
    WorkerConfig,
)
from ina.protocol import HEADER_BYTES, HEADER_DTYPE, Flag
from ina.sim.allreduce import run
from ina.sim.backends import build
from ina.sim.network import MIN_RTO_FLOOR_S, MIN_RTO_ROUND_TRIPS, NetworkSpec
from ina.sim.options import add_network_arguments, network_spec

LANES = 16


def lossy(loss: float, **kw) -> NetworkSpec:
    return NetworkSpec(workers=4, seed=1, **kw).with_links(rate_bps=10e9, loss=loss)


def call_time(spec: NetworkSpec) -> tuple[float, dict]:
    r = run(spec, size=200_000, iters=2)
    assert r["exact"]
    return max(r["call_seconds"]), r


def test_a_call_at_one_percent_loss_takes_little_longer_than_without():
    clean, _ = call_time(lossy(0.0))
    t, r = call_time(lossy(0.01))  # the path's timers (the default)
    assert r["retransmissions"] > 0
    assert t < 2.5 * clean, (t, clean)
    early, _ = call_time(lossy(0.01, early_retransmit=True))  # and RACK with probes
    assert early < 1.5 * clean and early < t, (early, t, clean)
    # with the wall clock's timers (and so with the old defaults) it took ~8x longer
    old, _ = call_time(lossy(0.01, rto_s=WALL_RTO, min_rto_s=WALL_MIN_RTO))
    assert old > 3 * clean, (old, clean)


def test_the_timers_follow_the_path_and_a_named_one_wins():
    s = lossy(0.0)
    rto, min_rto = s.timers()
    assert min_rto == pytest.approx(MIN_RTO_ROUND_TRIPS * s.round_trip())
    assert 50e-6 < s.round_trip() < 100e-6  # 10 Gbit/s, a pool of 64 frames in flight
    assert rto > min_rto
    assert s.worker_config(0).min_rto == min_rto
    # a 1 Tbit/s switch-local fabric: the absolute floor
    fast = NetworkSpec(workers=4).with_links(rate_bps=1e12, prop_delay_s=0)
    assert fast.timers()[1] == MIN_RTO_FLOOR_S
    named = replace(s, min_rto_s=5e-3)
    assert named.timers()[1] == 5e-3 and named.timers()[0] >= 5e-3


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_network_arguments(p)
    p.add_argument("--compute")
    p.add_argument("--codec")
    return p.parse_args(list(argv))


def test_options_path_timers_unless_named_or_measured():
    path = network_spec(_args("--link-rate", "10G"), 4, 256, 64)
    assert path.rto_s is None and path.min_rto_s is None  # from the path
    assert path.worker_config(0).min_rto < 1e-3
    named = network_spec(_args("--link-rate", "10G", "--min-rto", "7ms"), 4, 256, 64)
    assert named.worker_config(0).min_rto == pytest.approx(7e-3)
    for measured in (("--compute", "measured"), ("--codec", "measured:2")):
        spec = network_spec(_args("--link-rate", "10G", *measured), 4, 256, 64)
        assert (spec.rto_s, spec.min_rto_s) == (WALL_RTO, WALL_MIN_RTO)
    # an explicit --min-rto still wins there too
    spec = network_spec(_args("--compute", "measured", "--min-rto", "1ms"), 4, 256, 64)
    assert spec.min_rto_s == pytest.approx(1e-3) and spec.rto_s == WALL_RTO


def test_an_explicit_min_rto_wins_in_a_lossy_run():
    named = lossy(0.01, min_rto_s=20e-3, early_retransmit=True)
    assert {n.core.cfg.min_rto for n in build(named).workers} == {20e-3}
    # its timers are the ones the run waits for: the tail's probes at half of it
    t, _ = call_time(named)
    path, _ = call_time(lossy(0.01, early_retransmit=True))
    assert t > path + 5e-3, (t, path)


def test_the_wall_clock_recovers_early_and_the_simulator_only_when_asked():
    cfg = WorkerConfig(job_id=1, worker_id=0, num_workers=2)
    assert (cfg.rto, cfg.min_rto, cfg.max_rto) == (0.05, 0.02, 1.0)
    assert cfg.early_retransmit and cfg.tail_probe
    sim = NetworkSpec(workers=2).worker_config(0)
    assert not sim.early_retransmit and not sim.tail_probe
    asked = NetworkSpec(workers=2, early_retransmit=True).worker_config(0)
    assert asked.early_retransmit and asked.tail_probe


# -- the core, with a scripted clock ---------------------------------------------------


def _core(**kw) -> TransportCore:
    base = dict(job_id=1, worker_id=0, num_workers=1, pool_size=8, lanes=LANES, rto=1.0,
                early_retransmit=True, tail_probe=True)  # fmt: skip
    cfg = WorkerConfig(**{**base, "min_rto": 1.0, **kw})
    core = TransportCore(cfg, nonce=1)
    core.epoch = 1  # joined already: the call starts sending at once
    return core


def _sent(core: TransportCore) -> list[tuple[int, float, bool]]:
    """(chunk, time, RETX) of every datagram the core hands out now."""
    out = []
    for buf, rows, at in core.pop_sends():
        hdr = buf[rows, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
        at = np.broadcast_to(at, rows.shape)
        for r, f, t in zip(rows.tolist(), hdr["flags"].tolist(), at.tolist(), strict=True):
            out.append((r, t, bool(f & Flag.RETX)))
    return out


def _results(core: TransportCore, chunks: list[int], at: list[float]) -> None:
    """The switch's RESULT for ``chunks`` (one worker: each completes its slot)."""
    call = core._call
    rx = call.tx[chunks].copy()
    hdr = rx[:, :HEADER_BYTES].copy().view(HEADER_DTYPE).reshape(-1)
    hdr["flags"] = Flag.RESULT
    rx[:, :HEADER_BYTES] = hdr.view(np.uint8).reshape(len(chunks), HEADER_BYTES)
    core.receive(rx, np.full(len(chunks), core.pb), np.array(at))


def test_a_gap_in_the_results_resends_the_missing_chunk_before_its_timeout():
    core = _core()
    core.start(Round(np.ones(40 * LANES, np.int32)), 0.0)  # 40 chunks, window 8
    first = _sent(core)
    assert [c for c, _, _ in first] == list(range(8))
    # results 0..2 come back 1 ms after their sends; chunk 3's is lost; 4.. come back
    _results(core, [0, 1, 2], [1e-3] * 3)
    sent = _sent(core)  # the window let 8.. out at 1 ms
    assert sent and all(t == 1e-3 and not retx for _, t, retx in sent)
    _results(core, [4, 5, 6, 7], [1.2e-3] * 4)  # sent at 0, like 3: no gap in send time
    assert not any(retx for _, _, retx in _sent(core))
    # results of chunks sent at 1 ms (over half a round trip after chunk 3): chunk 3 is lost
    _results(core, [8], [2.0e-3])
    again = [(c, t) for c, t, retx in _sent(core) if retx]
    assert again == [(3, 2.0e-3)]  # at once, not at its timeout (1 s)
    assert core.stats.early_retransmissions == 1 and core.stats.retransmissions == 1
    assert core.rto == pytest.approx(1.0)  # no backoff: no timeout
    # the same gap shown again soon after does not send it once more (a round trip first)
    _results(core, [9], [2.1e-3])
    assert not any(retx for _, _, retx in _sent(core))


def test_without_early_retransmission_a_gap_waits_for_the_timeout():
    core = _core(early_retransmit=False)
    core.start(Round(np.ones(40 * LANES, np.int32)), 0.0)
    _sent(core)
    _results(core, [0, 1, 2, 4, 5, 6, 7], [1e-3] * 7)
    _sent(core)
    _results(core, [8, 9, 10], [2e-3] * 3)
    assert not any(retx for _, _, retx in _sent(core))
    assert core.deadline() == pytest.approx(1.0)  # chunk 3's timeout


def test_the_tail_of_a_call_is_probed_before_its_timeout():
    # every chunk out, the last one lost: no later result can show it; a probe two smoothed
    # round trips (at least half min_rto) after the tail's first round trip is measured
    # sends it again, without backing the timeout off
    core = _core(min_rto=1e-3)
    core.start(Round(np.ones(4 * LANES, np.int32)), 0.0)  # 4 chunks, all out at once
    _sent(core)
    _results(core, [0, 1, 2], [1e-3] * 3)  # srtt 1 ms: chunk 3 probed at 1 + 2 ms
    assert core.deadline() == pytest.approx(3e-3)  # (its timeout: at 1 s)
    rto = core.rto
    core.tick(3e-3)
    assert _sent(core) == [(3, 3e-3, True)]
    assert core.stats.probes == 1 and core.rto == rto
    assert core.deadline() == pytest.approx(3e-3 + rto)  # one probe, then the timeout


def test_a_path_slower_than_max_rto_raises_the_ceiling_not_an_error():
    from ina.sim.network import LinkSpec, NetworkSpec

    link = LinkSpec(rate_bps=1e6, prop_delay_s=1e-3)  # 1 Mbit/s: a pool takes seconds
    spec = NetworkSpec(workers=2, up=link, down=link, lanes=4096, pool_size=64)
    cfg = spec.worker_config(0)
    assert cfg.min_rto > spec.max_rto_s and cfg.max_rto >= cfg.rto >= cfg.min_rto
