"""DC2 control laws on synthetic RTT series, the level ladder, the registry and the controller.

The amplitudes asserted here are the ones docs/dc2.md documents.
"""

import csv
import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ina.control.dc2 import (
    LAWS,
    AIMDLaw,
    DC2Controller,
    DelayMonitor,
    DelayStats,
    DelayTargetLaw,
    FixedLevel,
    MeasuredCostLaw,
    OwnQueueLaw,
    index_to_density,
    level_to_index,
    make_law,
)
from ina.control.dc2.laws import LADDER_MIN_DENSITY, LADDER_SIZE, ControlLaw

BASE = 0.002  # base RTT of the synthetic series, seconds
CHUNKS = 16  # RTT samples per step
STEP_S = 0.1  # time per step


def drive(law, step_rtts, seed=0, noise=0.0):
    """Feed one RTT level per step (``CHUNKS`` samples, optional uniform relative noise) to a
    monitor and ``law``; returns the density chosen after each step."""
    rng = np.random.default_rng(seed)
    mon, out = DelayMonitor(), []
    for k, rtt in enumerate(step_rtts):
        samples = rtt * (1 + noise * rng.uniform(-1, 1, CHUNKS))
        mon.add(samples, now=(k + np.arange(1, CHUNKS + 1) / CHUNKS) * STEP_S)
        out.append(law.next_level(mon.snapshot()))
    return np.array(out)


def series(*phases):
    """Concatenate (steps, rtt) phases into one RTT level per step."""
    return [rtt for steps, rtt in phases for _ in range(steps)]


ADAPTIVE = [AIMDLaw, DelayTargetLaw]


# --- the ladder ---------------------------------------------------------------------------


def test_ladder_ends_and_order():
    assert index_to_density(0) == 1.0
    assert index_to_density(LADDER_SIZE - 1) == pytest.approx(LADDER_MIN_DENSITY)
    densities = [index_to_density(i) for i in range(LADDER_SIZE)]
    assert all(a > b for a, b in itertools.pairwise(densities))  # higher index: harder


def test_ladder_index_round_trip():
    for i in range(LADDER_SIZE):
        assert level_to_index(index_to_density(i)) == i


@given(st.floats(LADDER_MIN_DENSITY, 1.0))
def test_density_round_trip_within_half_a_rung(density):
    half_rung = LADDER_MIN_DENSITY ** (0.5 / (LADDER_SIZE - 1))  # ~0.9865
    ratio = index_to_density(level_to_index(density)) / density
    assert half_rung - 1e-12 <= ratio <= 1 / half_rung + 1e-12


def test_ladder_clamps_and_rejects():
    assert level_to_index(1.5) == 0
    assert level_to_index(1e-9) == LADDER_SIZE - 1
    for bad in (0.0, -0.1, math.nan):
        with pytest.raises(ValueError):
            level_to_index(bad)
    for bad in (-1, LADDER_SIZE):
        with pytest.raises(ValueError):
            index_to_density(bad)


@given(st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=32))
def test_max_of_indices_is_the_hardest_compression(densities):
    indices = [level_to_index(d) for d in densities]
    agreed = index_to_density(max(indices))  # what the switch's MAX gives every worker
    assert agreed == min(index_to_density(i) for i in indices)
    assert 0 <= max(indices) <= 255  # fits the 8-bit level field


# --- registry --------------------------------------------------------------------------------


def test_registry():
    assert LAWS == {
        "fixed": FixedLevel,
        "aimd": AIMDLaw,
        "target": DelayTargetLaw,
        "ownq": OwnQueueLaw,
        "cost": MeasuredCostLaw,
    }
    law = make_law("aimd", decrease=0.7)
    assert isinstance(law, AIMDLaw) and law.decrease == 0.7 and law.name == "aimd"
    with pytest.raises(ValueError, match="known"):
        make_law("bbr")


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("aimd", {"decrease": 1.0}),
        ("aimd", {"increase": 0.0}),
        ("aimd", {"cooldown_steps": -1}),
        ("target", {"deadband": -0.1}),
        ("target", {"target_s": 0.0}),
        ("fixed", {"density": 0.0}),
        ("ownq", {"share": 0.0}),
        ("ownq", {"share": 1.0}),
        ("ownq", {"gain": 0.0}),
        ("ownq", {"bracket": 0.5}),
        ("ownq", {"bracket_error": 0.1}),
        ("aimd", {"min_density": 0.5, "initial": 0.1}),
    ],
)
def test_bad_parameters_raise(name, params):
    with pytest.raises(ValueError):
        make_law(name, **params)


# --- behaviour on synthetic series --------------------------------------------------------


def test_fixed_level_never_moves():
    levels = drive(FixedLevel(0.1), series((20, BASE), (50, 20 * BASE), (20, BASE)))
    assert np.all(levels == 0.1)


@pytest.mark.parametrize("law_cls", ADAPTIVE)
def test_step_up_compresses_harder_and_step_down_relaxes(law_cls):
    law = law_cls()
    levels = drive(law, series((20, BASE), (60, 3 * BASE), (200, BASE)))
    assert np.all(levels[:20] == 1.0)  # no queueing: stay dense
    congested = levels[20:80]
    assert np.all(np.diff(congested) <= 0)  # only ever harder while the delay stays high
    assert congested[-1] == LADDER_MIN_DENSITY  # ... down to the bound
    assert np.all(np.diff(levels[80:]) >= 0)  # only ever relaxing afterwards
    assert levels[-1] == 1.0


def test_aimd_decrease_is_multiplicative_and_increase_additive():
    law = AIMDLaw(decrease=0.5, increase=0.05, cooldown_steps=0)
    levels = drive(law, series((10, BASE), (3, 5 * BASE)))
    assert levels[10] == pytest.approx(0.5)  # the queue shows at once in this series
    assert levels[11] == pytest.approx(0.25)
    law = AIMDLaw(increase=0.05, initial=0.1)
    levels = drive(law, series((5, BASE)))
    np.testing.assert_allclose(levels, 0.1 + 0.05 * np.arange(1, 6))


def test_target_law_steps_are_proportional_and_bounded():
    # q = 2 * target: error ln 2, gain 0.5 -> density / sqrt(2) once srtt has settled.
    law = DelayTargetLaw(target_s=0.001, gain=0.5, deadband=0.0, initial=0.5)
    mon = DelayMonitor()
    mon.add(np.full(200, BASE), now=np.linspace(0, 1, 200))
    mon.add(np.full(400, BASE + 0.002), now=np.linspace(1, 2, 400))
    assert law.next_level(mon.snapshot()) == pytest.approx(0.5 / math.sqrt(2), rel=1e-6)
    mon.add(BASE + 1.0, now=2.1)  # a huge error: clipped to one max_step (halve)
    assert law.next_level(mon.snapshot()) == pytest.approx(0.5 / math.sqrt(2) / 2)
    mon.add(np.full(400, BASE), now=np.linspace(2.2, 3, 400))  # no queue: full step back
    assert law.next_level(mon.snapshot()) == pytest.approx(0.5 / math.sqrt(2))


@pytest.mark.parametrize(
    ("law_cls", "lowest"),
    [
        (AIMDLaw, 0.5),  # one cut: the cooldown outlasts the spike's trace in srtt
        (DelayTargetLaw, 0.5),  # one max_step: a step later srtt keeps 12 % of the spike
    ],
)
def test_a_spike_gets_a_bounded_reaction(law_cls, lowest):
    law = law_cls()
    mon, levels = DelayMonitor(), []
    for k in range(120):
        rtts = np.full(CHUNKS, BASE)
        if k == 40:
            rtts[-1] = 20 * BASE  # one late chunk, just before a decision: the worst case
        mon.add(rtts, now=(k + np.arange(1, CHUNKS + 1) / CHUNKS) * STEP_S)
        levels.append(law.next_level(mon.snapshot()))
    assert min(levels) >= lowest
    assert levels[-1] == 1.0  # and it recovers


@pytest.mark.parametrize("law_cls", ADAPTIVE)
def test_jitter_below_the_threshold_does_not_move_a_dense_level(law_cls):
    # Uniform +-20 % per sample: base_rtt ~ 0.8 BASE and srtt ~ BASE, so jitter reads as a
    # queueing delay of ~0.25 base_rtt: under AIMD's threshold (1.0 base_rtt) and under the
    # target law's dead band (0.82 base_rtt). The level must stay dense throughout.
    levels = drive(law_cls(), series((400, BASE)), noise=0.2, seed=3)
    assert np.all(levels == 1.0)


def test_noise_inside_the_dead_band_does_not_move_the_target_law():
    # q = target on average, +-40 % of target per sample: srtt's relative error stays within
    # the 20 % dead band, so the level must not change at all.
    law = DelayTargetLaw(target_s=0.0005, initial=0.1)
    rng = np.random.default_rng(4)
    mon, levels = DelayMonitor(), []
    mon.add(np.full(CHUNKS, BASE), now=0.0)
    for k in range(1, 400):
        rtts = BASE + 0.0005 * (1 + 0.4 * rng.uniform(-1, 1, CHUNKS))
        mon.add(rtts, now=(k + np.arange(1, CHUNKS + 1) / CHUNKS) * STEP_S)
        levels.append(law.next_level(mon.snapshot()))
    assert np.ptp(levels[5:]) == 0.0


@pytest.mark.parametrize("law_cls", ADAPTIVE)
def test_bounds_are_respected(law_cls):
    law = law_cls(min_density=0.05, max_density=0.5, initial=0.5)
    levels = drive(law, series((10, BASE), (100, 1000 * BASE), (100, BASE)))
    assert levels.min() == 0.05 and levels.max() == 0.5
    assert levels[-1] == 0.5


@pytest.mark.parametrize("law_cls", [FixedLevel, *ADAPTIVE])
def test_no_new_samples_no_decision(law_cls):
    law = law_cls()
    mon = DelayMonitor()
    assert law.next_level(mon.snapshot()) == law.initial  # nothing measured yet
    mon.add(np.full(CHUNKS, BASE), now=0.0)
    law.next_level(mon.snapshot())
    mon.add(np.full(CHUNKS, 10 * BASE), now=0.1)
    stats = mon.snapshot()
    first = law.next_level(stats)
    assert law.next_level(stats) == first  # the same information twice: one decision
    law.reset()
    assert law.density == law.initial


# --- closed loop ----------------------------------------------------------------------------


def closed_loop(law, capacities, steps=100, burst=0.010):
    """A worker whose step sends a burst of ``density * burst`` seconds of dense traffic
    through a bottleneck at ``capacity`` times its nominal rate: the chunks queue behind each
    other, so queueing delay = density * burst / capacity (+1 % jitter)."""
    rng = np.random.default_rng(0)
    dc2, t, rows = DC2Controller(law), 0.0, []
    for capacity in capacities:
        for _ in range(steps):
            density = index_to_density(dc2.index)
            rtts = BASE + density * burst / capacity + rng.uniform(0, 0.01 * BASE, CHUNKS)
            dc2.observe(rtts, now=t + np.arange(1, CHUNKS + 1) * STEP_S / CHUNKS)
            t += STEP_S
            dc2.step(now=t)
            rows.append(density)
    return np.array(rows), dc2


def test_target_law_settles_in_its_dead_band_without_oscillation():
    levels, dc2 = closed_loop(DelayTargetLaw(), [50, 1, 0.25, 1])
    assert np.all(levels[50:100] == 1.0)  # an idle network: dense
    for phase in (1, 2, 3):
        settled = slice(phase * 100 + 50, phase * 100 + 100)
        assert np.ptp(levels[settled]) == 0.0  # a fixed point, no limit cycle
        for row in dc2.log[settled]:
            assert abs(math.log(row.queueing_delay / row.base_rtt)) <= 0.2 + 0.02
    # A quarter of the capacity: about a quarter of the density.
    assert levels[299] / levels[199] == pytest.approx(0.25, rel=0.3)


def test_aimd_sawtooth_stays_between_a_cut_below_and_an_increase_above_the_threshold():
    burst, law = 0.010, AIMDLaw()
    levels, dc2 = closed_loop(law, [50, 1, 0.25, 1], burst=burst)
    for phase, capacity in ((1, 1), (2, 0.25), (3, 1)):
        settled = slice(phase * 100 + 50, phase * 100 + 100)
        # The density at which the law's queueing delay (measured over the base it learnt in
        # phase 0, which includes that phase's small queue) reaches the threshold:
        base = dc2.log[settled.stop - 1].base_rtt
        at_threshold = (law.threshold_ratio * base + burst / 50) * capacity / burst
        assert levels[settled].min() >= 0.9 * law.decrease * at_threshold
        assert levels[settled].max() <= at_threshold + 2 * law.increase  # + one for srtt lag


# --- the controller -------------------------------------------------------------------------


def test_controller_warm_up_holds_dense_then_follows_the_law():
    def run(warmup_samples):
        dc2 = DC2Controller("aimd", warmup_samples=warmup_samples)
        dc2.observe(np.full(16, BASE), now=0.0)
        dc2.observe(np.full(16, 10 * BASE), now=0.1)
        return dc2, dc2.step(now=0.1)

    dc2, index = run(33)
    assert index == 0 and dc2.density == 1.0  # 32 samples < 33: still warming up
    dc2.observe(10 * BASE, now=0.2)
    assert dc2.step(now=0.2) == level_to_index(0.5)  # the law's first decision: one cut
    assert dc2.ladder_density == pytest.approx(0.5, rel=0.02)
    _, index = run(32)
    assert index == level_to_index(0.5)  # warm-up over at 32 samples


def test_controller_log_and_csv(tmp_path):
    dc2 = DC2Controller(make_law("target"), warmup_samples=0)
    assert dc2.step(now=0.0) == 0  # no samples at all: logged with NaN stats
    for k in range(1, 6):
        dc2.observe(np.full(CHUNKS, BASE * (1 + k)), now=k * STEP_S)
        dc2.step(now=k * STEP_S, agreed_index=7)
    assert len(dc2.log) == 6
    assert dc2.log[-1].agreed_index == 7 and dc2.log[0].agreed_index == -1
    path = tmp_path / "dc2.csv"
    dc2.write_csv(path)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    assert set(rows[0]) >= {"time", "srtt", "base_rtt", "queueing_delay", "density", "index"}
    assert rows[0]["srtt"] == "nan" and float(rows[-1]["srtt"]) > BASE
    assert int(rows[-1]["index"]) == dc2.index


def test_controller_rejects_params_with_a_law_instance():
    with pytest.raises(ValueError):
        DC2Controller(AIMDLaw(), decrease=0.7)


# --- OwnQueueLaw: the job's own bytes against a shift of the path's delay -------------------

COMPUTE = 0.001  # seconds of compute per step
DENSE_CHUNKS = 100  # chunks of a dense step
OWN_FULL = 0.004  # bottleneck service time of a dense step's chunks at the nominal rate, s


def own_queue_loop(
    law, phases, lag=2, window=None, seed=0, chunks=DENSE_CHUNKS, agreed=False, spread=0.0
):
    """A worker whose step computes for ``COMPUTE`` s, then sends ``max(2, ceil(chunks d))``
    chunks through a FIFO bottleneck serving one in ``OWN_FULL / chunks / capacity`` s, on top
    of the path's delay ``BASE + shift``; at most ``window`` chunks in flight (None: all at
    once, so they queue behind each other). ``phases``: ``(steps, capacity, shift)``. A level
    takes effect ``lag`` steps after the decision (the switch's MAX of the proposals travels
    with the next call); ``agreed``: report the next step's level to the controller, as the
    training loop does (otherwise it infers it from its own proposals). Returns the density of
    every step, and the controller. ``spread``: a step's chunks vary by up to this fraction
    (the union of the workers' supports varies)."""
    rng = np.random.default_rng(seed)
    dc2 = DC2Controller(law, warmup_samples=0)
    pending = [dc2.index] * lag
    t, out = 0.0, []
    for steps, capacity, shift in phases:
        service = OWN_FULL / chunks / capacity
        for _ in range(steps):
            density = index_to_density(pending.pop(0))
            n = max(2, math.ceil(chunks * density * (1 + spread * rng.uniform(-1, 1))))
            start = t + COMPUTE
            sent, arrived, free = np.empty(n), np.empty(n), start
            for i in range(n):
                sent[i] = start if window is None or i < window else arrived[i - window]
                free = max(sent[i], free) + service  # served in order, one at a time
                arrived[i] = free + BASE + shift + rng.uniform(0, 1e-7)
            dc2.observe(arrived - sent, now=arrived)
            t = arrived.max()
            pending.append(dc2.step(now=t, agreed_index=pending[0] if agreed else None))
            out.append(density)
    return np.array(out), dc2


def test_monitor_round_statistics_cover_the_round_only():
    mon = DelayMonitor()
    mon.add(np.full(8, 0.010), now=0.01 + np.arange(8) * 1e-3)  # an earlier step, slow path
    # this step: +2 ms on the path, results 0.1 ms apart, then a second round 5 ms later
    times = 0.02 + np.array([0, 1, 2, 3, 4, 54, 55]) * 1e-4
    mon.add(BASE + 0.002 + np.array([0, 1, 2, 3, 4, 0, 1]) * 1e-4, now=times)
    s = mon.snapshot(since=8)
    assert s.round_samples == 7
    assert s.round_min == pytest.approx(BASE + 0.002)
    assert s.round_p95 == pytest.approx(BASE + 0.002 + 3.7e-4)  # 0 0 1 1 2 3 4: 3.7
    assert s.round_stream == pytest.approx(
        5e-4
    )  # 4 + 1 gaps of 0.1 ms; the 5 ms gap (> round_min) is not
    assert mon.snapshot().round_samples == 0 and math.isnan(mon.snapshot().round_stream)
    assert mon.snapshot(since=14).round_stream == 0.0  # one sample: no gap


def test_a_round_longer_than_the_short_window_counts_whole():
    """A step of 1,000 chunks (a model of 1 MB): its results' whole stream is counted, not
    the short window's newest 256."""
    mon = DelayMonitor()
    times = 1.0 + np.arange(1000) * 1e-5
    mon.add(BASE + np.arange(1000) * 1e-5, now=times)
    s = mon.snapshot(since=0)
    assert s.round_samples == 1000 and s.window_samples == 256
    assert s.round_stream == pytest.approx(999e-5)
    assert s.round_min == pytest.approx(BASE)


def test_a_path_delay_step_does_not_push_the_own_queue_law_to_the_floor():
    """+2 ms on every sample (a longer route): no gap between results changes and the step
    gets longer, so the level never falls; the absolute delay target of the first study
    reads the same step as congestion and goes to its floor."""
    phases = [(40, 1.0, 0.0), (60, 1.0, 0.002), (40, 1.0, 0.0)]
    law = OwnQueueLaw(min_density=0.003)
    levels, _ = own_queue_loop(law, phases)
    settled = levels[30:40]
    assert np.ptp(settled) == 0 and 0.02 < settled[0] < 1.0  # a level inside the ladder
    assert levels[40:100].min() >= settled[0]  # the path step never compresses harder
    # and after it: back inside the dead band (q / (T - q), so the density, within e^±0.2)
    assert levels[100:].min() >= math.exp(-law.deadband) * settled[0]
    old, _ = own_queue_loop(DelayTargetLaw(target_s=0.0005, min_density=0.003), phases)
    assert old[40:100].min() == pytest.approx(0.003, rel=0.02)  # the old signal: the floor


def test_own_bytes_that_take_the_step_push_the_own_queue_law_to_the_floor():
    """At 1/50 of the rate even the floor's two chunks take longer than the target: the law
    goes to the floor, and back to dense when the rate returns."""
    law = OwnQueueLaw(share=0.2, share_low=None, min_density=0.003)
    phases = [(20, 1000.0, 0.0), (60, 0.02, 0.0), (30, 1000.0, 0.0)]
    levels, _ = own_queue_loop(law, phases)
    assert np.all(levels[:20] == 1.0)  # its bytes take no time: dense
    assert np.all(levels[60:80] == pytest.approx(0.003, rel=0.02))
    assert np.all(levels[100:] == 1.0)  # relaxes at up to 4x a step, back to dense in 10
    assert all(a >= b for a, b in itertools.pairwise(levels[20:80]))  # only ever down


def test_bytes_that_wait_for_the_window_count_as_much_as_bytes_that_queue():
    """A window of 2 chunks (the path's bandwidth-delay product at 1/50 of the rate, as a
    delay-based window settles): the RTTs' spread stays one service time while the bytes
    wait for the window, and the law still goes to the floor."""
    law = OwnQueueLaw(share=0.2, share_low=None, min_density=0.003)
    levels, dc2 = own_queue_loop(law, [(60, 0.02, 0.0)], window=2)
    assert np.all(levels[40:] == pytest.approx(0.003, rel=0.02))
    service = OWN_FULL / DENSE_CHUNKS / 0.02
    first = dc2.log[1]  # a dense step: 100 chunks, 2 in flight
    assert first.round_p95 - first.round_min <= service * 1.01
    assert first.round_stream == pytest.approx(99 * service, rel=0.01)


def test_the_own_queue_law_settles_where_its_bytes_are_its_share_of_the_step():
    """One share (``share_low`` None): service time proportional to the bytes, lag of two
    steps: a fixed point inside the dead band, no limit cycle; at a quarter of the rate,
    about a quarter of the density."""
    law = OwnQueueLaw(share=0.24, share_low=None, min_density=0.003)
    levels, dc2 = own_queue_loop(law, [(40, 1.0, 0.0), (40, 0.25, 0.0)])
    for end in (40, 80):
        assert np.ptp(levels[end - 15 : end]) == 0.0
        last, before = dc2.log[end - 1], dc2.log[end - 2]
        own, step = last.round_stream, last.time - before.time
        error = math.log(own / (step - own) / (law.share / (1 - law.share)))
        assert abs(error) <= law.deadband + 1e-9  # the law's own error: inside the dead band
    # The fixed point of q = share * (T0 + q), T0 = COMPUTE + BASE the step without its own
    # bytes' time: d = share / (1 - share) * T0 / (OWN_FULL / capacity), within the dead band.
    expected = law.share / (1 - law.share) * (COMPUTE + BASE) / OWN_FULL
    assert levels[39] == pytest.approx(expected, rel=0.25)
    assert levels[79] == pytest.approx(expected / 4, rel=0.25)


def test_the_share_changes_smoothly_across_the_knee():
    law = OwnQueueLaw(share=0.08, share_low=0.64, knee=0.03, knee_width=0.5)
    assert law.share_at(0.5) == (0.08, 0.0) and law.share_at(0.001) == (0.64, 0.0)
    edge = 0.03 * math.exp(0.5)
    assert law.share_at(edge * 0.999)[0] == pytest.approx(0.08, rel=0.01)  # continuous
    assert law.share_at(0.03)[0] == pytest.approx(math.sqrt(0.08 * 0.64), rel=0.3)
    densities = np.geomspace(0.01, 0.06, 50)
    shares = [law.share_at(d)[0] for d in densities]
    assert all(a >= b for a, b in itertools.pairwise(shares))  # lower density, larger share
    slope = law.share_at(0.03)[1]  # the logit's slope against -ln d
    logit = [math.log(s / (1 - s)) for s in (law.share_at(0.03 * 1.01)[0], law.share_at(0.03)[0])]
    assert slope == pytest.approx((logit[1] - logit[0]) / math.log(1.01), rel=0.01)
    one = OwnQueueLaw(share=0.3, share_low=None)
    assert one.share_at(0.03) == (0.3, 0.0) and one.share_at(1.0) == (0.3, 0.0)


@pytest.mark.parametrize(
    "params", [{"share_low": 0.05}, {"share_low": 1.0}, {"knee": 0.0}, {"knee_width": 0.0}]
)
def test_the_knee_rejects_what_has_no_meaning(params):
    with pytest.raises(ValueError):
        OwnQueueLaw(share=0.08, **params)


def test_the_knee_holds_one_level_over_a_range_of_rates():
    """Bytes that take between ``share`` and ``share_low`` of the step at the knee: over a
    7.5x range of the bottleneck's rate the law settles (no limit cycle: the Newton step
    keeps the steeper loop stable) inside the knee's zone, a 3x range of density; one share
    moves its fixed point with the rate, 7.5x."""
    zone = (0.03 * math.exp(-0.55), 0.03 * math.exp(0.55))
    settled = {}
    for share_low in (0.64, None):
        for capacity in (0.3, 0.1, 0.04):
            law = OwnQueueLaw(share=0.08 if share_low else 0.24, share_low=share_low,
                              min_density=0.003)  # fmt: skip
            levels, _ = own_queue_loop(law, [(60, capacity, 0.0)], chunks=1000)
            assert np.ptp(levels[-15:]) <= levels[-1] * 0.06  # one or two rungs, no cycle
            settled[share_low, capacity] = levels[-1]
    knee = [settled[0.64, c] for c in (0.3, 0.1, 0.04)]
    assert all(zone[0] * 0.97 <= d <= zone[1] * 1.03 for d in knee), knee
    one = [settled[None, c] for c in (0.3, 0.1, 0.04)]
    assert one[0] / one[2] == pytest.approx(7.5, rel=0.3)


# --- the bracket: a staircase of round trips -------------------------------------------------

STAIR = {"window": 30, "chunks": 400}  # 400 chunks a dense step, 30 in flight: one RTT a window
EDGE = 30 / 400  # the highest density whose step fits one window


def step_times(dc2):
    return np.diff([d.time for d in dc2.log])


@pytest.mark.parametrize(("agreed", "spread"), [(False, 0.0), (True, 0.0), (True, 0.1)])
def test_the_bracket_holds_the_edge_of_a_staircase(agreed, spread):
    """A 20 ms path and a window of 30 chunks: a step's bytes cost one round trip per window,
    so their time is a staircase in the density, nearly nothing below ``EDGE`` and a round
    trip more at every window above it. Without memory the law cycles (below one window its
    bytes look free, the step up crosses the edge, the lag doubles it); with the bracket it
    finds the edge within two rungs and stays below it, also where a step's chunks vary by
    10 % (the union of the workers' supports), so that the edge is not sharp."""
    phases = [(200, 1.0, 0.018)]
    cycle, free = own_queue_loop(OwnQueueLaw(bracket=False), phases, spread=spread, **STAIR)
    held, dc2 = own_queue_loop(OwnQueueLaw(), phases, agreed=agreed, spread=spread, **STAIR)
    assert np.ptp(cycle[-50:]) > 0.3  # the limit cycle, one window to several
    late = held[-120:]
    below = late <= EDGE
    assert below.mean() >= 0.9  # a probe above the edge now and then, no more
    assert late[below].min() >= EDGE / 1.03**2 / (1 + spread)
    one_window = step_times(dc2)[-150:].min()
    assert step_times(dc2)[-150:].mean() <= 1.1 * one_window
    assert step_times(free)[-150:].mean() >= 1.5 * one_window


def test_the_bracket_changes_nothing_where_bytes_queue():
    """Capacity episodes (the bytes queue at a bottleneck, no window): the bracket never
    holds the law back, the same densities step for step as without it."""
    phases = [(30, 10.0, 0.0), (40, 0.1, 0.0), (30, 10.0, 0.0), (40, 0.05, 0.0), (30, 1.0, 0.0)]
    with_, _ = own_queue_loop(OwnQueueLaw(min_density=0.003), phases, chunks=1000)
    without, _ = own_queue_loop(OwnQueueLaw(min_density=0.003, bracket=False), phases, chunks=1000)
    assert np.array_equal(with_, without)


def test_the_bracket_is_forgotten_when_the_path_changes():
    """The staircase, then a hundredth of the rate (a window's bytes now queue for 30 ms),
    then the staircase again: the law follows the slow path down as it does without the
    bracket, and finds the edge again after it."""
    phases = [(100, 1.0, 0.018), (60, 0.01, 0.018), (100, 1.0, 0.018)]
    levels, dc2 = own_queue_loop(OwnQueueLaw(), phases, **STAIR)
    free, _ = own_queue_loop(OwnQueueLaw(bracket=False), phases, **STAIR)
    assert EDGE / 1.03**2 <= levels[99] <= EDGE
    assert levels[130:160].max() <= EDGE / 2  # the slow path: well below the old edge
    assert levels[130:160].max() == pytest.approx(free[130:160].max(), rel=0.25)
    assert np.all((levels[-40:] <= EDGE * 1.03**2) & (levels[-40:] >= EDGE / 1.03**2))
    assert step_times(dc2)[-40:].mean() <= 1.1 * step_times(dc2)[-40:].min()


def test_the_controller_tells_the_law_which_level_each_step_ran_at():
    seen = []

    class Spy(ControlLaw):
        def _decide(self, stats):
            seen.append(self.round_density)
            return index_to_density(10 if len(seen) == 1 else 20)

    dc2 = DC2Controller(Spy(), warmup_samples=0)
    for k, agreed in enumerate([None, None, None, 40]):
        dc2.observe(np.full(4, BASE), now=0.01 * (k + 1) + np.arange(4) * 1e-4)
        dc2.step(now=0.01 * (k + 1) + 1e-3, agreed_index=agreed)
    # proposals travel with the next step and apply to the one after it: two steps late,
    # unless the caller reports the agreed level (the last step ran at index 40)
    assert seen == pytest.approx([1.0, 1.0, index_to_density(10), index_to_density(20)])
    dc2.observe(np.full(4, BASE), now=0.05 + np.arange(4) * 1e-4)
    dc2.step(now=0.051)
    assert seen[4] == pytest.approx(index_to_density(40))


# --- the measured-cost law ----------------------------------------------------------------


def cost_loop(law, step_time, stream_share, steps=300, lag=2):
    """Steps whose time is ``step_time(d)`` at density ``d`` and whose own bytes stream in
    over ``stream_share(d)`` of it; a decision takes effect ``lag`` steps later, and the law
    is told the density each step ran at. Returns the density of every step."""
    pending, t, out = [law.density] * lag, 0.0, []
    for k in range(steps):
        d = pending.pop(0)
        period = step_time(d)
        t += period
        stats = DelayStats(
            time=t, samples=k + 1, retransmitted=0, rejected=0, window_samples=10,
            latest=BASE, base_rtt=BASE, srtt=BASE, rttvar=0.0, p50=BASE, p95=BASE, trend=0.0,
            round_samples=10, round_stream=stream_share(d) * period,
        )  # fmt: skip
        pending.append(law.next_level(stats, round_density=d))
        out.append(d)
    return np.array(out)


OWNQ = dict(share=0.08, share_low=0.64, knee=0.03, knee_width=0.55, min_density=0.003)


def test_the_cost_law_stays_dense_where_compressing_saves_no_time():
    """A standing queue: the job's bytes seem to take half of every step at any density
    (they stream in behind others' packets), but the step takes 10 ms whatever the density.
    The own-bytes law compresses to its knee; the cost law measures that no band is faster
    and holds dense (its steps model makes every lower density cost more), trying a lower
    one again only when the costs it measured there grow old."""

    def flat(d):
        return 0.010

    def half(d):
        return 0.5

    ownq = cost_loop(OwnQueueLaw(**OWNQ), flat, half)
    assert np.all(ownq[100:] < 0.05)
    cost = cost_loop(make_law("cost", **OWNQ, memory=100), flat, half)
    assert np.mean(cost[50:] == 1.0) > 0.85
    assert np.mean(cost[50:]) > 0.85


def test_the_cost_law_compresses_where_the_bytes_take_the_step():
    """A slow link: the bytes take 90 % of a dense step and shrink with the density. Both
    laws compress; the cost law settles where its measured cost is least among the bands it
    ran, far below dense."""

    def step(d):
        return 0.001 + 0.009 * max(d, 0.003)

    def share(d):
        return 0.009 * max(d, 0.003) / step(d)

    ownq = cost_loop(OwnQueueLaw(**OWNQ), step, share)
    cost = cost_loop(make_law("cost", **OWNQ), step, share)
    assert np.median(ownq[100:]) < 0.1 and np.median(cost[100:]) < 0.1
    law = make_law("cost", **OWNQ)
    assert law._steps(0.01) > law._steps(0.1) > law._steps(1.0) == 1.0


def test_the_cost_law_takes_ownq_parameters_and_refuses_bad_ones():
    law = make_law("cost", share=0.2, memory=50)
    assert law.share == 0.2 and law.memory == 50
    with pytest.raises(ValueError, match="memory >= 1"):
        make_law("cost", memory=0)
    with pytest.raises(ValueError, match="no parameter"):
        make_law("cost", shares=0.2)


def test_the_cost_law_compresses_through_an_episode_that_begins_while_dense():
    """Quiet, 1.1 ms steps at any density; then a slow episode where dense steps take 10 ms
    and compression saves most of it; then quiet again. The costs measured before the
    episode mean nothing in it: the law compresses through it, and is dense again after."""
    k = [0]

    def slow():
        return 100 <= k[0] < 200

    def step(d):
        k[0] += 1
        return 0.001 + 0.009 * max(d, 0.003) if slow() else 0.0011

    def share(d):
        return 0.9 * max(d, 0.003) / (0.1 + 0.9 * max(d, 0.003)) if slow() else 0.05 * d

    levels = cost_loop(make_law("cost", **OWNQ), step, share, steps=300)
    assert np.mean(levels[110:200] < 0.3) > 0.9
    assert np.all(levels[:100] == 1.0) and np.mean(levels[220:] == 1.0) > 0.9
