"""The arithmetic of the DC2 study: regret against the best fixed level, and the oracle bound.

Pure functions on tables of numbers (no runs, no files), so they are tested on synthetic
tables (tests/test_regret.py) and shared by `ina experiment dc2-bound` (two states, wall
clock) and `ina experiment dc2 --sim` (any number of states, simulated time).

**Regret.** For one scenario, a method's regret is its time to target over the best fixed
level's, the best chosen in hindsight for that scenario (1.0: as good as the best fixed level;
inf: never reached the target). A user who must pick one fixed level in advance pays the
worst regret of that level over the scenarios; DC2 must not need the choice.

**Oracle.** A scenario that mixes steady states (quiet and congested, say) in fractions
``f_s`` of the time; at a fixed level ``d`` a step in state ``s`` takes ``t_s(d)`` seconds and
the target needs ``S(d)`` steps. If progress adds up across levels (a step at ``d`` is worth
``1/S(d)`` of the way) and states are long against a step, level ``d`` reaches the target in
``T(d) = S(d) / sum_s f_s / t_s(d)`` (its rate of progress is the time-weighted mean of its
per-state rates), and the controller that knows the state and switches for free to the best
level for it in ``T* = 1 / sum_s f_s max_d 1 / (S(d) t_s(d))``. No real controller beats
``T*`` under those assumptions; it ignores reaction time and the cost of a switch.

**Over many scenarios** (`distribution`, for generated ones): a method's regret in each
scenario gives its median, 90th percentile and worst, and the share of scenarios where it
beats every fixed level (regret below 1). A run that missed the target counts as infinite
regret, so it moves the percentiles up instead of leaving the sample; a scenario where no
fixed level reached the target has no regret (nan) and is counted apart.

**Seeds.** A method's time (or steps) to target in a scenario is the mean over the training
seeds, its spread the min and max (`over_seeds`); regret and the oracle are computed on the
means. A method that misses the target with any seed has no mean (nan: not reached).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

_NO_GAIN = 1e-6  # an oracle within rounding of the best fixed level gains nothing
Level = Hashable  # a density (1.0 = dense), or any name for a fixed configuration


def level_time(steps: float, step_s: Mapping[str, float], fractions: Mapping[str, float]) -> float:
    """``T(d)``: time to target of one fixed level with ``steps`` to target and
    ``step_s[state]`` seconds per step (inf: never reaches it)."""
    if math.isnan(steps) or math.isinf(steps):
        return math.inf
    rate = sum(f / step_s[s] for s, f in fractions.items() if f > 0)
    return steps / rate if rate > 0 else math.inf


def fixed_times(
    steps: Mapping[Level, float],
    step_s: Mapping[str, Mapping[Level, float]],
    fractions: Mapping[str, float],
) -> dict[Level, float]:
    """``T(d)`` of every level in ``steps`` (``step_s[state][level]``: seconds per step)."""
    _check(fractions)
    return {
        d: level_time(s, {st: step_s[st][d] for st in fractions}, fractions)
        for d, s in steps.items()
    }


def oracle_time(
    steps: Mapping[Level, float],
    step_s: Mapping[str, Mapping[Level, float]],
    fractions: Mapping[str, float],
) -> tuple[float, dict[str, Level | None]]:
    """(``T*``, the best level in each state): the best level per state, switching free."""
    _check(fractions)
    reach = [d for d, s in steps.items() if not (math.isnan(s) or math.isinf(s))]
    if not reach:
        return math.inf, dict.fromkeys(fractions)
    rate, best = 0.0, {}
    for state, f in fractions.items():
        d = max(reach, key=lambda d, st=state: 1 / (steps[d] * step_s[st][d]))
        best[state] = d
        rate += f / (steps[d] * step_s[state][d])
    return (1 / rate if rate > 0 else math.inf), best


def regret(times: Mapping[str, float], fixed: Iterable[str]) -> dict[str, float]:
    """Each method's time over the best of the ``fixed`` methods' times (nan/inf: not
    reached, regret inf; nan everywhere if no fixed method reached the target)."""
    fixed = list(fixed)
    clean = {m: (math.inf if math.isnan(t) else t) for m, t in times.items()}
    best = min((clean[m] for m in fixed), default=math.inf)
    if math.isinf(best):
        return dict.fromkeys(clean, math.nan)
    return {m: t / best for m, t in clean.items()}


def worst_regret(table: Mapping[str, Mapping[str, float]], method: str) -> tuple[float, str]:
    """(the largest regret of ``method`` over the scenarios of ``table[scenario][method]``,
    the scenario where it occurs)."""
    worst = (-math.inf, "")
    for scenario, row in table.items():
        r = row.get(method, math.nan)
        if not math.isnan(r) and r > worst[0]:
            worst = (r, scenario)
    return worst


def oracle_capture(best_fixed: float, method: float, oracle: float) -> float:
    """The share of the oracle's gain over the best fixed level that ``method`` captures:
    ``(best_fixed / method - 1) / (best_fixed / oracle - 1)`` (nan when the oracle gains
    nothing)."""
    gain = best_fixed / oracle - 1
    if not gain > _NO_GAIN:
        return math.nan
    if math.isinf(method):
        return 0.0
    return (best_fixed / method - 1) / gain


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated linearly between the two
    nearest ranks (numpy's default), where infinite values sort last: interpolating towards
    one gives inf (nan if there are no values)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is in [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100
    lo, frac = math.floor(pos), pos - math.floor(pos)
    if frac == 0:
        return xs[lo]
    a, b = xs[lo], xs[lo + 1]
    return math.inf if math.isinf(b) else a + (b - a) * frac


@dataclass(frozen=True)
class Distribution:
    """One method's regret over many scenarios (`distribution`)."""

    scenarios: int  # with a regret: some fixed level reached the target there
    median: float
    p90: float
    worst: float
    beats_fixed: float  # the share of those scenarios where regret < 1 (nan: none)
    not_reached: int  # of those, where this method missed the target (regret inf)
    no_reference: int  # scenarios where no fixed level reached the target (regret nan)


def distribution(regrets: Iterable[float]) -> Distribution:
    """The spread of one method's regrets, one per scenario (see the module docstring)."""
    values = [float(r) for r in regrets]
    known = [r for r in values if not math.isnan(r)]
    return Distribution(
        scenarios=len(known),
        median=percentile(known, 50),
        p90=percentile(known, 90),
        worst=max(known, default=math.nan),
        beats_fixed=sum(r < 1 for r in known) / len(known) if known else math.nan,
        not_reached=sum(math.isinf(r) for r in known),
        no_reference=len(values) - len(known),
    )


def over_seeds(values: Iterable[float]) -> tuple[float, float, float]:
    """(mean, min, max) of one method's per-seed times or steps to target; all nan if any seed
    did not reach the target (nan or inf), or if there are none. The mean, not the median:
    time to target adds up over the runs a user would make."""
    values = [float(v) for v in values]
    if not values or any(math.isnan(v) or math.isinf(v) for v in values):
        return math.nan, math.nan, math.nan
    return math.fsum(values) / len(values), min(values), max(values)


def _check(fractions: Mapping[str, float]) -> None:
    total = sum(fractions.values())
    if not math.isclose(total, 1.0, rel_tol=1e-6) or min(fractions.values()) < 0:
        raise ValueError(f"state fractions must be >= 0 and add up to 1, got {dict(fractions)}")
