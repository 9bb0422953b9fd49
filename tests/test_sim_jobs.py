"""Several jobs on one switch in the simulator (ATP's setting): each job's sums are its own
under contention and loss, and what one job's traffic does to another's time is measured.
Simulated time is deterministic, so these tests assert it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ina_in_process

from ina.sim import jobs
from ina.sim.backends import build
from ina.sim.network import LinkSpec, NetworkSpec, SwitchSpec


def spec(**kw) -> NetworkSpec:
    base = dict(workers=4, jobs=3, lanes=256, pool_size=64, seed=5)
    return NetworkSpec(**{**base, **kw})


def test_jobs_get_their_own_pools_ids_and_groups_on_one_switch():
    net = build(spec(jobs=3, placement="shared"))
    tables = net.pipeline.tables
    assert sorted(tables.jobs) == [1, 2, 3]
    assert sorted(j.pool_base for j in tables.jobs.values()) == [0, 64, 128]
    assert len({j.mcast_grp for j in tables.jobs.values()}) == 3
    assert net.job_of == [0] * 4 + [1] * 4 + [2] * 4
    # shared hosts: worker w of every job on one link each way
    assert len({id(n.uplink) for n in net.workers}) == 4 and len(net.links()) == 8


@pytest.mark.parametrize("placement", ["separate", "shared"])
def test_every_job_decodes_its_own_sums_under_contention_and_loss(placement):
    lossy = LinkSpec(rate_bps=100e9, loss=0.02)
    r = jobs.run_together(
        spec(up=lossy, down=lossy, switch=SwitchSpec(rate_bps=100e9), placement=placement),
        60_000,
        2,
    )
    assert all(j["retransmissions"] > 0 for j in r["jobs"])  # the loss did happen
    for j in r["jobs"]:
        assert j["exact"], j["job_id"]  # each job's sums equal its own workers' int32 sum
        assert not j["saw_another_jobs_sums"], j["job_id"]
    # the jobs' sums differ, so a job that decoded another's would be caught
    assert r["distinct_sums"]
    assert r["counters"]["drop_unknown_job"] == 0 and r["late_packets"] == 0


def test_the_slowdown_is_what_the_jobs_share():
    size = 200_000  # bandwidth-bound at 100 Gbit/s
    # hosts of their own and a line-rate switch: nothing shared but slot memory, no slowdown
    apart = jobs.run(spec(jobs=2, placement="separate"), size, 2)
    assert [j["slowdown"] for j in apart["jobs"]] == [1.0, 1.0]
    # worker w of both jobs on host w: its link carries both, each job takes about twice
    shared = jobs.run(spec(jobs=2, placement="shared"), size, 2)
    for j in shared["jobs"]:
        assert 1.6 < j["slowdown"] <= 2.05, j
    # hosts of their own, but a switch pipeline no faster than one port: it is shared
    slow_switch = jobs.run(spec(jobs=2, switch=SwitchSpec(rate_bps=100e9)), size, 2)
    assert all(j["slowdown"] > 1.5 for j in slow_switch["jobs"])
    assert shared["exact"] and apart["exact"] and slow_switch["exact"]


def test_timing_only_jobs_agree_with_every_worker_simulated():
    full = jobs.run_together(spec(jobs=2, placement="shared"), 100_000, 3)
    one = jobs.run_together(spec(jobs=2, placement="shared", timing_only=True), 100_000, 3)
    for f, o in zip(full["jobs"], one["jobs"], strict=True):
        # the first call also joins the run (N workers probe for their nonces)
        assert o["call_seconds"][1:] == pytest.approx(f["call_seconds"][1:], rel=0, abs=1e-12)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--jobs", "0"], "jobs must be 1..64"),
        (["--jobs", "4", "--pool", "512"], "need 2048; the switch has 1024"),
        (["--jobs", "2", "--placement", "rack"], "invalid choice: 'rack'"),
        (["--jobs", "2", "--density", "0.1"], "--jobs runs dense allreduces"),
        (["--jobs", "2", "--compute", "1ms"], "--jobs runs allreduces alone"),
        (["--jobs", "2", "--fail", "0@1ms"], "--jobs runs allreduces alone"),
    ],
)
def test_bad_job_options_are_one_line_errors(args, message):
    r = ina_in_process("sim", "allreduce", *args)
    assert r.returncode == 2
    assert message in r.stderr.strip().splitlines()[-1], r.stderr


def test_the_cli_reports_each_jobs_time_alone_and_together():
    r = subprocess.run(
        [sys.executable, "-m", "ina", "sim", "allreduce", "--jobs", "2", "--workers", "2",
         "--size", "50000", "--iters", "1", "--placement", "shared"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = [
        line
        for line in r.stdout.splitlines()
        if line.startswith("| 1 |") or line.startswith("| 2 |")
    ]
    assert len(rows) == 2 and all("x |" in row and "| yes | no |" in row for row in rows)
