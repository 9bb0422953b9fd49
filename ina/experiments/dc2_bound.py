"""`ina experiment dc2-bound`: the most any compression controller could gain on a profile.

DC2 can only beat every fixed level if the best level differs between quiet and congested
periods. This experiment measures, for each density of a ladder, the two things that decide
that, and combines them into an *oracle*: a controller that knows whether the path is congested
and switches to the best level for that state at no cost.

* **Progress**: ``S(d)``, the steps to the target accuracy at fixed density ``d`` (one full
  training run per level, on the profile's quiet path; fixed levels are deterministic in
  accuracy, so the path does not change ``S``).
* **Cost**: ``t_q(d)`` and ``t_c(d)``, the mean seconds per step on the quiet path (the same
  run) and on the path congested throughout (a short run with the episode always on).

With the path congested a fraction ``f`` of the time, a level's rate of progress is
``(1 - f) / (S t_q) + f / (S t_c)`` (targets per second), so its time to target is the
inverse; the oracle takes the best level in each state:
``T* = 1 / ((1 - f) max_d 1/(S t_q) + f max_d 1/(S t_c))``. This assumes that progress adds
up across levels (a step at ``d`` is worth ``1/S(d)`` of the way) and that episodes are short
against the run; it ignores the controller's reaction time. It bounds any real controller
over the measured levels: a DC2 law can approach ``T*`` but not beat it.

``f`` comes from the profile: ``on / (on + off)`` with shared episodes
(``high:episode_seed=N``: exact, all links congested together), ``1 - (off / (on + off))^(2
workers)`` with per-link episodes (approximate: the congested runs put every link in an
episode, while usually only one is). The tables also give ``T*`` for other values of ``f``.

Outputs in ``--out`` (default ``runs/dc2-bound``): each run's directory, ``bound.csv`` (one row
per level) and ``bound.md`` (the tables, and whether the goals of `ina experiment dc2` are
reachable at all).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ina.errors import output_dir
from ina.experiments.dc2 import (
    GOAL_VS_DENSE,
    GOAL_VS_FIXED,
    RunData,
    mbit_per_s,
    run_dir,
    train_argv,
    train_once,
)
from ina.experiments.dc2_common import Config
from ina.netem import congested_fraction

# Always congested: the first quiet period lasts a microsecond, then one episode of ~11 days.
_ALWAYS_ON = ":episode_off_s=1e-6:episode_on_s=1e6"
_WARMUP_STEPS = 2  # the dense warm-up step and DDP's bucket rebuild are not typical steps
F_GRID = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class Level:
    """One measured level: density (1.0 = dense), steps to target (nan: not reached) and the
    mean seconds per step on the quiet and on the congested path."""

    density: float
    steps_to_target: float
    quiet_s: float
    congested_s: float
    final_acc: float = math.nan

    def rate(self, f: float) -> float:
        """Targets per second when congested a fraction ``f`` of the time (0: never gets there)."""
        if math.isnan(self.steps_to_target):
            return 0.0
        return ((1 - f) / self.quiet_s + f / self.congested_s) / self.steps_to_target


def time_to_target(levels: list[Level], f: float) -> dict[float, float]:
    """Expected time to target of each fixed level at congested fraction ``f`` (inf: never)."""
    return {lv.density: (1 / r if (r := lv.rate(f)) > 0 else math.inf) for lv in levels}


def oracle_time(levels: list[Level], f: float) -> float:
    """Time to target of the controller that uses the best level in each state, for free."""
    from ina.sim.regret import oracle_time as general

    steps = {lv.density: lv.steps_to_target for lv in levels}
    step_s = {
        "quiet": {lv.density: lv.quiet_s for lv in levels},
        "congested": {lv.density: lv.congested_s for lv in levels},
    }
    return general(steps, step_s, {"quiet": 1 - f, "congested": f})[0]


def oracle_speedups(levels: list[Level], f: float) -> tuple[float, float, float]:
    """(oracle time, speed-up vs dense, speed-up vs the best compressed fixed level)."""
    t_star = oracle_time(levels, f)
    fixed = time_to_target(levels, f)
    dense = fixed.get(1.0, math.nan)
    best = min((t for d, t in fixed.items() if d < 1.0), default=math.inf)
    return t_star, dense / t_star, best / t_star


def _config(density: float) -> Config:
    return Config("dense" if density >= 1.0 else f"fixed:{density!r}")


def _mean_step_s(run: RunData) -> float:
    steps = run.steps[_WARMUP_STEPS:] or run.steps
    return statistics.fmean(s["step_s"] for s in steps)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default="high:episode_seed=1:episode_on_s=4:episode_off_s=4",
        help="the high-variation profile to bound (default: shared 4-s episodes)",
    )
    p.add_argument("--levels", default="1,0.3,0.1,0.03,0.01,0.003", help="densities (1: dense)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--model", default="big_mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-acc", type=float, default=0.90)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--timing-steps", type=int, default=10, help="steps of each congested run")
    p.add_argument("--link-rate", type=mbit_per_s, default="100M", metavar="RATE")
    p.add_argument("--lanes", type=int, default=256)
    p.add_argument("--pool", type=int, default=32)
    p.add_argument("--coding", default="support", choices=["support", "sketch"])
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--out", default="runs/dc2-bound")


def _train_args(args: argparse.Namespace, max_steps: int, eval_every: int) -> argparse.Namespace:
    """The option set `ina.experiments.dc2.train_argv` expects."""
    ns = argparse.Namespace(**vars(args))
    ns.max_steps, ns.eval_every, ns.stop_at_target = max_steps, eval_every, False
    return ns


def measure(args: argparse.Namespace, out: Path) -> list[Level]:
    """The runs: per level, one full run on the quiet path and a short one congested."""
    quiet_profile = args.profile + ":episode_delay_s=0"
    congested_profile = args.profile + _ALWAYS_ON
    full = _train_args(args, 0, args.eval_every)
    short = _train_args(args, args.timing_steps, 10**6)
    levels = []
    for density in args.level_list:
        cfg = _config(density)
        runs = {}
        for state, profile, targs in (
            ("quiet", quiet_profile, full),
            ("congested", congested_profile, short),
        ):
            where = run_dir(out, state, cfg, 0)
            t = time.monotonic()
            rc = train_once(train_argv(targs, profile, cfg, where), where)
            if rc != 0:
                raise RuntimeError(f"{state} run of {cfg.label} failed: see {where / 'train.log'}")
            runs[state] = RunData.load(where, state, cfg, 0)
            print(
                f"{cfg.label:<12} {state:<9} {len(runs[state].steps)} steps, "
                f"{_mean_step_s(runs[state]):.3f} s per step ({time.monotonic() - t:.0f} s)",
                flush=True,
            )
        _, step = runs["quiet"].time_to(args.target_acc)
        levels.append(
            Level(
                density,
                math.nan if step is None else float(step),
                _mean_step_s(runs["quiet"]),
                _mean_step_s(runs["congested"]),
                runs["quiet"].final_acc,
            )
        )
    return levels


def write_csv(levels: list[Level], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["density", "steps_to_target", "quiet_s_per_step", "congested_s_per_step",
                    "final_acc"])  # fmt: skip
        for lv in levels:
            w.writerow([f"{lv.density:g}", f"{lv.steps_to_target:g}", f"{lv.quiet_s:.5g}",
                        f"{lv.congested_s:.5g}", f"{lv.final_acc:.4f}"])  # fmt: skip


def _label(density: float) -> str:
    return "dense" if density >= 1.0 else f"fixed {density:g}"


def markdown(levels: list[Level], args: argparse.Namespace, f: float, shared: bool) -> str:
    lines = [
        "# The oracle bound for DC2",
        "",
        f"`{args.profile}`: congested {100 * f:.0f} % of the time "
        + ("(shared episodes: exact)." if shared else "(per-link episodes: approximate)."),
        f"{args.model}, {args.workers} workers x batch {args.batch_size}, lr {args.lr}, seed "
        f"{args.seed}, {args.epochs} epochs, target {100 * args.target_acc:.1f} %; links "
        f"{args.link_rate:g} Mbit/s, {args.lanes} lanes, pool {args.pool}, coding "
        f"`{args.coding}`.",
        "",
        "| level | steps to target | s per step, quiet | s per step, congested | "
        "time to target at this f | final accuracy |",
        "|---|---|---|---|---|---|",
    ]
    fixed = time_to_target(levels, f)
    for lv in levels:
        steps = "not reached" if math.isnan(lv.steps_to_target) else f"{lv.steps_to_target:g}"
        t = fixed[lv.density]
        lines.append(
            f"| {_label(lv.density)} | {steps} | {lv.quiet_s:.3f} | {lv.congested_s:.3f} | "
            + ("never" if math.isinf(t) else f"{t:.1f} s")
            + f" | {100 * lv.final_acc:.2f} % |"
        )
    t_star, vs_dense, vs_fixed = oracle_speedups(levels, f)
    lines += [
        f"| **oracle** | | | | **{t_star:.1f} s** | |",
        "",
        f"At f = {f:.2f} the oracle is {vs_dense:.2f}x faster than dense (goal for DC2 "
        f">= {GOAL_VS_DENSE:g}x) and {vs_fixed:.2f}x faster than the best fixed level (goal "
        f">= {GOAL_VS_FIXED:g}x).",
        "",
        "| congested fraction f | oracle vs dense | oracle vs best fixed | both goals reachable |",
        "|---|---|---|---|",
    ]
    for g in sorted({*F_GRID, round(f, 3)}):
        _, d, x = oracle_speedups(levels, g)
        ok = d >= GOAL_VS_DENSE and x >= GOAL_VS_FIXED
        lines.append(f"| {g:.2f} | {d:.2f}x | {x:.2f}x | {'yes' if ok else 'no'} |")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    try:
        args.level_list = sorted({float(x) for x in args.levels.split(",") if x.strip()},
                                 reverse=True)  # fmt: skip
        if not args.level_list or not all(0 < d <= 1 for d in args.level_list):
            raise ValueError("--levels are densities in (0, 1]")
        if 1.0 not in args.level_list:
            raise ValueError("--levels must include 1 (dense): the goals compare with it")
        if not (math.isfinite(args.link_rate) and args.link_rate > 0):
            raise ValueError(f"--link-rate must be a rate > 0 (e.g. 100M), got {args.link_rate:g}")
        f, shared = congested_fraction(args.profile, args.workers)
        out = output_dir(args.out)  # writable, before any run
    except ValueError as e:  # (UsageError too)
        print(f"ina experiment dc2-bound: {e}", file=sys.stderr)
        return 2
    try:
        levels = measure(args, out)
    except RuntimeError as e:
        print(f"ina experiment dc2-bound: {e}", file=sys.stderr)
        return 1
    write_csv(levels, out / "bound.csv")
    md = markdown(levels, args, f, shared)
    (out / "bound.md").write_text(md)
    print("\n" + md)
    print(f"written: {out / 'bound.csv'}, {out / 'bound.md'}")
    return 0
