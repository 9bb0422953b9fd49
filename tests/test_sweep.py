"""Sweeps: the same results serially, on local processes and on a Dask cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

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


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (a zombie counts as gone)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue  # (gone meanwhile)
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_killed_outright_leaves_no_process_running():
    """A job scheduler's SIGTERM (or SIGKILL) runs no cleanup in the sweep's process; its
    pool processes, each in a 60 s run, must stop with it all the same."""
    code = "import time; from ina.experiments.sweep import run_sweep; run_sweep(time.sleep, [60] * 2, parallel=2)"
    sweep = subprocess.Popen([sys.executable, "-c", code])
    try:
        pool: set[int] = set()

        def started() -> bool:
            pool.update(
                c for c in _children(sweep.pid)
                if b"spawn_main" in open(f"/proc/{c}/cmdline", "rb").read()
            )  # fmt: skip
            return len(pool) == 2

        _wait(started, 60, "two pool processes")
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(10) == -signal.SIGTERM
        _wait(lambda: not any(_alive(p) for p in pool), 10, f"pool processes {pool} stopped")
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
