"""`ina experiment stragglers`: how one slow worker, or jitter on every worker, sets the pace of
a data-parallel step with INA and with a ring, simulated beside its analytic expectation.

The step is `ina sim train`'s (`ina.sim.train_steps.prepare`, then `ina.sim.step.simulate`):
a workload's layers timed on a device profile, DDP's buckets reduced as backward produces
them, timing only, INA through the simulated switch and the ring (or halving-doubling) from
`ina.sim.baselines` over the same links. Timing only simulates one worker per class of alike
workers (`ina.sim.step.straggler_classes`): a slow worker is a class of its own, so INA's
slow-worker runs give every worker's times, the 1,023 waiting ones included. Jitter makes
every worker differ; beyond one switch's 32 classes one representative runs at the slowest
factor of each step.

1. **Reference**: one step without stragglers per algorithm; its timeline gives each
   bucket's allreduce time ``d_b``.
2. **One slow worker** (``slow:0=F``, one run per ``F``): every slot of INA and every step
   of the ring waits for the slow worker's data, so the step is the slow worker's.
3. **Jitter** (``jitter:SIGMA``, several steps, mean): each worker's compute is scaled by an
   independent lognormal factor of mean 1 at every step; the step is the slowest worker's.
4. **Expectation**: the step model's overlap, written out. With the slowest worker's factor
   ``f`` (backward start ``f * forward``, bucket ``b`` ready ``f * r_b`` later), bucket ``b``
   ends at ``c_b = max(c_{b-1}, f r_b) + d_b`` (one stream), and the iteration is
   ``T(f) = f (forward + optimizer) + max(f backward, c_B)``: the slowest worker's compute
   plus the communication still exposed after its last gradient is ready. With jitter,
   ``f`` is the largest of N lognormals: ``E[T]`` is integrated over its distribution
   (``P(max <= x) = Phi((ln x + SIGMA^2/2) / SIGMA)^N``, midpoint rule on a grid of the
   normal quantile), and ``T`` is also evaluated at the run's own draws.

``d_b`` comes from the reference run, so at ``F = 1`` the expectation equals the simulation by
construction; elsewhere it is a prediction, exact where a bucket's time does not depend on
when it starts (the ring's always; INA's on idle, lossless links).

Outputs in ``--out`` (default ``runs/stragglers``): ``report.md`` and ``result.json``;
``--report PATH`` writes the markdown there too (``docs/results/stragglers.md``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ina.errors import UsageError, output_dir

SLOW_WORKER = 0  # timing only: which worker is slow changes nothing (links alike)
DEFAULTS = {
    "workload": "resnet50",
    "device": "a100",
    "precision": "bf16",
    "workers": 1024,
    "link_rate": "100G",
    "algorithms": "ina,ring",
    "slowdowns": "1,1.25,1.5,1.75,2",
    "jitters": "0.05,0.1,0.2",
    "steps": 1,
    "jitter_steps": 3,
    "seed": 0,
}
# the default setting, chosen before any result: stated in the report when it is the one run
WHY = (
    "Why this setting: ResNet-50 is the usual data-parallel benchmark (MLPerf Training's image "
    "classifier), small enough to need no model parallelism; A100 with bf16 (its tensor-core "
    "training precision) is a common data-parallel training GPU, and a bf16 ring moves about "
    "the bytes of INA's int32 lanes, so neither wins on bytes alone; 100 Gbit/s is the link "
    "rate of the other studies here"
)
Z_GRID = np.linspace(-8.0, 9.0, 17_001)  # the max of N <= 2^16 normals lies well inside


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    p.add_argument("--workload", default=d["workload"], help="a zoo model (ina workloads)")
    p.add_argument("--device", default=d["device"])
    p.add_argument("--precision", default=d["precision"])
    p.add_argument("--workers", type=int, default=d["workers"])
    p.add_argument("--link-rate", default=d["link_rate"], help="every link, both ways")
    p.add_argument(
        "--algorithms", default=d["algorithms"], help="ina, ring, halving-doubling (comma list)"
    )
    p.add_argument(
        "--slowdowns", default=d["slowdowns"], help="the slow worker's factors, each >= 1"
    )
    p.add_argument("--jitters", default=d["jitters"], help="lognormal sigmas, each > 0")
    p.add_argument("--steps", type=int, default=d["steps"], help="steps of each slow-worker run")
    p.add_argument(
        "--jitter-steps", type=int, default=d["jitter_steps"], help="steps of each jitter run"
    )
    p.add_argument(
        "--seed", type=int, default=d["seed"], help="seed of the jitter draws (default 0)"
    )
    p.add_argument("--out", default="runs/stragglers", help="folder for report.md, result.json")
    p.add_argument("--report", help="also write the markdown report here")


def parse_list(text: str, option: str, least: float, strict: bool) -> tuple[float, ...]:
    """Comma-separated numbers, each >= ``least`` (> ``least`` if ``strict``)."""
    out = []
    for item in text.split(","):
        try:
            x = float(item)
        except ValueError:
            raise UsageError(f"{option} {text!r}: {item.strip()!r} is not a number") from None
        if not math.isfinite(x) or x < least or (strict and x == least):
            raise UsageError(f"{option} {text!r}: each must be {'>' if strict else '>='} {least:g}")
        out.append(x)
    return tuple(out)


@dataclass(frozen=True)
class Model:
    """What the expectation needs: one worker's step at factor 1 and each bucket's allreduce
    seconds (``d_b``) on this network with this algorithm."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    ready_s: tuple[float, ...]
    allreduce_s: tuple[float, ...]

    def iteration(self, f) -> np.ndarray:
        """``T(f)`` for the slowest worker's factor(s) ``f`` (see the module docstring)."""
        f = np.asarray(f, dtype=float)
        c = np.zeros_like(f)
        for r, d in zip(self.ready_s, self.allreduce_s, strict=True):
            c = np.maximum(c, f * r) + d
        return f * (self.forward_s + self.optimizer_s) + np.maximum(f * self.backward_s, c)


def bucket_times(timeline, buckets: int) -> tuple[float, ...]:
    """Each bucket's allreduce seconds from a traced step's communication rows."""
    out = [0.0] * buckets
    for stream, name, start, end in timeline.rows:
        m = re.search(r" b(\d+) \(", name)
        if stream == "comm" and m and not name.startswith("codec"):
            out[int(m.group(1))] = end - start
    return tuple(out)


def max_lognormal_weights(sigma: float, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """(factors, probabilities): the largest of ``workers`` factors ``exp(sigma z -
    sigma^2/2)``, z standard normal, discretized on `Z_GRID` (midpoint rule on the mass of
    each cell of the max's CDF ``Phi(z)^N``)."""
    phi = np.array([0.5 * math.erfc(-z / math.sqrt(2)) for z in Z_GRID])
    cdf = np.exp(workers * np.log(np.maximum(phi, 1e-300)))
    mass = np.diff(cdf)
    mid = (Z_GRID[1:] + Z_GRID[:-1]) / 2
    return np.exp(sigma * mid - sigma**2 / 2), mass / mass.sum()


def _train_args(args: argparse.Namespace, algorithm: str, steps: int, stragglers: str):
    """The options `ina sim train` would get for one run of the study (the roofline at the
    stated efficiency: the study's setting)."""
    from ina.sim import train_steps
    from ina.workload.devices import DEFAULT_EFFICIENCY

    p = argparse.ArgumentParser()
    train_steps.add_arguments(p)
    argv = ["--workload", args.workload, "--device", args.device, "--precision", args.precision]
    argv += ["--workers", str(args.workers), "--link-rate", args.link_rate, "--timing-only"]
    argv += ["--algorithm", algorithm, "--steps", str(steps), "--stragglers", stragglers]
    argv += ["--seed", str(args.seed), "--efficiency", str(DEFAULT_EFFICIENCY)]
    return p.parse_args(argv)


def _check(
    args: argparse.Namespace,
) -> tuple[tuple[str, ...], tuple[float, ...], tuple[float, ...]]:
    """The study's own options, checked before anything runs (UsageError: one line)."""
    from ina.sim.step import ALGORITHMS

    if args.workers < 2:
        raise UsageError(f"--workers must be >= 2 (a straggler needs others), got {args.workers}")
    for option, n in (("--steps", args.steps), ("--jitter-steps", args.jitter_steps)):
        if n < 1:
            raise UsageError(f"{option} must be >= 1, got {n}")
    algorithms = tuple(a.strip() for a in args.algorithms.split(","))
    for a in algorithms:
        if a not in ALGORITHMS:
            raise UsageError(
                f"--algorithms {args.algorithms!r}: {a!r} is not one of {', '.join(ALGORITHMS)}"
            )
    if "halving-doubling" in algorithms and args.workers & (args.workers - 1):
        raise UsageError(f"halving-doubling needs a power-of-two --workers, got {args.workers}")
    slowdowns = parse_list(args.slowdowns, "--slowdowns", 1.0, strict=False)
    jitters = parse_list(args.jitters, "--jitters", 0.0, strict=True)
    return algorithms, slowdowns, jitters


def run_study(args: argparse.Namespace) -> dict:
    """Every run of the study and its expectation, as data (see the module docstring)."""
    from ina.sim import train_steps
    from ina.sim.options import describe
    from ina.sim.step import shape_of, simulate
    from ina.workload.devices import DEFAULT_EFFICIENCY
    from ina.workload.layers import PRECISIONS

    algorithms, slowdowns, jitters = _check(args)
    t0 = time.perf_counter()
    comms = {}
    try:
        for a in algorithms:  # the workload, device and network alike; the comm per algorithm
            work, times, codec, spec, comms[a], _, cluster = train_steps.prepare(
                _train_args(args, a, 1, "none")
            )
    except ValueError as e:
        raise UsageError(str(e)) from None
    shape = shape_of(work, times, PRECISIONS[work.precision])

    def sim(a: str, steps: int, stragglers: str, trace: bool = False) -> dict:
        from ina.sim.stragglers import parse_stragglers

        f = parse_stragglers(stragglers).factor_matrix(spec.workers, steps, args.seed)
        r = simulate(shape, spec, steps, comms[a], codec, f, args.seed, 1 if trace else 0, cluster)
        r["max_factors"] = [float(x) for x in f.max(axis=1)]
        if a == "ina":  # the most workers any run of a kind simulated (none, slow, jitter)
            kind = stragglers.partition(":")[0]
            simulated[kind] = max(simulated.get(kind, 0), r["simulated_workers"])
        print(
            f"{a:<16} {stragglers:<12} {steps} step(s): {r['mean_iteration_s'] * 1e3:9.3f} ms "
            f"({r['wall_seconds']:.1f} s)",
            flush=True,
        )
        return r

    models, reference, simulated = {}, {}, {}
    for a in algorithms:
        ref = sim(a, 1, "none", trace=True)
        reference[a] = ref["mean_iteration_s"]
        models[a] = Model(
            shape.forward_s, shape.backward_s, shape.optimizer_s, shape.ready_s,
            bucket_times(ref["timelines"][0], len(shape.buckets)),
        )  # fmt: skip
    slow_rows = []
    for x in slowdowns:
        row = {"slowdown": x}
        for a in algorithms:
            it = sim(a, args.steps, f"slow:{SLOW_WORKER}={x:g}")["mean_iteration_s"]
            row[a] = {"simulated_s": it, "expected_s": float(models[a].iteration(x))}
        slow_rows.append(row)
    jitter_rows = []
    for sigma in jitters:
        factors, prob = max_lognormal_weights(sigma, spec.workers)
        row = {"sigma": sigma, "expected_max_factor": float(factors @ prob)}
        for a in algorithms:
            r = sim(a, args.jitter_steps, f"jitter:{sigma:g}")
            drawn = np.array(r["max_factors"])
            row["drawn_max_factors"] = [float(x) for x in drawn]
            row[a] = {
                "simulated_s": r["mean_iteration_s"],
                "at_draws_s": float(models[a].iteration(drawn).mean()),
                "expected_s": float(models[a].iteration(factors) @ prob),
            }
        jitter_rows.append(row)
    return {
        "workload": work.name,
        "parameters": work.params,
        "batch_size": work.samples,
        "precision": work.precision,
        "device": args.device,
        "link_rate": args.link_rate,
        "efficiency": DEFAULT_EFFICIENCY,
        "network": describe(spec),
        "workers": spec.workers,
        "algorithms": list(algorithms),
        "buckets": list(shape.buckets),
        "bucket_ready_s": list(shape.ready_s),
        "forward_s": shape.forward_s,
        "backward_s": shape.backward_s,
        "optimizer_s": shape.optimizer_s,
        "gradient_bytes": work.params * PRECISIONS[work.precision],
        "allreduce_s": {a: list(m.allreduce_s) for a, m in models.items()},
        "reference_s": reference,
        "slowdown": slow_rows,
        "jitter": jitter_rows,
        # INA's simulated workers (timing only: one per class) in each kind of run
        "ina_simulated_workers": simulated,
        "steps": args.steps,
        "jitter_steps": args.jitter_steps,
        "seed": args.seed,
        "wall_seconds": time.perf_counter() - t0,
    }


def command(args: argparse.Namespace) -> str:
    """The command line that regenerates this report."""
    words = ["ina", "experiment", "stragglers"]
    for key, default in DEFAULTS.items():
        value = getattr(args, key)
        if value != default:
            words += [f"--{key.replace('_', '-')}", str(value)]
    if args.report:
        words += ["--report", args.report]
    return shlex.join(words)


LABEL = {"ina": "INA", "ring": "ring", "halving-doubling": "halving-doubling"}


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def how_simulated(r: dict) -> str:
    """How INA's runs stood for the N workers (older results: one representative)."""
    n = r.get("ina_simulated_workers", {})
    slow, jitter = n.get("slow"), n.get("jitter")
    out = []
    if slow and slow > 1:
        out.append(
            f"with one slow worker, INA simulates {slow} classes of alike workers (the slow one, "
            "and the others), which gives every worker's times"
        )
    if jitter and jitter == r["workers"]:
        out.append("with jitter, every worker as itself")
    elif jitter:
        out.append(
            f"with jitter, all {r['workers']:,} workers differ, more classes than one switch's "
            "32: one representative runs at the slowest factor of each step, which leaves out "
            "what the others' early packets change at the switch"
        )
    return "; ".join(out) or "one representative worker stands for all, at the largest factor"


def markdown(r: dict, cmd: str) -> str:
    """The report: command, setting, tables and what they show."""
    algs = r["algorithms"]
    extra = r["forward_s"] + r["backward_s"] + r["optimizer_s"]
    lines = [
        "# Stragglers: one slow worker, and jitter on every worker",
        "",
        f"Command: `{cmd}` (this run: {r['wall_seconds']:.0f} s on 2 cores)",
        "",
        "Setting:",
        f"- {r['workload']} ({r['parameters'] / 1e6:.1f} M parameters, batch {r['batch_size']} "
        f"per worker) on {r['device'].upper()} at {r['precision']}: forward "
        f"{_ms(r['forward_s'])} ms, backward {_ms(r['backward_s'])} ms, optimizer "
        f"{_ms(r['optimizer_s'])} ms (the device's roofline at {r['efficiency']:g} of peak); "
        f"{len(r['buckets'])} DDP buckets ({', '.join(f'{b:,}' for b in r['buckets'])} values)",
        *(
            [f"- {WHY}"]
            if all(r[k] == DEFAULTS[k] for k in ("device", "precision", "link_rate"))
            and r["workload"] == DEFAULTS["workload"]
            else []
        ),
        f"- {r['network']}; timing only: {how_simulated(r)}",
        "- Per-bucket allreduce ms without stragglers: "
        + "; ".join(f"{LABEL[a]} {', '.join(_ms(d) for d in r['allreduce_s'][a])}" for a in algs),
        f"- One slow worker: `slow:{SLOW_WORKER}=F`, {r['steps']} step(s) each; jitter: "
        f"`jitter:SIGMA`, {r['jitter_steps']} steps each (mean), seed {r['seed']}",
        "- Expected: the slowest worker's factor f in the step model's overlap, "
        "T(f) = f (forward + optimizer) + max(f backward, end of the last bucket), each bucket "
        "starting when its last gradient is ready and the previous one is done, with the "
        "per-bucket times above; for jitter, f is the largest of N lognormals, E[T] "
        "integrated numerically over its distribution (Phi(z)^N), and T also at the run's draws",
        "",
        f"Iteration ms as one worker's compute slows by F ({r['workers']:,} workers; the "
        f"straggler's extra compute is (F - 1) x {_ms(extra)} ms):",
        "",
        "| F | extra compute | "
        + " | ".join(f"{LABEL[a]} simulated | {LABEL[a]} expected" for a in algs)
        + " |",
        "|---:|---:|" + "---:|---:|" * len(algs),
    ]
    for row in r["slowdown"]:
        x = row["slowdown"]
        cells = [f"{_ms(row[a]['simulated_s'])} | {_ms(row[a]['expected_s'])}" for a in algs]
        lines.append(f"| {x:g} | {_ms((x - 1) * extra)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Mean iteration ms with jitter on every worker ({r['jitter_steps']} steps; expected at "
        "the run's draws / over the distribution):",
        "",
        "| sigma | E[max factor] | drawn max factors | "
        + " | ".join(f"{LABEL[a]} simulated | {LABEL[a]} expected" for a in algs)
        + " |",
        "|---:|---:|---|" + "---:|---:|" * len(algs),
    ]
    for row in r["jitter"]:
        cells = [
            f"{_ms(row[a]['simulated_s'])} | {_ms(row[a]['at_draws_s'])} / "
            f"{_ms(row[a]['expected_s'])}"
            for a in algs
        ]
        drawn = ", ".join(f"{x:.3f}" for x in row["drawn_max_factors"])
        lines.append(
            f"| {row['sigma']:g} | {row['expected_max_factor']:.3f} | {drawn} | "
            + " | ".join(cells)
            + " |"
        )
    found = _findings(r)
    lines += ["", "What the numbers show: " + " ".join(found[:-2]), "", found[-2], "", found[-1]]
    return "\n".join(lines) + "\n"


def _findings(r: dict) -> list[str]:
    """What the numbers show, in a few sentences computed from them: the findings, then
    INA against the ring, then what is not modelled (the last two are paragraphs)."""
    algs = r["algorithms"]
    extra = r["forward_s"] + r["backward_s"] + r["optimizer_s"]
    first, last = r["slowdown"][0], r["slowdown"][-1]
    out = []
    if last["slowdown"] > first["slowdown"]:
        growth = {a: last[a]["simulated_s"] - first[a]["simulated_s"] for a in algs}
        out.append(
            f"From F = {first['slowdown']:g} to {last['slowdown']:g} the straggler's compute "
            f"grows by {_ms((last['slowdown'] - first['slowdown']) * extra)} ms and the "
            "iteration by "
            + ", ".join(f"{_ms(g)} ms with {LABEL[a]}" for a, g in growth.items())
            + ": where every bucket but the last is reduced before backward ends, the step "
            "grows by exactly the extra compute; where buckets queue behind each other, the "
            "slower backward hides part of the queue and the step grows by less."
        )
        if "ina" in algs and len(algs) > 1:
            gaps = [
                f"over {LABEL[a]} from {_ms(first[a]['simulated_s'] - first['ina']['simulated_s'])}"
                f" to {_ms(last[a]['simulated_s'] - last['ina']['simulated_s'])} ms"
                for a in algs
                if a != "ina"
            ]
            out.append(f"So a straggler shrinks INA's lead {'; '.join(gaps)}.")
    if r["jitter"]:
        j = r["jitter"][-1]
        out.append(
            f"With jitter every step waits for the largest of {r['workers']:,} factors of mean 1: "
            f"at sigma = {j['sigma']:g} its expectation is {j['expected_max_factor']:.2f}, so the "
            f"job runs as if one worker were {j['expected_max_factor']:.2f}x slow ("
            + ", ".join(
                f"{LABEL[a]} {_ms(j[a]['simulated_s'])} ms against {_ms(r['reference_s'][a])}"
                for a in algs
            )
            + " without jitter)."
        )
    worst = max(
        abs(row[a]["simulated_s"] - row[a][k])
        for rows, k in ((r["slowdown"], "expected_s"), (r["jitter"], "at_draws_s"))
        for row in rows
        for a in algs
    )
    out.append(
        f"Simulation and expectation at the same factors differ by at most {worst:.1e} s (the "
        "model's straggler only moves when each bucket can start); the mean over "
        f"{r['jitter_steps']} draws differs from E[T] by the draws' own spread."
    )
    ring = ""
    if "ring" in algs and "ina" in algs:
        steps = 2 * (r["workers"] - 1)
        d_ring, d_ina = r["allreduce_s"]["ring"][0], r["allreduce_s"]["ina"][0]
        ring = (
            f" Here the ring's first bucket ({r['buckets'][0]:,} values) takes {_ms(d_ring)} ms "
            f"over its {steps:,} steps, {d_ring / steps * 1e6:.1f} us a step, where INA takes "
            f"{_ms(d_ina)} ms."
        )
    out.append(
        "INA against the ring: both wait for the slowest worker once per bucket here, since only "
        "compute varies: an INA slot completes with the slowest worker's packet, and the ring's "
        "first step waits for the slowest worker's segment, after which its 2(N - 1) steps run "
        "in lockstep. Both overlap with backward alike (DDP's buckets, one stream). What differs "
        "is the communication: INA sends each value once in int32 lanes, the ring 2(N - 1)/N "
        "times at the training precision (about the same bytes at 16 bits), and pays 2(N - 1) "
        "latencies per bucket where INA's slots stream through the switch a window at a time."
        + ring
    )
    out.append(
        "Not modelled: jitter in the communication itself. A real ring synchronises at every "
        "one of its 2(N - 1) steps, so per-step network or host noise adds up along the ring, "
        "while INA meets once per slot at the switch; the baselines here need alike, "
        "deterministic links, and timing only takes the links alike for INA too."
    )
    return out


def main(args: argparse.Namespace) -> int:
    _check(args)
    out = output_dir(args.out)
    if args.report:
        output_dir(Path(args.report).parent or ".", "--report")
    r = run_study(args)
    text = markdown(r, command(args))
    print(text)
    written = [out / "report.md", out / "result.json"]
    written[0].write_text(text)
    written[1].write_text(json.dumps(r, indent=2) + "\n")
    if args.report:
        Path(args.report).write_text(text)
        written.append(Path(args.report))
    print(f"wrote {', '.join(str(p) for p in written)} in {r['wall_seconds']:.0f} s")
    return 0
