"""`ina sim scenarios generate` (ina/sim/generate.py, issue 31): the same bytes from one seed,
every family with capacity and delay on 1-100 Gbit/s links, a time scale with several changes
per run, files that `ina train --sim --scenario` loads and runs, and one-line errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from ina.cli import main as ina_main
from ina.sim import generate as gen
from ina.sim.scenario import load_scenario


def _files(directory) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}  # fmt: skip


def _cli(*argv: str) -> int:
    """``ina sim scenarios generate ARGV`` in this process (`ina sim` reads sys.argv to load
    only the command being run)."""
    argv = ["sim", "scenarios", "generate", *argv]
    saved, sys.argv = sys.argv, ["ina", *argv]
    try:
        return ina_main(argv)
    finally:
        sys.argv = saved


def test_one_seed_writes_the_same_bytes_and_a_count_is_a_prefix(tmp_path, capsys):
    assert _cli("--seed", "7", "--count", "8", "--out", str(tmp_path / "a")) == 0
    assert _cli("--seed", "7", "--count", "8", "--out", str(tmp_path / "b")) == 0
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert len([f for f in a if f.endswith(".json")]) == 8 and a == b
    assert _cli("--seed", "7", "--count", "3", "--out", str(tmp_path / "c")) == 0
    c = _files(tmp_path / "c")
    assert c and all(a[f] == data for f, data in c.items())  # scenario I of seed S is fixed
    assert _cli("--seed", "8", "--count", "8", "--out", str(tmp_path / "d")) == 0
    assert _files(tmp_path / "d").keys() != a.keys() or _files(tmp_path / "d") != a
    record = json.loads(a["gen7-002-onoff.json"])["generator"]
    assert (record["seed"], record["index"], record["family"]) == (7, 2, "onoff")
    assert {"rate_gbps", "left_mbps", "share", "duty", "sigma"} <= record["params"].keys()
    assert len(capsys.readouterr().out.splitlines()) == 8 + 8 + 3 + 8


def test_the_families_cover_capacity_delay_and_1_to_100_gbit_s(tmp_path):
    paths = gen.write(gen.generate(0, 36, list(gen.FAMILIES), ["mnist1d", "pytext"]), tmp_path)
    seen: dict[str, list] = {}
    for path in paths:
        record = gen.record(path)
        s = load_scenario(str(path))
        seen.setdefault(record["family"], []).append((s, record))
        assert 1e9 <= s.up.rate_bps <= 100e9 and s.up == s.down
        assert math.isclose(sum(st.fraction for st in s.states()), 1.0)
        assert s.rto_s > 2 * s.up.prop_delay_s  # timers above the round trip
        if record["family"] != "persistent":  # the time scale: congestion changes in a run
            assert record["changes_per_run"] >= 3, (path, record)
            assert gen.path_changes(path, record["time_scale_s"]) == record["changes_per_run"]
    assert set(seen) == set(gen.FAMILIES)
    rates = [s.up.rate_bps for runs in seen.values() for s, _ in runs]
    assert min(rates) < 3e9 and max(rates) > 30e9
    for s, _ in seen["square"] + seen["onoff"] + seen["swell"]:  # capacity and delay vary
        assert s.up.capacity.startswith("trace:") and s.up.profile.startswith("timeline:")
        assert len(s.states()) >= 2
    for s, _ in seen["wan"]:  # the delay varies, the capacity does not
        assert s.up.capacity is None and s.up.profile.startswith("timeline:")
        assert s.up.prop_delay_s >= 2e-3 and len(s.states()) >= 2
    for s, record in seen["persistent"]:  # steady: a share and a standing queue
        assert s.up.capacity.startswith("episodes:") and s.up.profile.startswith("low:")
        assert len(s.states()) == 1 and record["changes_per_run"] == 0
    for _, record in seen["mixture"]:
        components = record["params"]["components"]
        assert len(set(components)) == 2 and "mixture" not in components


def test_the_step_estimate_is_within_1_5x_of_the_shipped_scenarios_measured_steps():
    """Seconds per step from docs/dc2.md's tables (time to target / steps to target)."""
    cases = [
        # workload, density, rate left (bit/s), round trip (s), compute (s), measured (s)
        ("mnist1d", 1.0, 100e9, 4e-6, 1e-3, 0.473 / 475),  # quiet-dc, dense
        ("mnist1d", 1.0, 20e6, 102e-6, 1e-3, 21.242 / 475),  # slow, dense
        ("mnist1d", 0.1, 10e9, 40e-3, 1e-3, 37.475 / 508),  # long-rtt, 0.1
        ("pytext", 1.0, 10e9, 40e-3, 3e-3, 177.81 / 900),  # long-rtt, dense
        ("pytext", 0.003, 20e6, 102e-6, 3e-3, 21.292 / 1650),  # slow, 0.003
    ]
    for workload, d, rate, rtt, compute, measured in cases:
        estimate = gen.step_seconds(workload, d, rate, rtt, compute)
        assert 1 / 1.5 < estimate / measured < 1.5, (workload, d, estimate, measured)


@pytest.mark.slow
def test_a_generated_file_trains_in_simulated_time(tmp_path):
    gen.write([gen.generate_one(3, 0, "mixture", ["mnist1d"])], tmp_path)
    (path,) = tmp_path.glob("*.json")
    r = subprocess.run(
        [sys.executable, "-m", "ina", "train", "--sim", "--scenario", str(path), "--dataset",
         "mnist1d", "--max-steps", "5", "--no-progress", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["steps"] == 5 and result["scenario"] == str(path)
    assert "timeline:" in result["network"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--families", "square,tidal"], "unknown family 'tidal'; known: square, swell, onoff"),
        (["--count", "0"], "--count takes a whole number of scenarios >= 1, got '0'"),
        (["--count", "many"], "--count takes a whole number"),
        (["--seed", "1.5"], "--seed takes a whole number >= 0, got '1.5'"),
        (["--seed", "x"], "--seed takes a whole number >= 0"),
        (["--workloads", "cifar"], "unknown workload 'cifar'"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    assert _cli(*argv, "--out", str(tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ina sim scenarios: ") and message in err[0], err
    assert not list(tmp_path.glob("*.json"))
