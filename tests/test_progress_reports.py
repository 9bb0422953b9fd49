"""Progress and the first hour's rough edges (issue 29): runs done out of runs planned on
stderr for the long commands (a bar on a terminal, or with ``INA_PROGRESS=1``; elsewhere a
line now and then, issue 49), the busy-host
warning of `ina sim validate`, and `ina counters --watch` redrawn in place."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys

import pytest

from ina import progress
from ina.cli import main as ina_main
from ina.experiments import dc2, dc2_sim
from ina.experiments.sweep import run_sweep


def fake_run(job: dict) -> dict:
    """A run of `ina experiment dc2 --sim` that does nothing (module level: processes import
    it by name)."""
    return {"workload": job["workload"], "error": ""}


@pytest.fixture
def counted(monkeypatch):
    """The number of steps every progress bar was advanced by, keyed by its label."""
    steps: dict[str, int] = {}
    real = progress.bar

    def bar(total, desc, unit="run"):
        b = real(total, desc, unit)
        update = b.update

        def counting(n=1):
            steps[desc] = steps.get(desc, 0) + n
            return update(n)

        b.update = counting
        return b

    monkeypatch.setattr(progress, "bar", bar)
    return steps


def test_a_parallel_sweep_advances_its_bar_as_runs_finish(monkeypatch, capsys, counted):
    monkeypatch.setenv("INA_PROGRESS", "1")
    assert run_sweep(abs, [-3, -1, -2], parallel=2, desc="squares") == [3, 1, 2]
    assert counted == {"squares": 3}
    err = capsys.readouterr().err
    assert "squares" in err and "/3" in err


def test_no_bar_off_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("INA_PROGRESS", raising=False)  # pytest's stderr is not a terminal
    assert run_sweep(abs, [-3, -1], parallel=1, desc="squares") == [3, 1]
    assert capsys.readouterr().err == ""


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_every_30_s_or_10_percent_whichever_is_rarer():
    """`ina allreduce | tee log`, `ina reproduce lhc --quick | cat`: silent for minutes
    before; a plain line now and then, none at the end (the results follow)."""
    clock, log = Clock(), io.StringIO()
    fast = progress.Lines(100, "runs", file=log, clock=clock)
    for _ in range(100):  # a run a second: 10 % every 10 s, so every 30 s rules
        clock.now += 1.0
        fast.update(1)
    lines = log.getvalue().splitlines()
    assert lines[0] == "runs: 30/100 runs (30 %), 0:30 elapsed, about 1:10 left", lines
    assert [line.split()[1] for line in lines] == ["30/100", "60/100", "90/100"]
    clock, log = Clock(), io.StringIO()
    slow = progress.Lines(20, "calls", unit="call", file=log, clock=clock)
    for _ in range(20):  # a call a minute: 30 s every call, so every 10 % (2 calls) rules
        clock.now += 60.0
        slow.update(1)
    lines = log.getvalue().splitlines()
    assert len(lines) == 9 and lines[0].startswith("calls: 2/20 calls (10 %), 2:00 elapsed")
    assert lines[-1] == "calls: 18/20 calls (90 %), 18:00 elapsed, about 2:00 left"


def test_a_line_of_an_unknown_total_and_of_hours():
    clock, log = Clock(), io.StringIO()
    b = progress.Lines(None, "steps", unit="step", file=log, clock=clock)
    clock.now = 3725.0
    b.update(7)
    assert log.getvalue() == "steps: 7 steps, 1:02:05 elapsed\n"


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch):
    monkeypatch.delenv("INA_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: lines
    with progress.bar(10, "runs") as b:
        assert isinstance(b, progress.Lines) and b.file is sys.stderr
        b.update(3)  # within 30 s: nothing yet
        b.write("a result")  # the command's own lines still go to stdout
    assert sys.stderr.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress.bar(10, "runs") as b:
        assert not isinstance(b, progress.Lines) and not b.disable
    for forced, kind in (("lines", progress.Lines), ("0", None)):
        monkeypatch.setenv("INA_PROGRESS", forced)
        with progress.bar(10, "runs") as b:
            assert isinstance(b, progress.Lines) if kind else b.disable


def test_dc2_sim_shows_its_runs_in_parallel(monkeypatch, capsys, counted):
    monkeypatch.setenv("INA_PROGRESS", "1")
    monkeypatch.setattr(dc2_sim, "run_job", fake_run)
    jobs = [{"workload": f"w{i}", "state": ""} for i in range(4)]
    args = argparse.Namespace(parallel=2, cluster=None)
    assert [r["workload"] for r in dc2_sim.run_plan(jobs, args)] == ["w0", "w1", "w2", "w3"]
    assert counted == {"dc2 --sim runs": 4}
    assert "dc2 --sim runs" in capsys.readouterr().err


def test_dc2_on_the_wall_clock_shows_its_runs(monkeypatch, capsys, tmp_path, counted):
    from ina.experiments import cli

    monkeypatch.setenv("INA_PROGRESS", "1")
    monkeypatch.setattr(dc2, "train_once", lambda argv, where: 1)  # every run fails at once
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(["dc2", "--profiles", "high", "--configs", "dense,fixed:0.01",
                         "--out", str(tmp_path)])  # fmt: skip
    assert dc2.main(args) == 1
    out, err = capsys.readouterr()
    assert counted == {"dc2 runs": 2} and "dc2 runs" in err and "/2" in err
    assert out.count("FAILED (rc 1)") == 2 and "dc2 runs" not in out


# ---- ina sim validate ------------------------------------------------------------------------


def test_a_busy_host_is_warned_of_in_one_line_before_the_runs():
    from ina.sim.validate import busy_warning

    assert busy_warning(0.10, 0.20, 0.5) is None  # quiet: below half the limit
    assert busy_warning(float("nan"), float("nan"), 0.5) is None  # unknown: no warning
    line = busy_warning(0.41, 0.9, 0.5)
    assert line.count("\n") == 0 and "41 % of its CPU time" in line and "load average" in line
    assert "may be empty" in line and "--stop-if-busy" in line


def _validate(*args: str, progress_env: str | None = None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k != "INA_PROGRESS"}
    if progress_env is not None:
        env["INA_PROGRESS"] = progress_env
    cmd = [sys.executable, "-m", "ina", "sim", "validate", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_validate_can_stop_on_a_busy_host():
    """A limit no host is under (0.1 %): the warning, then exit 1 before any run."""
    r = _validate("--busy-limit", "0.001", "--stop-if-busy")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "the result may be empty" in lines[0], r.stderr
    assert "|" not in r.stdout  # no table: nothing ran


@pytest.mark.parametrize("forced", ["1", None])
def test_validate_draws_its_rows_on_stderr_only_when_asked(forced):
    r = _validate("--workers", "1", "--rates", "20M", "--profiles", "none", "--what",
                  "allreduce", "--size", "20000", "--iters", "1", "--switch-latency", "20us",
                  progress_env=forced)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sum(line.startswith("| allreduce") for line in r.stdout.splitlines()) == 1
    assert ("validate rows" in r.stderr) == (forced == "1")
    assert "\r" not in r.stdout  # the bar never mixes into the table


# ---- ina counters --watch ----------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_redraws_in_place_on_a_terminal():
    from ina.control.counters_cli import Redraw

    screen = Terminal()
    r = Redraw(screen)
    r.show("a\nb\nc")
    r.show("d\ne\nf")
    assert screen.getvalue() == "a\nb\nc\n\x1b[3F\x1b[Jd\ne\nf\n"  # up 3 lines, erase, redraw


def test_watch_prints_tables_one_after_another_when_piped():
    from ina.control.counters_cli import Redraw

    piped = io.StringIO()
    r = Redraw(piped)
    r.show("a\nb")
    r.show("c\nd")
    assert piped.getvalue() == "a\nb\n\nc\nd\n\n"


@pytest.mark.parametrize("n", ["0", "-3"])
def test_watch_iterations_below_one_is_a_one_line_error(n, capsys):
    assert ina_main(["counters", "--watch", "1", "--iterations", n]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--iterations must be >= 1, got {n}" in err[0], err


@pytest.mark.parametrize("forced", ["1", None])
def test_allreduce_draws_its_calls_on_stderr_only_when_asked(forced, monkeypatch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INA_PROGRESS"}
    if forced:
        env["INA_PROGRESS"] = forced
    r = subprocess.run([sys.executable, "-m", "ina", "allreduce", "--workers", "2", "--size",
                        "1000", "--iters", "3"], capture_output=True, text=True, timeout=180,
                       env=env, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert ("allreduce calls:" in r.stderr) == bool(forced), r.stderr
