"""Run an experiment's independent configurations in parallel: local processes by default,
or a Dask distributed cluster given its scheduler's address.

An experiment is a function ``fn(config) -> result`` over many configurations, each a
complete, deterministic description of one run (a simulated training with its seed, say).
`run_sweep` returns the results in the configurations' order, whoever ran them: a serial
loop, a pool of local processes (``concurrent.futures`` with spawned interpreters, so that
no run inherits another's state), or the workers of a Dask cluster (``--cluster
tcp://HOST:PORT``, started elsewhere with ``dask scheduler`` and ``dask worker``). Because
every run is a pure function of its configuration, all three give the same results (a test
checks the cluster against the serial loop); only the wall time differs.

``fn`` must be importable by name (a module-level function): processes and cluster workers
receive it by reference, not by value.

A pool process stops when the sweep's process dies, however it dies (`_die_with_parent`).
Pool processes block SIGINT: Ctrl-C reaches the sweep's process alone, which cancels the
runs queued and stops the running ones by PID (`_stop_pool`), as it does on the first failed
run; the command then prints its one line and exits 130.

With ``desc``, a progress bar (`ina.progress`: runs done out of runs planned, and the time
left) advances as each run finishes, in whatever order they finish.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

from ina import progress
from ina.errors import UsageError
from ina.procs import ctrl_c_blocked_in_children, die_with_parent

# the schemes of Dask's comms (distributed.comm.registry) a scheduler's address may name
CLUSTER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")

C = TypeVar("C")
R = TypeVar("R")


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--parallel",
        type=int,
        default=os.cpu_count() or 1,
        help="local processes running configurations at once (1: serially, in this process)",
    )
    p.add_argument(
        "--cluster",
        metavar="tcp://HOST:PORT",
        help="run the configurations on this Dask distributed scheduler's workers instead",
    )


def check_sweep_arguments(parallel: int, cluster: str | None = None) -> None:
    """`UsageError` for a ``--parallel`` below 1 or a ``--cluster`` that is not a scheduler's
    address, ``[tcp://]HOST:PORT``: for a command to call before any of its work (the sweep
    itself checks them only when it starts, after whatever came before it)."""
    if parallel < 1:
        raise UsageError(f"--parallel must be >= 1, got {parallel}")
    if cluster is not None:
        _check_cluster(cluster)


def _check_cluster(cluster: str) -> None:
    """`UsageError` unless ``cluster`` reads as ``[SCHEME://]HOST:PORT``."""
    scheme, sep, rest = cluster.rpartition("://")
    host, _, port = rest.rpartition(":")
    known = not sep or scheme in CLUSTER_SCHEMES
    if not (known and host and port.isdigit() and 0 < int(port) < 65536):
        raise UsageError(
            f"--cluster {cluster}: not a Dask scheduler's address (tcp://HOST:PORT, as "
            "`dask scheduler` prints it)"
        )


def run_sweep(
    fn: Callable[[C], R],
    configs: Sequence[C],
    parallel: int = 1,
    cluster: str | None = None,
    desc: str = "runs",
) -> list[R]:
    """``[fn(c) for c in configs]``, run serially, on ``parallel`` local processes, or on
    the Dask cluster at ``cluster``; the first failure is raised. ``desc`` labels the
    progress bar."""
    configs = list(configs)
    if cluster:
        from distributed import Client
        from distributed import as_completed as dask_completed

        _check_cluster(cluster)
        try:
            client = Client(cluster, timeout="20s")
        except OSError as e:
            raise UsageError(f"--cluster {cluster}: no Dask scheduler answers ({e})") from None
        with client, progress.bar(len(configs), desc) as bar:
            futures = client.map(fn, configs, pure=False)
            try:
                for _ in dask_completed(futures):
                    bar.update(1)
                return client.gather(futures)
            except BaseException:  # Ctrl-C or a failed run: the cluster's queue emptied too
                client.cancel(futures)
                raise
    check_sweep_arguments(parallel)
    if parallel == 1 or len(configs) <= 1:
        return [fn(c) for c in progress.track(configs, desc)]
    pool = ProcessPoolExecutor(
        max_workers=min(parallel, len(configs)),
        mp_context=mp.get_context("spawn"),
        initializer=_die_with_parent,
        initargs=(os.getpid(),),
    )
    try:
        with progress.bar(len(configs), desc) as bar:
            with ctrl_c_blocked_in_children():  # the pool's processes start in submit
                futures = [pool.submit(fn, c) for c in configs]
            for f in as_completed(futures):
                f.result()  # the first failure, as it happens
                bar.update(1)
            return [f.result() for f in futures]
    except BaseException:
        _stop_pool(pool)  # Ctrl-C or a failed run: no queued run starts, none runs on
        raise
    finally:
        pool.shutdown(wait=True)  # (after _stop_pool, at once)


def _stop_pool(pool: ProcessPoolExecutor, timeout: float = 10.0) -> None:
    """Cancel the pool's queued runs and stop its processes by PID (SIGTERM, then SIGKILL
    after ``timeout`` seconds): leaving a pool's ``with`` block waits for every run queued,
    which after Ctrl-C was minutes. The pool's own thread then sees its processes gone, fails
    what was running and closes its queues, so that no semaphore is left to the resource
    tracker's warning."""
    processes = list((pool._processes or {}).values())  # (only the pool holds them)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        p.terminate()
    deadline = time.monotonic() + timeout
    for p in processes:
        p.join(max(deadline - time.monotonic(), 0))
        if p.is_alive():
            p.kill()
            p.join()


def _die_with_parent(parent: int) -> None:
    """A pool process's start: it stops when the sweep's process dies. Killed outright (a
    job scheduler's SIGTERM, SIGKILL), that process runs no cleanup, and its pool would run
    on, each process to the end of its run and then waiting for work that never comes."""
    if not die_with_parent(parent):
        os._exit(1)
