"""Sweeps: the same results serially, on local processes and on a Dask cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import alive, descendants, wait_for

from ina.experiments.sweep import run_sweep


def simulate(config: tuple[int, float]) -> dict:
    """One small simulated allreduce with lossy links (module level: importable by name)."""
    from ina.sim.allreduce import run
    from ina.sim.network import LinkSpec, NetworkSpec

    seed, loss = config
    link = LinkSpec(loss=loss, profile="low")
    spec = NetworkSpec(workers=3, up=link, down=link, seed=seed, rto_s=1e-3, min_rto_s=1e-3)
    r = run(spec, size=3000, iters=2, seed=seed)
    return {k: v for k, v in r.items() if not k.startswith("wall_")}


CONFIGS = [(seed, loss) for seed in (1, 2) for loss in (0.0, 0.05)]


def test_local_processes_give_the_serial_results():
    serial = run_sweep(simulate, CONFIGS, parallel=1)
    assert len({str(r) for r in serial}) == len(CONFIGS)  # the configurations differ
    assert run_sweep(simulate, CONFIGS, parallel=2) == serial


def test_a_dask_cluster_on_loopback_gives_the_serial_results():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        remote = run_sweep(simulate, CONFIGS, cluster=cluster.scheduler_address)
    assert remote == run_sweep(simulate, CONFIGS, parallel=1)


def test_a_bad_parallel_count_is_refused():
    with pytest.raises(ValueError, match="--parallel"):
        run_sweep(simulate, CONFIGS, parallel=0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_killed_outright_leaves_no_process_running():
    """A job scheduler's SIGTERM (or SIGKILL) runs no cleanup in the sweep's process; its
    pool processes, each in a 60 s run, must stop with it all the same."""
    code = "import time; from ina.experiments.sweep import run_sweep; run_sweep(time.sleep, [60] * 2, parallel=2)"
    sweep = subprocess.Popen([sys.executable, "-c", code])
    pool: set[int] = set()
    try:
        _wait_for_pool(sweep, pool)
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(10) == -signal.SIGTERM
        wait_for(lambda: not any(alive(p) for p in pool), 10, f"pool processes {pool} to stop")
    finally:
        _reap(sweep, pool)


def _wait_for_pool(sweep: subprocess.Popen, pool: set[int]) -> None:
    """Wait until the sweep's two pool processes run; ``pool`` holds their PIDs."""

    def started() -> bool:
        pool.clear()
        pool.update(p for p in descendants(sweep.pid) if _in_pool(p))
        return len(pool) == 2

    wait_for(started, 60, "two pool processes")


def _reap(sweep: subprocess.Popen, pool: set[int]) -> None:
    """Stop what a failed test left running (no 60 s sleeper left to the next test)."""
    if sweep.poll() is None:
        sweep.kill()
        sweep.wait()
    for p in pool:
        if alive(p):
            os.kill(p, signal.SIGKILL)


def _in_pool(pid: int) -> bool:
    """Whether ``pid`` is a pool process (not the pool's resource tracker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"spawn_main" in f.read()
    except OSError:
        return False


# a sweep of 60 s runs, more than the pool holds, ended as the `ina` command ends one
_INTERRUPTIBLE = (
    "import sys, time\n"
    "from ina.errors import run_command\n"
    "from ina.experiments.sweep import run_sweep\n"
    "sys.exit(run_command('ina sweep', run_sweep, time.sleep, [60] * 6, 2))\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_a_parallel_sweep_at_once():
    """SIGINT to the process group, as a terminal's Ctrl-C: the queued runs never start, the
    running ones stop, one line and exit 130 within seconds (it waited for every run queued,
    each pool process taking the interrupt as one failed run), no leaked semaphores."""
    sweep = subprocess.Popen([sys.executable, "-c", _INTERRUPTIBLE], stderr=subprocess.PIPE,
                             text=True, start_new_session=True)  # fmt: skip
    pool: set[int] = set()
    try:
        _wait_for_pool(sweep, pool)
        os.killpg(sweep.pid, signal.SIGINT)
        _, err = sweep.communicate(timeout=15)  # a queued run alone would take 60 s
        assert sweep.returncode == 130, err[-3000:]
        assert err.strip() == "ina sweep: interrupted", err[-3000:]  # no traceback, no leak
        wait_for(lambda: not any(alive(p) for p in pool), 10, f"pool processes {pool} to stop")
    finally:
        _reap(sweep, pool)


def test_a_failed_run_stops_the_sweep_at_once():
    """The first failure is raised as it happens, without waiting for the runs queued."""
    import time

    t0 = time.monotonic()
    with pytest.raises(TypeError):
        run_sweep(time.sleep, ["not a number", 60, 60, 60], parallel=2)
    assert time.monotonic() - t0 < 30  # a queued run alone would take 60 s
