"""Equivalence classes of workers (`ina.sim.classes`): found from the topology, the links'
conditions and the workers' compute, and, simulated one representative per class, the same
times to the nanosecond as simulating every worker, with a congested leaf uplink, a
straggler and a lossy link in the run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ina_in_process

from ina import topology
from ina.sim.allreduce import run as sim_allreduce
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec, link_classes
from ina.sim.options import with_link_conditions
from ina.sim.stragglers import parse_stragglers

LINK = LinkSpec(rate_bps=10e9, prop_delay_s=1e-6)
CONGESTED = "capacity=episodes:share=0.5:on_s=0.0002:off_s=0.0003:fixed=1"


def spec(fabric, timing_only: bool, switch_rate: float | None = None) -> NetworkSpec:
    return NetworkSpec(
        workers=len(fabric.workers), topology=fabric, lanes=256, pool_size=64, up=LINK,
        down=LINK, switch=SwitchSpec(rate_bps=switch_rate, latency_s=1e-6),
        timing_only=timing_only, seed=3,
    )  # fmt: skip


def test_alike_workers_make_one_class_and_each_difference_adds_one():
    fabric = topology.load("two_level:4x8")
    one = link_classes(spec(fabric, True), fabric)
    assert one.count == 1 and one.weights == {"s1": {"l1": 4}, "l1": {"h1": 8}}
    assert sorted(one.members["h1"], key=topology.natural_key) == fabric.workers
    # a lossy worker link in the middle of its leaf: the workers before it, it, those after
    lossy = with_link_conditions(fabric, ["h3:loss=0.01"])
    c = link_classes(spec(lossy, True), lossy)
    assert c.weights["l1"] == {"h1": 2, "h3": 1, "h4": 5}
    assert c.weights["s1"] == {"l1": 1, "l2": 3}  # l1 differs now, l2..l4 do not
    assert c.members["h3"] == ["h3"] and len(c.members["h4"]) == 5
    assert len(c.members["h9"]) == 24  # 3 leaves of 8
    # every worker in exactly one class
    members = sorted(m for ms in c.members.values() for m in ms)
    assert members == sorted(fabric.workers)
    # two lossy links draw two streams: two classes, even with equal parameters
    two = with_link_conditions(fabric, ["h3:loss=0.01", "h4:loss=0.01"])
    assert link_classes(spec(two, True), two).weights["l1"] == {"h1": 2, "h3": 1, "h4": 1, "h5": 4}
    # a worker's own compute makes it a class of its own; a deterministic link condition
    # alike on every leaf changes nothing
    slow = link_classes(spec(fabric, True), fabric, lambda h: h == "h10")
    assert slow.weights["l2"] == {"h9": 1, "h10": 1, "h11": 6}
    racked = with_link_conditions(fabric, [], ["s1:rate=25G"])
    assert link_classes(spec(racked, True), racked).count == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "topo, links, stragglers, switch_rate",
    [
        # 256 workers: a congested leaf uplink, a straggler, a lossy worker link
        ("two_level:8x32", ["l3:" + CONGESTED, "h40:loss=0.01"], "slow:70=1.5", None),
        # three levels, a pipeline slower than the links, a lossy leaf uplink
        ("three_level:2x4x8", ["l2:loss=0.02", "m2:rate=5G"], "slow:5=2", 20e9),
    ],
)
def test_classes_give_every_workers_times_to_the_nanosecond(topo, links, stragglers, switch_rate):
    fabric = with_link_conditions(topology.load(topo), links)
    runs = []
    for timing_only in (False, True):
        runs.append(
            sim_allreduce(
                spec(fabric, timing_only, switch_rate), 20_000, 3,
                compute_s=100e-6, stragglers=parse_stragglers(stragglers),
            )
        )  # fmt: skip
    every, classes = runs
    assert classes["simulated_workers"] < every["simulated_workers"] / 8
    assert every["retransmissions"] > 0  # the loss is felt
    # Where the pipeline is slower than the links, the first call differs by a few of its
    # processing times: the run's last joiner skips the JOIN round trip the others of its
    # class make, and is a worker apart until the first call is over (docs/simulation.md).
    first = 0 if switch_rate is None else 1
    for key in ("call_seconds", "step_seconds"):
        assert classes[key][first:] == pytest.approx(every[key][first:], rel=0, abs=1e-12), key
    # each class's retransmissions count once per member
    assert classes["retransmissions"] == every["retransmissions"]


def ina(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ina", "sim", "allreduce", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_thousand_workers_with_conditions_run_as_a_few_classes():
    r = ina(
        "--topology", "two_level:32x32", "--timing-only", "--size", "20000", "--iters", "1",
        "--link", "l7:" + CONGESTED, "--link", "h100:loss=0.001", "--compute", "1ms",
        "--stragglers", "slow:500=1.5", "--link-rate", "10G",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # at the spine, runs of alike leaves: l1-l3, l4 (h100's), l5-l6, l7 (congested), l8-l15,
    # l16 (worker 500, h501), l17-l32; on l4 and l16, the workers before, the one, those after
    assert "timing only: 11 classes of alike workers" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--topology", "two_level:2x2", "--link", "l9:loss=0.1"], "has no link 'l9'"),
        (["--topology", "two_level:2x2", "--link", "h1:speed=1G"], "not KEY=VALUE with KEY one of"),
        (["--topology", "two_level:2x2", "--rack", "l5:loss=0.1"], "has no switch 'l5'"),
        (["--topology", "two_level:2x2", "--link", "h1:loss=2"], "link h1: loss must be in [0, 1)"),
        (["--link", "h1:loss=0.1"], "--link and --rack name links of a --topology"),
        (["--topology", "two_level:2x2", "--stragglers", "slow:9=2"], "worker 9 of 4 (0..3)"),
        (["--topology", "four_level:2x2x2x2"], "four_level"),
        (["--topology", "three_level:2x2"], "three_level:AxLEAVESxWORKERS"),
        (
            ["--topology", "two_level:32x32", "--timing-only", "--rack", "s1:loss=0.01",
             "--size", "1e9"],
            "1,024 classes of alike workers (of 1,024",
        ),
    ],
)  # fmt: skip
def test_bad_conditions_are_one_line_errors(args, message):
    r = ina_in_process("sim", "allreduce", *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr


@pytest.mark.parametrize("timing_only", [False, True])
def test_a_worker_that_fails_is_named_and_the_others_time_out(timing_only):
    fabric = topology.load("two_level:2x4")
    r = sim_allreduce(spec(fabric, timing_only), 50_000, 2, fail=(5, 50e-6))
    f = r["failed"]
    assert f["name"] == "h6" and f["at_s"] == 50e-6
    # the others' chunk timeout (10 s), seen at a retransmission (at most max_rto, 1 s, apart)
    assert 10.0 < f["others_timed_out_at_s"] < 11.0
    assert "ReduceTimeout" in f["error"] or "got no result within 10.0 s" in f["error"]
    cmd = ["--topology", "two_level:2x4", "--fail", "5@50us", "--size", "50000"]
    p = ina(*cmd, *(["--timing-only"] if timing_only else []))
    assert p.returncode == 1 and p.stdout.startswith("h6 (worker 5) failed at 50.00 us"), p.stdout


@pytest.mark.parametrize(
    "fail, message",
    [("9@1ms", "worker 9 of 8 (0..7)"), ("x", "use WORKER@TIME"), ("1@soon", "--fail time")],
)
def test_a_bad_failure_is_one_line(fail, message):
    r = ina_in_process("sim", "allreduce", "--topology", "two_level:2x4", "--fail", fail)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_the_classes_benchmark_runs_a_row_and_reports_its_memory():
    r = subprocess.run(
        [sys.executable, "-m", "ina", "bench", "classes", "--size", "20000", "--only", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("| 1,024 workers, a cong"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "11" and float(cells[5]) > 0  # classes; peak memory in GiB
    assert ina_in_process("bench", "classes", "--only", "9").returncode == 2
