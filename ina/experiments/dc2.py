"""`ina experiment dc2`: time to accuracy with DC2 against no compression and fixed levels.

For each delay profile (``low`` and ``high`` variation, `ina.netem`) and each configuration
(``dense``: no compression; ``fixed:D``: homomorphic compression at a fixed density D;
``aimd``, ``target``: DC2 with that control law), one `ina train` run trains the same model
from the same seed on the same data through the switch model, with every worker's up and
down link emulated at ``--link-rate`` Mbit/s with the profile's delays. Rank 0 logs every
step (time, density, bytes) and, with DC2, its controller's decisions (RTTs, level); the test
accuracy is measured every ``--eval-every`` steps (that time is left out of the clock).

Outputs in ``--out`` (default ``runs/dc2``):

* ``PROFILE/CONFIG[-rR]/``: each run's own `ina train` outputs (``metrics.csv``,
  ``steps.csv``, ``dc2_rank0.csv``, ``summary.json``, ``train.log``);
* ``results.csv``: one row per run (time to target, speed-ups, final accuracy, ...);
* ``timeline.csv``: every step of every run, with the DC2 controller's RTTs where it has them;
* ``dc2_accuracy.png``: test accuracy against training time, one panel per profile;
* ``dc2_control.png``: density used per step and DC2's smoothed/base RTT over time;
* ``summary.md``: the table (time to target, speed-up vs dense and vs the best fixed level,
  final accuracy) and the goals, met or not.

The default is the short run (about 5 minutes on two cores); ``--long`` runs more steps, more
fixed levels and repeats every configuration to show the spread.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ina import progress
from ina.errors import output_dir
from ina.experiments.dc2_common import DC2_TUNED, Config, output_to, parse_configs

# The two presets. Every value can be overridden on the command line.
SHORT = {
    "profiles": "high,low",
    "configs": f"dense,fixed:0.01,aimd:{DC2_TUNED},target:{DC2_TUNED}",
    "dense_profiles": "high",
    "max_steps": 40,
    "epochs": 2,
    "target_acc": 0.80,
    "stop_at_target": True,
    "repeats": 1,
}
LONG = {
    "profiles": "high,low",
    "configs": f"dense,fixed:0.1,fixed:0.01,fixed:0.001,aimd:{DC2_TUNED},target:{DC2_TUNED},target",
    "dense_profiles": "high,low",
    "max_steps": 0,
    "epochs": 3,
    "target_acc": 0.90,
    "stop_at_target": False,
    "repeats": 2,
}

# Goals of the design (docs/architecture.md, "Goals").
GOAL_VS_DENSE = 5.0  # high variation: at least 5x faster to the target than no compression
GOAL_VS_FIXED = 1.3  # ... and 1.3x faster than the best fixed level
GOAL_ACC_PP = 0.5  # ... with the final accuracy within 0.5 pp of no compression
GOAL_LOW_SLOWDOWN = 0.10  # low variation: at most 10 % slower than the best fixed level


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--long",
        action="store_true",
        help="the long run: "
        + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in LONG.items())
        + " (default: the short run, "
        + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in SHORT.items())
        + ")",
    )
    p.add_argument("--profiles", help="delay profiles, comma-separated (low, high, ...)")
    p.add_argument(
        "--configs",
        help="comma-separated: dense, fixed:DENSITY (homomorphic at that density), aimd, target",
    )
    p.add_argument(
        "--dense-profiles",
        help="profiles on which the dense baseline runs (the slowest run; the goal under low "
        "variation compares DC2 with the fixed levels only)",
    )
    p.add_argument(
        "--stop-at-target",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stop each run once it reaches the target (the short run; the final accuracy "
        "is then compared in the long run)",
    )
    p.add_argument("--workers", type=int, default=2, help="(wall clock; --sim: the scenario's)")
    p.add_argument("--model", default="big_mlp", help="ina train --model (default big_mlp)")
    p.add_argument("--epochs", type=int, help="epochs per run")
    p.add_argument("--max-steps", type=int, help="steps per run (0: the epochs decide)")
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target-acc", type=float, help="target test accuracy, e.g. 0.9")
    p.add_argument(
        "--eval-every", type=int, help="test accuracy every N steps (default 2; --sim: 25)"
    )
    p.add_argument("--repeats", type=int, help="runs of each configuration (spread)")
    p.add_argument(
        "--link-rate",
        type=mbit_per_s,
        default="100M",
        metavar="RATE",
        help="rate of each worker's emulated up and down link, with its unit (default: 100M)",
    )
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet")
    p.add_argument(
        "--pool",
        type=int,
        help="slots per job = the window (default 32: 32 x 1 KiB is about one bandwidth-delay "
        "product of a quiet emulated path, so the link runs full without a standing queue; "
        "--sim: 128, ina train's)",
    )
    p.add_argument(
        "--coding",
        default="support",
        choices=["support", "sketch"],
        help="homomorphic round-2 coding (default support: fewer lanes and faster than "
        "the sketch in the two-round protocol, docs/compression.md)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="ina train --timeout")
    p.add_argument("--out", help="output directory (default runs/dc2; --sim: runs/dc2-sim)")
    p.add_argument(
        "--replot",
        action="store_true",
        help="do not train: rebuild the CSVs, plots and summary from the runs in --out",
    )
    from ina.experiments.dc2_sim import add_sim_arguments

    add_sim_arguments(p)


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left unset from the preset; validate. Raises ValueError."""
    preset = LONG if args.long else SHORT
    args.out = args.out or "runs/dc2"
    args.eval_every = args.eval_every or 2
    args.pool = args.pool or 32
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.profile_list = [s.strip() for s in args.profiles.split(",") if s.strip()]
    args.config_list = parse_configs(args.configs)
    args.dense_list = [s.strip() for s in args.dense_profiles.split(",") if s.strip()]
    from ina.netem import make_link

    for prof in args.profile_list:
        make_link(prof)  # ValueError on an unknown profile or parameter
    if not 0 < args.target_acc <= 1:
        raise ValueError("--target-acc is a fraction in (0, 1]")
    if args.repeats < 1 or args.epochs < 1 or args.max_steps < 0 or args.eval_every < 1:
        raise ValueError("--repeats, --epochs, --eval-every must be >= 1, --max-steps >= 0")
    if not args.link_rate > 0:
        raise ValueError("--link-rate must be > 0")
    return args


def mbit_per_s(text: str) -> float:
    """``--link-rate`` with its unit (``100M``, ``1G``), in Mbit/s (argparse's type)."""
    from ina import units

    try:
        return units.rate(text, "--link-rate") / 1e6
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run_dir(out: Path, profile: str, cfg: Config, repeat: int) -> Path:
    name = cfg.slug + (f"-r{repeat}" if repeat else "")
    return out / profile.replace(":", "_").replace("/", "_") / name


def train_argv(args: argparse.Namespace, profile: str, cfg: Config, where: Path) -> list[str]:
    argv = [
        "--workers", str(args.workers), "--model", args.model, "--epochs", str(args.epochs),
        "--batch-size", str(args.batch_size), "--lr", repr(args.lr), "--seed", str(args.seed),
        "--delay", profile, "--link-rate", f"{args.link_rate:g}M", "--lanes", str(args.lanes),
        "--pool", str(args.pool), "--coding", args.coding, "--timeout", repr(args.timeout),
        "--step-log", "--eval-every", str(args.eval_every), "--no-progress",
        "--out", str(where), *cfg.train_args(),
    ]  # fmt: skip
    if args.max_steps:
        argv += ["--max-steps", str(args.max_steps)]
    if args.stop_at_target:
        argv += ["--stop-at-acc", repr(args.target_acc)]
    return argv


def train_once(argv: list[str], where: Path) -> int:
    """One `ina train` run in this process (its output to ``where/train.log``)."""
    from ina import train_cli

    parser = argparse.ArgumentParser(prog="ina train")
    train_cli.add_arguments(parser)
    targs = parser.parse_args(argv)
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    (where / "argv.json").write_text(json.dumps(argv))
    with output_to(where / "train.log"):
        return train_cli.main(targs)


# ---- reading a run back ---------------------------------------------------------------------


def _float(s: str) -> float:
    return float(s) if s not in ("", None) else math.nan


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class RunData:
    """One finished run, as read back from its directory."""

    profile: str
    config: Config
    repeat: int
    steps: list[dict]  # steps.csv rows, floats
    evals: list[tuple[int, float, float]]  # (step, time_s, accuracy), by step
    dc2: list[dict] = field(default_factory=list)  # dc2_rank0.csv rows, floats
    summary: dict = field(default_factory=dict)

    @classmethod
    def load(cls, where: Path, profile: str, cfg: Config, repeat: int) -> RunData:
        steps = [{k: _float(v) for k, v in r.items()} for r in read_csv(where / "steps.csv")]
        time_at = {int(r["step"]): r["time_s"] for r in steps}
        evals = {int(r["step"]): r["test_acc"] for r in steps if not math.isnan(r["test_acc"])}
        for row in read_csv(where / "metrics.csv"):  # the epoch-end evaluations
            evals.setdefault(int(row["step"]), float(row["test_acc"]))
        points = [(s, time_at[s], a) for s, a in sorted(evals.items()) if s in time_at]
        dc2 = []
        if (where / "dc2_rank0.csv").exists():
            dc2 = [{k: _float(v) for k, v in r.items()} for r in read_csv(where / "dc2_rank0.csv")]
        summary = json.loads((where / "summary.json").read_text())
        return cls(profile, cfg, repeat, steps, points, dc2, summary)

    def time_to(self, target: float) -> tuple[float, int | None]:
        """(training seconds, step) of the first evaluation at or above ``target``."""
        for step, t, acc in self.evals:
            if acc >= target - 1e-12:
                return t, step
        return math.nan, None

    @property
    def total_time(self) -> float:
        return self.steps[-1]["time_s"] if self.steps else math.nan

    @property
    def final_acc(self) -> float:
        return float(self.summary.get("final_accuracy") or math.nan)

    def dc2_times(self) -> list[float]:
        """Training time of each DC2 decision (one per step, made at the step's end)."""
        n = min(len(self.dc2), len(self.steps))
        return [self.steps[i]["time_s"] for i in range(n)]


# ---- results --------------------------------------------------------------------------------


RESULT_FIELDS = (
    "profile", "config", "repeat", "steps", "train_s", "time_to_target_s", "steps_to_target",
    "reached", "speedup_vs_dense", "speedup_vs_best_fixed", "best_fixed", "final_acc",
    "final_acc_minus_dense_pp", "best_acc", "mean_density", "mb_sent_per_step",
    "step_s_mean", "retransmissions",
)  # fmt: skip


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def results(runs: list[RunData], target: float) -> list[dict]:
    """One row per run; speed-ups against the same profile's dense and best fixed runs, whose
    time to target is the median over repeats. Censored times (target not reached) give
    bounds: a run that never reaches it is ``nan``; dense that never reaches it gives a lower
    bound on the speed-up (its whole training time), marked in ``reached`` of the dense row."""
    rows = []
    by_profile: dict[str, list[RunData]] = {}
    for r in runs:
        by_profile.setdefault(r.profile, []).append(r)
    for profile, group in by_profile.items():
        dense = [r for r in group if r.config.kind == "dense"]
        dense_t = _median([r.time_to(target)[0] for r in dense])
        dense_bound = _median([r.total_time for r in dense]) if math.isnan(dense_t) else dense_t
        dense_acc = _median([r.final_acc for r in dense])
        fixed: dict[str, float] = {}
        for r in group:
            if r.config.kind == "fixed":
                fixed.setdefault(r.config.spec, [])
        for spec in fixed:
            fixed[spec] = _median([r.time_to(target)[0] for r in group if r.config.spec == spec])
        reached_fixed = {s: t for s, t in fixed.items() if not math.isnan(t)}
        best_spec = min(reached_fixed, key=reached_fixed.get) if reached_fixed else ""
        best_t = reached_fixed.get(best_spec, math.nan)
        for r in group:
            t, step = r.time_to(target)
            st = r.steps
            bytes_sent = st[-1]["bytes_sent"] if st else math.nan
            rows.append(
                {
                    "profile": profile,
                    "config": r.config.spec,
                    "repeat": r.repeat,
                    "steps": len(st),
                    "train_s": r.total_time,
                    "time_to_target_s": t,
                    "steps_to_target": step if step is not None else "",
                    "reached": int(not math.isnan(t)),
                    "speedup_vs_dense": dense_bound / t if dense else math.nan,
                    "speedup_vs_best_fixed": best_t / t,
                    "best_fixed": best_spec,
                    "final_acc": r.final_acc,
                    "final_acc_minus_dense_pp": 100 * (r.final_acc - dense_acc),
                    "best_acc": max((a for _, _, a in r.evals), default=math.nan),
                    "mean_density": statistics.fmean(x["density"] for x in st) if st else math.nan,
                    "mb_sent_per_step": bytes_sent / max(len(st), 1) / 1e6,
                    "step_s_mean": statistics.fmean(x["step_s"] for x in st) if st else math.nan,
                    "retransmissions": r.summary["ranks"][0].get("retransmissions", ""),
                }
            )
    return rows


def write_results(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RESULT_FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


TIMELINE_FIELDS = (
    "profile", "config", "repeat", "step", "time_s", "step_s", "comm_s", "loss", "density",
    "level", "bytes_sent", "test_acc", "srtt_ms", "base_rtt_ms", "p95_ms", "dc2_density",
)  # fmt: skip


def write_timeline(runs: list[RunData], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TIMELINE_FIELDS)
        for r in runs:
            for i, s in enumerate(r.steps):
                d = r.dc2[i] if i < len(r.dc2) else None
                acc = "" if math.isnan(s["test_acc"]) else f"{s['test_acc']:.4f}"
                w.writerow(
                    [r.profile, r.config.spec, r.repeat, int(s["step"]), f"{s['time_s']:.4f}",
                     f"{s['step_s']:.4f}", f"{s['comm_s']:.4f}", f"{s['loss']:.5g}",
                     f"{s['density']:.5g}", int(s["level"]), int(s["bytes_sent"]), acc,
                     _ms(d, "srtt"), _ms(d, "base_rtt"), _ms(d, "p95"),
                     f"{d['density']:.5g}" if d else ""]
                )  # fmt: skip


def _ms(d: dict | None, key: str) -> str:
    return f"{1e3 * d[key]:.4g}" if d else ""


def _fmt_pp(x: float, stopped: bool) -> str:
    return "–" if stopped or math.isnan(x) else f"{x:+.2f} pp"


def _fmt_s(t: float) -> str:
    return "not reached" if math.isnan(t) else f"{t:.1f} s"


def _fmt_x(x: float, bound: bool = False) -> str:
    if math.isnan(x):
        return "–"
    return ("≥ " if bound else "") + f"{x:.2f}x"


def summary_markdown(rows: list[dict], args: argparse.Namespace, wall_s: float) -> str:
    """The markdown table (medians over repeats, min-max spread of the time to target) and the
    goals, met or not."""
    target = args.target_acc
    lines = [
        f"# DC2 experiment ({'long' if args.long else 'short'} run)",
        "",
        f"{args.model}, {args.workers} workers x batch {args.batch_size}, lr {args.lr}, seed "
        f"{args.seed}, {args.epochs} epochs"
        + (f" capped at {args.max_steps} steps" if args.max_steps else "")
        + f"; links {args.link_rate:g} Mbit/s per direction per worker, {args.lanes} lanes "
        f"per packet, window (pool) {args.pool}; homomorphic coding `{args.coding}`; test "
        f"accuracy every {args.eval_every} steps; target {100 * target:.1f} %; "
        f"{args.repeats} run(s) per configuration; experiment wall time {wall_s / 60:.1f} min.",
        "",
        "Times are training time on rank 0 (process start-up and the periodic evaluations left "
        "out). With repeats: median, and the spread (min-max) in brackets. `DC2 aimd` and "
        f"`DC2 target` run with the law parameters `{DC2_TUNED}`; `(law defaults)` marks a "
        "law with its defaults (start dense, floor 0.1 %)."
        + (
            " Runs stop at the target accuracy, so the final accuracy is about the target; "
            "it is compared in the long run."
            if args.stop_at_target
            else ""
        ),
        "",
    ]
    goals = []
    for profile in dict.fromkeys(r["profile"] for r in rows):
        group = [r for r in rows if r["profile"] == profile]
        lines += [
            f"## {profile} delay variation",
            "",
            "| configuration | time to target | speed-up vs dense | vs best fixed | final "
            "accuracy | vs dense | mean density | MB sent per step | s per step |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        dense_rows = [r for r in group if r["config"] == "dense"]
        dense_censored = bool(dense_rows) and not any(r["reached"] for r in dense_rows)
        agg = {}
        for spec in dict.fromkeys(r["config"] for r in group):
            rs = [r for r in group if r["config"] == spec]
            med = {k: _median([float(r[k]) for r in rs]) for k in (
                "time_to_target_s", "speedup_vs_dense", "speedup_vs_best_fixed", "final_acc",
                "final_acc_minus_dense_pp", "mean_density", "mb_sent_per_step", "step_s_mean",
            )}  # fmt: skip
            agg[spec] = med
            ts = [float(r["time_to_target_s"]) for r in rs]
            spread = ""
            if len(rs) > 1:
                ok = [t for t in ts if not math.isnan(t)]
                spread = f" [{min(ok):.1f}-{max(ok):.1f}]" if ok else ""
                if len(ok) < len(ts):
                    spread += f" ({len(ts) - len(ok)} of {len(ts)} not reached)"
            label = Config(spec).label
            lines.append(
                f"| {label} | {_fmt_s(med['time_to_target_s'])}{spread} | "
                f"{_fmt_x(med['speedup_vs_dense'], dense_censored)} | "
                f"{_fmt_x(med['speedup_vs_best_fixed'])} | {100 * med['final_acc']:.2f} % | "
                f"{_fmt_pp(med['final_acc_minus_dense_pp'], args.stop_at_target)} | "
                f"{med['mean_density']:.3g} | "
                f"{med['mb_sent_per_step']:.2f} | {med['step_s_mean']:.2f} |"
            )
        best = group[0]["best_fixed"]
        lines += ["", f"Best fixed level: {Config(best).label if best else 'none reached'}."]
        if dense_censored:
            lines.append(
                "Dense did not reach the target: its speed-ups are lower bounds (its whole "
                "training time over the run's time to target)."
            )
        lines.append("")
        for spec, med in agg.items():
            if Config(spec).kind == "dc2":
                goals += _goals(f"{Config(spec).label}, {profile}", profile, med, args)
    lines += ["## Goals", "", *goals, ""]
    return "\n".join(lines)


def _verdict(x: float, ok: bool, why_na: str) -> str:
    return f"**n/a** ({why_na})" if math.isnan(x) else f"**{'met' if ok else 'not met'}**"


def _goals(name: str, profile: str, med: dict, args: argparse.Namespace) -> list[str]:
    """The design goals for one DC2 configuration on one profile, met or not."""
    out = []
    if profile.startswith("high"):
        for what, x, goal, na in (
            ("speed-up vs dense", med["speedup_vs_dense"], GOAL_VS_DENSE, "no dense run"),
            ("speed-up vs best fixed", med["speedup_vs_best_fixed"], GOAL_VS_FIXED,
             "no fixed level reached the target"),
        ):  # fmt: skip
            out.append(
                f"- {name}: {what} {_fmt_x(x)} (goal >= {goal}x): "
                + _verdict(x, not math.isnan(x) and x >= goal, na)
            )
        dacc = med["final_acc_minus_dense_pp"]
        if args.stop_at_target:
            dacc = math.nan
        out.append(
            f"- {name}: final accuracy vs dense {dacc:+.2f} pp (goal >= -{GOAL_ACC_PP} pp): "
            + _verdict(dacc, dacc >= -GOAL_ACC_PP, "runs stop at the target: see the long run")
        )
    elif profile.startswith("low"):
        x = med["speedup_vs_best_fixed"]
        slower = 100 * (1 / x - 1) if x and not math.isnan(x) else math.nan
        out.append(
            f"- {name}: {slower:+.1f} % time to target vs the best fixed level (goal <= "
            f"+{100 * GOAL_LOW_SLOWDOWN:.0f} %): "
            + _verdict(slower, slower <= 100 * GOAL_LOW_SLOWDOWN, "no fixed level reached it")
        )
    return out


# ---- plots ----------------------------------------------------------------------------------


def plot(runs: list[RunData], args: argparse.Namespace, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ina.control.dc2.laws import LADDER_MIN_DENSITY

    profiles = list(dict.fromkeys(r.profile for r in runs))
    specs = list(dict.fromkeys(r.config.spec for r in runs))
    colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(specs)}
    first = [r for r in runs if r.repeat == 0]
    paths = []

    fig, axes = plt.subplots(1, len(profiles), figsize=(5.5 * len(profiles), 4), squeeze=False)
    for ax, profile in zip(axes[0], profiles, strict=True):
        for r in runs:
            if r.profile != profile:
                continue
            _, ts, accs = zip(*r.evals, strict=True) if r.evals else ((), (), ())
            c, first_run = colors[r.config.spec], r.repeat == 0
            ax.plot(ts, [100 * a for a in accs], color=c, lw=1.2, alpha=1.0 if first_run else 0.35,
                    label=r.config.label if first_run else None)  # fmt: skip
            t, _ = r.time_to(args.target_acc)
            if not math.isnan(t):  # where the run first reached the target
                ax.plot([t], [100 * args.target_acc], "o", color=c, ms=5,
                        alpha=1.0 if first_run else 0.35)  # fmt: skip
        ax.axhline(100 * args.target_acc, color="grey", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("training time (s, log)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(max(0, 100 * args.target_acc - 40), 100)
        ax.set_title(f"{profile} delay variation: accuracy (dot: target reached)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    paths.append(out / "dc2_accuracy.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    # Level and RTT over time: DC2 runs as time series, the fixed levels as reference lines;
    # the time axis spans the DC2 runs (dense takes far longer and would squeeze them).
    fig, axes = plt.subplots(
        2, len(profiles), figsize=(5.5 * len(profiles), 6), squeeze=False, sharex="col"
    )
    for col, profile in enumerate(profiles):
        mine = [r for r in first if r.profile == profile]
        adaptive = [r for r in mine if r.config.kind == "dc2"] or mine
        t_end = max((r.total_time for r in adaptive), default=1.0)
        ax = axes[0][col]
        for r in mine:
            c = colors[r.config.spec]
            if r.config.kind == "dc2":
                ax.step([s["time_s"] for s in r.steps], [s["density"] for s in r.steps],
                        where="post", color=c, lw=1.3, label=r.config.label)  # fmt: skip
            else:
                level = 1.0 if r.config.kind == "dense" else r.config.density
                ax.axhline(level, color=c, ls="--", lw=1.0, label=r.config.label)
        ax.set_yscale("log")
        ax.set_ylim(LADDER_MIN_DENSITY / 1.5, 1.5)
        ax.set_xlim(0, 1.02 * t_end)
        ax.set_ylabel("density used (log)")
        ax.set_title(f"{profile} delay variation: compression level per step")
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        for r in mine:
            if not r.dc2:
                continue
            t = r.dc2_times()
            c = colors[r.config.spec]
            ax.plot(t, [1e3 * d["srtt"] for d in r.dc2[: len(t)]], color=c, lw=1.1)
            ax.plot(t, [1e3 * d["base_rtt"] for d in r.dc2[: len(t)]], color=c, lw=0.9, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("rank 0 chunk RTT (ms, log)")
        ax.set_title("DC2 monitor: srtt (solid), base RTT (dotted)", fontsize=10)
        ax.grid(alpha=0.3)
    handles: dict = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(4, len(handles)),
               fontsize=8, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0.01 + 0.03 * math.ceil(len(handles) / 4), 1, 1))
    paths.append(out / "dc2_control.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def _say(bar, line: str) -> None:
    """A line on stdout, above the progress bar (which tqdm clears and draws again)."""
    bar.write(line, file=sys.stdout)
    sys.stdout.flush()


def main(args: argparse.Namespace) -> int:
    if args.sim:
        from ina.experiments import dc2_sim

        return dc2_sim.main(args)
    try:
        args = resolve(args)
    except ValueError as e:
        print(f"ina experiment dc2: {e}", file=sys.stderr)
        return 2
    if args.replot and not Path(args.out).is_dir():
        print(f"ina experiment dc2: --replot redraws the runs in --out {args.out}: no such "
              "folder", file=sys.stderr)  # fmt: skip
        return 2
    out = output_dir(args.out)  # writable, before any run
    t0 = time.monotonic()
    plan = [
        (rep, prof, cfg)
        for rep in range(args.repeats)
        for prof in args.profile_list
        for cfg in args.config_list
        if cfg.kind != "dense" or prof in args.dense_list
    ]
    failed = []
    if not args.replot:
        print(
            f"ina experiment dc2: {len(plan)} runs ({args.model}, {args.workers} workers, "
            f"profiles {', '.join(args.profile_list)}; target {100 * args.target_acc:.1f} %) "
            f"into {out}",
            flush=True,
        )
        with progress.bar(len(plan), "dc2 runs") as bar:
            for i, (rep, prof, cfg) in enumerate(plan, 1):
                where = run_dir(out, prof, cfg, rep)
                t = time.monotonic()
                rc = train_once(train_argv(args, prof, cfg, where), where)
                bar.update(1)
                line = f"[{i}/{len(plan)}] {prof:<5} {cfg.label:<12}"
                if rc != 0:
                    failed.append(where)
                    _say(bar, f"{line} FAILED (rc {rc}): see {where / 'train.log'}")
                    continue
                r = RunData.load(where, prof, cfg, rep)
                tt, _ = r.time_to(args.target_acc)
                _say(bar, f"{line} {len(r.steps)} steps in {r.total_time:6.1f} s, time to "
                     f"target {_fmt_s(tt):>11}, final accuracy {100 * r.final_acc:.2f} % "
                     f"({time.monotonic() - t:.0f} s with start-up)")  # fmt: skip
    runs = []
    for rep, prof, cfg in plan:
        where = run_dir(out, prof, cfg, rep)
        if (where / "summary.json").exists() and (where / "steps.csv").exists():
            runs.append(RunData.load(where, prof, cfg, rep))
    if not runs:
        print(f"ina experiment dc2: no finished runs in {out}", file=sys.stderr)
        return 2 if args.replot else 1  # (--replot of an empty folder: a wrong --out)
    rows = results(runs, args.target_acc)
    write_results(rows, out / "results.csv")
    write_timeline(runs, out / "timeline.csv")
    pngs = plot(runs, args, out)
    wall_file = out / "wall_seconds.txt"  # the training runs' wall time, kept for --replot
    if not args.replot:
        wall_file.write_text(f"{time.monotonic() - t0:.1f}\n")
    wall = float(wall_file.read_text()) if wall_file.exists() else math.nan
    md = summary_markdown(rows, args, wall)
    (out / "summary.md").write_text(md)
    print("\n" + md)
    print(f"written: {out / 'results.csv'}, {out / 'timeline.csv'}, {out / 'summary.md'}, "
          + ", ".join(str(p) for p in pngs))  # fmt: skip
    if failed:
        print(f"ina experiment dc2: {len(failed)} run(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="ina experiment dc2", description=__doc__.split("\n")[0])
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
