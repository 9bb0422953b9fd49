"""Compile the INA P4 program for BMv2 (``make p4``).

Runs ``p4c-bm2-ss`` (p4c's simple_switch backend) on ``ina/p4/ina.p4`` and writes the BMv2
JSON and the P4Info (text format) that ``simple_switch_grpc`` and the control plane load::

    p4c-bm2-ss --arch v1model --std p4-16 \\
        --p4runtime-files build/p4/ina.p4info.txtpb -o build/p4/ina.json ina/p4/ina.p4

The generated P4 sources (``ina/p4/generated/``) are checked first: a stale one means the
program would not match ``ina/protocol.py`` (run ``python -m ina.p4gen``). Without
``p4c-bm2-ss`` this prints what is missing and how to get it, and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ina import p4gen

P4_DIR = Path(__file__).resolve().parent / "p4"
MAIN_P4 = P4_DIR / "ina.p4"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "build" / "p4"
COMPILER = "p4c-bm2-ss"

MISSING_COMPILER = f"""\
{COMPILER} (the p4c compiler's BMv2 simple_switch backend) is not on PATH.

It compiles ina/p4/ina.p4 into the BMv2 JSON and P4Info that simple_switch_grpc loads.
To get it:
  - if p4c was built into a prefix, put its bin on PATH (docs/testing.md, "BMv2 and p4c"):
        PATH=PREFIX/bin:$PATH make p4
  - or build p4c from source: https://github.com/p4lang/p4c (cmake -DENABLE_BMV2=ON),
  - or install the p4lang packages (Ubuntu: the `p4lang-p4c` package from the p4lang
    OBS repository, https://github.com/p4lang/p4c#installing-packaged-versions-of-p4c).
Or pass the compiler explicitly: python -m ina.p4build --p4c /path/to/{COMPILER}
"""


@dataclass(frozen=True)
class BuildOutputs:
    """Where a build puts its products."""

    json: Path
    p4info: Path

    @classmethod
    def in_dir(cls, out_dir: Path) -> BuildOutputs:
        return cls(json=out_dir / "ina.json", p4info=out_dir / "ina.p4info.txtpb")


def find_compiler(explicit: str | None = None) -> str | None:
    """Path of ``p4c-bm2-ss``: ``explicit`` if given (and executable), else from PATH."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else shutil.which(explicit)
    return shutil.which(COMPILER)


def compile_command(compiler: str, outputs: BuildOutputs, source: Path = MAIN_P4) -> list[str]:
    """The ``p4c-bm2-ss`` command line that builds ``outputs`` from ``source``."""
    return [
        compiler,
        "--arch",
        "v1model",
        "--std",
        "p4-16",
        "--p4runtime-files",
        str(outputs.p4info),
        "-o",
        str(outputs.json),
        str(source),
    ]


def build(
    out_dir: Path = DEFAULT_OUT, compiler: str | None = None, check_generated: bool = True
) -> BuildOutputs:
    """Compile the program into ``out_dir``; raises `RuntimeError` saying why it failed."""
    if check_generated:
        stale = p4gen.stale_files()
        if stale:
            raise RuntimeError(
                f"stale generated P4 files: {', '.join(sorted(stale))}; "
                "run `python -m ina.p4gen` first"
            )
    path = find_compiler(compiler)
    if path is None:
        raise FileNotFoundError(MISSING_COMPILER)
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = BuildOutputs.in_dir(out_dir)
    cmd = compile_command(path, outputs)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)}\nexited with status {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        )
    if proc.stderr.strip():  # warnings: show them, they are usually worth fixing
        print(proc.stderr.rstrip(), file=sys.stderr)
    return outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ina.p4build", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    ap.add_argument(
        "--p4c", default=None, help=f"the {COMPILER} executable (default: found on PATH)"
    )
    args = ap.parse_args(argv)
    try:
        outputs = build(args.out, args.p4c)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"P4 build failed: {e}", file=sys.stderr)
        return 1
    print(f"wrote {outputs.json}\nwrote {outputs.p4info}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
