"""Network scenarios (ina/sim/scenario.py): every shipped file parses and describes the path it
says over time; bad files are one-line errors (exit 2 from the CLI)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from conftest import ina_in_process

from ina.netem import CapacityTrace, TimelineDelay, make_link
from ina.sim.network import capacity_model
from ina.sim.scenario import (
    SCENARIO_DIR,
    constant_capacity,
    load_scenario,
    names,
    parse_scenario,
    synthetic_timeline,
)

SHIPPED = names()


def test_the_issue_s_scenarios_are_shipped():
    assert {
        "quiet-dc", "slow", "long-rtt", "persistent", "episodes", "episodes-25", "episodes-75",
        "episodes-short", "episodes-long", "low", "high", "trace",
    } <= set(SHIPPED)  # fmt: skip


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_parses_and_its_states_add_up(name):
    s = load_scenario(name)
    assert s.description and s.source
    # compute from a stated profile, never this host's time
    for model in ("cnn1d", "char_lstm"):
        assert s.compute_for(model).startswith(("fixed:", "flops:"))
    assert not s.codec.startswith("measured")
    spec = s.network()
    assert spec.workers == s.workers
    states = s.states()
    assert sum(st.fraction for st in states) == pytest.approx(1.0)
    for st in states:  # each state is itself a steady scenario
        assert [x.name for x in st.scenario.states()] in (["steady"], [st.name]) or len(
            st.scenario.states()
        ) == 1


def _share(s, t):
    cap = s.up.capacity
    return np.ones(len(t)) if cap is None else capacity_model(cap, seed=0).share(np.array(t))


@pytest.mark.parametrize(
    ("name", "rate", "quiet_at", "congested_at", "share"),
    [
        ("episodes", 10e9, [0.1, 0.5], [0.3, 0.7], 0.02),  # 0.2 s off, 0.2 s on
        ("episodes-25", 10e9, [0.1, 0.25, 0.45], [0.35, 0.75], 0.02),  # 0.3 off, 0.1 on
        ("episodes-75", 10e9, [0.05, 0.45], [0.15, 0.35], 0.02),  # 0.1 off, 0.3 on
        ("episodes-short", 10e9, [0.01, 0.05], [0.03, 0.07], 0.02),
        ("episodes-long", 10e9, [1.0, 5.0], [3.0, 7.0], 0.02),
        ("persistent", 1e9, [], [1e-6, 1.0, 100.0], 0.05),  # quiet for its first ns
        ("quiet-dc", 100e9, [0.0, 10.0], [], 1.0),
        ("slow", 20e6, [0.0, 10.0], [], 1.0),
    ],
)
def test_capacity_over_time_is_as_configured(name, rate, quiet_at, congested_at, share):
    s = load_scenario(name)
    assert s.up.rate_bps == s.down.rate_bps == rate
    assert _share(s, quiet_at).tolist() == [1.0] * len(quiet_at)
    assert _share(s, congested_at).tolist() == pytest.approx([share] * len(congested_at))


def test_delay_over_time_is_as_configured():
    # long RTT: 20 ms each way, timers above the round trip
    s = load_scenario("long-rtt")
    assert s.up.prop_delay_s == s.down.prop_delay_s == pytest.approx(0.02)
    assert s.rto_s > 0.04 and s.min_rto_s > 0.04
    # low: 1 ms +- 0.1 ms per direction
    d = make_link(load_scenario("low").up.profile, seed=1).delay.delays(np.zeros(20000))
    assert d.mean() == pytest.approx(1e-3, rel=0.01) and d.std() == pytest.approx(1e-4, rel=0.05)
    # high: shared +20 ms episodes, a quarter of the time (1 s on, 3 s off)
    states = {st.name: st.fraction for st in load_scenario("high").states()}
    assert states == pytest.approx({"quiet": 0.75, "congested": 0.25})
    # persistent: a standing queue of 2 ms on top of the cross traffic
    d = make_link(load_scenario("persistent").up.profile, seed=1).delay.delays(np.zeros(5000))
    assert d.mean() == pytest.approx(2e-3, rel=0.02)


def test_the_trace_replays_capacity_and_delay_of_the_shipped_file():
    s = load_scenario("trace")
    path = SCENARIO_DIR / "traces" / "wan.txt"
    assert path.read_text() == synthetic_timeline(15)  # regenerating it is a no-op
    cap, delay = CapacityTrace(path), TimelineDelay(path)
    rows = [
        [float(x) for x in line.split()]
        for line in path.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    mid = [(a[0] + b[0]) / 2 for a, b in itertools.pairwise(rows)]
    assert _share(s, mid).tolist() == [r[1] for r in rows[:-1]]
    assert make_link(s.up.profile, seed=0).delay.delays(np.array(mid)).tolist() == pytest.approx(
        [r[2] / 1e3 for r in rows[:-1]]
    )
    assert cap.period == delay.period == 8.0
    states = {st.name: st.fraction for st in s.states()}
    assert set(states) == {"share 1, +0 ms", "share 0.1, +1 ms", "share 0.02, +4 ms"}
    spans = np.diff([r[0] for r in rows])
    for share, ms in ((1, 0), (0.1, 1), (0.02, 4)):
        held = sum(sp for sp, r in zip(spans, rows, strict=False) if r[1:] == [share, ms])
        assert states[f"share {share:g}, +{ms:g} ms"] == pytest.approx(held / 8.0)


def test_episode_states_hold_one_share_throughout():
    quiet, congested = load_scenario("episodes").states()
    assert quiet.scenario.up.capacity is None
    assert congested.scenario.up.capacity == constant_capacity(0.02)
    assert _share(congested.scenario, [1e-6, 0.3, 1e4]).tolist() == pytest.approx([0.02] * 3)


GOOD = {"description": "d", "source": "s", "link": {"rate": "1G"}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "one JSON object"),
        ({**GOOD, "colour": 1}, "unknown key(s): colour"),
        ({"source": "s"}, "'description' is required"),
        ({**GOOD, "link": {"rate": "fast"}}, "does not parse"),
        ({**GOOD, "link": {"speed": "1G"}}, "unknown key(s) in 'link': speed"),
        ({**GOOD, "link": {"capacity": "constant:share=x"}}, "constant:share=S"),
        ({**GOOD, "link": {"profile": "wobbly"}}, "unknown link profile"),
        ({**GOOD, "link": {"profile": "timeline:missing.txt"}}, "missing.txt"),
        ({**GOOD, "workers": 2.5}, "whole number"),
        ({**GOOD, "compute": {"cnn1d": "fast"}}, "compute"),
        ({**GOOD, "link": {"loss": "lots"}}, "not a number"),
    ],
)
def test_bad_scenarios_are_one_line_errors(tmp_path, data, message):
    with pytest.raises(ValueError) as e:
        parse_scenario(data, "bad", tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("scenario bad:")


def test_a_model_without_a_compute_profile_is_named():
    s = parse_scenario({**GOOD, "compute": {"cnn1d": "fixed:1ms"}}, "x", SCENARIO_DIR)
    with pytest.raises(ValueError, match="no compute profile for model 'char_lstm'"):
        s.compute_for("char_lstm")


def test_load_by_name_and_by_path(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**GOOD, "compute": {"default": "fixed:2ms"}, "codec": "none"}))
    s = load_scenario(str(path))
    assert s.name == "mine" and s.up.rate_bps == 1e9 and s.compute_for("cnn1d") == "fixed:2ms"
    with pytest.raises(ValueError, match="known: episodes"):
        load_scenario("nowhere")
    with pytest.raises(ValueError, match="no such file"):
        load_scenario(str(tmp_path / "nope.json"))
    path.write_text("{ not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_scenario(str(path))


def test_the_cli_says_what_is_wrong_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**GOOD, "link": {"rate": "fast"}}))
    for argv in (
        ["--scenario", str(bad)],
        ["--scenario", "nowhere"],
        ["--scenario", "slow", "--link-rate", "10G"],
    ):
        r = ina_in_process("train", "--sim", *argv)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = ina_in_process("train", "--scenario", "slow")
    assert r.returncode == 2 and "need --sim" in r.stderr
