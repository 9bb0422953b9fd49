"""The virtual-time simulator: physics (rates, queues, drops, capacity), exactness against
the UDP path, determinism, and its command's errors. Simulated time is deterministic, so
these tests assert it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from conftest import ina_in_process

from ina.host.allreduce import Worker
from ina.protocol import FRAME_OVERHEAD, packet_bytes
from ina.sim import allreduce as sim_allreduce
from ina.sim.allreduce import run
from ina.sim.backends import build
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec, workers_for

FRAME = packet_bytes(256) + FRAME_OVERHEAD


def spec(**kw) -> NetworkSpec:
    base = dict(workers=4, lanes=256, pool_size=64, seed=1)
    return NetworkSpec(**{**base, **kw})


def chunks(n: int, lanes: int = 256) -> int:
    return -(-n // lanes)


def test_an_allreduce_never_beats_its_bytes_over_the_link_rate():
    for rate in (1e9, 10e9, 100e9):
        s = spec(up=LinkSpec(rate_bps=rate), down=LinkSpec(rate_bps=rate))
        r = run(s, size=100_000, iters=2)
        assert r["exact"]
        # the SUM round alone puts every chunk's frame through each worker's uplink
        bound = chunks(100_000) * FRAME * 8 / rate
        assert all(t > bound for t in r["call_seconds"])
        assert r["call_seconds"][1] < 1.5 * bound + 100e-6  # and is bandwidth-bound here


def test_latency_bound_calls_pay_round_trips():
    s = spec(up=LinkSpec(prop_delay_s=50e-6), down=LinkSpec(prop_delay_s=50e-6))
    r = run(s, size=100, iters=2)
    # a call is two rounds (scales, then sums), each at least one round trip
    assert r["call_seconds"][1] >= 2 * 100e-6


def test_offered_load_above_the_rate_queues_then_overflows_into_drops_and_retransmissions():
    slow = LinkSpec(rate_bps=1e9)
    net = build(spec(up=slow, down=slow, pool_size=64))
    ws = workers_for(net)
    x = [np.ones(64 * 256, np.float32) * (w + 1) for w in range(4)]
    samples: list[np.ndarray] = []
    net.workers[0].core.rtt_listener = lambda rtt, _t: samples.append(rtt)
    net.run([ws[w].allreduce_steps(x[w]) for w in range(4)])
    rtt = np.concatenate(samples)
    base = 2 * (1e-6 + FRAME * 8 / 1e9) + 1e-6
    # a whole window sent at once waits in the uplink's queue: delays grow along the window
    assert rtt.max() > 10 * base and rtt.min() < 3 * base
    # the same with a buffer of 8 frames: the queue overflows, packets are tail-dropped,
    # retransmitted, and every sum is still exact
    small = LinkSpec(rate_bps=1e9, buffer_bytes=8 * FRAME)
    r = run(spec(up=small, down=small, rto_s=0.001, min_rto_s=0.0005), size=64 * 256, iters=2)
    assert r["exact"] and r["retransmissions"] > 0


def test_capacity_episodes_stretch_the_step_by_their_share():
    full = run(spec(), size=200_000, iters=1)["call_seconds"][0]
    # cross traffic takes half of every link for the whole run (an episode from t = 0+)
    half = LinkSpec(capacity="episodes:share=0.5:on_s=100:off_s=1e-9:fixed=1")
    halved = run(spec(up=half, down=half), size=200_000, iters=1)["call_seconds"][0]
    assert 1.7 < halved / full < 2.1
    # episodes that start after the call leave it alone
    later = LinkSpec(capacity="episodes:share=0.5:on_s=1:off_s=10:fixed=1")
    same = run(spec(up=later, down=later), size=200_000, iters=1)["call_seconds"][0]
    assert same == full


@pytest.mark.parametrize("loss", [0.0, 0.01, 0.1])
def test_simulated_sums_are_exact_and_equal_the_udp_paths(loss, harness_factory):
    n = 20_000
    rng = np.random.default_rng(5)
    x = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    lossy = LinkSpec(loss=loss)
    net = build(spec(workers=3, up=lossy, down=lossy, rto_s=1e-4, min_rto_s=1e-4))
    sim = workers_for(net)
    net.run([sim[w].allreduce_steps(x[w]) for w in range(3)])
    expected = np.add.reduce([w.last_ints for w in sim], dtype=np.int32)
    for w in sim:
        np.testing.assert_array_equal(w.last_int_sums, expected)
    # the same tensors through the UDP switch model: the same integers, bit for bit
    h = harness_factory(3, lanes=256, pool_size=64)

    def udp(w: int):
        with Worker(h.config(w)) as worker:
            worker.allreduce(x[w])
            return worker.last_int_sums

    for got in h.run(udp).values():
        np.testing.assert_array_equal(got, expected)


def test_compressed_allreduce_in_simulation_is_exact():
    r = run(spec(), size=50_000, iters=3, density=0.05)
    assert r["exact"] and r["counters"]["runs"] == 1


def test_same_seed_same_result_any_engine_and_different_seeds_differ():
    lossy = LinkSpec(loss=0.05, profile="low")
    timers = dict(rto_s=1e-3, min_rto_s=1e-3)
    a = run(spec(up=lossy, down=lossy, **timers), size=30_000, iters=2, seed=3)
    b = run(spec(up=lossy, down=lossy, engine="heap", **timers), size=30_000, iters=2, seed=3)
    c = run(spec(up=lossy, down=lossy, seed=9, **timers), size=30_000, iters=2, seed=3)

    def sim_fields(r):
        return {k: v for k, v in r.items() if not k.startswith("wall_") and k != "model"}

    assert sim_fields(a) == sim_fields(b)
    assert sim_fields(a) != sim_fields(c)


def test_lookahead_batching_changes_no_result_even_under_tail_drop(monkeypatch):
    """The nodes' batches of arrivals (lookahead) against one packet per event, with a port
    buffer smaller than the window: the window lets chunks out at the arrival of the result
    that made room for each, so the same packets overflow and the same chunks are resent."""
    link = LinkSpec(rate_bps=10e9, prop_delay_s=5e-6, buffer_bytes=16_000)
    s = spec(up=link, down=link, rto_s=1e-3, min_rto_s=200e-6)
    batched = run(s, size=50_000, iters=2)

    def one_per_event(*args):
        net = build(*args)
        for node in [*net.workers, net.switch]:
            node.lookahead = 1e-9
            node.run_ahead = False
        return net

    monkeypatch.setattr(sim_allreduce, "build", one_per_event)
    single = run(s, size=50_000, iters=2)
    assert single["events"] > 3 * batched["events"]
    assert batched["retransmissions"] == single["retransmissions"] > 0  # tail drops happened
    for key in ("packets_on_links", "packets_sent_per_worker", "counters"):
        assert batched[key] == single[key]
    assert batched["call_seconds"] == single["call_seconds"]  # to the bit
    # (the mean queueing delay sums floats in another order)
    assert batched["queue_delay_up_s"] == pytest.approx(single["queue_delay_up_s"], rel=1e-12)


def test_switch_run_ahead_changes_no_result_under_loss(monkeypatch):
    """The switch's channel clocks (a round trip of arrivals per event) against exactly its
    lookahead per event, with loss on every link: the workers' retransmission timers fire
    at the same instants, so their packets meet at the switch at equal times, and are taken
    by input port whatever the batching (they used to go in event order)."""
    lossy = LinkSpec(rate_bps=10e9, loss=0.01)
    # (a case where taking ties in event order made the two differ)
    s = spec(up=lossy, down=lossy, rto_s=1e-3, min_rto_s=200e-6)
    ahead = run(s, size=100_000, iters=2)

    def held_back(*args):
        net = build(*args)
        net.switch.run_ahead = False
        return net

    monkeypatch.setattr(sim_allreduce, "build", held_back)
    held = run(s, size=100_000, iters=2)
    assert ahead["events"] < held["events"] and ahead["retransmissions"] > 0
    for key in ("call_seconds", "counters", "packets_sent_per_worker", "retransmissions"):
        assert ahead[key] == held[key]
    # queueing delays are summed packet by packet: equal to the bit too
    assert ahead["queue_delay_up_s"] == held["queue_delay_up_s"]
    assert ahead["queue_delay_down_s"] == held["queue_delay_down_s"]


def test_lookahead_batching_changes_no_result_with_cross_traffic_in_the_fifos(
    monkeypatch, tmp_path
):
    """Bursts of cross-traffic packets (as a replay of TCP gives them) in every worker's
    links, both ways: batched and one packet per event give the same times to the bit.
    Before, a batch's running sums rounded differently from one packet at a time, a
    one-ulp difference flipped a tie with a cross packet and the runs drifted apart."""
    rng = np.random.default_rng(2)
    for name in ("up", "down"):
        lines = []
        for w in range(3):
            starts = np.sort(rng.uniform(0, 2e-3, 40))
            for t0 in starts:  # bursts of back-to-back 1,502-byte segments
                for k in range(int(rng.integers(2, 12))):
                    lines.append((t0 + k * 1.2016e-6, 1502, w))
        lines.sort()
        (tmp_path / name).write_text("".join(f"{t:.9f} {b} {w}\n" for t, b, w in lines))
    up = LinkSpec(rate_bps=10e9, prop_delay_s=5e-6, buffer_bytes=64_000)
    s = spec(
        workers=3,
        up=replace(up, cross=f"trace:{tmp_path / 'up'}"),
        down=replace(up, cross=f"trace:{tmp_path / 'down'}"),
        rto_s=1e-3,
        min_rto_s=200e-6,
    )
    batched = run(s, size=60_000, iters=2)
    single = sim_allreduce.run(s, 60_000, 2, lookahead_s=1e-9)
    assert batched["exact"] and single["events"] > 3 * batched["events"]
    assert batched["call_seconds"] == single["call_seconds"]
    assert batched["packets_on_links"] == single["packets_on_links"]
    assert batched["queue_delay_down_s"] == pytest.approx(single["queue_delay_down_s"], rel=1e-12)
    assert batched["queue_delay_down_s"] > 0


def test_the_switch_rate_limits_aggregation():
    fast = run(spec(), size=100_000, iters=1)["call_seconds"][0]
    s = spec(switch=SwitchSpec(rate_bps=50e9))  # 4 workers x 100G into a 50G pipeline
    slow = run(s, size=100_000, iters=1)["call_seconds"][0]
    assert slow > 4 * fast  # 400G of offered load through 50G: ~8x, minus the latency share


def test_ina_sim_allreduce_writes_the_same_file_twice_apart_from_wall_fields(tmp_path):
    outs = []
    for i in range(2):
        cmd = [sys.executable, "-m", "ina", "sim", "allreduce", "--workers", "3", "--size"]
        cmd += ["5000", "--iters", "2", "--link-loss", "0.02", "--out", str(tmp_path / str(i))]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "every sum exact: yes" in r.stdout
        outs.append(json.loads((tmp_path / str(i) / "result.json").read_text()))
    walls = [k for k in outs[0] if k.startswith("wall_")]
    assert walls
    for o in outs:
        for k in walls:
            del o[k]
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--link-rate", "fast"], "link rate 'fast' does not parse"),
        (["--link-rate=-3G"], "does not parse"),
        (["--prop-delay", "1 parsec"], "propagation delay"),
        (["--link-profile", "bogus"], "unknown link profile"),
        (["--buffer", "0"], "buffer must be > 0"),
        (["--capacity", "episodes:share=2"], "share must be in (0, 1]"),
        (["--capacity", "sometimes"], "unknown capacity model"),
        (["--workers", "40"], "workers must be 1..32"),
        (["--pool", "100"], "power of two"),
        (["--link-loss", "1.5"], "loss must be in [0, 1)"),
        (["--density", "0"], "--density"),
    ],
)
def test_bad_options_are_one_line_errors(args, message):
    r = ina_in_process("sim", "allreduce", *args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(
    "switch", [SwitchSpec(), SwitchSpec(rate_bps=200e9, latency_s=2e-6)], ids=["line", "200G"]
)
@pytest.mark.parametrize("workers", [2, 5, 8])
def test_timing_only_agrees_with_every_worker_simulated(workers, switch):
    link = LinkSpec(rate_bps=25e9, prop_delay_s=2e-6, profile="constant:delay_s=1e-6")
    full = run(spec(workers=workers, up=link, down=link, switch=switch), 60_000, 3)
    one = run(spec(workers=workers, up=link, down=link, switch=switch, timing_only=True), 60_000, 3)
    # the first call joins the run: all workers but the one whose JOIN completes it spend
    # one more round trip asking for their own nonce, and the representative, who stands
    # for them, does as they do (`ina.sim.nodes.SwitchNode._rename_runs`). A pipeline
    # slower than line rate answers those questions one processing time apart, so the
    # workers start a little apart and the first call may differ by that much per worker.
    assert one["call_seconds"][1:] == pytest.approx(full["call_seconds"][1:], rel=0, abs=1e-12)
    service = 0.0 if switch.rate_bps is None else 1100 * 8 / switch.rate_bps
    assert abs(one["call_seconds"][0] - full["call_seconds"][0]) <= (workers - 1) * service + 1e-12
    assert one["exact"] and one["packets_on_links"] * workers == pytest.approx(
        full["packets_on_links"], rel=0.01
    )


def test_timing_only_scales_past_the_bitmap_and_refuses_asymmetric_links():
    r = run(spec(workers=1024, timing_only=True), 200_000, 1)
    frames = chunks(200_000) * FRAME * 8 / 100e9
    assert frames < r["call_seconds"][0] < frames + 20e-6
    with pytest.raises(ValueError, match="deterministic links"):
        spec(workers=64, timing_only=True, up=LinkSpec(loss=0.01))
    with pytest.raises(ValueError, match=r"workers must be 1\.\.32"):
        spec(workers=64)


def test_ina_against_ring_approaches_the_bandwidth_bound_and_beats_it_when_latency_counts():
    from ina.sim.baselines import allreduce_time, bound
    from ina.sim.compare import compare

    slow = LinkSpec(rate_bps=1e9)  # bandwidth-bound: a step's segment takes far longer
    r = compare(spec(workers=64, up=slow, down=slow, timing_only=True), 1_000_000)
    assert r["ring"] / r["ina"] == pytest.approx(bound("ring", 64), rel=0.05)
    assert r["halving-doubling"] == pytest.approx(r["ring"], rel=0.05)  # the same bytes
    # small messages: the ring's 2(N-1) latencies dominate, halving-doubling has 2 log2 N
    small = compare(spec(workers=64, timing_only=True), 10_000)
    assert small["ring"] / small["ina"] > 3 * bound("ring", 64)
    assert small["halving-doubling"] < small["ring"] / 3
    ring = allreduce_time(spec(workers=8), 80_000, "ring")
    assert ring["bytes_sent_per_worker"] == 2 * 7 * chunks(10_000) * FRAME
    with pytest.raises(ValueError, match="power-of-two"):
        allreduce_time(spec(workers=6), 1000, "halving-doubling")


def test_the_union_of_the_workers_top_k_grows_with_the_workers_unless_timing_only():
    """Each worker allreduces its own tensor, so round 2 carries the union of their top-k
    (about 1 - (1 - d)^N of independent tensors); one representative carries its own."""
    full = run(spec(workers=4), size=50_000, iters=1, density=0.01)
    one = run(spec(workers=4, timing_only=True), size=50_000, iters=1, density=0.01)
    assert full["union_density"] == pytest.approx(1 - 0.99**4, rel=0.05)
    assert one["union_density"] == pytest.approx(0.01, rel=0.01)
    assert run(spec(workers=4), size=1_000, iters=1)["union_density"] == 1.0
