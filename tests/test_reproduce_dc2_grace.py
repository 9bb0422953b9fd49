"""`ina reproduce dc2` and `ina reproduce grace` (`ina.experiments.reproduce`): each --quick run
finishes, writes its report, and every claim carries a verdict; the pure helpers on fixed
inputs."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from ina.experiments.reproduce import VERDICTS, dc2, grace


def test_kendall_tau_of_equal_and_reversed_orders():
    assert grace.kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert grace.kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert math.isnan(grace.kendall_tau(["a"], ["a"]))


def test_ranking_puts_runs_to_target_first_then_by_metric():
    rows = [
        dict(workload="w", method="slow", metric="test_acc", time_to_target_s=2.0,
             final_metric=0.9, diverged_at_step=None),
        dict(workload="w", method="fast", metric="test_acc", time_to_target_s=1.0,
             final_metric=0.8, diverged_at_step=None),
        dict(workload="w", method="missed", metric="test_acc", time_to_target_s=None,
             final_metric=0.5, diverged_at_step=None),
    ]  # fmt: skip
    assert [r["method"] for r in grace.ranking(rows, "w")] == ["fast", "slow", "missed"]


def test_grace_ranking_claim_follows_the_top_methods_not_tau():
    """Tau 0.87 with the same top three is not "the ranking changes" (issue 45)."""

    def ranks(a, b):
        return {"mnist1d": [dict(method=m) for m in a], "pytext": [dict(method=m) for m in b]}

    same_top = ranks(list("abcdef"), list("abcdfe"))
    assert grace.claims(same_top, [])[0].verdict == "not reproduced"
    new_best = ranks(list("abcdef"), list("bacdef"))
    assert grace.claims(new_best, [])[0].verdict == "reproduced"


def _tta(scenario, vs_dense, law="ownq"):
    return dict(
        workload="mnist1d", scenario=scenario, law=law, dense=1.0, dc2=1.0 / vs_dense,
        best_fixed="fixed:0.01", t_best=1.0, uniform="fixed:0.01", t_uniform=1.0,
        worst="fixed:0.01", t_worst=1.0, density=0.1, vs_dense=vs_dense, vs_best=1.0,
        vs_uniform=1.0, vs_worst=1.0,
    )  # fmt: skip


def test_dc2_claims_report_the_controller_and_a_fixed_density_apart():
    """The 41x row is DC2's controller to target (its best scenario); a fixed density's
    per-iteration gain is a row of its own, labelled as not DC2 (issue 45)."""
    tta = [_tta("low", 0.78), _tta("high", 1.55)]
    steps = [
        dict(model="resnet50", rate=1e9, density=d, speedup=x, bound=25.0)
        for d, x in ((1.0, 1.0), (0.01, 20.64))
    ]
    ctl, fixed, uni = dc2.claims(tta, steps)
    assert "DC2's controller" in ctl.claim and ctl.ina.startswith("1.55x")
    assert ctl.verdict == "direction only" and "low 0.78x" in ctl.why
    assert "not DC2" in fixed.claim and fixed.ina.startswith("20.64x")
    assert fixed.verdict == "direction only"
    assert uni.verdict == "not reproduced"  # 1.00x: no effect


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, extra",
    # smaller than --quick, on the same code paths: dc2 to a lower target (50 steps dense,
    # 100 at 0.01), its step part with a small zoo model (the PTB LSTM's dense step alone
    # takes about 40 s to simulate), grace with two methods of its six, one per path
    # (dense summed, top-k as a union of supports); one run at a time, in the command's own
    # process: each worker process of a pool imports torch again (about 11 s of CPU a test;
    # the pool has tests of its own)
    [
        (
            "dc2",
            ["--step-models", "cifar10-resnet20", "--targets", "mnist1d=0.3", "--parallel", "1"],
        ),
        ("grace", ["--methods", "none,topk:ratio=0.01", "--parallel", "1"]),
    ],
)
def test_quick_run_writes_a_report_with_verdicts(name, extra, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ina", "reproduce", name, "--quick", "--out", str(tmp_path),
         *extra],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["name"] == name and report["claims"]
    assert all(c["verdict"] in VERDICTS for c in report["claims"])
    assert (tmp_path / "report.md").read_text().startswith(f"## `{name}`")


def test_an_unknown_step_model_is_one_line_before_any_run(tmp_path):
    from conftest import ina_in_process

    r = ina_in_process("reproduce", "dc2", "--quick", "--step-models", "resnet50,gpt5",
                       "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--step-models 'resnet50,gpt5': unknown model 'gpt5'" in r.stderr
