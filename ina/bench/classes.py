"""`ina bench classes`: thousands of workers that are not all alike, in simulated time.

Each row runs one `ina sim allreduce --timing-only` in a process of its own and reports its
wall time and peak memory (the child's maximum resident set) next to what it simulated: how
many classes of alike workers stood for how many workers (`ina.sim.classes`). The default
rows are the issue's goals: 1,024 workers on 32 leaves and 4,096 on three levels, 25 M
values each, with a congested leaf uplink, a straggler and 0.1 % loss on one worker's link,
and the same trees with every worker alike for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ina.errors import UsageError

CONGESTED = "capacity=episodes:share=0.5:on_s=0.002:off_s=0.003:fixed=1"


def rows(size: str) -> list[tuple[str, list[str]]]:
    """(what, the command's arguments) of each row."""
    common = ["--timing-only", "--params", size, "--iters", "1", "--link-rate", "100G"]
    common += ["--compute", "10ms"]
    conditions = {
        "two_level:32x32": ["--link", f"l7:{CONGESTED}", "--link", "h100:loss=0.001",
                            "--stragglers", "slow:500=1.5"],
        "three_level:16x16x16": ["--link", f"l7:{CONGESTED}", "--link", "h1000:loss=0.001",
                                 "--stragglers", "slow:2000=1.5"],
    }  # fmt: skip
    out = []
    for topo, extra in conditions.items():
        n = 1024 if topo.startswith("two") else 4096
        out.append((f"{n:,} workers, all alike", ["--topology", topo, *common]))
        out.append(
            (
                f"{n:,} workers, a congested leaf uplink, a straggler (1.5x), 0.1 % loss on "
                "one link",
                ["--topology", topo, *common, *extra],
            )
        )
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="25e6", help="float32 values per worker")
    p.add_argument("--only", type=int, help="run row ONLY of the table (1..4) instead of every row")


def main(args: argparse.Namespace) -> int:
    table = rows(args.size)
    if args.only is not None and not 1 <= args.only <= len(table):
        raise UsageError(f"--only must be 1..{len(table)}, got {args.only}")
    print(
        "| run | command | classes | simulated step (compute + call) | wall s | peak memory "
        "GiB | simulated packets |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for i, (what, argv) in enumerate(table, 1):
        if args.only is not None and i != args.only:
            continue
        with tempfile.TemporaryDirectory() as out:
            cmd = [sys.executable, "-m", "ina", "sim", "allreduce", *argv, "--out", out]
            t0 = time.perf_counter()
            with open(Path(out) / "stderr", "w+") as err:
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
                # this child's own resource use (ru_maxrss in KiB on Linux), not the most
                # any child of ours reached
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                wall = time.perf_counter() - t0
                err.seek(0)
                if p.returncode != 0:
                    print(f"row {i} failed: {err.read().strip()[-300:]}", file=sys.stderr)
                    return 1
            peak = usage.ru_maxrss
            r = json.loads((Path(out) / "result.json").read_text())
        shown = "ina sim allreduce " + " ".join(a if " " not in a else repr(a) for a in argv)
        print(
            f"| {what} | `{shown}` | {r['simulated_workers']:,} | "
            f"{r['step_seconds'][0] * 1e3:.3f} ms | {wall:.1f} | {peak / 2**20:.2f} | "
            f"{r['packets_on_links']:,} |",
            flush=True,
        )
    return 0
