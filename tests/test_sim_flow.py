"""The flow-level mode (`ina.sim.flow`, `ina sim allreduce --flow`): on bulk transfers, the
same simulated times as the packet engine (the real transport and pipeline) to within a
percent, whatever sets the pace (a link, the switch's pipeline, the window, capacity and
cross-traffic episodes, a straggler); any number of workers; and what it cannot model
refused in one line."""

from __future__ import annotations

import argparse
import json

import pytest
from conftest import ina_in_process

from ina.sim import allreduce, flow

EPISODES = "on_s=0.0002:off_s=0.0003:fixed=1"


def prepared(*argv: str) -> tuple[argparse.Namespace, allreduce.Prepared]:
    """`ina sim allreduce ARGV`'s options and the run they describe."""
    parser = argparse.ArgumentParser()
    allreduce.add_arguments(parser)
    args = parser.parse_args(list(argv))
    return args, allreduce.prepare(args)


def both(*argv: str) -> tuple[dict, dict]:
    """The packet engine's (timing only) and the flow level's results of one command."""
    args, p = prepared("--timing-only", "--iters", "2", *argv)
    packets = allreduce.run(
        p.spec, args.size, args.iters, compute_s=p.compute_s, stragglers=p.stragglers
    )
    return packets, flow.run(p.spec, args.size, args.iters, p.compute_s, p.stragglers)


@pytest.mark.parametrize(
    "argv, paced_by",
    [
        ([], "uplinks"),
        (["--link-rate", "10G"], "uplinks"),
        (["--switch-rate", "200G"], "switch"),
        (["--capacity", f"episodes:share=0.5:{EPISODES}"], "uplinks"),
        (["--cross", f"episodes:rate=40G:{EPISODES}"], "uplinks"),
        (["--capacity", "trace:{trace}"], "uplinks"),  # looped: its changes' times round
        (["--topology", "two_level:2x4"], "the window"),
        (["--topology", "two_level:2x4", "--link", "l2:rate=25G"], "l2-s1 up"),
        (["--topology", "two_level:2x4", "--compute", "1ms", "--stragglers", "slow:5=1.5"],
         "the window"),
    ],
)  # fmt: skip
def test_bulk_transfers_take_the_packet_engines_time_to_within_a_percent(argv, paced_by, tmp_path):
    trace = tmp_path / "capacity.txt"  # half the rate 20 us in every 50
    trace.write_text("0 1\n0.00003 0.5\n0.00005 1\n")
    packets, fluid = both("--size", "2e6", *(a.format(trace=trace) for a in argv))
    (first, *rest), (flow_first, *flow_rest) = packets["step_seconds"], fluid["step_seconds"]
    for a, b in zip(rest, flow_rest, strict=True):
        assert b == pytest.approx(a, rel=0.01)
    # the first call: in a tree, the packet engine's slow start takes a few round trips more
    assert flow_first == pytest.approx(first, rel=0.02)
    assert next(iter(fluid["paced_by"])) == paced_by  # the hop that set the pace most


def test_a_straggler_starts_every_call_when_it_is_ready():
    base = flow.run(prepared("--flow", "--topology", "two_level:2x4")[1].spec, 1_000_000, 3)
    _, p = prepared(
        "--flow", "--topology", "two_level:2x4", "--compute", "2ms", "--stragglers", "slow:6=1.5"
    )
    slow = flow.run(p.spec, 1_000_000, 3, compute_s=p.compute_s, stragglers=p.stragglers)
    # each step: the straggler's 3 ms of compute, then the call as without it
    for a, b in zip(base["call_seconds"], slow["step_seconds"], strict=True):
        assert b == pytest.approx(3e-3 + a, abs=1e-12)
    # a call as the others see it: from their end of compute (2 ms) to the end
    assert slow["call_seconds"][1] == pytest.approx(1e-3 + base["call_seconds"][1], abs=1e-12)


def test_the_cli_runs_65536_workers_and_writes_the_same_result_twice(tmp_path):
    outs = []
    for k in range(2):
        r = ina_in_process(
            "sim", "allreduce", "--flow", "--workers", "65536", "--params", "25e6", "--iters",
            "2", "--out", str(tmp_path / str(k)),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "as a fluid" in r.stdout and "paced by: uplinks 100%" in r.stdout
        d = json.loads((tmp_path / str(k) / "result.json").read_text())
        outs.append({k: v for k, v in d.items() if not k.startswith("wall_")})
    assert outs[0] == outs[1]
    # 97,657 packets of SUM and 382 of MAX (the scales), 1,090-byte frames at 100 Gbit/s:
    # 8.549 ms and two round trips; at line rate the switch is no bottleneck, so as long as
    # for 8 workers
    assert 8.549e-3 < outs[0]["call_seconds"][1] < 8.56e-3
    eight = ina_in_process("sim", "allreduce", "--flow", "--params", "25e6", "--iters", "2",
                           "--out", str(tmp_path / "8"))  # fmt: skip
    assert eight.returncode == 0, eight.stderr
    d = json.loads((tmp_path / "8" / "result.json").read_text())
    assert d["call_seconds"] == outs[0]["call_seconds"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--link-loss", "0.01"], "no packets to lose"),
        (["--link-profile", "high"], "deterministic delays"),
        (["--buffer", "1MB"], "no queues to fill"),
        (["--density", "0.1"], "dense allreduce"),
        (["--jobs", "2"], "one job"),
        (["--backend", "ns3"], "on no backend"),
        (["--fail", "1@1ms"], "no worker to fail"),
        (["--cross", "trace:{trace}"], "not a trace"),
        (["--topology", "two_level:2x4", "--link", "h3:loss=0.1"], "no packets to lose"),
    ],
)
def test_what_the_flow_level_cannot_model_is_one_line_and_exit_2(argv, says, tmp_path):
    trace = tmp_path / "cross.txt"
    trace.write_text("0.000001 1500\n")
    r = ina_in_process("sim", "allreduce", "--flow", *(a.format(trace=trace) for a in argv))
    assert r.returncode == 2, r
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_benchmark_prints_both_engines_and_their_difference():
    r = ina_in_process("bench", "flow", "--size", "2e5", "--only", "6")
    assert r.returncode == 0, r.stderr
    row = r.stdout.strip().splitlines()[-1].split("|")
    # the last call (the first adds the packet engine's slow start, which the fluid has not)
    packets, fluid, diff = (float(x.split()[0].rstrip("%")) for x in row[6:9])
    assert row[2].strip() == "`--topology two_level:4x8`"
    assert fluid == pytest.approx(packets, rel=0.02) and abs(diff) < 2
    assert ina_in_process("bench", "flow", "--only", "99").returncode == 2
