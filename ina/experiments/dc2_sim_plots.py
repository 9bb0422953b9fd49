"""The plots of `ina experiment dc2 --sim` (matplotlib PNGs): the metric against simulated
time per scenario, DC2's level over time under the scenario's capacity and delay, the
regret of every method per scenario, and over generated scenarios the CDF of each method's
regret (`plot_regret_cdf`).

Each figure fits a page: panels wrap into a grid at most `MAX_COLS` wide (twelve scenarios
in one row made a 2,816 x 320 px strip, issue 29), legends sit below the panels, never
over the data, and log axes read in plain numbers (6, 10, 20; not 6x10^0).
"""

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

MAX_COLS = 4  # panels per row: four 4-inch panels at 80 dpi are about 1,300 px
MAX_LEVEL_PANELS = 6  # DC2's level: the first six time-varying scenarios of a generated run
DPI = 80


def _grid(n: int, max_cols: int = MAX_COLS) -> tuple[int, int]:
    """(rows, columns) of a grid for ``n`` panels, at most ``max_cols`` wide."""
    cols = max(1, min(n, max_cols))
    return math.ceil(max(n, 1) / cols), cols


def _plain(value: float, _pos=None) -> str:
    """A log axis's tick as a plain number: 0.003, 0.1, 6, 20, 1000."""
    return f"{value:g}" if value > 0 else ""


def plain_log(axis) -> None:
    """Label a log ``axis`` (``ax.xaxis``, ``ax.yaxis``) in plain numbers: the ticks
    matplotlib labels (the minors too where the axis spans under a decade), not in powers
    of ten."""
    from matplotlib import ticker

    major = ticker.LogFormatter(labelOnlyBase=False)
    minor = ticker.LogFormatter(labelOnlyBase=False)

    class Plain(ticker.Formatter):
        def __init__(self, inner: ticker.LogFormatter) -> None:
            self.inner = inner

        def set_axis(self, axis) -> None:
            super().set_axis(axis)
            self.inner.set_axis(axis)

        def set_locs(self, locs) -> None:
            self.inner.set_locs(locs)

        def __call__(self, x, pos=None) -> str:
            return _plain(x) if self.inner(x, pos) else ""  # the same ticks, plainly

    axis.set_major_formatter(Plain(major))
    axis.set_minor_formatter(Plain(minor))


def _legend_below(fig, handles: list, labels: list[str], ncol: int = 4) -> float:
    """A figure legend under the panels; returns the share of the height it takes."""
    rows = math.ceil(len(labels) / ncol)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), ncol), fontsize=8,
               frameon=False)  # fmt: skip
    return min(0.4, (0.25 * rows + 0.1) / fig.get_figheight())


def _handles(axes) -> tuple[list, list[str]]:
    """Every panel's legend entries, once each (the first panel may have no runs)."""
    legend: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(lab, h)
    return list(legend.values()), list(legend)


def _run_dir(args, workload: str, scenario: str, spec: str) -> Path:
    """The run of the first seed (the curves of one seed; the tables average the seeds)."""
    from ina.sim.scenario import load_scenario

    seeds = args.seed_list
    return sim_run_dir(args.out, workload, load_scenario(scenario).name, Config(spec), seeds[0],
                   len(seeds))  # fmt: skip


def _short(scenario: str) -> str:
    """A scenario as a title shows it: a file's name without its folder (generated ones)."""
    return Path(scenario).stem if scenario.endswith(".json") else scenario


def _colors(configs: list[Config]) -> dict[str, tuple]:
    import matplotlib.pyplot as plt

    return {c.spec: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(configs)}


def plot_accuracy(table: dict, args, out: Path) -> list[Path]:
    """One figure per workload: the metric against simulated time, a panel per scenario."""
    import matplotlib.pyplot as plt

    from ina.workload.catalog import resolve

    colors, paths = _colors(args.config_list), []
    for w, scenarios in table.items():
        wl = resolve(w)
        col = wl.metric.column
        n = len(scenarios)
        rows, cols = _grid(n)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows + 0.8),
                                 squeeze=False)  # fmt: skip
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
            plain_log(ax.xaxis)
            ax.set_title(_short(name), fontsize=10)
            ax.set_xlabel("simulated time (s, log)")
            ax.set_ylabel("test accuracy (%)" if col == "test_acc" else "bits per character")
            if col == "test_acc":
                ax.set_ylim(max(0, target - 40), 100)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        handles, labels = _handles(axes.flat)
        if not labels:  # a --replot of results.csv without the runs' folders: no curves
            plt.close(fig)
            continue
        below = _legend_below(fig, handles, labels)
        fig.suptitle(f"{w}: {wl.metric.name} against simulated time, seed "
                     f"{args.seed_list[0]} (dotted: target)")  # fmt: skip
        fig.tight_layout(rect=(0, below, 1, 0.96))
        paths.append(out / f"dc2sim_accuracy_{w}.png")
        fig.savefig(paths[-1], dpi=DPI)
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
    from ina.experiments.dc2_common import generated, mixes_states

    if generated(args, table):  # no state runs: the path from its file
        names = [n for n in table.get(w, {}) if mixes_states(n)][:MAX_LEVEL_PANELS]
    if not names or not laws:
        return []
    # a scenario is a column of two panels (density over RTT); the columns wrap
    rows, cols = _grid(len(names), 3)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(5 * cols, 5.5 * rows + 0.6), squeeze=False)
    for i in range(len(names), rows * cols):
        axes[2 * (i // cols)][i % cols].axis("off")
        axes[2 * (i // cols) + 1][i % cols].axis("off")
    for i, name in enumerate(names):
        ax, ax_rtt = axes[2 * (i // cols)][i % cols], axes[2 * (i // cols) + 1][i % cols]
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
        plain_log(ax.yaxis)
        ax.set_title(f"{w} / {_short(name)}: density per step", fontsize=10)
        ax.set_ylabel("density (log)")
        ax.grid(alpha=0.3)
        ax_rtt.set_yscale("log")
        plain_log(ax_rtt.yaxis)
        ax_rtt.set_xlabel("simulated time (s)")
        ax_rtt.set_ylabel("rank 0 chunk RTT (ms): srtt, base dotted", fontsize=8)
        ax_rtt.grid(alpha=0.3)
    handles, labels = _handles(axes.flat)
    below = _legend_below(fig, handles, labels) if labels else 0.0
    fig.tight_layout(rect=(0, below, 1, 1))
    path = out / "dc2sim_level.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return [path]


def plot_regret(table: dict, args, out: Path) -> list[Path]:
    """Per workload, a panel per method: its regret (time over the best fixed level's) in
    every scenario, against the goals."""
    import matplotlib.pyplot as plt

    configs = args.config_list
    paths = []
    for w, scenarios in table.items():
        names = list(scenarios)
        rows, cols = _grid(len(configs))
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows + 1.0),
                                 sharey=True, squeeze=False)  # fmt: skip
        cmap = plt.get_cmap("viridis")
        colors = [cmap(i / max(len(names) - 1, 1)) for i in range(len(names))]
        x = np.arange(len(names))
        for ax, c in zip(axes.flat, configs, strict=False):
            # not run there: no bar; not reached (infinite regret): off the top
            vals = [scenarios[n]["regret"].get(c.spec, math.nan) for n in names]
            ax.bar(x, [50.0 if math.isinf(v) else v for v in vals], 0.8, color=colors)
            ax.axhline(GOAL_REGRET, color="green", ls="--", lw=1,
                       label=f"{GOAL_REGRET}x: DC2's goal (at most, everywhere)")  # fmt: skip
            ax.axhline(GOAL_FIXED_REGRET, color="red", ls=":", lw=1,
                       label=f"{GOAL_FIXED_REGRET}x: a fixed level's (at least, somewhere)")  # fmt: skip
            # a configuration named in full (not a law's default) gets a line per parameter
            ax.set_title(label(c).replace(":", "\n"), fontsize=9)
            ax.set_xticks(x, [_short(n) for n in names], fontsize=7, rotation=60, ha="right")
            ax.set_yscale("log")
            plain_log(ax.yaxis)
            ax.grid(alpha=0.3, axis="y")
        for ax in axes[:, 0]:
            ax.set_ylabel("time / best fixed level's")
        for ax in list(axes.flat)[len(configs) :]:
            ax.axis("off")
        handles, labels = _handles(axes.flat)
        below = _legend_below(fig, handles, labels, ncol=2)
        fig.suptitle(f"{w}: regret per method and scenario (at the top: not reached; no bar: "
                     "not run)", fontsize=10)  # fmt: skip
        fig.tight_layout(rect=(0, below, 1, 0.97))
        paths.append(out / f"dc2sim_regret_{w}.png")
        fig.savefig(paths[-1], dpi=DPI)
        plt.close(fig)
    return paths


def plot_regret_cdf(table: dict, args, out: Path) -> list[Path]:
    """Over many (generated) scenarios: per workload, the share of scenarios in which each
    method's regret is at most x. A curve that stops below 1 is a method that missed the
    target somewhere (infinite regret); the legend counts those."""
    import matplotlib.pyplot as plt

    from ina.experiments.dc2_common import regret_distribution

    configs = args.config_list
    colors, dist = _colors(configs), regret_distribution(table, configs)
    cols = len(table)
    fig, axes = plt.subplots(1, cols, figsize=(5.2 * cols, 4.2), squeeze=False, sharey=True)
    for ax, (w, scenarios) in zip(axes.flat, table.items(), strict=True):
        for c in configs:
            known = sorted(r for r in (e["regret"].get(c.spec, math.nan)
                                       for e in scenarios.values()) if not math.isnan(r))  # fmt: skip
            finite = [r for r in known if not math.isinf(r)]
            if not finite:
                continue
            n, d = len(known), dist[w][c.spec]
            y = np.arange(1, len(finite) + 1) / n
            missed = f", missed {d.not_reached}/{n}" if d.not_reached else ""
            ax.step([finite[0], *finite], [0.0, *y], where="post", color=colors[c.spec],
                    lw=1.8 if c.kind == "dc2" else 1.1, ls="-" if c.kind == "dc2" else "--",
                    label=f"{label(c)}: median {d.median:.2f}x{missed}")  # fmt: skip
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.axvline(GOAL_REGRET, color="green", lw=0.8, ls=":")
        ax.set_xscale("log")
        plain_log(ax.xaxis)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{w}: {len(scenarios)} scenarios", fontsize=10)
        ax.set_xlabel("regret: time / best fixed level's (log)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, frameon=False)
    axes[0][0].set_ylabel("share of scenarios with regret <= x")
    rows = max(len(configs), 1)
    fig.set_figheight(4.2 + 0.2 * rows)
    fig.suptitle(f"Regret over generated scenarios (dotted: 1x and {GOAL_REGRET}x)", fontsize=10)
    fig.tight_layout()
    path = out / "dc2sim_regret_cdf.png"
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return [path]


def plot_all(rows: list[dict], table: dict, args, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from ina.experiments.dc2_common import generated

    paths = plot_accuracy(table, args, out) + plot_level(table, args, out)
    paths += plot_regret(table, args, out)
    if generated(args, table):
        paths += plot_regret_cdf(table, args, out)
    return paths
