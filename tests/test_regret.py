"""Regret and oracle arithmetic of the DC2 study on synthetic tables (ina/sim/regret.py)."""

from __future__ import annotations

import math

import pytest

from ina.sim.regret import (
    fixed_times,
    level_time,
    oracle_capture,
    oracle_time,
    regret,
    worst_regret,
)

# Dense needs 100 steps, 0.01 needs 150, 0.001 never gets there. Quiet: a step costs 1 s
# at any level; congested: dense 10 s, 0.01 2 s.
STEPS = {1.0: 100.0, 0.01: 150.0, 0.001: math.nan}
STEP_S = {
    "quiet": {1.0: 1.0, 0.01: 1.0, 0.001: 1.0},
    "congested": {1.0: 10.0, 0.01: 2.0, 0.001: 1.5},
}


def test_a_level_progresses_at_the_time_weighted_mean_of_its_rates():
    half = {"quiet": 0.5, "congested": 0.5}
    t = fixed_times(STEPS, STEP_S, half)
    assert t[1.0] == pytest.approx(100 / (0.5 / 1 + 0.5 / 10))  # 181.8 s
    assert t[0.01] == pytest.approx(150 / (0.5 / 1 + 0.5 / 2))  # 200 s
    assert math.isinf(t[0.001])
    # one state: steps x seconds per step
    assert level_time(150, {"s": 2.0}, {"s": 1.0}) == pytest.approx(300)


def test_the_oracle_takes_the_best_level_per_state():
    half = {"quiet": 0.5, "congested": 0.5}
    t_star, best = oracle_time(STEPS, STEP_S, half)
    # quiet: dense (1/100 per s); congested: 0.01 (1/300 per s)
    assert best == {"quiet": 1.0, "congested": 0.01}
    assert t_star == pytest.approx(1 / (0.5 / 100 + 0.5 / 300))  # 150 s
    assert t_star <= min(fixed_times(STEPS, STEP_S, half).values())
    # with one state the oracle is the best fixed level
    for f in (0.0, 1.0):
        fr = {"quiet": 1 - f, "congested": f}
        assert oracle_time(STEPS, STEP_S, fr)[0] == pytest.approx(
            min(fixed_times(STEPS, STEP_S, fr).values())
        )
    assert math.isinf(oracle_time({0.1: math.nan}, STEP_S, half)[0])
    with pytest.raises(ValueError, match="add up to 1"):
        oracle_time(STEPS, STEP_S, {"quiet": 0.5, "congested": 0.6})


def test_regret_is_against_the_best_fixed_level_in_hindsight():
    times = {"dense": 300.0, "fixed 0.1": 120.0, "fixed 0.01": 100.0, "dc2": 110.0, "x": math.nan}
    r = regret(times, ["dense", "fixed 0.1", "fixed 0.01"])
    assert r == pytest.approx(
        {"dense": 3.0, "fixed 0.1": 1.2, "fixed 0.01": 1.0, "dc2": 1.1, "x": math.inf}
    )
    # nobody fixed reached the target: no regret is defined
    assert all(math.isnan(v) for v in regret({"a": math.nan, "dc2": 5.0}, ["a"]).values())


def test_worst_regret_and_oracle_capture():
    table = {"quiet": {"dc2": 1.05, "fixed": 1.0}, "slow": {"dc2": 1.2, "fixed": 2.0}}
    assert worst_regret(table, "dc2") == (1.2, "slow")
    assert worst_regret(table, "fixed") == (2.0, "slow")
    # best fixed 130 s, oracle 100 s (1.3x), a method at 110 s: 1.18x, 61 % of the gain
    assert oracle_capture(130, 110, 100) == pytest.approx((130 / 110 - 1) / 0.3)
    assert oracle_capture(130, 100, 100) == pytest.approx(1.0)
    assert oracle_capture(130, math.inf, 100) == 0.0
    assert math.isnan(oracle_capture(100, 90, 100))  # the oracle gains nothing
    assert math.isnan(oracle_capture(1.1, 1.2, 1.1 * (1 - 1e-15)))  # ... up to rounding


def test_over_seeds_is_the_mean_with_its_spread_and_nothing_if_a_seed_missed():
    from ina.sim.regret import over_seeds

    assert over_seeds([0.5, 0.7, 0.6]) == pytest.approx((0.6, 0.5, 0.7))
    assert over_seeds([2.0]) == (2.0, 2.0, 2.0)
    for missed in (math.nan, math.inf):
        assert all(math.isnan(x) for x in over_seeds([0.5, missed, 0.6]))
    assert all(math.isnan(x) for x in over_seeds([]))
