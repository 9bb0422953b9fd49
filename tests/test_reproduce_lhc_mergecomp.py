"""`ina reproduce lhc` and `ina reproduce mergecomp` end to end: each ``--quick`` run exits 0
and writes a report whose claims have valid verdicts and a numeric ina value."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import ina_in_process

from ina.experiments.reproduce import VERDICTS


def reproduce(name: str, out, *extra: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "ina", "reproduce", name, "--quick", "--out", str(out), *extra],
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


@pytest.mark.slow
def test_mergecomp_quick(tmp_path):
    report = reproduce("mergecomp", tmp_path)
    assert "PCIe 3.0 x16" in report["tables"][0] and "NVLink 2.0" in report["tables"][0]


def test_lhc_densities_come_from_each_models_structure():
    """The full --quick run takes minutes (the README's table comes from it); here, what it
    decides per model: embedding models at the rows one batch touches, dense ones at the
    stated top-k."""
    from ina.experiments.reproduce.lhc import TOPK_DENSITY, density_of
    from ina.workload import zoo

    d = {m: density_of(m, zoo.build(m))[0] for m in ("ncf", "ptb-lstm", "vgg19", "bert-base")}
    assert d["vgg19"] == d["bert-base"] == TOPK_DENSITY
    assert 0 < d["ncf"] < 1 and 0 < d["ptb-lstm"] < 1


@pytest.mark.slow
def test_lhc_on_one_model(tmp_path):
    report = reproduce("lhc", tmp_path, "--models", "ncf")
    assert "| ncf |" in report["tables"][0] and "| vgg19 |" not in report["tables"][0]
    assert report["command"] == "ina reproduce lhc --quick --models ncf"


def test_lhc_refuses_a_model_it_does_not_know(tmp_path):
    r = ina_in_process("reproduce", "lhc", "--models", "gpt5", "--out", str(tmp_path))
    assert r.returncode == 2 and "--models 'gpt5'" in r.stderr.strip().splitlines()[-1]
