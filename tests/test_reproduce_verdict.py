"""The one verdict rule of `ina reproduce` (`ina.experiments.reproduce.verdict`): reproduced
only within [0.8, 1.25]x of the paper's number, "exceeds" above, and below it "direction
only" or "not reproduced"; an "exceeds" claim names the cost the model misses."""

from __future__ import annotations

import math

import pytest

from ina.experiments.reproduce import BAND, MISSES, VERDICTS, Claim, verdict


@pytest.mark.parametrize(
    "ina, paper, same, expected",
    [
        (4.0, 4.0, True, "reproduced"),
        (0.8 * 4.0, 4.0, True, "reproduced"),  # the lower edge is in
        (1.25 * 4.0, 4.0, True, "reproduced"),  # the upper edge is in
        (0.79 * 4.0, 4.0, True, "direction only"),
        (0.79 * 4.0, 4.0, False, "not reproduced"),
        (1.26 * 4.0, 4.0, True, "exceeds"),
        (16.68, 6.33, True, "exceeds"),  # LHC's old "reproduced" (issue 45)
        (1.0, 1.0, False, "reproduced"),  # a yes/no claim, observed
        (0.0, 1.0, False, "not reproduced"),  # not observed
        (math.nan, 5.3, True, "not reproduced"),
    ],
)
def test_the_band_and_its_edges(ina, paper, same, expected):
    assert verdict(ina, paper, same) == expected
    assert expected in VERDICTS


def test_a_number_that_is_not_like_for_like_is_at_most_direction_only():
    assert verdict(6.0, 6.33, True, like_for_like=False) == "direction only"
    assert verdict(20.0, 6.33, True, like_for_like=False) == "direction only"
    assert verdict(6.0, 6.33, False, like_for_like=False) == "not reproduced"


def test_the_band_is_the_issues():
    assert BAND == (0.8, 1.25)


def test_an_exceeds_claim_must_name_the_cost_the_model_misses():
    with pytest.raises(ValueError, match="misses a cost"):
        Claim("up to 2x", "2x", "3x", "exceeds", "ina is faster")
    c = Claim("up to 2x", "2x", "3x", "exceeds", f"{MISSES}: the codec's time")
    assert c.verdict == "exceeds"
