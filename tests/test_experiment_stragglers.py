"""`ina experiment stragglers`: the study's arithmetic on a tiny setting, its expectation, its
one-line errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ina.cli import main as ina_main
from ina.experiments.stragglers import Model, max_lognormal_weights

# Simulated time is deterministic: the simulation and the expectation share every input but
# the straggler, so they may differ only by float rounding over a step's sums.
ROUNDING_S = 1e-9
TINY = ["--workload", "cifar10-resnet20", "--precision", "fp32", "--workers", "8"]
TINY += ["--algorithms", "ina,ring,halving-doubling"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One tiny study (8 workers, ResNet-20, 2 buckets): its result and its report."""
    out = tmp_path_factory.mktemp("stragglers")
    report = out / "docs" / "stragglers.md"
    assert (
        ina_main(["experiment", "stragglers", *TINY, "--out", str(out), "--report", str(report)])
        == 0
    )
    return json.loads((out / "result.json").read_text()), report.read_text()


def test_a_slowdown_of_one_is_the_run_without_stragglers(study):
    r, _ = study
    row = r["slowdown"][0]
    assert row["slowdown"] == 1.0
    for a in r["algorithms"]:
        assert row[a]["simulated_s"] == r["reference_s"][a]  # slow:0=1 is all ones


def test_a_2x_straggler_adds_its_extra_compute_less_what_it_hides(study):
    """The step is the slow worker's: it grows by the extra compute (forward, backward and
    optimizer at 2x), less at most the communication the slower backward now hides."""
    r, _ = study
    extra = r["forward_s"] + r["backward_s"] + r["optimizer_s"]
    one, two = r["slowdown"][0], r["slowdown"][-1]
    assert two["slowdown"] == 2.0
    for a in r["algorithms"]:
        growth = two[a]["simulated_s"] - one[a]["simulated_s"]
        hidden = sum(r["allreduce_s"][a][:-1])
        assert extra - hidden - ROUNDING_S <= growth <= extra + ROUNDING_S, a
    # INA's growth is what the expectation's model of the step gives for it (the slower
    # backward hides whatever of the first bucket's allreduce it now covers)
    ina = Model(r["forward_s"], r["backward_s"], r["optimizer_s"], tuple(r["bucket_ready_s"]),
                tuple(r["allreduce_s"]["ina"]))  # fmt: skip
    assert len(r["buckets"]) == 2
    assert two["ina"]["simulated_s"] - one["ina"]["simulated_s"] == pytest.approx(
        float(ina.iteration(2.0) - ina.iteration(1.0)), abs=ROUNDING_S
    )


def test_a_slow_worker_is_a_class_of_its_own_and_jitter_makes_every_worker_one(study):
    r, text = study
    assert r["ina_simulated_workers"] == {"none": 1, "slow": 2, "jitter": 8}
    assert "INA simulates 2 classes of alike workers" in text
    assert "with jitter, every worker as itself" in text


def test_the_expectation_is_the_simulation_at_the_same_factors(study):
    r, _ = study
    for row in r["slowdown"]:
        for a in r["algorithms"]:
            assert row[a]["expected_s"] == pytest.approx(row[a]["simulated_s"], abs=ROUNDING_S)
    for row in r["jitter"]:
        drawn = row["drawn_max_factors"]
        assert len(drawn) == r["jitter_steps"] == 3 and min(drawn) > 1  # the max of 8 of mean 1
        for a in r["algorithms"]:
            # INA's 8 jittered workers are simulated each as itself (8 classes): the others'
            # packets reach the switch before the slowest's, not with them as in the
            # reference run the expectation is built on, which moves a step by 0.05-0.17 %
            # here. The baselines' models take the slowest worker's factor: exact.
            bound = 1e-2 * row[a]["simulated_s"] if a == "ina" else ROUNDING_S
            assert row[a]["at_draws_s"] == pytest.approx(row[a]["simulated_s"], abs=bound)
            # the slowest of 8 factors of mean 1 is > 1 in expectation, and T increases in f
            assert row[a]["expected_s"] > r["reference_s"][a]
    sigmas = [row["expected_max_factor"] for row in r["jitter"]]
    assert sigmas == sorted(sigmas)  # more jitter, a slower slowest worker


def test_the_expected_maximum_of_lognormals_is_exact_where_known():
    """One factor has mean 1; the larger of two lognormals of mean 1 has mean 2 Phi(sigma /
    sqrt 2); 1,024 of them agree with a Monte Carlo draw of the same model."""
    for sigma in (0.05, 0.2, 0.5):
        f, p = max_lognormal_weights(sigma, 1)
        assert f @ p == pytest.approx(1.0, abs=1e-7)
        f, p = max_lognormal_weights(sigma, 2)
        assert f @ p == pytest.approx(1 + math.erf(sigma / 2), abs=1e-7)
    f, p = max_lognormal_weights(0.1, 1024)
    z = np.random.default_rng(0).standard_normal((2000, 1024)).max(axis=1)
    assert f @ p == pytest.approx(np.exp(0.1 * z - 0.005).mean(), rel=2e-3)


def test_the_report_says_how_to_regenerate_it(study):
    _, text = study
    assert (
        "ina experiment stragglers --workload cifar10-resnet20 --precision fp32 --workers 8" in text
    )
    assert "--report " in text and "| F | extra compute |" in text and "| sigma |" in text
    assert "halving-doubling simulated" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--slowdowns", "1,x"], "--slowdowns '1,x': 'x' is not a number"),
        (["--slowdowns", "1,0.5"], "--slowdowns '1,0.5': each must be >= 1"),
        (["--jitters", "0.1;0.2"], "--jitters '0.1;0.2': '0.1;0.2' is not a number"),
        (["--jitters", "0"], "--jitters '0': each must be > 0"),
        (["--jitters", ""], "--jitters '': '' is not a number"),
        (["--workers", "1"], "--workers must be >= 2"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--algorithms", "ina,bogus"], "'bogus' is not one of"),
        (["--workers", "1000", "--algorithms", "ring,halving-doubling"], "power-of-two"),
        (["--device", "tpu"], "tpu"),
    ],
)
def test_bad_input_is_one_line(args, message, capsys, tmp_path):
    assert ina_main(["experiment", "stragglers", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
