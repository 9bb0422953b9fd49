"""DC2 control laws: from delay statistics to a sparsifier density, and the level ladder.

A *density* is the fraction of gradient entries a worker sends, in (0, 1]; 1.0 is dense (no
compression). A law is a small state object whose ``next_level(stats)`` returns the density for
the next step; it is deterministic given the sequence of `DelayStats` (no clock, no randomness,
no I/O), so it is tested on synthetic RTT series without a network.

Workers must agree on one density per step. The density travels as an index into a fixed
log-spaced *ladder* in the 8-bit ``level`` field of the INA header, which the switch
MAX-combines: index 0 is dense and a higher index compresses harder, so the MAX is the hardest
compression any worker asked for (the most congested worker's view wins, like the MIN of the
receive windows in TCP).

The laws (equations and the reasons for the defaults in docs/dc2.md):

* `FixedLevel`: a constant density, the baseline.
* `AIMDLaw`: when the queueing delay ``q = srtt - base_rtt`` exceeds a threshold, multiply the
  density by ``decrease`` and hold for ``cooldown_steps`` (one reaction per congestion event);
  otherwise add ``increase``. Density plays the role of TCP's window: traffic is proportional
  to it, so AIMD's convergence argument (Chiu & Jain) carries over.
* `DelayTargetLaw`: LEDBAT/Vegas-like; hold ``q`` near a target with a step in log-density
  proportional to ``ln(q / target)``, nothing inside a dead band, at most ``max_step`` a step.
* `OwnQueueLaw`: the same log-density steps, on a different signal and target: the time the
  job's own bytes take in one step (its results streaming in back to back; a shift of the
  whole path's delay changes no gap within a round), held at a share of the step's time: a
  small one above the density where the workload's steps start to grow fast, a large one
  below it.
* `MeasuredCostLaw` (``cost``): `OwnQueueLaw`'s moves, checked against the step time each
  band of densities measurably takes, weighed by a model of the steps to target.

The paper (Abdelmoniem & Canini, INFOCOM'21) has no public code: these laws are our own.
"""

from __future__ import annotations

import abc
import inspect
import math
from typing import ClassVar

import numpy as np

from ina.control.dc2.monitor import DelayStats
from ina.registry import registrar

# The ladder. ``level`` is an 8-bit header field, so 256 rungs, log-spaced from dense (index 0)
# to LADDER_MIN_DENSITY (index 255): density(i) = LADDER_MIN_DENSITY ** (i / 255). With 0.1 %
# at the bottom (DGC's and most top-k papers' hardest setting) consecutive rungs differ by
# 2.7 %, finer than any law's step, so quantizing to the ladder never stalls a law.
LADDER_SIZE = 256
LADDER_MIN_DENSITY = 1e-3
_LADDER_TOP = LADDER_SIZE - 1
_LADDER = LADDER_MIN_DENSITY ** (np.arange(LADDER_SIZE) / _LADDER_TOP)


def index_to_density(index: int) -> float:
    """Density of ladder rung ``index`` (0 = dense, 255 = LADDER_MIN_DENSITY)."""
    if not 0 <= index <= _LADDER_TOP:
        raise ValueError(f"ladder index must be in 0..{_LADDER_TOP}, got {index}")
    return float(_LADDER[index])


def level_to_index(density: float) -> int:
    """Nearest ladder rung (in log space) of ``density``; densities beyond the ends clamp."""
    if not density > 0:  # also rejects NaN
        raise ValueError(f"density must be > 0, got {density}")
    rung = round(math.log(density) / math.log(LADDER_MIN_DENSITY) * _LADDER_TOP)
    return min(max(rung, 0), _LADDER_TOP)


class ControlLaw(abc.ABC):
    """A density controller. Subclasses implement `_decide`; `next_level` does the rest.

    Args:
        initial: density before the first decision (1.0: start uncompressed).
        min_density: lowest density the law may choose (hardest compression).
        max_density: highest density the law may choose.
    """

    name: ClassVar[str]

    def __init__(
        self,
        initial: float = 1.0,
        min_density: float = LADDER_MIN_DENSITY,
        max_density: float = 1.0,
    ) -> None:
        if not 0 < min_density <= max_density <= 1:
            raise ValueError(
                f"need 0 < min_density <= max_density <= 1, got {min_density}, {max_density}"
            )
        if not min_density <= initial <= max_density:
            raise ValueError(f"initial density {initial} outside [{min_density}, {max_density}]")
        # Hyperparameters.
        self.initial = initial
        self.min_density = min_density
        self.max_density = max_density
        # Internal state.
        self.density = initial
        self._seen = 0  # DelayStats.samples at the last decision
        # The density the round in the latest stats ran at (None: the caller did not say).
        self.round_density: float | None = None

    def next_level(self, stats: DelayStats, round_density: float | None = None) -> float:
        """The density for the next step, given the latest delay statistics and, where the
        caller knows it, the density the step they describe ran at (a decision takes effect
        two steps later, so it is not the law's last decision).

        Without new samples since the last decision there is no new information: hold.
        """
        if not stats.ready or stats.samples == self._seen:
            return self.density
        self._seen = stats.samples
        self.round_density = round_density
        self.density = min(max(self._decide(stats), self.min_density), self.max_density)
        return self.density

    def reset(self) -> None:
        """Back to the state right after construction."""
        self.density = self.initial
        self._seen = 0
        self.round_density = None

    @abc.abstractmethod
    def _decide(self, stats: DelayStats) -> float:
        """The new density (clamped by the caller) from fresh ``stats``."""


LAWS: dict[str, type[ControlLaw]] = {}


register_law = registrar(LAWS, "control law")
"""Class decorator: ``@register_law("name")`` makes a law available to `make_law`."""


def law_parameters(name: str) -> list[str]:
    """The parameters law ``name``'s constructor takes, in its order."""
    return _parameters(LAWS[name])


def _parameters(cls: type) -> list[str]:
    """``cls``'s constructor's parameters, and its base's where it passes ``**`` on."""
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    sig = inspect.signature(cls.__init__).parameters
    own = [n for n, p in sig.items() if n != "self" and p.kind in kinds]
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        own += [n for n in _parameters(cls.__mro__[1]) if n not in own]
    return own


def make_law(name: str, **params: float) -> ControlLaw:
    """A new law by registry name (``fixed``, ``aimd``, ``target``) with its parameters;
    ValueError naming an unknown law or parameter (with the law's parameters), or the law
    and what its constructor refused."""
    if name not in LAWS:
        raise ValueError(f"unknown control law {name!r}; known: {sorted(LAWS)}")
    known = law_parameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(
            f"{name} has no parameter {', '.join(unknown)}; its parameters: {', '.join(known)}"
        )
    try:
        return LAWS[name](**params)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


_TINY_DELAY = 1e-12  # keeps log(q / target) finite; any real delay is far larger


def _delay_bound(stats: DelayStats, ratio: float, seconds: float | None) -> float:
    """An absolute bound if given, else ``ratio`` times the base RTT (scale-free default)."""
    return seconds if seconds is not None else ratio * stats.base_rtt


@register_law("fixed")
class FixedLevel(ControlLaw):
    """Always ``density``: the baseline (1.0 = never compress)."""

    def __init__(self, density: float = 1.0) -> None:
        super().__init__(initial=density, min_density=density, max_density=density)

    def _decide(self, stats: DelayStats) -> float:
        return self.initial


@register_law("aimd")
class AIMDLaw(ControlLaw):
    """Multiplicative decrease of density on queueing delay, additive increase otherwise.

    1. ``q = srtt - base_rtt``; the threshold is ``threshold_s`` if given, else
       ``threshold_ratio * base_rtt``.
    2. While cooling down after a decrease: hold (the cut needs time to show in ``srtt``;
       without this one delay spike would cut several times, as TCP cuts once per window).
    3. ``q > threshold``: ``density *= decrease`` and cool down for ``cooldown_steps`` steps.
    4. Otherwise: ``density += increase`` (a fixed share of dense traffic per step).

    Args:
        threshold_ratio: queueing delay, as a fraction of the base RTT, that means congestion.
        threshold_s: absolute threshold in seconds; overrides ``threshold_ratio``.
        decrease: factor applied on congestion, in (0, 1).
        increase: density added per uncongested step, > 0.
        cooldown_steps: decisions to hold after a decrease.
    """

    def __init__(
        self,
        threshold_ratio: float = 1.0,
        threshold_s: float | None = None,
        decrease: float = 0.5,
        increase: float = 0.1,
        cooldown_steps: int = 2,
        initial: float = 1.0,
        min_density: float = LADDER_MIN_DENSITY,
        max_density: float = 1.0,
    ) -> None:
        super().__init__(initial, min_density, max_density)
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease}")
        if not increase > 0:
            raise ValueError(f"increase must be > 0, got {increase}")
        if cooldown_steps < 0:
            raise ValueError(f"cooldown_steps must be >= 0, got {cooldown_steps}")
        if threshold_ratio <= 0 or (threshold_s is not None and threshold_s <= 0):
            raise ValueError("thresholds must be > 0")
        # Hyperparameters.
        self.threshold_ratio = threshold_ratio
        self.threshold_s = threshold_s
        self.decrease = decrease
        self.increase = increase
        self.cooldown_steps = cooldown_steps
        # Internal state.
        self._cooldown = 0

    def reset(self) -> None:
        super().reset()
        self._cooldown = 0

    def _decide(self, stats: DelayStats) -> float:
        if self._cooldown > 0:
            self._cooldown -= 1
            return self.density
        if stats.queueing_delay > _delay_bound(stats, self.threshold_ratio, self.threshold_s):
            self._cooldown = self.cooldown_steps
            return self.density * self.decrease
        return self.density + self.increase


def _log_step(law: DelayTargetLaw | OwnQueueLaw, error: float) -> float:
    """The next density of a law that steps in log density (``law.gain``, ``law.deadband``,
    ``law.max_step``): nothing while ``|error|`` is within the dead band, else
    ``density * exp(-clip(gain * error, -max_step, max_step))``."""
    if abs(error) <= law.deadband:
        return law.density
    step = min(max(law.gain * error, -law.max_step), law.max_step)
    return law.density * math.exp(-step)


@register_law("target")
class DelayTargetLaw(ControlLaw):
    """Hold the queueing delay near a target (LEDBAT/Vegas-like) by steps in log-density.

    1. ``q = srtt - base_rtt + lookahead_s * trend`` (trend: d(rtt)/dt of the short window;
       ``lookahead_s > 0`` reacts to a queue that is still building).
    2. ``target`` is ``target_s`` if given, else ``target_ratio * base_rtt``;
       ``error = ln(q / target)`` (> 0 means too much delay).
    3. ``|error| <= deadband``: hold (noise around the target must not move the level).
    4. Otherwise ``density *= exp(-clip(gain * error, -max_step, max_step))``.

    Why logarithms: when the queue a step builds is proportional to the data it sends
    (``q ~ density``), ``ln q = ln density + c``, so the loop is linear in log space and each
    step removes the fraction ``gain`` of the distance to the target, without overshoot for
    ``gain <= 1``; the error is symmetric (twice or half the target give equal steps), and a
    vanishing queue relaxes at the full ``max_step`` instead of crawling. ``max_step`` bounds
    the reaction to any spike.

    Args:
        target_ratio: target queueing delay as a fraction of the base RTT.
        target_s: absolute target in seconds; overrides ``target_ratio``.
        gain: log-density change per unit of log error.
        deadband: log error tolerated without a change (0.2: q within 0.82-1.22 x target).
        max_step: largest log-density change per step (ln 2: at most halve or double).
        lookahead_s: horizon of the trend term, seconds (0: off).
    """

    def __init__(
        self,
        target_ratio: float = 1.0,
        target_s: float | None = None,
        gain: float = 0.5,
        deadband: float = 0.2,
        max_step: float = math.log(2),
        lookahead_s: float = 0.0,
        initial: float = 1.0,
        min_density: float = LADDER_MIN_DENSITY,
        max_density: float = 1.0,
    ) -> None:
        super().__init__(initial, min_density, max_density)
        if target_ratio <= 0 or (target_s is not None and target_s <= 0):
            raise ValueError("targets must be > 0")
        if not (gain > 0 and max_step > 0 and deadband >= 0 and lookahead_s >= 0):
            raise ValueError("need gain > 0, max_step > 0, deadband >= 0, lookahead_s >= 0")
        # Hyperparameters.
        self.target_ratio = target_ratio
        self.target_s = target_s
        self.gain = gain
        self.deadband = deadband
        self.max_step = max_step
        self.lookahead_s = lookahead_s

    def _decide(self, stats: DelayStats) -> float:
        target = max(_delay_bound(stats, self.target_ratio, self.target_s), _TINY_DELAY)
        q = max(_TINY_DELAY, stats.queueing_delay + self.lookahead_s * stats.trend)
        return _log_step(self, math.log(q / target))


@register_law("ownq")
class OwnQueueLaw(ControlLaw):
    """Hold the time the job's own bytes take at a share of its step time.

    1. ``q = round_stream``: the time the last step's results streamed in back to back (the
       sum of the gaps shorter than ``round_min`` between consecutive arrivals,
       `DelayMonitor`): the bottleneck's service time of the bytes the step sent, whether
       they queue (spread of the RTTs) or wait for the transport's window. A shift of the
       whole path's delay (a longer route, another flow's standing queue) moves every sample
       and changes no gap within a round; `DelayTargetLaw`'s ``srtt - base_rtt`` reads such
       a shift as congestion.
    2. ``T``: the step's own time, the interval between two decisions (compute plus
       communication); the target is ``q = share * T``.
    3. ``error = ln((q / (T - q)) / (share / (1 - share)))``: the bytes' time over the rest
       of the step against the same ratio at the target (zero exactly where ``q = share *
       T``); ``|error| <= deadband``: hold; otherwise ``density *= exp(-clip(gain * error,
       -max_step, max_step))``. The first decision (no ``T`` yet) and a step of fewer than
       two samples (no gap) hold.

    Why ``q / (T - q)`` and not ``q / T``: with ``q`` proportional to the density and the
    rest of the step fixed, ``ln(q / (T - q))`` is ``ln d`` plus a constant, so the loop is
    linear in log density and ``gain`` is the share of the distance removed per step, as in
    `DelayTargetLaw`; ``q / T`` saturates at 1 (a step all bytes reads at most ``1 / share``
    over the target), which made a first version come down from dense in 10 steps.

    Why ``share * T``: if the steps to target grow as ``d ** -alpha`` as the density ``d``
    falls, and a step takes ``T = T0 + q`` with the bytes' time ``q`` growing as ``d ** eps``
    (``eps`` < 1: indices, headers and the support round do not shrink with ``d``), the time
    to target ``d ** -alpha * T`` is least where ``q = (alpha / eps) * T``. ``share`` is
    ``alpha / eps``: the workload's elasticity of steps to density over the codec's
    elasticity of bytes to density. That ties the target to the step (a 1 ms compute step and
    a 40 ms WAN step alike) instead of an absolute delay.

    Why two shares: ``alpha`` is not one number. Top-k with error feedback costs almost no
    steps down to a few per cent and many below (both workloads of docs/dc2.md: ``alpha /
    eps`` is 0.06-0.08 from dense to 0.03 and 0.53-0.64 from 0.03 to 0.003). So the share is
    ``share`` above the ``knee`` and ``share_low`` below it, changing smoothly (its logit
    linear in ``ln d``) within ``knee_width`` of it in log density. A law with the two holds
    the knee over the wide range of paths where the knee's bytes take between the two shares
    of a step, and leaves it only where the bytes are nearly free or dominate. Inside that
    zone the target moves with the density, which steepens the loop by ``1 + slope`` (the
    logit's slope against ``-ln d``); the step is divided by it (a Newton step), so ``gain``
    keeps its meaning and the two-step lag does not make the loop ring.

    Why a bracket: where the transport's window (the pool of slots) is smaller than a step's
    chunks and the round trip is long, the bytes' time is a staircase, one round trip per
    window: below the first window's edge the bytes look free (``q`` near 0), one rung above
    it they cost a round trip. No continuous step rule can hold an edge: the law stepped up
    from "free", over the edge, and the two-step lag doubled it (a limit cycle, 1.48x slower
    than the best fixed level on the LSTM over a 40 ms path). With ``bracket`` the law
    remembers the highest density whose step stayed under target (``good``, with its step
    time) and the lowest above it that went over (``bad``), as the switch ran them (the
    caller reports the agreed level, `DC2Controller.step`). Steps up stop half way (in log
    density) to ``bad`` and at ``good`` once the two are a rung apart; steps down are the
    law's own. So the law bisects to the edge in a few probes and stays below it. It
    forgets all of it when a step at or below ``good`` goes over target or takes a time
    more than ``bracket_tolerance`` away from ``good``'s (the path changed: on a staircase
    that time does not move), or after ``bracket_memory`` steps without a step at or below
    ``good`` as fast as it; a ``bad`` that old is probed again (the ceiling becomes ``bad``
    itself), and dropped if that step is under target. Only decisive steps (``|error| >
    bracket_error``) count: jitter must not enter the bracket as an edge. Where the bytes'
    time is smooth in the density (they queue at a bottleneck), a decisive step over target
    seldom lies just above one under it, and the bracket seldom acts.

    Args:
        share: target share of the step for the job's own bytes (``alpha / eps``), at
            densities at and above ``knee * exp(knee_width)``.
        share_low: the share at and below ``knee * exp(-knee_width)`` (None: ``share``, one
            share everywhere); at least ``share``.
        knee: the density where the steps to target start to grow fast.
        knee_width: half the width of the change from one share to the other, in ``ln d``.
        gain: log-density change per unit of log error.
        deadband: log error tolerated without a change.
        max_step: largest log-density change per step.
        bracket: remember the densities found under and over target (above).
        bracket_error: log error beyond which a step counts as under or over target for the
            bracket.
        bracket_tolerance: relative change of the good density's step time that means the
            path changed and the bracket is forgotten.
        bracket_memory: steps after which the bracket's ends are stale.
    """

    def __init__(
        self,
        share: float = 0.08,
        share_low: float | None = 0.64,
        knee: float = 0.03,
        knee_width: float = 0.55,
        gain: float = 0.5,
        deadband: float = 0.2,
        max_step: float = math.log(4),
        bracket: bool = True,
        bracket_error: float = 1.0,
        bracket_tolerance: float = 0.15,
        bracket_memory: int = 256,
        initial: float = 1.0,
        min_density: float = LADDER_MIN_DENSITY,
        max_density: float = 1.0,
    ) -> None:
        super().__init__(initial, min_density, max_density)
        share_low = share if share_low is None else share_low
        if not 0 < share < 1:
            raise ValueError(f"share must be in (0, 1), got {share}")
        if not share <= share_low < 1:
            raise ValueError(
                f"share_low ({share_low}) must be at least share ({share}) and below 1 "
                "(share_low=SHARE: one share everywhere)"
            )
        if not (0 < knee <= 1 and knee_width > 0):
            raise ValueError("need 0 < knee <= 1 and knee_width > 0")
        if not (gain > 0 and max_step > 0 and deadband >= 0):
            raise ValueError("need gain > 0, max_step > 0, deadband >= 0")
        if bracket not in (0, 1):  # a law parameter arrives as a number: 0 or 1
            raise ValueError(f"bracket must be 0 (off) or 1 (on), got {bracket}")
        if not (bracket_error >= deadband and bracket_tolerance > 0 and bracket_memory >= 1):
            raise ValueError(
                "need bracket_error >= deadband, bracket_tolerance > 0, bracket_memory >= 1"
            )
        # Hyperparameters.
        self.share = share
        self.share_low = share_low
        self.knee = knee
        self.knee_width = knee_width
        self.gain = gain
        self.deadband = deadband
        self.max_step = max_step
        self.bracket = bool(bracket)
        self.bracket_error = bracket_error
        self.bracket_tolerance = bracket_tolerance
        self.bracket_memory = bracket_memory
        # Internal state: the time of the previous decision (the step time is the interval);
        # the bracket: (density, step time) of the good step and the bad step's density.
        self._last_time = math.nan
        self._good: tuple[float, float, int] | None = None
        self._bad: tuple[float, int] | None = None
        self._decisions = 0
        # Stats: the last decision's inputs, for tests and logs.
        self.own_time = math.nan
        self.target = math.nan

    def reset(self) -> None:
        super().reset()
        self._last_time = math.nan
        self._good = self._bad = None
        self._decisions = 0
        self.own_time = self.target = math.nan

    def _decide(self, stats: DelayStats) -> float:
        period = stats.time - self._last_time
        self._last_time = stats.time
        self.own_time = stats.round_stream if stats.round_samples >= 2 else math.nan
        if not period > 0 or math.isnan(self.own_time):
            return self.density
        share, slope = self.share_at(self.density)
        self.target = share * period
        rest = max(period - self.own_time, _TINY_DELAY)
        ratio = max(self.own_time, _TINY_DELAY) / rest
        error = math.log(ratio / (share / (1 - share))) / (1 + slope)
        proposal = _log_step(self, error)
        if not self.bracket or self.round_density is None:
            return proposal
        return self._bracketed(proposal, error, self.round_density, period)

    def _bracketed(self, proposal: float, error: float, ran_at: float, period: float) -> float:
        """``proposal``, kept inside the bracket where one is known: below the lowest density
        whose step went over target (``bad``), above the highest that stayed under it
        (``good``), both seen on the path as it is now."""
        self._decisions += 1
        now = self._decisions
        # only decisive steps count: a window's round trip moves the error by more than
        # ``bracket_error``; jitter and a smooth cost curve move it by less
        cheap, costly = error < -self.bracket_error, error > self.bracket_error
        good, bad = self._good, self._bad  # (density, step time, when), (density, when)
        # Forget what the path may no longer show: anything older than the memory; all of it
        # when a step at or below the good density went over target or took another time
        # (an episode began or ended; on a staircase that step's time does not change).
        if good is not None and now - good[2] > self.bracket_memory:
            good = bad = None
        if good is not None and ran_at <= good[0] * _RUNG:
            if costly and ran_at >= good[0] / _RUNG and now - good[2] <= _RECENT:
                # the good density itself went over, just after it stayed under: a step's
                # chunks vary (the union of the workers' supports), so the edge is not sharp
                bad, good = (ran_at, now), (good[0] / _RUNG**2, good[1], good[2])
            elif costly or abs(period / good[1] - 1) > self.bracket_tolerance:
                good = bad = None
            else:  # a step at or below it, as fast: the path still shows it
                good = (good[0], good[1], now)
        if cheap and bad is not None and ran_at >= bad[0] and now - bad[1] > self.bracket_memory:
            bad = None  # the probe of an old bad density: no longer over target
        if (
            cheap
            and (bad is None or ran_at < bad[0])
            and (good is None or ran_at >= good[0] / _RUNG)
        ):
            good = (max(ran_at, good[0]) if good else ran_at, period, now)
        elif costly and good is not None and ran_at > good[0] * _RUNG:
            bad = (min(ran_at, bad[0]) if bad else ran_at, now)
        self._good, self._bad = good, bad
        if good is None or bad is None:
            return proposal
        if proposal > self.density:  # up, towards a known cost: half way there (log density)
            ceiling = good[0] if bad[0] <= good[0] * _RUNG**2 else math.sqrt(good[0] * bad[0])
            if now - bad[1] > self.bracket_memory:
                ceiling = bad[0]  # an old bad density: probe it again, no further
            return max(min(proposal, ceiling), self.density)
        return proposal

    def share_at(self, density: float) -> tuple[float, float]:
        """The target share at ``density``, and the slope of its logit against ``-ln d``
        there (0 outside the knee's zone)."""
        x = math.log(density / self.knee) / self.knee_width  # -1 .. 1 across the zone
        if x >= 1 or self.share_low == self.share:
            return self.share, 0.0
        if x <= -1:
            return self.share_low, 0.0
        high, low = _logit(self.share), _logit(self.share_low)
        logit = low + (high - low) * (x + 1) / 2
        return 1 / (1 + math.exp(-logit)), (low - high) / (2 * self.knee_width)


@register_law("cost")
class MeasuredCostLaw(OwnQueueLaw):
    """`OwnQueueLaw`'s moves, each checked against what the densities measurably cost.

    The own-bytes signal says how much of the step the job's bytes take, not how much
    compressing them would save. Where the two part, the law compresses for nothing: under a
    standing queue the bytes' time barely shrinks with the density, and between dense and a
    tenth the support round can make a step slower than dense. So this law also scores the
    densities it has run, and climbs towards the cheapest:

    1. Per band of densities (half a decade wide: 1, 0.3, 0.1, 0.03, ...) it keeps a moving
       average (gain 1/4) of the step times measured there.
    2. A band's cost is its step time times the steps to target its density needs, as a
       model: ``d ** -alpha`` above the knee, ``knee ** -alpha * (d / knee) ** -alpha_low``
       below it. The defaults are the elasticities behind `OwnQueueLaw`'s shares (MNIST-1D's
       steps table, docs/dc2.md): 0.042 and 0.21.
    3. A proposal into a band whose fresh cost is more than ``margin`` above the present
       band's is refused; the law then tries the band above instead where that one has no
       fresh cost or a lower one (the signal asked for fewer bytes, the costs say the other
       way), and holds otherwise. Where a fresh band costs ``margin`` less than where the
       law is going, it goes there.
    4. A band's cost is fresh for ``memory`` decisions. A step time more than ``change``
       away from its band's average means the path changed: that band starts again from it,
       and every other band's cost is forgotten (an average across the change would compare
       a quiet band with a congested one).

    Args (besides `OwnQueueLaw`'s):
        alpha: elasticity of the steps to target to the density above the knee.
        alpha_low: the same below the knee.
        margin: relative cost difference that moves (or holds) the law.
        memory: decisions a band's cost stays fresh.
        change: relative change of a band's step time that means the path changed.
    """

    def __init__(
        self,
        alpha: float = 0.042,
        alpha_low: float = 0.21,
        margin: float = 0.05,
        memory: int = 200,
        change: float = 0.15,
        **ownq: float,
    ) -> None:
        super().__init__(**ownq)
        if not (alpha >= 0 and alpha_low >= 0 and margin >= 0 and change > 0 and memory >= 1):
            raise ValueError("need alpha, alpha_low, margin >= 0, change > 0 and memory >= 1")
        self.alpha, self.alpha_low = alpha, alpha_low
        self.margin, self.memory, self.change = margin, int(memory), change
        # band -> [mean step time, decision it was last measured at, density last run there]
        self._bands: dict[int, list[float]] = {}
        self._count = 0

    def reset(self) -> None:
        super().reset()
        self._bands = {}
        self._count = 0

    def _steps(self, density: float) -> float:
        """Steps to target at ``density`` relative to dense (the model of step 2)."""
        if density >= self.knee:
            return density**-self.alpha
        return self.knee**-self.alpha * (density / self.knee) ** -self.alpha_low

    def _decide(self, stats: DelayStats) -> float:
        period = stats.time - self._last_time
        proposal = super()._decide(stats)
        ran = self.round_density
        if ran is None or not period > 0:
            return proposal
        self._count += 1
        now, band = self._count, _band(ran)
        held = self._bands.get(band)
        if held is None or now - held[1] > self.memory:
            self._bands[band] = [period, now, ran]
        else:
            if abs(period / held[0] - 1) > self.change:  # the path changed: start afresh
                self._bands = {band: [period, now, ran]}
            else:
                held[0] += 0.25 * (period - held[0])
                held[1], held[2] = now, ran
        cost = {
            b: t * self._steps(d) for b, (t, seen, d) in self._bands.items()
            if now - seen <= self.memory
        }  # fmt: skip
        here, there = _band(self.density), _band(proposal)
        if there > here and there in cost and here in cost:
            if cost[there] > cost[here] * (1 + self.margin):  # down costs more, measured
                up = here - 1
                if up >= 0 and (up not in cost or cost[up] < cost[here]):
                    return min(10 ** (-up / 2), self.max_density)  # try the band above
                return self.density
        going = _band(proposal)
        if going in cost:
            best = min(cost, key=cost.get)
            if cost[best] * (1 + self.margin) < cost[going]:
                proposal = self._bands[best][2]  # back to a band that costs less, measured
        return proposal


def _band(density: float) -> int:
    """The half-decade band of ``density``: 0 for dense, 1 for about 0.3, 2 for 0.1, ..."""
    return round(-2 * math.log10(density))


_RUNG = 1.03  # a little more than one rung of the ladder: densities this close are one level
_RECENT = 4  # decisions: a good density confirmed this recently is still good


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def law_params(items: list[str]) -> dict[str, float | int]:
    """``["initial=0.1", "cooldown_steps=1"]`` -> ``{"initial": 0.1, "cooldown_steps": 1}``."""
    out: dict[str, float | int] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--law-param takes NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            raise ValueError(f"--law-param {item!r}: the value must be a number") from None
    return out
