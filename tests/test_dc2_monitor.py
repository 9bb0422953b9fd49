"""DelayMonitor: RFC 6298 estimators, sliding base RTT, short-window stats, Karn's rule."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.control.dc2.monitor import DelayMonitor, DelayStats, ewma


def test_empty_monitor_is_not_ready():
    stats = DelayMonitor().snapshot()
    assert isinstance(stats, DelayStats)
    assert not stats.ready and stats.samples == 0
    assert math.isnan(stats.srtt) and math.isnan(stats.base_rtt)
    assert math.isnan(stats.queueing_delay)


def test_rfc6298_first_and_second_sample():
    mon = DelayMonitor()
    mon.add(0.010, now=0.0)
    s = mon.snapshot()
    assert (s.srtt, s.rttvar, s.base_rtt, s.latest) == (0.010, 0.005, 0.010, 0.010)
    mon.add(0.018, now=0.1)
    s = mon.snapshot()
    assert s.rttvar == pytest.approx(0.75 * 0.005 + 0.25 * abs(0.010 - 0.018))
    assert s.srtt == pytest.approx(0.875 * 0.010 + 0.125 * 0.018)
    assert s.queueing_delay == pytest.approx(s.srtt - 0.010)


def test_constant_samples():
    mon = DelayMonitor()
    mon.add(np.full(500, 0.002), now=np.arange(500) * 1e-3)
    s = mon.snapshot()
    assert s.base_rtt == s.p50 == s.p95 == 0.002
    assert s.srtt == pytest.approx(0.002)
    assert s.queueing_delay == pytest.approx(0.0, abs=1e-15)
    assert s.rttvar < 1e-9  # decays from rtt/2 by 3/4 per sample
    assert s.trend == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    rtts=st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=300),
    split=st.integers(0, 300),
)
def test_batches_equal_one_at_a_time(rtts, split):
    rtts = np.array(rtts)
    times = np.cumsum(np.full(len(rtts), 0.37))
    one, batch = DelayMonitor(base_window_s=20.0), DelayMonitor(base_window_s=20.0)
    for r, t in zip(rtts, times, strict=True):
        one.add(r, t)
    batch.add(rtts[:split], times[:split])
    batch.add(rtts[split:], times[split:])
    a, b = one.snapshot(), batch.snapshot()
    for field in ("samples", "window_samples", "latest", "base_rtt", "p50", "p95"):
        assert getattr(a, field) == getattr(b, field), field
    for field in ("srtt", "rttvar", "trend"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("gain", [1 / 8, 1 / 4, 0.9, 0.999])
def test_vectorized_ewma_matches_the_recurrence_on_long_series(gain):
    x = np.random.default_rng(1).lognormal(-6, 1, 5000)
    expected, s = [], 0.003
    for v in x:
        s = (1 - gain) * s + gain * v
        expected.append(s)
    np.testing.assert_allclose(ewma(x, 0.003, gain), expected, rtol=1e-10)


def test_karn_and_invalid_samples_are_counted_not_used():
    mon = DelayMonitor()
    assert mon.add(0.5, now=0.0, retransmitted=True) == 0
    rtts = np.array([0.002, 0.9, np.nan, -1.0, 0.0, np.inf, 0.003])
    retx = np.array([False, True, False, False, False, False, False])
    assert mon.add(rtts, now=1.0, retransmitted=retx) == 2
    mon.add(float("nan"), now=2.0)
    s = mon.snapshot()
    assert (s.samples, s.retransmitted, s.rejected) == (2, 2, 5)
    assert s.base_rtt == 0.002 and s.p95 < 0.9


def test_base_rtt_slides_with_time():
    mon = DelayMonitor(base_window_s=10.0, base_bucket_s=1.0)
    mon.add(np.full(10, 0.001), now=np.linspace(0, 0.9, 10))
    mon.add(np.full(100, 0.005), now=np.linspace(1, 9.9, 100))
    assert mon.snapshot().base_rtt == 0.001  # still inside the window
    mon.add(0.005, now=10.5)
    assert mon.snapshot().base_rtt == 0.005  # the 1 ms bucket aged out
    # A route change to a shorter path is seen at once.
    mon.add(0.0005, now=10.6)
    assert mon.snapshot().base_rtt == 0.0005


def test_stale_monitor_keeps_its_newest_values():
    mon = DelayMonitor(base_window_s=10.0)
    mon.add([0.004, 0.003], now=[0.0, 0.5])
    s = mon.snapshot(now=1000.0)  # nothing heard for many windows
    assert s.time == 1000.0
    assert s.base_rtt == 0.003 and s.latest == 0.003 and s.window_samples == 1


def test_short_window_percentiles_and_count_limit():
    rtts = np.random.default_rng(2).uniform(0.001, 0.002, 1000)
    mon = DelayMonitor(stats_window_samples=100, stats_window_s=1e9)
    mon.add(rtts, now=np.arange(1000) * 1e-3)
    s = mon.snapshot()
    assert s.window_samples == 100
    assert s.p50 == pytest.approx(np.percentile(rtts[-100:], 50))
    assert s.p95 == pytest.approx(np.percentile(rtts[-100:], 95))
    assert s.base_rtt == rtts.min()  # the base window is longer than the short one


def test_short_window_age_limit():
    mon = DelayMonitor(stats_window_s=0.5)
    mon.add(np.full(50, 0.010), now=np.linspace(0, 0.49, 50))
    mon.add(np.full(10, 0.001), now=np.linspace(2.0, 2.09, 10))
    s = mon.snapshot()
    assert s.window_samples == 10 and s.p95 == 0.001


def test_trend_is_the_slope_of_a_ramp():
    t = np.linspace(0, 1, 200)
    mon = DelayMonitor()
    mon.add(0.002 + 0.004 * t, now=t)  # +4 ms per second
    assert mon.snapshot().trend == pytest.approx(0.004)
    flat = DelayMonitor()
    flat.add([0.001, 0.002, 0.003], now=5.0)  # one shared timestamp: no slope to speak of
    assert flat.snapshot().trend == 0.0


def test_spike_moves_srtt_by_at_most_the_gain():
    mon = DelayMonitor()
    mon.add(np.full(100, 0.002), now=np.arange(100) * 1e-3)
    mon.add(0.050, now=0.2)
    s = mon.snapshot()
    assert s.srtt == pytest.approx(0.002 + (0.050 - 0.002) / 8)


@pytest.mark.parametrize(
    "params",
    [
        {"base_window_s": 0.0},
        {"base_bucket_s": 100.0},
        {"stats_window_samples": 0},
        {"srtt_gain": 1.0},
        {"rttvar_gain": 0.0},
    ],
)
def test_bad_configuration_raises(params):
    with pytest.raises(ValueError):
        DelayMonitor(**params)
