"""The examples a user copies: the README's Python example is `examples/allreduce_two_workers.py`
to the character, and runs as printed, one process per worker, against `ina switch` serving
`examples/jobs.json`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ina.host.launch import LocalSwitch
from ina.switch_model.tables import load_jobs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "allreduce_two_workers.py"


def test_the_readme_prints_the_example_script_as_it_is():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    printed = [b for b in blocks if b.startswith("# examples/allreduce_two_workers.py")]
    assert printed == [SCRIPT.read_text()]


@pytest.mark.network
def test_the_example_runs_as_printed_one_process_per_worker():
    jobs = load_jobs(ROOT / "examples" / "jobs.json")
    with LocalSwitch(jobs, lanes=256, grpc=False) as sw:
        switch = f"{sw.address[0]}:{sw.address[1]}"
        procs = [
            subprocess.Popen(
                [sys.executable, str(SCRIPT), str(w), switch],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for w in (0, 1)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    for w, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, err
        assert out.strip() == f"worker {w}: sum 3, mean 1.5"


def test_the_training_step_example_runs_and_prints_both_algorithms():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "simulate_a_training_step.py")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [ln.split(":")[0].strip() for ln in lines] == ["ina", "ring"]
    ms = [float(re.search(r"([0-9.]+) ms per step", ln).group(1)) for ln in lines]
    assert all(m > 0 for m in ms)
