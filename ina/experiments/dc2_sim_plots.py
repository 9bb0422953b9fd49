"""The plots of `ina experiment dc2 --sim` (matplotlib PNGs): the metric against simulated
time per scenario, DC2's level over time under the scenario's capacity and delay, and the
regret of every method per scenario."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ina.experiments.dc2_common import (
    GOAL_FIXED_REGRET,
    GOAL_REGRET,
    Config,
    label,
    read_steps,
    sim_run_dir,
)


def _run_dir(args, workload: str, scenario: str, spec: str) -> Path:
    """The run of the first seed (the curves of one seed; the tables average the seeds)."""
    from ina.sim.scenario import load_scenario

    seeds = args.seed_list
    return sim_run_dir(args.out, workload, load_scenario(scenario).name, Config(spec), seeds[0],
                   len(seeds))  # fmt: skip


def _colors(configs: list[Config]) -> dict[str, tuple]:
    import matplotlib.pyplot as plt

    return {c.spec: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(configs)}


def plot_accuracy(table: dict, args, out: Path) -> list[Path]:
    """One figure per workload: the metric against simulated time, a panel per scenario."""
    import matplotlib.pyplot as plt

    from ina.workload.tasks import resolve

    colors, paths = _colors(args.config_list), []
    for w, scenarios in table.items():
        wl = resolve(w)
        col = wl.metric.column
        n = len(scenarios)
        cols = min(n, 4)
        rows = math.ceil(n / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
        for ax, name in zip(axes.flat, scenarios, strict=False):
            for c in args.config_list:
                steps = read_steps(_run_dir(args, w, name, c.spec))
                pts = [(s["time_s"], s[col]) for s in steps if not math.isnan(s.get(col, math.nan))]
                if not pts:
                    continue
                t, v = zip(*pts, strict=True)
                scale = 100 if col == "test_acc" else 1
                ax.plot(t, [scale * x for x in v], color=colors[c.spec], lw=1.2,
                        ls="-" if c.kind == "dc2" else "--", label=label(c))  # fmt: skip
            target = args.target_map.get(w, wl.default_target) * (100 if col == "test_acc" else 1)
            ax.axhline(target, color="grey", lw=0.8, ls=":")
            ax.set_xscale("log")
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("simulated time (s, log)")
            ax.set_ylabel("test accuracy (%)" if col == "test_acc" else "bits per character")
            if col == "test_acc":
                ax.set_ylim(max(0, target - 40), 100)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        legend: dict = {}  # label -> handle, from every panel (the first may have no runs)
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(lab, h)
        if not legend:  # a --replot of results.csv without the runs' folders: no curves
            plt.close(fig)
            continue
        handles, labels = list(legend.values()), list(legend)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8,
                   frameon=False)  # fmt: skip
        fig.suptitle(f"{w}: {wl.metric.name} against simulated time, seed "
                     f"{args.seed_list[0]} (dotted: target)")  # fmt: skip
        fig.tight_layout(rect=(0, 0.05, 1, 0.96))
        paths.append(out / f"dc2sim_accuracy_{w}.png")
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths


def _path_over_time(scenario: str, t: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(capacity share, extra delay in ms) of the scenario's links at times ``t``."""
    from ina.netem import TimelineDelay
    from ina.sim.network import capacity_model
    from ina.sim.scenario import load_scenario

    up = load_scenario(scenario).up
    share = capacity_model(up.capacity, seed=0).share(t) if up.capacity else None
    delay = None
    if up.profile.startswith("timeline:"):
        delay = 1e3 * TimelineDelay(up.profile.partition(":")[2]).delays(t)
    return share, delay


def plot_level(table: dict, args, out: Path) -> list[Path]:
    """DC2's density per step under each time-varying scenario's capacity (and delay), and
    its monitor's smoothed and base RTT, for the first workload."""
    import csv

    import matplotlib.pyplot as plt

    colors = _colors(args.config_list)
    laws = [c for c in args.config_list if c.kind == "dc2"]
    w = next(iter(table), None)
    names = [n for n, e in table.get(w, {}).items() if len(e["states"]) > 1 or n == "slow"]
    if not names or not laws:
        return []
    fig, axes = plt.subplots(2, len(names), figsize=(5 * len(names), 5.5), squeeze=False)
    for col, name in enumerate(names):
        ax, ax_rtt = axes[0][col], axes[1][col]
        t_end = 0.0
        for c in laws:
            where = _run_dir(args, w, name, c.spec)
            steps = read_steps(where)
            if not steps:
                continue
            t = [s["time_s"] for s in steps]
            t_end = max(t_end, t[-1])
            ax.step(t, [s["density"] for s in steps], where="post", color=colors[c.spec],
                    lw=1.2, label=label(c))  # fmt: skip
            if (where / "dc2_rank0.csv").exists():
                with open(where / "dc2_rank0.csv", newline="") as f:
                    dec = list(csv.DictReader(f))
                n = min(len(dec), len(t))
                ax_rtt.plot(t[:n], [1e3 * float(d["srtt"]) for d in dec[:n]], color=colors[c.spec],
                            lw=1.0, label=f"{label(c)} srtt")  # fmt: skip
                ax_rtt.plot(t[:n], [1e3 * float(d["base_rtt"]) for d in dec[:n]],
                            color=colors[c.spec], lw=0.8, ls=":")  # fmt: skip
        grid = np.linspace(0, max(t_end, 1e-6), 2000)
        share, delay = _path_over_time(name, grid)
        if share is not None:
            ax.fill_between(grid, 1e-3, 1.5, where=share < 1, color="red", alpha=0.12, lw=0,
                            label="cross traffic on", step="post")  # fmt: skip
        if delay is not None:
            twin = ax_rtt.twinx()
            twin.plot(grid, delay, color="grey", lw=0.8)
            twin.set_ylabel("trace: extra delay (ms)", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylim(1e-3, 1.5)
        ax.set_title(f"{w} / {name}: density per step", fontsize=10)
        ax.set_ylabel("density (log)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        ax_rtt.set_yscale("log")
        ax_rtt.set_xlabel("simulated time (s)")
        ax_rtt.set_ylabel("rank 0 chunk RTT (ms): srtt, base dotted", fontsize=8)
        ax_rtt.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "dc2sim_level.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]


def plot_regret(table: dict, args, out: Path) -> list[Path]:
    """Per method, its regret (time over the best fixed level's) in every scenario."""
    import matplotlib.pyplot as plt

    configs = args.config_list
    paths = []
    for w, scenarios in table.items():
        names = list(scenarios)
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(configs) * max(1, len(names)) / 3), 4))
        width = 0.8 / max(len(names), 1)
        cmap = plt.get_cmap("viridis")
        for i, name in enumerate(names):
            # not run there: no bar; not reached (infinite regret): off the top
            vals = [scenarios[name]["regret"].get(c.spec, math.nan) for c in configs]
            vals = [50.0 if math.isinf(v) else v for v in vals]
            ax.bar(np.arange(len(configs)) + (i - (len(names) - 1) / 2) * width, vals, width,
                   color=cmap(i / max(len(names) - 1, 1)), label=name)  # fmt: skip
        ax.axhline(GOAL_REGRET, color="green", ls="--", lw=1, label=f"{GOAL_REGRET}x (DC2 goal)")
        ax.axhline(GOAL_FIXED_REGRET, color="red", ls=":", lw=1, label=f"{GOAL_FIXED_REGRET}x")
        # a configuration named in full (not a law's default) gets a line per parameter
        names = [label(c).replace(":", "\n") for c in configs]
        ax.set_xticks(np.arange(len(configs)), names, fontsize=8, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("time to target / best fixed level's")
        ax.set_title(
            f"{w}: regret per method and scenario (at the top: not reached; no bar: not run)",
            fontsize=10,
        )
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out / f"dc2sim_regret_{w}.png")
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths


def plot_all(rows: list[dict], table: dict, args, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    return (
        plot_accuracy(table, args, out)
        + plot_level(table, args, out)
        + plot_regret(table, args, out)
    )
