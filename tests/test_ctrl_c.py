"""Ctrl-C in a long command: one line, exit status 130, and no process left behind.

A terminal sends SIGINT to its whole foreground process group; the tests do the same to a
command started as the leader of a group of its own, while it works, and then check that
every process it had started (found through /proc) is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import alive, descendants


def interrupt(
    tmp_path, argv: list[str], started: str, want_children: int, sig: int = signal.SIGINT,
    group: bool = True, status: int = 130, env: dict | None = None,
) -> tuple[str, str]:  # fmt: skip
    """Run ``ina argv``; once ``started`` is on stdout and ``want_children`` processes are
    under it, send ``sig`` to its process group (or, not ``group``, to it alone, as
    ``kill PID`` does); its stdout and stderr after it ended with ``status``."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ina", *argv],
            stdout=fo,
            stderr=fe,
            cwd=tmp_path,
            start_new_session=True,  # a process group of its own, as a shell's job
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        deadline = time.monotonic() + 120
        kids: set[int] = set()
        while True:
            assert proc.poll() is None, f"ended before the interrupt: {err.read_text()[-2000:]}"
            kids = descendants(proc.pid)
            if started in out.read_text() and len(kids) >= want_children:
                break
            assert time.monotonic() < deadline, f"never started: {out.read_text()[-2000:]}"
            time.sleep(0.2)  # polling a process's output and children
        time.sleep(1.0)  # let it get into the work itself
        kids = descendants(proc.pid)
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 20
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.1)  # the children stop by SIGTERM, reaped by their own parents
    left = [k for k in kids if alive(k)]
    for k in left:  # do not leave them to the next test
        os.kill(k, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    assert rc == status, err.read_text()[-3000:]
    return out.read_text(), err.read_text()


# one row's wall-clock side: a switch model and two workers on 10 Mbit/s links
VALIDATE = ["sim", "validate", "--what", "allreduce", "--workers", "2", "--rates", "10M",
            "--profiles", "none", "--iters", "100", "--switch-latency", "20us"]  # fmt: skip


@pytest.mark.parametrize(
    "argv, started, want_children",
    [
        (["allreduce", "--workers", "2", "--size", "2e6", "--iters", "500"], "starting", 3),
        (["sim", "allreduce", "--workers", "8", "--size", "4e6", "--iters", "50"], "", 0),
        (["train", "--workers", "2", "--epochs", "200", "--no-progress"], "switch model", 3),
        (["train", "--sim", "--workers", "4", "--epochs", "200", "--no-progress"], "training", 0),
        (VALIDATE, "| what", 3),  # its workers printed a traceback each
    ],
    ids=["allreduce", "sim-allreduce", "train", "train-sim", "sim-validate"],
)
def test_ctrl_c_ends_with_one_line_and_status_130(tmp_path, argv, started, want_children):
    command = "ina " + " ".join(argv[:2] if argv[0] == "sim" else argv[:1])
    _, err = interrupt(tmp_path, argv, started, want_children)
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"{command}: interrupted", err[-3000:]


@pytest.mark.parametrize(
    "argv, started, want_children",
    [
        (["allreduce", "--workers", "2", "--size", "2e6", "--iters", "500"], "starting", 3),
        (["train", "--workers", "2", "--epochs", "200", "--no-progress"], "switch model", 3),
        (VALIDATE, "| what", 3),
    ],
    ids=["allreduce", "train", "sim-validate"],
)
def test_sigterm_stops_the_switch_and_the_workers_and_exits_143(
    tmp_path, argv, started, want_children
):
    """``kill PID`` (SIGTERM to the command alone): its switch model and workers or ranks
    stop with it, its ``ina-switch-*`` (and ``ina-validate-*``) folders go, one line, exit
    143 (the switch ran on, orphaned, and its folder stayed)."""
    command = "ina " + " ".join(argv[:2] if argv[0] == "sim" else argv[:1])
    temp = tmp_path / "tmp"
    temp.mkdir()
    _, err = interrupt(tmp_path, argv, started, want_children, signal.SIGTERM, group=False,
                       status=143, env={"TMPDIR": str(temp)})  # fmt: skip
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == f"{command}: terminated", err[-3000:]
    assert not list(temp.glob("ina-*")), list(temp.iterdir())


def test_ctrl_c_in_a_parallel_experiment_stops_its_worker_processes(tmp_path):
    argv = ["experiment", "dc2", "--sim", "--workloads", "mnist1d", "--scenarios", "quiet-dc",
            "--levels", "0.1", "--laws", "ownq", "--parallel", "2", "--out", str(tmp_path / "o")]  # fmt: skip
    _, err = interrupt(tmp_path, argv, "runs", 2)
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "ina experiment dc2: interrupted", err[-3000:]


def test_ctrl_c_while_the_command_loads_is_one_line_too(monkeypatch, capsys):
    """SIGINT before the command runs (its modules still importing, on a busy machine) ends
    as one during its run does, not with a traceback from the import machinery."""
    import importlib

    from ina import cli

    def interrupted(name, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", interrupted)
    assert cli.main(["sim", "allreduce", "--workers", "8"]) == 130
    assert capsys.readouterr().err == "ina sim allreduce: interrupted\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child")
def test_sigterm_raises_in_the_command_and_ends_a_forked_child_as_before():
    """SIGTERM is `Terminated` in the command's process only: a child forked meanwhile
    (`ina switch --shards`' shards, before they set their own handler) still dies of it,
    with no traceback (it raised there, a shard's traceback on Ctrl-C)."""
    from ina.errors import Terminated, sigterm_as_interrupt

    with sigterm_as_interrupt():
        ready, say = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child, once its interpreter is past the fork: wait for the signal
            os.write(say, b".")
            time.sleep(30)
            os._exit(0)
        os.read(ready, 1)
        os.close(ready)
        os.close(say)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # (raised before this ends)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
