"""`ina bench report`: run the benchmarks and write docs/benchmarks.md (`make bench-report`).

The page is written, never edited: each section holds one benchmark's tables, the commands
that produced them, the machine (cores, memory, CPU model, OS) and the date. The commands are
the ones the tables have always come from (`ina bench ...`, `ina sim ...`, `ina train`, timed
runs of `ina sim train`); each runs in a process of its own, timed with its peak memory.

``--only NAME,...`` reruns some sections and keeps every other one as the page (``--out``)
has it, with its own machine and date. A section whose tool is missing here (BMv2 and p4c,
root, Mininet) or whose command fails is kept the same way, and the run says why. The whole
report takes about ``FULL_MINUTES`` minutes on 2 cores (the sum of each entry's ``minutes``,
measured by this report where it ran them, else estimated from the earlier runs' wall times),
BMv2 and Mininet not included.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ina.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"
OUT_DIR = "{out}"  # in a command: a fresh temporary folder for that command's files


@dataclass
class Run:
    """One command's run: what it printed, how long it took, its largest process's memory."""

    argv: list[str]  # as shown (``ina ...``), with OUT_DIR in place of the folder
    stdout: str
    stderr: str
    returncode: int
    wall_s: float
    peak_bytes: int
    out: Path  # the folder that replaced OUT_DIR (deleted after rendering)


def shown(argv: list[str]) -> str:
    """The command as a user types it."""
    return " ".join(shlex.quote(a) if a != OUT_DIR else "DIR" for a in argv)


# -- renderers: runs -> markdown ------------------------------------------------------------


def printed(runs: list[Run]) -> str:
    """What each command printed (the benchmarks print markdown), its own headings dropped."""
    blocks = []
    for r in runs:
        lines = [ln for ln in r.stdout.strip().splitlines() if not ln.startswith("## ina bench")]
        if len(runs) > 1:
            lines = [f"`{shown(r.argv)}`:", "", *lines]
        blocks.append("\n".join(lines).strip())
    return "\n\n".join(blocks)


def timed(runs: list[Run]) -> str:
    """A row per command: wall time and peak memory, then the last lines it printed."""
    rows = ["| command | wall s | peak memory GiB |", "|---|---:|---:|"]
    rows += [f"| `{shown(r.argv)}` | {r.wall_s:.1f} | {r.peak_bytes / 2**30:.2f} |" for r in runs]
    tails = []
    for r in runs:
        lines = [ln.rstrip() for ln in r.stdout.strip().splitlines()]
        tail = [ln for ln in lines if not ln.startswith("wrote ")][-12:]  # not the temporary folder
        tails += ["", f"`{shown(r.argv)}` ended with:", "", "```", *tail, "```"]
    return "\n".join(rows + tails)


def step_table(runs: list[Run]) -> str:
    """`ina sim train`'s mean step, from each run's result.json."""
    rows = [
        "| algorithm | iteration ms | compute ms | exposed comm ms | tokens/s | scaling |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        d = json.loads((r.out / "result.json").read_text())
        s = d["steps"][-1]
        rows.append(
            f"| {d['algorithm']} | {1e3 * d['mean_iteration_s']:.2f} | "
            f"{1e3 * s['compute_s']:.2f} | {1e3 * s['exposed_comm_s']:.2f} | "
            f"{s['throughput']:,.0f} | {100 * d['scaling_factor']:.1f} % |"
        )
    return "\n".join(rows)


# -- what the page holds ---------------------------------------------------------------------


def bmv2_missing() -> str | None:
    from ina.bench.bmv2 import bmv2_missing as missing

    return missing()


def mininet_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (Mininet)"
    if shutil.which("mn") is None:
        return "needs Mininet (`apt-get install -y mininet`)"
    return None


@dataclass(frozen=True)
class Entry:
    """One section of the page: its commands, and how their runs become markdown."""

    name: str
    title: str
    what: str  # what the table shows, with a link to the guide that explains it
    commands: tuple[str, ...]  # command lines, ``ina ...`` or ``python ...``
    minutes: float  # about how long on 2 cores
    render: Callable[[list[Run]], str] = printed
    missing: Callable[[], str | None] = lambda: None  # why it cannot run here, or None


SIM_TRAIN = "ina sim train --timing-only --steps 1"
ALLREDUCE = "ina sim allreduce --timing-only --params 25e6 --iters 1"
LOSS = "ina sim allreduce --workers 8 --size 4000000 --link-rate 10G --iters 20 --early-retransmit"
GPT2 = "ina sim train --workload gpt2 --precision bf16 --system dgx-h100 --nodes 8 --timing-only"

ENTRIES: list[Entry] = [
    Entry(
        "zoo",
        "Building the zoo's models",
        "Seconds to build each model on the meta device and count one step's FLOPs "
        "([workloads.md](workloads.md)); goal: <= 5 s each.",
        ("ina bench zoo",),
        0.25,
    ),
    Entry(
        "workload-steps",
        "Large simulated steps: wall time and memory",
        "A BERT-large step at 1,024 workers and a ResNet-50 step at 32 distinct workers with "
        "stragglers ([workloads.md](workloads.md)); goals: <= 30 s and <= 60 s of simulation.",
        (
            f"{SIM_TRAIN} --workload bert-large --device a100 --precision bf16 --workers 1024",
            f"{SIM_TRAIN} --workload resnet50 --device v100 --precision fp16 --workers 32 "
            "--stragglers slow:3=1.5+jitter:0.05",
        ),
        0.7,
        timed,
    ),
    Entry(
        "gpt2",
        "GPT-2 on 8 DGX H100 (64 GPUs), bf16",
        "One simulated step with INA across the rails (int32 lanes) and with NCCL's pick "
        "(bf16 gradients); the H100 is uncalibrated (0.5 of peak) "
        "([cluster.md](cluster.md)).",
        (f"{GPT2} --out {OUT_DIR}", f"{GPT2} --algorithm nccl --out {OUT_DIR}"),
        0.25,
        step_table,
    ),
    Entry(
        "switch",
        "Switch model aggregation throughput",
        "A switch model process and N worker processes on loopback, each worker reducing "
        "8 MB (1 MB at 32 lanes) three times; gradient payload = completed slots x lanes x "
        "4 bytes per second ([switch-model.md](switch-model.md)).",
        ("ina bench switch",),
        0.6,
    ),
    Entry(
        "bmv2",
        "BMv2 running the P4 program against the switch model",
        "BMv2's rate is the highest paced offered load at which every slot completed "
        "([testing.md](testing.md#the-bmv2-benchmark)).",
        ("ina bench bmv2",),
        10,
        missing=bmv2_missing,
    ),
    Entry(
        "p4runtime",
        "P4Runtime reads under load",
        "Reads of every register while workers aggregate "
        "([control-plane.md](control-plane.md#reads-under-load-measured)).",
        ("ina bench p4runtime",),
        3,
    ),
    Entry(
        "compression",
        "Homomorphic compression: traffic and codec speed",
        "4M-element buckets; traffic against dense int32 and encode + decode throughput "
        "([compression.md](compression.md)).",
        ("ina bench compression",),
        5,
    ),
    Entry(
        "compressors",
        "GRACE's compressors in the switch: bits per value and codec speed",
        "Each method's bits per value with its headers and its encode + decode speed, "
        "8 workers ([compression.md](compression.md)).",
        ("ina bench compressors",),
        3,
    ),
    Entry(
        "sim",
        "Simulator speed",
        "Simulated packets per wall second of dense allreduce calls, per event kernel, and "
        "the wall time of `ina train --sim` on digits ([simulation.md](simulation.md)); "
        "goal: 200k packets per wall s.",
        ("ina bench sim",),
        0.2,
    ),
    Entry(
        "scale",
        "1,024 workers, one switch or 32 leaves; loss against lossless",
        "Timing-only allreduces of 25M values (100 MB) per worker, and 20 calls with 1 % "
        "loss on every link against the same run lossless ([simulation.md](simulation.md)); "
        "goals: <= 60 s for 1,024 workers, a lossy run <= 2x the lossless one's wall time.",
        (
            f"{ALLREDUCE} --workers 1024",
            f"{ALLREDUCE} --topology two_level:32x32 --link-rate 100G --pool 256",
            f"{LOSS} --link-loss 0.01",
            f"{LOSS} --link-loss 0",
        ),
        2.5,
        timed,
    ),
    Entry(
        "classes",
        "Thousands of workers, not all alike",
        "1,024 workers on 32 leaves and 4,096 on three levels, with a congested leaf uplink, "
        "a straggler and 0.1 % loss on one link ([simulation.md](simulation.md)); goals: "
        "<= 60 s and <= 8 GB at 1,024, <= 5 min at 4,096.",
        ("ina bench classes",),
        6,
    ),
    Entry(
        "flow",
        "The flow level against the packet engine",
        "Each `ina sim allreduce` run by the packet engine and as a fluid (`--flow`) "
        "([simulation.md](simulation.md#the-flow-level-against-the-packet-engine)).",
        ("ina bench flow",),
        0.6,
    ),
    Entry(
        "compare",
        "INA against ring all-reduce, 1,024 workers, 100 MB each",
        "The same links for every algorithm; the bandwidth bound is 2(N-1)/N = 2.00x "
        "([simulation.md](simulation.md)).",
        tuple(
            f"ina sim compare --workers 1024 --params 25e6 --link-rate {rate}"
            for rate in ("1G", "10G", "25G", "100G")
        ),
        4,
    ),
    Entry(
        "train",
        "Training on the wall clock (`make train`)",
        "4 workers train an MLP on digits through the switch model for 20 epochs "
        "([training.md](training.md)).",
        (f"ina train --workers 4 --no-progress --out {OUT_DIR}",),
        0.25,
        timed,
    ),
    Entry(
        "ring",
        "INA against gloo's ring allreduce in Mininet",
        "4 worker hosts on bandwidth-limited links ([topology.md](topology.md)).",
        ("python -m bmv2_topologies.bench_ring",),
        10,
        missing=mininet_missing,
    ),
]
BY_NAME = {e.name: e for e in ENTRIES}
FULL_MINUTES = round(sum(e.minutes for e in ENTRIES if e.name not in ("bmv2", "ring")))


# -- running ---------------------------------------------------------------------------------


def run_command(line: str) -> Run:
    """Run one command in a process of its own, in the repository's folder."""
    argv = shlex.split(line)
    out = Path(tempfile.mkdtemp(prefix="ina-bench-report-"))
    real = [str(out / "run") if a == OUT_DIR else a for a in argv]
    if real[0] == "ina":
        real = [sys.executable, "-m", "ina", *real[1:]]
    elif real[0] == "python":
        real = [sys.executable, *real[1:]]
    with open(out / "stdout", "w+") as so, open(out / "stderr", "w+") as se:
        t0 = time.perf_counter()
        p = subprocess.Popen(real, stdout=so, stderr=se, cwd=REPO, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)  # this command's own peak (KiB on Linux)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        return Run(list(argv), so.read(), se.read(), p.returncode, wall, usage.ru_maxrss * 1024,
                   out / "run")  # fmt: skip


def machine() -> str:
    """Cores (as nproc counts them), memory, CPU model and OS of this machine."""
    cores = len(os.sched_getaffinity(0))
    cpu = platform.processor() or "unknown CPU"
    mem = "unknown memory"
    try:
        cpu = next(
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        )
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kib / 2**20:.1f} GiB of memory"
    except (OSError, StopIteration, AttributeError):
        pass
    system = platform.platform()
    try:
        system = re.search(r'PRETTY_NAME="([^"]*)"', Path("/etc/os-release").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    return f"{cores} cores ({cpu}), {mem}, {system}"


def section(entry: Entry, body: str) -> str:
    """A section between markers, so that a later run can replace it alone."""
    return f"<!-- section {entry.name} -->\n## {entry.title}\n\n{body.strip()}\n<!-- /section {entry.name} -->"


def sections_of(page: str) -> dict[str, str]:
    """The sections of an earlier page, by name."""
    pattern = r"<!-- section ([\w-]+) -->\n.*?<!-- /section \1 -->"
    return {m.group(1): m.group(0) for m in re.finditer(pattern, page, re.S)}


def measured(entry: Entry, runs: list[Run], when: str, where: str, load: str) -> str:
    cmds = "\n".join(shown(r.argv) for r in runs)
    took = sum(r.wall_s for r in runs)
    return section(
        entry,
        f"{entry.what}\n\n```sh\n{cmds}\n```\n\nMeasured on {when} on {where} (load average "
        f"{load} at the start; {took:.0f} s in all; `ina bench report --only {entry.name}` "
        f"reruns it).\n\n{entry.render(runs)}\n",
    )


def placeholder(entry: Entry, why: str) -> str:
    cmds = "\n".join(shown(shlex.split(c)) for c in entry.commands)
    return section(entry, f"{entry.what}\n\n```sh\n{cmds}\n```\n\nNot measured yet: {why}.\n")


HEADER = """# Benchmarks: what `ina` measures on this machine

Written by `ina bench report` (`make bench-report`); rerun it rather than edit this page.
Each section gives its commands, the machine and the date it was measured; a section under a
heading **From an earlier run** holds numbers measured before this page was generated, with
the command they came from. The whole report takes about {minutes} minutes on 2 cores (BMv2's
and Mininet's sections, which need root and their tools, not included);
`ina bench report --only NAME,...` reruns some sections and keeps the others. These are
benchmarks, never timed tests: on a 2-core machine shared with other work the numbers move by
10-30 % from run to run.

Last written on {when} on {where}; sections rerun then: {rerun}.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        f"Run the benchmarks and write their tables, commands, machine and date into a page. "
        f"All of them take about {FULL_MINUTES} minutes on 2 cores."
    )
    p.add_argument(
        "--only",
        help=f"comma-separated sections to rerun, keeping the rest as --out has them: "
        f"{', '.join(BY_NAME)}",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the page (default docs/benchmarks.md)")


def check_options(args: argparse.Namespace) -> list[Entry]:
    """The entries to run; a bad name or an --out that cannot be written is a usage error."""
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise UsageError(f"--only: unknown sections {unknown}; known: {', '.join(BY_NAME)}")
    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder, not a page")
    if not os.access(out.parent if out.parent != Path("") else Path("."), os.W_OK):
        raise UsageError(f"--out {out}: cannot write in {out.parent}")
    return [BY_NAME[n] for n in names]


def main(args: argparse.Namespace) -> int:
    chosen = check_options(args)
    out = Path(args.out)
    earlier = sections_of(out.read_text()) if out.exists() else {}
    when, where = datetime.date.today().isoformat(), machine()
    status, rerun, written = 0, [], {}
    for entry in chosen:
        why = entry.missing()
        if why is not None:
            print(f"ina bench report: {entry.name}: not run here: {why}", file=sys.stderr)
            continue
        print(f"ina bench report: {entry.name} (about {entry.minutes:g} min)", file=sys.stderr)
        load = f"{os.getloadavg()[0]:.2f}"
        runs = []
        for line in entry.commands:
            r = run_command(line)
            runs.append(r)
            if r.returncode != 0:
                tail = r.stderr.strip().splitlines()[-1:] or ["no message"]
                print(f"ina bench report: {entry.name}: `{shown(r.argv)}` exited "
                      f"{r.returncode}: {tail[0]}; its section is kept", file=sys.stderr)  # fmt: skip
                status = 1
                break
        else:
            written[entry.name] = measured(entry, runs, when, where, load)
            rerun.append(entry.name)
        for r in runs:
            shutil.rmtree(r.out.parent, ignore_errors=True)
    parts = []
    for entry in ENTRIES:
        if entry.name in written:
            parts.append(written[entry.name])
        elif entry.name in earlier:
            parts.append(earlier[entry.name])
        else:
            why = entry.missing() or f"`ina bench report --only {entry.name}`"
            parts.append(placeholder(entry, why))
    head = HEADER.format(minutes=FULL_MINUTES, when=when, where=where,
                         rerun=", ".join(rerun) or "none")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + "\n" + "\n\n".join(parts) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return status
