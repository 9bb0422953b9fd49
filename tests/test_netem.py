"""LinkEmulator: reproducibility, delay distributions, bandwidth, loss, FIFO."""

import math

import numpy as np
import pytest

from ina.netem import (
    PROFILES,
    ConstantDelay,
    HighVariationDelay,
    LinkEmulator,
    LowVariationDelay,
    TraceDelay,
    make_link,
)

N = 20_000
SPACED = np.arange(N) * 1.0  # one packet a second: FIFO never binds, delays show as drawn


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "delays.txt"
    path.write_text("# one delay per line, ms\n1.5\n3\n\n0.25\n")
    return path


def profiles(trace_file):
    return ["none", "constant", "low", "high", f"trace:{trace_file}"]


def test_profile_registry():
    assert set(PROFILES) == {"none", "constant", "low", "high", "trace", "timeline"}
    with pytest.raises(ValueError, match="known"):
        make_link("lossy")
    with pytest.raises(ValueError):
        make_link("trace")  # needs a path
    with pytest.raises(ValueError):
        make_link("timeline")
    with pytest.raises(ValueError, match="jitter_s"):
        make_link("high", jitter_s=1e-3)  # a parameter of another profile


def test_same_seed_same_releases_other_seed_other_releases(trace_file):
    for profile in ["low", "high"]:
        run = [
            make_link(profile, seed=s, loss=0.1).admit_batch(SPACED[:2000], 1500) for s in (5, 5, 6)
        ]
        np.testing.assert_array_equal(run[0], run[1])
        assert not np.array_equal(run[0], run[2], equal_nan=True)


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_batches_and_single_packets_agree(trace_file, batch):
    times = np.cumsum(np.random.default_rng(0).exponential(2e-5, 3000))
    sizes = np.random.default_rng(1).integers(64, 9000, 3000)
    for profile in profiles(trace_file):
        kw = {"seed": 3, "rate_bps": 1e9, "loss": 0.05}
        single = make_link(profile, **kw)
        one = [single.admit(t, int(n)) for t, n in zip(times, sizes, strict=True)]
        one = np.array([math.nan if r is None else r for r in one])
        batched = make_link(profile, **kw)
        parts = [
            batched.admit_batch(times[i : i + batch], sizes[i : i + batch])
            for i in range(0, len(times), batch)
        ]
        np.testing.assert_allclose(np.concatenate(parts), one, rtol=0, atol=1e-12)
        assert (single.packets, single.dropped, single.bytes) == (
            batched.packets,
            batched.dropped,
            batched.bytes,
        )


def test_a_lossy_plain_wire_gives_the_general_paths_times_exactly():
    """A constant delay and a rate with loss takes a shortcut past the general path (no queue
    accounting); a buffer too big to fill takes the general path: the same draws, times and
    counters, to the bit."""
    times = np.cumsum(np.random.default_rng(2).exponential(2e-6, 5000))
    sizes = np.random.default_rng(3).integers(64, 1500, 5000)
    kw = {"seed": 4, "rate_bps": 10e9, "loss": 0.02, "delay_s": 1e-6}
    plain, general = make_link("constant", **kw), make_link("constant", **kw, buffer_bytes=1e15)
    for i in range(0, 5000, 64):
        a = plain.admit_batch(times[i : i + 64], sizes[i : i + 64])
        b = general.admit_batch(times[i : i + 64], sizes[i : i + 64])
        np.testing.assert_array_equal(a, b)
    assert (plain.packets, plain.dropped, plain.bytes) == (
        general.packets, general.dropped, general.bytes
    )  # fmt: skip
    assert 0 < plain.dropped < 5000


def test_none_and_constant():
    assert make_link("none").admit(3.0, 1500) == 3.0
    link = make_link("constant", delay_s=0.005)
    np.testing.assert_allclose(link.admit_batch(SPACED[:100], 100) - SPACED[:100], 0.005)


def test_low_variation_matches_its_normal():
    delays = make_link("low", seed=1, base_s=1e-3, jitter_s=1e-4).admit_batch(SPACED, 1) - SPACED
    assert delays.mean() == pytest.approx(1e-3, abs=4 * 1e-4 / math.sqrt(N))
    assert delays.std() == pytest.approx(1e-4, rel=0.03)
    assert np.percentile(delays, 97.5) == pytest.approx(1e-3 + 1.96e-4, rel=0.01)


def test_high_variation_tail_matches_its_lognormal():
    link = make_link("high", seed=2, base_s=1e-3, median_s=2e-3, sigma=0.8, episode_delay_s=0.0)
    extra = link.admit_batch(SPACED, 1) - SPACED - 1e-3
    assert np.median(extra) == pytest.approx(2e-3, rel=0.03)
    assert np.percentile(extra, 90) == pytest.approx(2e-3 * math.exp(0.8 * 1.2816), rel=0.04)
    assert extra.mean() == pytest.approx(2e-3 * math.exp(0.8**2 / 2), rel=0.03)


def test_high_variation_episodes_cover_their_share_of_time():
    model = HighVariationDelay(np.random.SeedSequence(4), episode_on_s=1.0, episode_off_s=3.0)
    times = np.arange(0, 20_000, 0.02)  # ~5,000 on/off cycles, sampled finely
    on = model.in_episode(times)
    assert on.mean() == pytest.approx(0.25, abs=0.015)
    starts = np.flatnonzero(np.diff(on.astype(int)) == 1)
    assert len(starts) == pytest.approx(5_000, rel=0.06)
    # During an episode packets get the extra delay on top of the tail.
    link = make_link("high", seed=4, median_s=1e-4, sigma=0.1, episode_delay_s=0.02)
    delays = link.admit_batch(times[:200_000], 1) - times[:200_000]
    on = link.delay.in_episode(times[:200_000])  # the schedule is already drawn: a pure lookup
    assert delays[on].min() > 0.02 > delays[~on].max()


def test_trace_replays_in_order_and_loops(trace_file):
    link = make_link(f"trace:{trace_file}")
    np.testing.assert_allclose(
        link.admit_batch(SPACED[:7], 1) - SPACED[:7],
        [1.5e-3, 3e-3, 0.25e-3, 1.5e-3, 3e-3, 0.25e-3, 1.5e-3],
    )


@pytest.mark.parametrize("content", ["", "# nothing\n", "1\n-2\n", "1\nnan\n"])
def test_bad_traces_raise(tmp_path, content):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ValueError):
        TraceDelay(path)


def test_bandwidth_limit_gives_the_configured_throughput():
    rate, size = 1e8, 1250  # 100 Mbit/s, 10,000 bits a packet: 100 us each
    link = make_link("none", rate_bps=rate)
    release = link.admit_batch(np.zeros(N), size)  # a burst: all queued at t = 0
    assert release[-1] == pytest.approx(N * size * 8 / rate)
    np.testing.assert_allclose(np.diff(release), 1e-4)
    # An under-loaded link adds only the serialization time, no queueing.
    link = make_link("constant", rate_bps=rate, delay_s=0.001)
    release = link.admit_batch(np.arange(100) * 1e-3, size)
    np.testing.assert_allclose(release - np.arange(100) * 1e-3, 1e-4 + 0.001)


def test_queue_carries_over_between_calls():
    link = make_link("none", rate_bps=8e6)  # 1 us a byte
    assert link.admit(0.0, 1000) == pytest.approx(1e-3)
    assert link.admit(0.0005, 1000) == pytest.approx(2e-3)  # waits for the first
    np.testing.assert_allclose(link.admit_batch([0.0006, 0.01], 1000), [3e-3, 0.011])


def test_loss_rate_within_tolerance():
    link = make_link("low", seed=9, loss=0.05)
    release = link.admit_batch(np.arange(100_000) * 1e-4, 100)
    rate = np.isnan(release).mean()
    assert rate == pytest.approx(0.05, abs=4 * math.sqrt(0.05 * 0.95 / 100_000))
    assert link.dropped == np.isnan(release).sum() and link.packets == 100_000


def test_loss_does_not_change_the_delays_of_delivered_packets():
    clean = make_link("high", seed=1).admit_batch(SPACED[:5000], 1)
    lossy = make_link("high", seed=1, loss=0.3).admit_batch(SPACED[:5000], 1)
    kept = ~np.isnan(lossy)
    np.testing.assert_array_equal(lossy[kept], clean[kept])


@pytest.mark.parametrize("profile", ["low", "high"])
def test_links_are_fifo_unless_reordering_is_allowed(profile):
    times = np.arange(N) * 1e-5  # 10 us apart: jitter is larger than the gaps
    fifo = (
        make_link(profile, seed=1, jitter_s=1e-3)
        if profile == "low"
        else make_link(profile, seed=1)
    )
    assert np.all(np.diff(fifo.admit_batch(times, 100)) >= 0)
    loose = LinkEmulator(LowVariationDelay(np.random.SeedSequence(1), jitter_s=1e-3), reorder=True)
    assert np.any(np.diff(loose.admit_batch(times, 100)) < 0)


def test_bad_input_raises():
    with pytest.raises(ValueError):
        LinkEmulator(ConstantDelay(), loss=1.0)
    with pytest.raises(ValueError):
        LinkEmulator(rate_bps=0.0)
    link = LinkEmulator()
    with pytest.raises(ValueError):
        link.admit_batch([1.0, 0.5], 100)  # times must not go back within a batch
    with pytest.raises(ValueError):
        link.admit(1.0, -1)
    assert len(link.admit_batch([], 100)) == 0


def test_profile_parameters_in_the_name():
    from ina.netem import parse_profile

    assert parse_profile("high:episode_on_s=5:episode_off_s=2.5") == (
        "high",
        {"episode_on_s": 5.0, "episode_off_s": 2.5},
    )
    assert parse_profile("low") == ("low", {})
    assert parse_profile("trace:/tmp/a:b=c.txt") == ("trace", {"path": "/tmp/a:b=c.txt"})
    for bad in ("high:episode_on_s", "high:=3", "high:episode_on_s=abc", "lossy:x=1"):
        with pytest.raises(ValueError):
            parse_profile(bad)
    with pytest.raises(ValueError, match="bogus"):
        make_link("high:bogus=1")
    # The name's parameters act like keyword parameters; keywords win.
    named = make_link("constant:delay_s=0.004").admit_batch(SPACED[:10], 100)
    np.testing.assert_allclose(named - SPACED[:10], 0.004)
    kw = make_link("constant:delay_s=0.004", delay_s=0.002).admit_batch(SPACED[:10], 100)
    np.testing.assert_allclose(kw - SPACED[:10], 0.002)


def test_shared_episodes_line_up_across_links():
    times = np.arange(0, 600, 0.01) + 1000.0
    own = [HighVariationDelay(np.random.SeedSequence(s)).in_episode(times) for s in (1, 2)]
    assert not np.array_equal(own[0], own[1])  # per-link episodes: independent
    shared = [
        HighVariationDelay(np.random.SeedSequence(s), episode_seed=7, epoch=1000.0) for s in (1, 2)
    ]
    on = [d.in_episode(times) for d in shared]
    np.testing.assert_array_equal(on[0], on[1])
    assert 0.15 < on[0].mean() < 0.35  # on 1 s, off 3 s
    # The schedule is anchored at the epoch, not at each link's first packet.
    late = HighVariationDelay(np.random.SeedSequence(3), episode_seed=7, epoch=1000.0)
    np.testing.assert_array_equal(late.in_episode(times[30000:]), on[0][30000:])
    with pytest.raises(ValueError, match="whole"):
        HighVariationDelay(np.random.SeedSequence(0), episode_seed=1.5)


# -- finite buffers and capacity (cross traffic) ------------------------------------------------


def test_a_full_buffer_tail_drops_what_does_not_fit():
    link = LinkEmulator(rate_bps=8e6, buffer_bytes=10_000)  # 1 MB/s: 1 ms per 1000 B
    release = link.admit_batch(np.zeros(25), 1000)  # a burst of 25 packets at once
    assert np.isnan(release).sum() == 15 and link.overflows == 15
    np.testing.assert_allclose(release[:10], (np.arange(10) + 1) * 1e-3)
    # once the queue has drained, there is room again
    assert link.admit(0.0105, 1000) == pytest.approx(0.0115)


def test_buffer_accounting_is_the_same_in_one_batch_and_one_by_one():
    rng = np.random.default_rng(4)
    times = np.cumsum(rng.exponential(0.9e-3, 3000))  # ~1.1x the link's rate: queues grow
    sizes = rng.integers(500, 1500, 3000)
    batched = LinkEmulator(rate_bps=8e6, buffer_bytes=20_000)
    single = LinkEmulator(rate_bps=8e6, buffer_bytes=20_000)
    a = np.concatenate(
        [batched.admit_batch(times[i : i + 97], sizes[i : i + 97]) for i in range(0, 3000, 97)]
    )
    b = np.array([single.admit(t, int(s)) or np.nan for t, s in zip(times, sizes, strict=True)])
    # bit for bit: the serializer's times are on a grid where its sums are exact, so a
    # batch's running sums round as one packet at a time (ties with cross traffic included)
    np.testing.assert_array_equal(a, b)
    assert batched.overflows == single.overflows > 0


def test_a_large_buffer_changes_nothing():
    times = np.sort(np.random.default_rng(5).uniform(0, 0.1, 2000))
    free = LinkEmulator(rate_bps=1e8).admit_batch(times, 1200)
    big = LinkEmulator(rate_bps=1e8, buffer_bytes=1e12).admit_batch(times, 1200)
    np.testing.assert_allclose(free, big)


def test_capacity_episodes_slow_the_link_to_their_share():
    from ina.netem import CapacityEpisodes

    cap = CapacityEpisodes(share=0.25, on_s=1.0, off_s=1.0, fixed=True)  # on in [1, 2), ...
    link = LinkEmulator(rate_bps=8e6, capacity=cap)  # 1000 B take 1 ms, 4 ms in an episode
    assert link.admit(0.5, 1000) == pytest.approx(0.501)
    assert link.admit(1.5, 1000) == pytest.approx(1.504)
    assert link.admit(2.5, 1000) == pytest.approx(2.501)
    # a backlog: 2000 packets offered at once in an episode drain at a quarter of the rate
    out = link.admit_batch(np.full(100, 3.0), 1000)
    np.testing.assert_allclose(np.diff(out), 4e-3)
    np.testing.assert_array_equal(
        cap.share(np.array([0.0, 1.0, 1.99, 2.0, 3.5])), [1, 0.25, 0.25, 1, 0.25]
    )


def test_capacity_trace_replays_and_loops(tmp_path):
    from ina.netem import CapacityTrace

    path = tmp_path / "cap.txt"
    path.write_text("# time share\n0 1.0\n2 0.5\n3 1.0\n4\n".replace("4\n", "4 1\n"))
    cap = CapacityTrace(path)
    np.testing.assert_array_equal(
        cap.share(np.array([0, 1.9, 2, 2.9, 3, 4.5, 6.5])), [1, 1, 0.5, 0.5, 1, 1, 0.5]
    )
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 nope\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2"):
        CapacityTrace(bad)
    bad.write_text("0 1\n")
    with pytest.raises(ValueError, match="at least two"):
        CapacityTrace(bad)


def test_a_timeline_gives_capacity_and_delay_by_time(tmp_path):
    from ina.netem import CapacityTrace, TimelineDelay

    path = tmp_path / "wan.txt"
    path.write_text("# time share delay_ms\n0 1.0 0\n0.5 0.1 4\n1.5 1.0 0.5\n2.0 1.0 0\n")
    delay, cap = TimelineDelay(path), CapacityTrace(path)
    t = np.array([0.0, 0.49, 0.5, 1.0, 1.6, 2.1, 2.7])  # looped after 2 s
    assert delay.delays(t).tolist() == pytest.approx([0, 0, 4e-3, 4e-3, 5e-4, 0, 4e-3])
    assert cap.share(t).tolist() == pytest.approx([1, 1, 0.1, 0.1, 1, 1, 0.1])
    assert delay.min_delay() == 0
    # the share is constant inside one line, not across a change or a whole period
    assert cap.constant_over(0.6, 1.4) == pytest.approx(0.1)
    assert cap.constant_over(2.6, 3.4) == pytest.approx(0.1)
    assert cap.constant_over(0.4, 0.6) is None and cap.constant_over(0.0, 2.5) is None
    # through a link: the delay follows the clock, the rate the share
    link = make_link(f"timeline:{path}", rate_bps=8e6, capacity=cap)
    assert link.admit(0.0, 1000) == pytest.approx(1e-3)  # 1 ms to serialize, no delay
    assert link.admit(1.0, 1000) == pytest.approx(1.0 + 1e-2 + 4e-3)  # a tenth of the rate


def test_a_timeline_that_does_not_parse_is_a_one_line_error(tmp_path):
    from ina.netem import TimelineDelay

    path = tmp_path / "bad.txt"
    path.write_text("0 1.0 0\n1 0.5\n2 1 0\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: need 'TIME_S SHARE DELAY_MS'"):
        TimelineDelay(path)
    path.write_text("0 1.0 -1\n2 1 0\n")
    with pytest.raises(ValueError, match="delays must be >= 0"):
        TimelineDelay(path)


# -- cross traffic as packets in the same FIFO ---------------------------------------------------


def test_cross_packets_queue_ahead_of_ours_and_fill_the_buffer(tmp_path):
    from ina.netem import CrossTrace

    path = tmp_path / "cross.txt"
    # three 1000-byte cross packets at 0 on link 0, one on link 1 (not ours), one without a
    # link column (every link's)
    path.write_text("# TIME_S BYTES [LINK]\n0 1000 0\n0 1000 0\n0 1000 0\n0 1000 1\n0.01 500\n")
    link = LinkEmulator(rate_bps=8e6, cross=CrossTrace(path, link=0))  # 1 ms per 1000 B
    # ours arrives 0.5 ms later: behind 3 ms of cross traffic, then its own 1 ms
    assert link.admit(0.0005, 1000) == pytest.approx(0.004)
    assert link.cross_packets == 3 and link.cross_dropped == 0
    assert link.admit(0.0101, 1000) == pytest.approx(0.0105 + 0.001)  # behind the 500 B one
    # a buffer of 2.5 packets: the third cross packet is tail-dropped, and ours with it
    small = LinkEmulator(rate_bps=8e6, buffer_bytes=2500, cross=CrossTrace(path, link=0))
    assert small.admit(0.0005, 1000) is None
    assert small.cross_dropped == 1 and small.overflows == 1
    assert small.admit(0.0015, 1000) == pytest.approx(0.003)  # one left: 1 ms, then ours
    with pytest.raises(ValueError, match="TIME_S BYTES"):
        (tmp_path / "bad.txt").write_text("0 1000 0 7\n")
        CrossTrace(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="cannot read"):
        CrossTrace(tmp_path / "missing.txt")


def test_cross_episodes_send_at_their_rate_while_on():
    from ina.netem import CapacityEpisodes, CrossEpisodes

    # 1000-byte packets every 2 ms (4 Mbit/s) in episodes [1, 2), [3, 4), ...
    cross = CrossEpisodes(4e6, 1000, CapacityEpisodes(1.0, on_s=1.0, off_s=1.0, fixed=True))
    t, s = cross.arrivals(1.0105)
    np.testing.assert_allclose(t, 1 + 2e-3 * np.arange(6))
    assert np.all(s == 1000)
    t2, _ = cross.arrivals(3.003)  # the rest of the first episode, two of the second
    assert t2.size == 494 + 2 and t2[0] == pytest.approx(1.012) and t2[-1] == pytest.approx(3.002)
    assert cross.arrivals(3.003)[0].size == 0  # nothing twice
    # on an 8 Mbit/s link (1 ms per packet): ours, one per ms from 1.0005 for 1 s, share the
    # FIFO with the cross packets; the link is busy with both until all 1.5 s of work is done
    link = LinkEmulator(
        rate_bps=8e6,
        cross=CrossEpisodes(4e6, 1000, CapacityEpisodes(1.0, on_s=1.0, off_s=1.0, fixed=True)),
    )
    assert link.admit(1.0005, 1000) == pytest.approx(1.002)  # behind the one at 1.0
    out = link.admit_batch(1.0015 + 1e-3 * np.arange(999), 1000)
    assert out[-1] == pytest.approx(2.5) and link.cross_packets == 500


def test_cross_traffic_gives_the_same_releases_in_one_batch_and_one_by_one(tmp_path):
    from ina.netem import CrossTrace

    rng = np.random.default_rng(9)
    ct = np.sort(rng.uniform(0, 1.8, 1500))  # with ours, ~1.4x the link: the buffer fills
    path = tmp_path / "cross.txt"
    sizes = rng.integers(60, 1500, 1500)
    path.write_text("".join(f"{t:.17g} {b}\n" for t, b in zip(ct, sizes, strict=True)))
    times = np.cumsum(rng.exponential(1.2e-3, 1500))
    kw = dict(rate_bps=8e6, buffer_bytes=15_000)
    batched, single = (
        LinkEmulator(**kw, cross=CrossTrace(path)),
        LinkEmulator(**kw, cross=CrossTrace(path)),
    )
    a = np.concatenate([batched.admit_batch(times[i : i + 61], 900) for i in range(0, 1500, 61)])
    b = np.array([single.admit(t, 900) or np.nan for t in times])
    np.testing.assert_array_equal(a, b)  # bit for bit, ties with cross traffic included
    assert batched.overflows == single.overflows > 0
    assert batched.cross_dropped == single.cross_dropped > 0


def test_the_serializer_counts_whole_picoseconds_and_is_exact_for_any_batching():
    from ina.netem import to_ps

    rng = np.random.default_rng(4)
    times = np.cumsum(rng.exponential(3e-7, 4000)) + 1e-3 / 3  # off the grid, busy periods
    sizes = rng.integers(64, 1500, 4000).astype(np.float64)
    assert (np.abs(to_ps(times) / 1e12 - times) <= 0.5e-12).all()
    assert (to_ps(to_ps(times) / 1e12) == to_ps(times)).all()
    runs = []
    for batch in (1, 7, 4000):
        link = LinkEmulator(rate_bps=25e9)
        runs.append(
            np.concatenate(
                [
                    link.admit_batch(times[i : i + batch], sizes[i : i + batch])
                    for i in range(0, 4000, batch)
                ]
            )
        )
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    # a decimal rate's service times are whole picoseconds: 320 ps a byte at 25 Gbit/s
    assert (to_ps(runs[0]) - to_ps(times) >= sizes * 320).all()
    busy = np.diff(runs[0]) > 0
    assert (to_ps(runs[0])[1:][busy] - to_ps(runs[0])[:-1][busy] >= sizes[1:][busy] * 320).all()
