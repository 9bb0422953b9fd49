"""`ina sim scenarios generate`: network scenarios drawn at random from documented families,
so that DC2's regret is measured over a distribution of paths, not a dozen hand-made ones.

A **family** is a kind of path; each generated scenario draws its parameters from the
family's stated ranges (`FAMILIES`, listed with ``--help``):

==============  ===========================================================================
``square``      square-wave episodes of cross traffic (a shuffle, a checkpoint)
``swell``       a slow swell of load (a diurnal pattern compressed in time) with bursts
``onoff``       on/off congestion with lognormal durations
``wan``         a WAN path whose delay shifts (route changes) while its capacity does not
``persistent``  congestion that never lets go: a constant share and a standing queue
``mixture``     two of the above on one path: the lower share and the sum of the delays
==============  ===========================================================================

Every family sets both the **capacity** (the share of the link cross traffic leaves the job)
and the **delay** (the queue that traffic builds, or the route's) of the path, on links of
1 to 100 Gbit/s. Congestion is drawn as the rate it leaves the job (20 Mbit/s to 2 Gbit/s),
not as a share, so that it matters to these small models whatever the link's rate.

**Time scale.** A family draws its shape in *runs*: 1.0 is the simulated time the best fixed
level takes to the target on that path (`estimate_run`: steps to target from the steps table
of docs/dc2.md, a step's time from its compute, round trips and bytes, `step_seconds`). Its
times are then multiplied by that estimate for the shortest of the workloads it is made for,
so congestion changes several times within every run, not only after the target: at least
`MIN_CHANGES` (a draw with fewer, a lognormal period longer than a run, is drawn again), 3 to
about 40 by the ranges (``changes_per_run``); a slower method's run sees more of them. A
steady path (`persistent`) has no time scale.

**Files.** A scenario is the JSON of `ina.sim.scenario` (so ``ina train --sim --scenario
FILE`` and ``ina experiment dc2 --sim --scenarios FILE`` load it), with a ``generator``
object: the family, the drawn parameters, the seed and index, the time scale and the
estimate. A time-varying path is a ``TIME_S SHARE DELAY_MS`` timeline in ``traces/`` next to
it (the capacity and the delay of every link, one shared bottleneck), looped after its last
line. Scenario ``I`` of seed ``S`` is drawn from ``numpy.random.default_rng([S, I])`` with
family ``FAMILIES[I mod len]``: the first four of 30 are the four of ``--count 4``, and one
seed writes the same bytes every time.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ina.errors import HelpFormatter, UsageError, output_dir

# -- the workloads' step, for the time scale -------------------------------------------------

# Steps to target and kB sent per step per worker at each density (1.0: dense): the steps
# table of docs/dc2.md ("Steps to target against density"; MNIST-1D the mean of seeds 0-2,
# the LSTM seed 0).
STEPS = {
    "mnist1d": {1.0: 475, 0.3: 517, 0.1: 508, 0.03: 550, 0.01: 708, 0.003: 883},
    "pytext": {1.0: 900, 0.3: 900, 0.1: 900, 0.03: 1000, 0.01: 1500, 0.003: 1650},
}
KB_PER_STEP = {
    "mnist1d": {1.0: 107, 0.3: 80, 0.1: 40, 0.03: 18, 0.01: 11.6, 0.003: 8.6},
    "pytext": {1.0: 406, 0.3: 333, 0.1: 159, 0.03: 70, 0.01: 39, 0.003: 27},
}
MODEL = {"mnist1d": "cnn1d", "pytext": "char_lstm"}
# The experiments' window: a pool of 128 slots of 256 int32 lanes (1 KiB) per packet.
WINDOW_BYTES = 128 * 1024
SWITCH_LATENCY_S = 1e-6
# Compute and codec: the stated GPU profile of every shipped scenario (quiet-dc.json says why).
PROFILE_SCENARIO = "quiet-dc"

# -- the ranges the families draw from -------------------------------------------------------

RATE_GBPS = (1.0, 100.0)  # the link, log-uniform
DC_PROP_US = (1, 20)  # data-center propagation per hop, whole microseconds
WAN_PROP_MS = (2.0, 40.0)  # one way, log-uniform: a metro ring to a continent
LEFT_MBPS = (20.0, 2000.0)  # what congestion leaves the job, log-uniform
MAX_SHARE = 0.5  # ... but at least half the link taken, or it is no congestion
QUEUE_MS = (0.0, 4.0)  # the queue cross traffic builds while congested, one way
DUTY = (0.2, 0.8)  # the share of the time congested
CYCLES_PER_RUN = (2.0, 8.0)  # congestion cycles in the best fixed level's run
SIGMA = (0.3, 1.2)  # lognormal spread of the on and off periods
SWELLS_PER_RUN = (1.0, 3.0)  # swell periods ("days") in a run
SWELL_LEVELS = (4, 6)  # steps of the quantized swell, whole
BURSTS_PER_RUN = (3.0, 10.0)  # bursts on top of the swell, Poisson
BURST_RUNS = (0.005, 0.03)  # a burst's length, in runs (a few to some tens of steps)
BURST_LEFT_MBPS = (20.0, 500.0)  # what a burst leaves the job
BURST_DELAY_MS = (1.0, 10.0)
SHIFTS_PER_RUN = (3.0, 10.0)  # the WAN path's delay shifts in a run
SHIFT_SIGMA = 0.5  # lognormal spread of the time between shifts
SWING_MS = (1.0, 20.0)  # the largest extra one-way delay of a shift, log-uniform
STANDING_MS = (0.5, 5.0)  # persistent congestion's standing queue, one way
JITTER = (0.05, 0.2)  # its jitter, a fraction of the queue
HORIZON_RUNS = 4.0  # a random timeline covers this many runs, then loops
MIN_CHANGES = 3  # a time-varying path changes this often in a run, or it is drawn again ...
MAX_TRIES = 100  # ... up to this many times (a lognormal period can outlast a run)
TIME_DECIMALS = 6  # timeline times in whole microseconds


@dataclass(frozen=True)
class Shape:
    """A path over time in runs: ``segments`` (start, share, extra one-way delay in ms), each
    holding until the next, looped after ``period`` (inf: held for ever)."""

    params: dict
    segments: tuple[tuple[float, float, float], ...]
    period: float = math.inf
    jitter_ms: float = 0.0  # persistent: a standing queue's jitter (a `low` profile)


@dataclass(frozen=True)
class Family:
    """A family: its one-line description, the kind of link, and how it draws a shape."""

    doc: str
    link: str  # "dc" or "wan"
    draw: Callable[[np.random.Generator, float], Shape] | None = field(default=None, repr=False)


def _logu(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(math.exp(rng.uniform(math.log(bounds[0]), math.log(bounds[1]))))


def _u(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(*bounds))


def _sig(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits: what the file records is what runs."""
    return float(f"{x:.{digits}g}")


def _congestion(rng: np.random.Generator, rate_bps: float, p: dict) -> float:
    """Draw what congestion leaves the job and its queue into ``p``; return the share."""
    p["left_mbps"] = _sig(_logu(rng, LEFT_MBPS), 3)
    p["share"] = _sig(min(MAX_SHARE, p["left_mbps"] * 1e6 / rate_bps))
    p["queue_ms"] = round(_u(rng, QUEUE_MS), 2)
    return p["share"]


def _square(rng: np.random.Generator, rate_bps: float) -> Shape:
    p: dict = {}
    share = _congestion(rng, rate_bps, p)
    p["duty"] = round(_u(rng, DUTY), 3)
    p["cycles_per_run"] = round(_u(rng, CYCLES_PER_RUN), 2)
    cycle = 1 / p["cycles_per_run"]
    return Shape(p, ((0.0, 1.0, 0.0), ((1 - p["duty"]) * cycle, share, p["queue_ms"])), cycle)


def _onoff(rng: np.random.Generator, rate_bps: float) -> Shape:
    p: dict = {}
    share = _congestion(rng, rate_bps, p)
    p["duty"] = round(_u(rng, DUTY), 3)
    p["sigma"] = round(_u(rng, SIGMA), 3)
    p["cycles_per_run"] = round(_u(rng, CYCLES_PER_RUN), 2)
    cycle = 1 / p["cycles_per_run"]
    on = bool(rng.random() < p["duty"])
    t, segs = 0.0, []
    while t < HORIZON_RUNS:
        segs.append((t, share, p["queue_ms"]) if on else (t, 1.0, 0.0))
        median = (p["duty"] if on else 1 - p["duty"]) * cycle
        t += median * float(rng.lognormal(0.0, p["sigma"]))
        on = not on
    return Shape(p, tuple(segs), t)


def _swell(rng: np.random.Generator, rate_bps: float) -> Shape:
    """The load rises and falls as ``(1 - cos)/2`` per period (a day, compressed); the share
    falls from 1 to the trough's in log, in ``levels`` steps, and the queue grows with the
    load; Poisson bursts of harder congestion come on top."""
    p: dict = {}
    trough = _congestion(rng, rate_bps, p)
    p["swells_per_run"] = round(_u(rng, SWELLS_PER_RUN), 2)
    p["levels"] = int(rng.integers(SWELL_LEVELS[0], SWELL_LEVELS[1] + 1))
    p["bursts_per_run"] = round(_u(rng, BURSTS_PER_RUN), 2)
    p["burst_runs"] = _sig(_u(rng, BURST_RUNS), 3)
    p["burst_left_mbps"] = _sig(_logu(rng, BURST_LEFT_MBPS), 3)
    p["burst_share"] = _sig(min(MAX_SHARE, p["burst_left_mbps"] * 1e6 / rate_bps))
    p["burst_delay_ms"] = round(_u(rng, BURST_DELAY_MS), 2)
    day = 1 / p["swells_per_run"]
    n = p["levels"] - 1
    # the load x = (1 - cos(2 pi t / day)) / 2 crosses level k's midpoint (k - 0.5) / n at
    # t = day * acos(1 - 2 x) / (2 pi), rising, and at day - t, falling
    ups = [day * math.acos(1 - (2 * k - 1) / n) / (2 * math.pi) for k in range(1, n + 1)]
    edges = [(0.0, 0)] + [(t, k) for k, t in enumerate(ups, 1)]
    edges += [(day - t, k - 1) for k, t in reversed(list(enumerate(ups, 1)))]
    swell = tuple((t, _sig(trough ** (k / n)), round(p["queue_ms"] * k / n, 3)) for t, k in edges)
    days = math.ceil(HORIZON_RUNS / day)
    horizon = days * day
    bursts, t = [(0.0, 1.0, 0.0)], 0.0
    while True:
        t += float(rng.exponential(1 / p["bursts_per_run"]))
        if t + p["burst_runs"] >= horizon:
            break
        bursts += [(t, p["burst_share"], p["burst_delay_ms"]), (t + p["burst_runs"], 1.0, 0.0)]
        t += p["burst_runs"]
    segs = _combine([Shape({}, swell, day), Shape({}, tuple(bursts), horizon)], horizon)
    return Shape(p, segs, horizon)


def _wan(rng: np.random.Generator, rate_bps: float) -> Shape:
    """The capacity holds; the route's extra delay shifts to a new level, uniform in
    [0, swing], after lognormal holds."""
    p: dict = {"swing_ms": _sig(_logu(rng, SWING_MS), 3)}
    p["shifts_per_run"] = round(_u(rng, SHIFTS_PER_RUN), 2)
    hold = 1 / p["shifts_per_run"]
    t, segs = 0.0, []
    while t < HORIZON_RUNS:
        segs.append((t, 1.0, round(_u(rng, (0.0, p["swing_ms"])), 2)))
        t += hold * float(rng.lognormal(0.0, SHIFT_SIGMA))
    return Shape(p, tuple(segs), t)


def _persistent(rng: np.random.Generator, rate_bps: float) -> Shape:
    p: dict = {}
    share = _congestion(rng, rate_bps, p)
    del p["queue_ms"]  # the standing queue instead
    p["standing_ms"] = round(_u(rng, STANDING_MS), 2)
    p["jitter_ms"] = round(p["standing_ms"] * _u(rng, JITTER), 3)
    return Shape(p, ((0.0, share, p["standing_ms"]),), math.inf, p["jitter_ms"])


FAMILIES: dict[str, Family] = {
    "square": Family("square-wave episodes of cross traffic", "dc", _square),
    "swell": Family("a slow swell of load (a compressed day) with bursts", "dc", _swell),
    "onoff": Family("on/off congestion, lognormal durations", "dc", _onoff),
    "wan": Family("a WAN path whose delay shifts, capacity constant", "wan", _wan),
    "persistent": Family("constant cross traffic and a standing queue", "dc", _persistent),
    "mixture": Family("two of the others on one path: lower share, delays added", "dc"),
}


def _combine(shapes: list[Shape], horizon: float) -> tuple[tuple[float, float, float], ...]:
    """Shapes laid over each other on [0, horizon): at each time the lowest share (the
    tighter bottleneck) and the sum of the delays (queues in series); equal neighbours
    merged."""
    cuts = {0.0}
    for s in shapes:
        if math.isinf(s.period):
            continue
        for k in range(math.ceil(horizon / s.period)):
            cuts.update(k * s.period + t for t, _, _ in s.segments if k * s.period + t < horizon)
    out: list[tuple[float, float, float]] = []
    for t in sorted(cuts):
        share, delay = 1.0, 0.0
        for s in shapes:
            _, sh, d = _at(s, t)
            share, delay = min(share, sh), delay + d
        if not out or (out[-1][1], out[-1][2]) != (share, round(delay, 3)):
            out.append((t, share, round(delay, 3)))
    return tuple(out)


def _at(shape: Shape, t: float) -> tuple[float, float, float]:
    phase = t if math.isinf(shape.period) else math.fmod(t, shape.period)
    starts = [s[0] for s in shape.segments]
    return shape.segments[max(0, int(np.searchsorted(starts, phase + 1e-12, side="right")) - 1)]


def _draw(rng: np.random.Generator, components: list[str], rate_bps: float) -> tuple[Shape, dict]:  # fmt: skip
    """The shape of one family, or of a mixture of several, and its drawn parameters."""
    shapes = [FAMILIES[c].draw(rng, rate_bps) for c in components]
    if len(shapes) == 1:
        return shapes[0], dict(shapes[0].params)
    finite = [s.period for s in shapes if not math.isinf(s.period)]
    horizon = max([HORIZON_RUNS, *finite])
    params = {"components": components, **{c: s.params for c, s in zip(components, shapes, strict=True)}}  # fmt: skip
    return Shape({}, _combine(shapes, horizon), horizon), params


# -- the step and the run, estimated ---------------------------------------------------------


def step_seconds(workload: str, density: float, rate_bps: float, rtt_s: float, compute_s: float) -> float:  # fmt: skip
    """A step's simulated time at ``density`` on a path of ``rate_bps`` left to the job and
    round trip ``rtt_s``: compute, one round trip plus one per window of the step's bytes
    (the pool bounds the bytes in flight), and the bytes at the rate. Within 1.5x of the
    shipped scenarios' measured steps (tests/test_scenario_generate.py)."""
    sent = 1e3 * KB_PER_STEP[workload][density]
    return compute_s + rtt_s * (1 + math.ceil(sent / WINDOW_BYTES)) + 8 * sent / rate_bps


def estimate_run(workload: str, rate_bps: float, prop_s: float, compute_s: float, shape: Shape) -> tuple[float, float]:  # fmt: skip
    """(the simulated time to target of the best fixed level on this path, that level):
    each level's time mixes its steps' times over the shape's states (`regret.fixed_times`)."""
    from ina.sim import regret as rg

    fractions, step_s = {}, {}
    for state, f in _fractions(shape).items():
        share, delay_ms = state
        rtt = 2 * (prop_s + delay_ms / 1e3 + SWITCH_LATENCY_S)
        key = f"{share}:{delay_ms}"
        fractions[key] = f
        step_s[key] = {d: step_seconds(workload, d, share * rate_bps, rtt, compute_s)
                       for d in STEPS[workload]}  # fmt: skip
    times = rg.fixed_times(STEPS[workload], step_s, fractions)
    best = min(times, key=times.get)
    return times[best], best


def _fractions(shape: Shape) -> dict[tuple[float, float], float]:
    """The share of the time in each (share, delay) state."""
    if math.isinf(shape.period):
        return {(shape.segments[0][1], shape.segments[0][2]): 1.0}
    out: dict[tuple[float, float], float] = {}
    ends = [s[0] for s in shape.segments[1:]] + [shape.period]
    for (t, share, delay), end in zip(shape.segments, ends, strict=True):
        out[(share, delay)] = out.get((share, delay), 0.0) + (end - t) / shape.period
    total = sum(out.values())
    return {k: v / total for k, v in out.items()}


def changes_within(shape: Shape, runs: float) -> int:
    """How many times the path changes in (0, ``runs``) runs."""
    if math.isinf(shape.period):
        return 0
    n, k = 0, 0
    while k * shape.period < runs:
        n += sum(1 for t, _, _ in shape.segments if t > 0 and k * shape.period + t < runs)
        # the loop's restart is a change if it starts in another state than it ends
        n += 1 if k > 0 and shape.segments[0][1:] != shape.segments[-1][1:] else 0
        k += 1
    return n


# -- one scenario -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """One generated scenario: its name, the scenario file's JSON and its timeline (or None)."""

    name: str
    data: dict
    timeline: str | None


def generate_one(seed: int, index: int, family: str, workloads: list[str]) -> Generated:
    """Scenario ``index`` of ``seed`` from ``family`` (see the module docstring)."""
    from ina.sim.scenario import load_scenario
    from ina.workload.compute import parse_compute

    rng = np.random.default_rng([seed, index])
    components = [family]
    if family == "mixture":
        others = [f for f in FAMILIES if f != "mixture"]
        components = sorted(rng.choice(others, 2, replace=False).tolist(), key=others.index)
    wan = any(FAMILIES[c].link == "wan" for c in components)
    link: dict = {"rate_gbps": _sig(_logu(rng, RATE_GBPS), 2)}
    if wan:
        link["prop_ms"] = _sig(_logu(rng, WAN_PROP_MS), 3)
        prop_s = link["prop_ms"] / 1e3
    else:
        link["prop_us"] = int(rng.integers(DC_PROP_US[0], DC_PROP_US[1] + 1))
        prop_s = link["prop_us"] / 1e6
    rate_bps = link["rate_gbps"] * 1e9
    tries, shape, params = 1, *_draw(rng, components, rate_bps)
    while not math.isinf(shape.period) and changes_within(shape, 1.0) < MIN_CHANGES:
        if tries == MAX_TRIES:
            raise RuntimeError(
                f"{family}: no path with {MIN_CHANGES} changes a run in {tries} tries"
            )
        tries, shape, params = tries + 1, *_draw(rng, components, rate_bps)
    params = {**link, **params, "tries": tries}
    profiles = load_scenario(PROFILE_SCENARIO)
    compute = dict(profiles.compute)
    estimate, scale = {}, math.inf
    for w in workloads:
        compute_s = parse_compute(compute.get(MODEL[w], compute["default"])).seconds
        run_s, best = estimate_run(w, rate_bps, prop_s, compute_s, shape)
        estimate[w] = {"run_s": _sig(run_s), "best_level": best}
        scale = min(scale, run_s)
    scale = _sig(scale)
    name = f"gen{seed}-{index:03d}-{family}"
    max_delay_ms = max(d for _, _, d in shape.segments) + 3 * shape.jitter_ms
    max_rtt = 2 * (prop_s + max_delay_ms / 1e3)
    data: dict = {
        "description": _describe(family, components, params, shape, scale),
        "source": f"Generated by `ina sim scenarios generate --seed {seed}` (scenario {index}, "
        f"family {family}): parameters drawn from the ranges in ina/sim/generate.py, times "
        "scaled to the estimated run of the best fixed level (generator.estimate); compute "
        f"and codec as the shipped scenarios ({PROFILE_SCENARIO}.json).",
        "workers": profiles.workers,
        "link": {"rate": f"{link['rate_gbps']:g}G",
                 "prop_delay": (f"{link['prop_ms']:g}ms" if wan else f"{link['prop_us']}us")},
        "switch": {"rate": "none", "latency": f"{SWITCH_LATENCY_S * 1e6:g}us"},
        "transport": {"rto": f"{max(50, math.ceil(5e3 * max_rtt))}ms",
                      "min_rto": f"{max(20, math.ceil(2.5e3 * max_rtt))}ms"},
        "compute": compute,
        "codec": profiles.codec,
    }  # fmt: skip
    timeline = None
    if math.isinf(shape.period):
        share, delay_ms = shape.segments[0][1], shape.segments[0][2]
        if share < 1:
            data["link"]["capacity"] = f"constant:share={share!r}"
        if delay_ms > 0:
            data["link"]["profile"] = (f"low:base_s={delay_ms / 1e3:.6g}:"
                                       f"jitter_s={shape.jitter_ms / 1e3:.6g}")  # fmt: skip
    else:
        timeline = _timeline_text(name, shape, scale)
        data["link"]["profile"] = f"timeline:traces/{name}.txt"
        if any(s < 1 for _, s, _ in shape.segments):
            data["link"]["capacity"] = f"trace:traces/{name}.txt"
    data["generator"] = {
        "seed": seed,
        "index": index,
        "family": family,
        "params": params,
        "time_scale_s": scale,
        "changes_per_run": changes_within(shape, 1.0),
        "period_s": None if math.isinf(shape.period) else round(shape.period * scale, 6),
        "estimate": estimate,
    }
    return Generated(name, data, timeline)


def _timeline_text(name: str, shape: Shape, scale: float) -> str:
    lines = [f"# {name}: TIME_S SHARE DELAY_MS (ina/sim/generate.py), looped after the last line"]
    last = -1.0
    for t, share, delay in shape.segments:
        t_s = round(t * scale, TIME_DECIMALS)
        if t_s <= last:  # shorter than the rounding: the later state holds from here
            lines.pop()
        lines.append(f"{t_s:.{TIME_DECIMALS}f} {share:g} {delay:g}")
        last = t_s
    period = round(shape.period * scale, TIME_DECIMALS)
    if period <= last:
        lines.pop()
    lines.append(f"{period:.{TIME_DECIMALS}f} 1 0")
    return "\n".join(lines) + "\n"


def _describe(family: str, components: list[str], p: dict, shape: Shape, scale: float) -> str:
    where = f"{p['prop_ms']:g} ms one way" if "prop_ms" in p else f"{p['prop_us']} us"
    kind = family if len(components) == 1 else f"{family} of {' and '.join(components)}"
    head = f"Generated ({kind}): {p['rate_gbps']:g} Gbit/s links, {where}"
    states = _fractions(shape)
    lowest = min(share for share, _ in states)
    most = max(d for _, d in states)
    left = f"share down to {lowest:g} ({lowest * p['rate_gbps'] * 1e3:.3g} Mbit/s left)"
    if lowest >= 1:
        left = "the whole rate throughout"
    if math.isinf(shape.period):
        return f"{head}; {left.replace('down to ', '')} throughout and +{most:g} ms of queue."
    return (f"{head}; {len(states)} states over a {shape.period * scale:.3g} s loop: {left}, "
            f"up to +{most:g} ms one way; about {changes_within(shape, 1.0)} changes in the best "
            f"fixed level's estimated run ({scale:.3g} s).")  # fmt: skip


def generate(seed: int, count: int, families: list[str], workloads: list[str]) -> list[Generated]:
    """``count`` scenarios of ``seed``, the families taken in turn."""
    return [generate_one(seed, i, families[i % len(families)], workloads) for i in range(count)]


def write(scenarios: list[Generated], out: Path) -> list[Path]:
    """Write the scenario files (and their timelines under ``traces/``); their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for g in scenarios:
        if g.timeline is not None:
            (out / "traces").mkdir(exist_ok=True)
            (out / "traces" / f"{g.name}.txt").write_text(g.timeline)
        paths.append(out / f"{g.name}.json")
        paths[-1].write_text(json.dumps(g.data, indent=2) + "\n")
    return paths


def record(path: str | Path) -> dict | None:
    """The ``generator`` record of a scenario file (None: not generated, or not a file)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data.get("generator") if isinstance(data, dict) else None


def path_changes(path: str | Path, until_s: float) -> int:
    """How many times a scenario file's path (its timeline's share or delay) changes in
    (0, ``until_s``) of simulated time: 0 for a steady one; nan-safe (0 for nan)."""
    from ina.netem import read_timeline
    from ina.sim.scenario import load_scenario

    up = load_scenario(str(path)).up
    files = {text.partition(":")[2] for text in (up.profile, up.capacity or "")
             if text.startswith(("timeline:", "trace:"))}  # fmt: skip
    if not files or not until_s > 0:
        return 0
    columns = []
    for f in sorted(files):
        times, shares = read_timeline(f, 1, "capacity")
        columns.append(shares)
        if up.profile.endswith(f):
            columns.append(read_timeline(f, 2, "delay")[1])
    starts, period = times[:-1], float(times[-1])
    states = list(zip(*(c[:-1] for c in columns), strict=True))
    # a change at each start whose state differs from the one before it (looped)
    changed = [states[i] != states[i - 1] for i in range(len(states))]
    loops = math.ceil(until_s / period)
    return sum(1 for k in range(loops) for t, c in zip(starts, changed, strict=True)
               if c and 0 < k * period + t < until_s)  # fmt: skip


# -- input -----------------------------------------------------------------------------------


def parse_count(text: str) -> int:
    """``--count``: a whole number >= 1 (UsageError otherwise)."""
    try:
        n = int(text)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UsageError(f"--count takes a whole number of scenarios >= 1, got {text!r}")
    return n


def parse_seed(text: str) -> int:
    """``--seed``: a whole number >= 0 (UsageError otherwise)."""
    try:
        n = int(text)
        if n < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise UsageError(f"--seed takes a whole number >= 0, got {text!r}") from None
    return n


def _names(text: str, known, what: str) -> list[str]:
    """A comma-separated list of names out of ``known`` (UsageError for an unknown one)."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"unknown {what} {', '.join(map(repr, unknown)) or repr(text)}; "
                         f"known: {', '.join(known)}")  # fmt: skip
    return names


def parse_families(text: str) -> list[str]:
    """``--families``: names of `FAMILIES`."""
    return _names(text, FAMILIES, "family")


def parse_workloads(text: str) -> list[str]:
    """``--workloads``: names of `STEPS`."""
    return _names(text, STEPS, "workload")


# -- the command ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="scenarios_command", required=True, metavar="COMMAND")
    g = sub.add_parser(
        "generate",
        help="write N scenario files drawn from the families",
        description=__doc__.split("\n\n")[0].replace("`", ""),
        formatter_class=HelpFormatter,
    )
    g.add_argument("--seed", default="0", help="the generator's seed, a whole number >= 0")
    g.add_argument("--count", default="10", help="scenarios to write, >= 1")
    g.add_argument("--out", default="runs/scenarios", help="directory of the files")
    g.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help="families to draw from, in turn: "
        + "; ".join(f"{n}: {f.doc}" for n, f in FAMILIES.items()),
    )
    g.add_argument(
        "--workloads",
        default=",".join(STEPS),
        help="the workloads whose runs set the time scale (the shortest run)",
    )


def main(args: argparse.Namespace) -> int:
    seed, count = parse_seed(args.seed), parse_count(args.count)
    families, workloads = parse_families(args.families), parse_workloads(args.workloads)
    out = output_dir(args.out)
    scenarios = generate(seed, count, families, workloads)
    for g, path in zip(scenarios, write(scenarios, out), strict=True):
        print(f"{path}: {g.data['description']}")
    return 0
