"""What the DC2 studies share (`ina.experiments.dc2` on the wall clock, `dc2_sim` in simulated
time, and its plots): compression configurations, the laws' configurations, the goals, where
a simulated run writes and how its step log is read."""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ina.sim import regret as rg

# DC2's laws as this experiment runs them: start at, and never go below, 1 % density. Below
# about 1/(32 N) the OR round's bitmap (n/32 words, 3 % of dense) dominates the traffic, so
# harder compression saves little time and costs accuracy; starting there, rather than
# dense, is TCP's slow start (start small, grow while the path is quiet). The laws'
# defaults (initial 1.0, floor 0.1 %) are in the long run too, as `target`.
DC2_TUNED = "initial=0.01:min_density=0.01"

# ONE configuration per law, used in every scenario and workload (no per-scenario tuning).
# The signal is the queueing delay the workers see (srtt - base RTT of their chunks). An
# absolute bound of 0.5 ms: the time of a byte-bound step is compute plus queueing, so a
# queue of about half a (1 ms) step is where sending fewer bytes starts to pay for the steps
# it costs (docs/dc2.md, "DC2 in simulated time"). Floor 0.003: the hardest rung of the
# ladder that still reaches the targets. The target law with gain 1 and steps of up to 8x:
# the queue a step builds is proportional to its bytes, so one step of ln(q / target) lands
# on the target (a first try with the law's gain 0.5 and 2x steps took 4-5 steps, 15-20 ms,
# to come down at the start of an episode and as long to come back up after it).
DC2_DEFAULT = {
    "ownq": "ownq:share=0.08:share_low=0.64:knee=0.03:knee_width=0.55:min_density=0.003:"
    "gain=0.5:max_step=1.386",
    "cost": "cost:share=0.08:share_low=0.64:knee=0.03:knee_width=0.55:min_density=0.003:"
    "gain=0.5:max_step=1.386",
    "target": "target:target_s=0.0005:min_density=0.003:gain=1:max_step=2.08",
    "aimd": "aimd:threshold_s=0.0005:min_density=0.003:increase=0.05",
}

GOAL_REGRET = 1.15  # DC2 within 1.15x of the best fixed level in every scenario
GOAL_FIXED_REGRET = 1.5  # every fixed level >= 1.5x slower than the best somewhere


@dataclass(frozen=True)
class Config:
    """One compression configuration: ``dense``, ``fixed:D``, or a DC2 law name with optional
    law parameters, ``target:initial=0.01:min_density=0.01``."""

    spec: str

    @property
    def kind(self) -> str:
        if self.spec == "dense":
            return "dense"
        return "fixed" if self.spec.startswith("fixed:") else "dc2"

    @property
    def density(self) -> float | None:
        return float(self.spec.split(":", 1)[1]) if self.kind == "fixed" else None

    @property
    def law(self) -> str | None:
        return self.spec.split(":")[0] if self.kind == "dc2" else None

    @property
    def law_params(self) -> list[str]:
        return self.spec.split(":")[1:] if self.kind == "dc2" else []

    @property
    def label(self) -> str:
        if self.kind == "fixed":
            return f"fixed {self.density:g}"
        if self.kind == "dense":
            return "dense"
        params = ":".join(self.law_params)
        if params == DC2_TUNED:
            return f"DC2 {self.law}"
        return f"DC2 {self.law} ({params.replace(':', ', ') if params else 'law defaults'})"

    @property
    def slug(self) -> str:
        return self.spec.replace(":", "_").replace("=", "").replace("/", "_")

    def train_args(self) -> list[str]:
        if self.kind == "dense":
            return ["--compression", "dense"]
        if self.kind == "fixed":
            return ["--compression", "homomorphic", "--density", repr(self.density)]
        out = ["--compression", "dc2", "--law", self.law]
        for item in self.law_params:
            out += ["--law-param", item]
        return out


def parse_configs(text: str) -> list[Config]:
    """``dense,fixed:0.01,aimd,target:initial=0.01`` -> configurations; raises ValueError on a
    bad one."""
    from ina.control.dc2.laws import LAWS, law_params, make_law

    out = []
    for spec in (s.strip() for s in text.split(",") if s.strip()):
        cfg = Config(spec)
        if cfg.kind == "fixed":
            try:
                d = cfg.density
            except ValueError:
                raise ValueError(f"bad fixed level {spec!r}: use fixed:DENSITY") from None
            if not 0 < d < 1:
                raise ValueError(f"fixed density must be in (0, 1), got {spec!r}")
        elif cfg.kind == "dc2":
            if cfg.law not in LAWS or cfg.law == "fixed":
                raise ValueError(
                    f"unknown configuration {spec!r}: dense, fixed:DENSITY or a DC2 law "
                    f"({', '.join(sorted(k for k in LAWS if k != 'fixed'))}), optionally "
                    "with law parameters: target:initial=0.01:min_density=0.01"
                )
            try:
                make_law(cfg.law, **law_params(cfg.law_params))
            except (TypeError, ValueError) as e:
                raise ValueError(f"configuration {spec!r}: {e}") from None
        out.append(cfg)
    if not out:
        raise ValueError("no configurations")
    if len({c.spec for c in out}) != len(out):
        raise ValueError("a configuration is listed twice")
    return out


@contextlib.contextmanager
def output_to(path: Path):
    """Send this process's stdout and stderr (file descriptors 1 and 2, so that child processes
    follow) to ``path`` for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def label(cfg: Config) -> str:
    """``DC2 LAW`` for a law's default configuration; another one is named in full."""
    if cfg.kind != "dc2":
        return cfg.label
    return f"DC2 {cfg.law}" if DC2_DEFAULT.get(cfg.law) == cfg.spec else f"DC2 {cfg.spec}"


def read_steps(where: Path) -> list[dict]:
    path = where / "steps.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [
            {k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def sim_run_dir(out: Path | str, workload: str, scenario: str, cfg: Config, seed: int, seeds: int):
    """Where one run to target writes: a ``seed-S`` folder per seed when there are several."""
    base = Path(out) / workload / scenario / cfg.slug
    return base / f"seed-{seed}" if seeds > 1 else base


def mixes_states(scenario: str) -> bool:
    """Whether the scenario mixes steady states, so that its oracle needs the state runs
    (False for a scenario file that cannot be read here)."""
    from ina.sim.scenario import load_scenario

    try:
        return len(load_scenario(scenario).states()) >= 2
    except ValueError:
        return False


def generated(args: argparse.Namespace, table: dict) -> bool:
    """Whether this run's scenarios were generated (--generated, or a --replot of such a run:
    every scenario file carries a generator record)."""
    from ina.sim.generate import record

    if getattr(args, "generated", None):
        return True
    names = {name for scenarios in table.values() for name in scenarios}
    return bool(names) and all(record(n) is not None for n in names)


def regret_distribution(table: dict, configs: list[Config]) -> dict[str, dict[str, rg.Distribution]]:  # fmt: skip
    """Per workload and method, its regret over the scenarios (`regret.distribution`)."""
    return {
        w: {
            c.spec: rg.distribution(e["regret"].get(c.spec, math.nan) for e in scenarios.values())
            for c in configs
        }
        for w, scenarios in table.items()
    }
