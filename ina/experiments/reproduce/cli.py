"""`ina reproduce {lhc,mergecomp,dc2,grace}`: re-run one seed paper's headline experiment in
simulated time (see `ina.experiments.reproduce`)."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from ina.errors import HelpFormatter, UsageError

STUDIES = {
    "lhc": "ina.experiments.reproduce.lhc",
    "mergecomp": "ina.experiments.reproduce.mergecomp",
    "dc2": "ina.experiments.reproduce.dc2",
    "grace": "ina.experiments.reproduce.grace",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="study", required=True, metavar="NAME")
    argv = sys.argv[sys.argv.index("reproduce") + 1 :] if "reproduce" in sys.argv else []
    for name, module in STUDIES.items():
        sp = sub.add_parser(name, formatter_class=HelpFormatter)
        sp.add_argument("--quick", action="store_true", help="a reduced run (minutes)")
        sp.add_argument(
            "--out", help="folder for report.md and report.json (default: runs/reproduce/NAME)"
        )
        if argv and argv[0] == name:
            importlib.import_module(module).add_arguments(sp)


def main(args: argparse.Namespace) -> int:
    module = importlib.import_module(STUDIES[args.study])
    out = Path(args.out or f"runs/reproduce/{args.study}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write there ({e.strerror})") from None
    t0 = time.perf_counter()
    report = module.run(args)
    print(report.markdown())
    paths = report.write(out)
    print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - t0:.0f} s")
    return 0
