"""Shared fixtures: a switch model served on loopback in this process, and workers on
threads (real UDP sockets), so that tests run fast on two cores."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

import pytest

from ina.host.launch import local_jobs
from ina.host.transport import WorkerConfig
from ina.switch_model.impair import Impairment
from ina.switch_model.pipeline import Pipeline
from ina.switch_model.run import install_job_spec
from ina.switch_model.server import SwitchServer
from ina.switch_model.tables import JobSpec


def ina_in_process(*argv: str, cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """``ina ARGV`` run in this process: its exit status, stdout and stderr, as
    `subprocess.run` gives them. For the tests of bad input, which end before any work: the
    same `ina.cli.main` as the command, without a new interpreter importing torch (seconds
    each, most of those tests' time). A traceback fails the test here as it would there."""
    from ina.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd = sys.argv[:], os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as e:  # argparse's usage errors, --help
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for s, h in handlers.items():
            signal.signal(s, h)
    return subprocess.CompletedProcess(["ina", *argv], rc, out.getvalue(), err.getvalue())


def fresh_python(code: str, timeout: float = 60) -> str:
    """What ``code`` prints, run in a new interpreter (nothing this test process imported is
    there): the way to check what a module imports."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def wait_for(condition: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


def _stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command name (state, parent, ...); None: gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs, ...), from /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(entry)) is not None:
            parent[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, which nothing may reap here, counts as gone)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def bmv2_thrift_serving(port: int, timeout: float = 10.0) -> bool:
    """Whether BMv2's Thrift runtime server accepts on ``port`` within ``timeout``.

    A simple_switch_grpc built without Thrift accepts ``--thrift-port`` and serves nothing
    on it, so the pool reset over ``simple_switch_CLI`` cannot be exercised there."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)  # polling a listener that may still be starting


def require_bmv2_thrift(port: int) -> int:
    """``port`` if BMv2 serves Thrift on it; skip the test otherwise."""
    if not bmv2_thrift_serving(port):
        pytest.skip(
            f"simple_switch_grpc serves no Thrift runtime on port {port} "
            "(built without Thrift): BMv2's pool reset needs simple_switch_CLI"
        )
    return port


@contextmanager
def serving(pipeline: Pipeline, impairment: Impairment | None = None):
    """Serve ``pipeline`` on a free loopback port in a thread; stop it afterwards."""
    server = SwitchServer(pipeline, bind=("127.0.0.1", 0), impairment=impairment)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll": 0.01}, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.stop()
        t.join(timeout=5)
        server.close()


class Harness:
    """One job on an in-process switch model."""

    def __init__(self, server: SwitchServer, spec: JobSpec, lanes: int) -> None:
        self.server = server
        self.spec = spec
        self.lanes = lanes

    @property
    def pipeline(self) -> Pipeline:
        return self.server.pipeline

    def config(self, worker_id: int, **kw) -> WorkerConfig:
        w = self.spec.workers[worker_id]
        base = dict(
            job_id=self.spec.job_id,
            worker_id=worker_id,
            num_workers=self.spec.num_workers,
            switch=self.server.address,
            bind=(w.ip, w.udp_port),
            pool_size=self.spec.pool_size,
            lanes=self.lanes,
        )
        base.update(kw)
        return WorkerConfig(**base)

    def run(
        self, fn: Callable[[int], object], workers: list[int] | None = None, timeout: float = 120.0
    ) -> dict[int, object]:
        """Run ``fn(worker_id)`` on one thread per worker; results or raised exceptions."""
        ids = range(self.spec.num_workers) if workers is None else workers
        results: dict[int, object] = {}

        def body(w: int) -> None:
            try:
                results[w] = fn(w)
            except BaseException as e:  # collected and re-examined by the test
                results[w] = e

        threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
            assert not t.is_alive(), "a worker thread hung"
        return results


@pytest.fixture(scope="session")
def p4_program(request, tmp_path_factory):
    """The P4 program compiled by p4c-bm2-ss, for the BMv2 tests: no test depends on a
    command run beforehand (`make p4`). Kept in pytest's cache and compiled again only when
    the P4 sources change; skips, saying why, when the compiler is not installed."""
    from differential.targets import compiled_program

    from ina import p4build

    if p4build.find_compiler() is None:
        pytest.skip(f"{p4build.COMPILER} not on PATH (see `python -m ina.p4build`)")
    return compiled_program(request.config, tmp_path_factory)


@pytest.fixture
def harness_factory():
    """harness_factory(num_workers, lanes=..., pool_size=..., impairment=...) -> Harness."""
    stack = []

    def make(
        num_workers: int,
        lanes: int = 64,
        pool_size: int = 32,
        impairment: Impairment | None = None,
        pool_total: int = 256,
    ) -> Harness:
        spec = local_jobs(num_workers, pool_size)[0]
        pipeline = Pipeline(lanes=lanes, pool_total=pool_total)
        install_job_spec(pipeline, spec)
        cm = serving(pipeline, impairment)
        server = cm.__enter__()
        stack.append(cm)
        return Harness(server, spec, lanes)

    yield make
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


class ArrayLib:
    """The array library a codec test runs on: ``to(numpy_array)`` converts test data."""

    def __init__(self, name: str, device: str | None) -> None:
        self.name = name
        self.device = device

    def to(self, a):
        if self.device is None:
            return a
        import numpy as np
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def __repr__(self) -> str:
        return self.name


@pytest.fixture(scope="session", params=["numpy", "torch-cpu", "torch-cuda"])
def arraylib(request) -> ArrayLib:
    """The codec's array libraries: numpy, torch on the CPU, torch on CUDA (skipped with a
    reason where no GPU is present). Results must be bit-identical on all of them."""
    if request.param == "numpy":
        return ArrayLib("numpy", None)
    import torch

    if request.param == "torch-cuda" and not torch.cuda.is_available():
        pytest.skip("torch-cuda: no CUDA device here (torch.cuda.is_available() is False)")
    return ArrayLib(request.param, "cuda" if request.param == "torch-cuda" else "cpu")
