"""Sweeps: the same results serially, on local processes and on a Dask cluster."""

from __future__ import annotations

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
