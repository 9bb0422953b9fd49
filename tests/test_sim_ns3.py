"""The ns-3 backend: the same workers and switch over ns-3's links (`ina.sim.ns3net`).

Skipped with the reason where the ``ns3`` package (the ``ns3`` extra) cannot be imported.
Loading ns-3 takes ~10-20 s of wall time, once per process.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ina.sim import allreduce as sim_allreduce
from ina.sim import ns3net
from ina.sim.backends import build
from ina.sim.network import LinkSpec, NetworkSpec

why = ns3net.unavailable()
pytestmark = pytest.mark.skipif(why is not None, reason=f"ns-3 backend unavailable: {why}")


def spec(**links) -> NetworkSpec:
    return NetworkSpec(workers=3, lanes=64, pool_size=16, seed=3).with_links(
        rate_bps=1e9, prop_delay_s=5e-6, **links
    )


def run(s: NetworkSpec, size: int = 5000, iters: int = 2) -> dict:
    return sim_allreduce.run(s, size, iters, seed=1)


def test_ns3_allreduce_is_exact_and_matches_the_fast_engine_when_lossless():
    s = spec(buffer_bytes=64_000)
    ns3 = run(replace(s, backend="ns3"))
    fast = run(s)
    assert ns3["model"].count("ns-3 backend") == 1
    assert ns3["exact"] and fast["exact"]  # every worker's sums equal the host-side sum
    assert ns3["retransmissions"] == fast["retransmissions"] == 0
    assert ns3["packets_on_links"] == fast["packets_on_links"]
    # The same packets over the same FIFO links: ns-3 keeps time in whole nanoseconds, so a
    # frame's serialization (8.5 us here) and each send time may round by < 1 ns; over the
    # call's few hundred frames that is < 1e-3 of its time.
    for a, b in zip(ns3["call_seconds"], fast["call_seconds"], strict=True):
        assert a == pytest.approx(b, rel=1e-3)
    # Queueing delay: the same, also for packets the window released within a batch of
    # arrivals (each leaves when the result that made room for it arrived; the goal
    # was 5 %).
    assert ns3["queue_delay_up_s"] > 0
    assert ns3["queue_delay_up_s"] == pytest.approx(fast["queue_delay_up_s"], rel=1e-3)


@pytest.mark.parametrize("rate", [1e9, 10e9], ids=["1G", "10G"])
def test_ns3_and_the_fast_engine_agree_under_tail_drop(rate):
    """A port buffer smaller than the window: the same packets are dropped in both, so the
    same chunks are retransmitted, although ns-3 feeds the nodes one packet per event and
    the fast engine a lookahead's worth (a chunk the window lets out leaves when the result
    that made room for it arrived, however many arrived with it). At 1 Gbit/s a frame
    (1,066 bytes) takes a whole number of nanoseconds, and packets arrive in the very
    picosecond a transmission ends: both count the ending one as still queued (ns-3
    scheduled the arrival first), and the fast engine's whole-picosecond clock makes
    those ties ties."""
    link = LinkSpec(rate_bps=rate, prop_delay_s=5e-6, buffer_bytes=16_000)
    s = NetworkSpec(workers=4, lanes=256, pool_size=64, up=link, down=link, rto_s=1e-3)
    s = replace(s, min_rto_s=200e-6)
    ns3 = run(replace(s, backend="ns3"), size=50_000)
    fast = run(s, size=50_000)
    assert ns3["exact"] and fast["exact"]
    assert ns3["retransmissions"] == fast["retransmissions"] > 0  # tail drops happened
    for a, b in zip(ns3["call_seconds"], fast["call_seconds"], strict=True):
        assert a == pytest.approx(b, rel=1e-3)
    assert ns3["queue_delay_up_s"] == pytest.approx(fast["queue_delay_up_s"], rel=1e-3)


def test_ns3_allreduce_is_exact_under_loss_and_tcp_cross_traffic():
    lossy = spec(loss=0.01, buffer_bytes=64_000, capacity="episodes:on_s=200e-6:off_s=100e-6")
    s = replace(lossy, backend="ns3", min_rto_s=200e-6, rto_s=1e-3)
    r = run(s)
    assert r["exact"]
    assert r["retransmissions"] > 0  # the loss was real
    assert r["queue_delay_down_s"] > 0  # the TCP flows queued in the switch's ports


def test_ns3_backend_rejects_what_it_does_not_model():
    with pytest.raises(ValueError, match="profile"):
        build(NetworkSpec(backend="ns3").with_links(profile="low"))
    with pytest.raises(ValueError, match="timing-only"):
        build(NetworkSpec(backend="ns3", timing_only=True))


def test_ns3_tcp_replayed_into_the_fast_engine_reproduces_ns3(tmp_path):
    """ns-3's TCP cross traffic, recorded as it entered each worker link's queue and replayed
    into the fast engine's FIFOs (`ina.netem.CrossTrace`), gives the fast engine, batched as
    it runs and fed one packet per event, ns-3's run: the same tail drops
    (retransmissions), call times and queueing delays, to the picosecond both count in."""
    link = LinkSpec(rate_bps=1e9, prop_delay_s=5e-6, buffer_bytes=64_000)
    tcp = replace(link, capacity="episodes:on_s=200e-6:off_s=100e-6:fixed=1")
    s = NetworkSpec(workers=3, lanes=64, pool_size=16, seed=3, up=link, down=tcp, rto_s=1e-3)
    s = replace(s, min_rto_s=200e-6)
    ns3 = run(replace(s, backend="ns3"), size=20_000)
    traces = ns3net.write_cross_traces(tmp_path)
    down = ns3net.cross_arrivals("down")
    # full segments carry most of the bytes (the rest: handshakes, FINs of each episode's flow)
    assert all(t.size > 100 and sizes[sizes > 1000].sum() > 0.9 * sizes.sum() for t, sizes in down)
    assert all((sizes < 100).all() for _, sizes in ns3net.cross_arrivals("up"))  # their ACKs
    replay = replace(
        s,
        up=replace(s.up, cross=f"trace:{traces['up']}"),
        down=replace(s.down, capacity=None, cross=f"trace:{traces['down']}"),
    )
    for lookahead in (None, 1e-9):
        fast = sim_allreduce.run(replay, 20_000, 2, seed=1, lookahead_s=lookahead)
        assert ns3["exact"] and fast["exact"]
        assert fast["retransmissions"] == ns3["retransmissions"] > 0  # INA tail-dropped
        for a, b in zip(ns3["call_seconds"], fast["call_seconds"], strict=True):
            assert a == pytest.approx(b, rel=1e-9)
        for key in ("queue_delay_up_s", "queue_delay_down_s"):
            assert fast[key] == pytest.approx(ns3[key], rel=1e-9)


def two_level(loss: float = 0.0) -> NetworkSpec:
    from ina import topology

    fabric = topology.parse(topology.two_level(2, 2), "two_level_2x2")
    link = LinkSpec(rate_bps=10e9, prop_delay_s=5e-6, buffer_bytes=200_000, loss=loss)
    s = NetworkSpec(workers=4, topology=fabric, lanes=256, pool_size=64, up=link, down=link)
    return replace(s, rto_s=1e-3, min_rto_s=200e-6)


def test_ns3_two_level_tree_sums_exactly_and_matches_the_fast_engine():
    """Hierarchical aggregation on ns-3: leaf switches (the same `Pipeline`, with their
    parent_table entries) send partial sums up over ns-3 links to the spine; lossless, the
    same call times as the fast engine's tree; with loss on every link, leaf-spine ones
    included, every sum still exact."""
    s = two_level()
    ns3 = run(replace(s, backend="ns3"), size=20_000)
    fast = run(s, size=20_000)
    assert ns3["exact"] and fast["exact"]
    assert ns3["packets_on_links"] == fast["packets_on_links"]
    for a, b in zip(ns3["call_seconds"], fast["call_seconds"], strict=True):
        assert a == pytest.approx(b, rel=1e-3)
    lossy = run(replace(two_level(loss=0.02), backend="ns3"), size=20_000)
    assert lossy["exact"] and lossy["retransmissions"] > 0


def test_ina_sim_fidelity_prints_every_scenario(tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "ina", "sim", "fidelity", "--size", "5000", "--iters", "1"]
    r = subprocess.run(
        [*cmd, "--cross-dir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr
    for row in (
        "| bottleneck | ns-3 |",
        "| bottleneck + TCP | fast, TCP replayed, 1 packet/event |",
        "| loss 0.001 | fast |",
        "| tree two_level_2x2 | ns-3 |",
        "| tree two_level_2x2 | fast, 1 packet/event |",
    ):
        assert row in r.stdout
    assert (tmp_path / "bottleneck-tcp-seed0" / "cross_down.txt").stat().st_size > 0
    bad = subprocess.run([*cmd, "--seeds", "0"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
