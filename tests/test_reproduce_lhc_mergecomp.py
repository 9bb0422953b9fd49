"""`ina reproduce lhc` and `ina reproduce mergecomp` end to end: each ``--quick`` run exits 0
and writes a report whose claims have valid verdicts and a numeric ina value."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ina.experiments.reproduce import VERDICTS


def reproduce(name: str, out) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "ina", "reproduce", name, "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").read_text().startswith(f"## `{name}`")
    assert report["name"] == name and report["setting"] and report["tables"]
    assert len(report["claims"]) == 2
    for c in report["claims"]:
        assert c["verdict"] in VERDICTS
        number = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", c["ina"])
        assert number, c["ina"]
        assert float(number.group(1)) > 0
    return report


def test_mergecomp_quick(tmp_path):
    report = reproduce("mergecomp", tmp_path)
    assert "PCIe 3.0 x16" in report["tables"][0] and "NVLink 2.0" in report["tables"][0]


@pytest.mark.slow
def test_lhc_quick(tmp_path):
    report = reproduce("lhc", tmp_path)
    for model in ("ncf", "ptb-lstm", "vgg19", "bert-base"):
        assert f"| {model} |" in report["tables"][0]
