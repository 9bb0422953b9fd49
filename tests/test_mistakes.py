"""Issue 49's list of a new user's mistakes, kept as a regression list: each one ends, as a
process, in one line on stderr and exit status 2, within seconds (every input is checked
before any work: a command that starts its work first takes far longer than the timeout).

Also here: ``--help`` naming the choices, and Ctrl-C in the long-running commands that
ended with status 0 (`ina switch`, `ina counters --watch`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_for

from ina.host.allreduce_cmd import worker_bytes_per_value
from ina.procs import available_memory
from ina.switch_model.tables import local_job

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60  # seconds: a mistake takes about one (imports); the slack is for a busy machine


def run_ina(*argv: str) -> subprocess.CompletedProcess:
    """``ina ARGV`` as a process in the repository's root, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ina", *argv], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT)  # fmt: skip


def assert_one_line(r: subprocess.CompletedProcess, says: str) -> None:
    """Exit status 2 and exactly one line on stderr, holding ``says``, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr[-3000:]
    assert says in lines[0], lines[0]


# -- jobs files ina switch must refuse before it binds anything -------------------------------


def _job() -> dict:
    return local_job(num_workers=2, pool_size=16).to_json()


def _worker0(**change) -> dict:
    job = _job()
    job["workers"][0].update(change)
    return {"jobs": [job]}


BAD_JOBS = {
    "port70000": (_worker0(udp_port=70000), "'udp_port' 70000 is not a UDP port"),
    "switch_port70000": (_worker0(port=70000), "'port' 70000 is not a switch port (0..511"),
    "mac_bad": (_worker0(mac="00:11:22:33:44"), "'mac' '00:11:22:33:44' is not a MAC address"),
    "mac_not_hex": (_worker0(mac="zz:11:22:33:44:55"), "is not a MAC address"),
    "twojobs_same": ({"jobs": [_job(), _job()]}, "job 1: given twice"),
    "binary": (b'{"jobs": [\xd0\x00\xff\xfe\x80garbage', "not a text file (JSON in UTF-8)"),
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_switch_refuses_a_bad_jobs_file(case, tmp_path):
    data, says = BAD_JOBS[case]
    path = tmp_path / f"{case}.json"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(json.dumps(data))
    r = run_ina("switch", "--jobs", str(path), "--port", "0", "--grpc", "")
    assert_one_line(r, f"ina switch: jobs file {path}: ")
    assert says in r.stderr


# -- the listed mistakes -----------------------------------------------------------------------

MISTAKES = [
    # ina train: checked before any rank starts
    (["train", "--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["train", "--law", "target"], "--law target is DC2's control law: it needs --compression dc2"),
    (["train", "--timeout", "0"], "--timeout must be a number of seconds > 0, got 0"),
    (["train", "--timeout", "-1"], "--timeout must be a number of seconds > 0, got -1"),
    (["train", "--eval-every", "0"], "--eval-every must be >= 1, got 0"),
    (["train", "--warmup-steps", "-1"], "--warmup-steps must be >= 0, got -1"),
    # ina switch: options, before anything binds
    (["switch", "--grpc", "127.0.0.1:99999"], "99999 is not a TCP port (0..65535)"),
    (["switch", "--device-id", "-1"], "--device-id -1: P4Runtime's device id is 0..2^64-1"),
    (["switch", "--pool", "3"], "--pool 3: the pool must be a power of two"),
    # ina allreduce: sizes that could never finish
    (["allreduce", "--size", "1e12"], "--size 1,000,000,000,000 with 4 workers needs about"),
    # ina sim allreduce: options that were ignored; --out before the simulation
    (["sim", "allreduce", "--stragglers", "slow:1=0.5"],
     "--stragglers slow:1=0.5 scales each worker's --compute: give one"),
    (["sim", "allreduce", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["sim", "allreduce", "--placement", "shared"],
     "--placement shared places the workers of several --jobs"),
    # ina sim validate: before any wall-clock worker (a bad profile failed in one; --size 0 hung)
    (["sim", "validate", "--profiles", "bogus"], "--profiles: unknown link profile 'bogus'"),
    (["sim", "validate", "--size", "0"], "--size must be >= 1 float32 value, got 0"),
    (["sim", "validate", "--what", "train", "--steps", "2"], "--steps must be >= 3"),
    # ina sim mergecomp: --points 0 was ignored (exit 0), --batch-size 0 a traceback
    (["sim", "mergecomp", "--points", "0"], "--points must be >= 2 (the cost model's sizes), got 0"),
    (["sim", "mergecomp", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    # ina sim fidelity: --cross-dir before the runs (and before ns-3's availability)
    (["sim", "fidelity", "--cross-dir", "/proc/x"], "--cross-dir /proc/x: cannot write there"),
    # ina experiment: output folders and sweep options before any run
    (["experiment", "dc2", "--sim", "--parallel", "0"], "--parallel must be >= 1, got 0"),
    (["experiment", "dc2", "--sim", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["experiment", "dc2", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["experiment", "dc2-bound", "--link-rate", "0G"], "--link-rate must be a rate > 0"),
    (["experiment", "dc2-bound", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["experiment", "dc2", "--sim", "--cluster", "notaurl"], "--cluster notaurl: not a Dask"),
    # ina experiment grace --sim: before its codec timings and its plan (--target 5 trained
    # every run to --max-steps for a target no run reaches)
    (["experiment", "grace", "--sim", "--parallel", "0"], "--parallel must be >= 1, got 0"),
    (["experiment", "grace", "--sim", "--target", "5"],
     "--target for mnist1d: a target accuracy must be in (0, 1], got 5"),
    (["experiment", "grace", "--sim", "--compute", "bogus"], "--compute 'bogus': use"),
    (["experiment", "grace", "--sim", "--out", "/proc/x"], "--out /proc/x: cannot write there"),
    (["experiment", "grace", "--sim", "--cluster", "notaurl"], "--cluster notaurl: not a Dask"),
    (["experiment", "grace", "--sim", "--max-steps", "0"], "--max-steps must be >= 1, got 0"),
    # ina reproduce dc2: the sweep's checks (ina experiment dc2 --sim's) as one line
    (["reproduce", "dc2", "--parallel", "0"], "--parallel must be >= 1, got 0"),
    (["reproduce", "dc2", "--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["reproduce", "dc2", "--targets", "mnist1d=abc"], "--targets takes WORKLOAD=VALUE"),
    # ina reproduce lhc, mergecomp, grace: before the simulations (--steps 0 ran the default 3)
    (["reproduce", "lhc", "--steps", "0"], "--steps must be >= 1, got 0"),
    (["reproduce", "mergecomp", "--compressors", "foo"], "--compressors 'foo': a comma-separated"),
    (["reproduce", "grace", "--methods", "foo"], "unknown compressor 'foo'"),
    (["reproduce", "grace", "--parallel", "-1"], "--parallel must be >= 1, got -1"),
    # ina bench switch: before any switch starts (--megabytes -1 printed negative rates)
    (["bench", "switch", "--workers", "0"], "ina bench switch: --workers 0: a job has 1..32"),
    (["bench", "switch", "--lanes", "0"], "ina bench switch: --lanes 0: packets carry 1..4096"),
    (["bench", "switch", "--megabytes", "-1"], "ina bench switch: --megabytes -1: a size > 0"),
]  # fmt: skip


@pytest.mark.parametrize("argv, says", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_is_one_line_and_exit_2(argv, says):
    assert_one_line(run_ina(*argv), says)


def test_allreduce_of_more_than_memory_holds_is_refused_up_front():
    need = 2 * worker_bytes_per_value(2) * 10**9
    have = available_memory()
    if have is None or have >= need:
        pytest.skip(f"this host has {have} bytes free: a 1e9-value run with 2 workers fits")
    assert_one_line(run_ina("allreduce", "--workers", "2", "--size", "1e9"),
                    "--size 1,000,000,000 with 2 workers needs about")  # fmt: skip


@pytest.mark.network
def test_allreduce_against_no_switch_is_one_line():
    """Nothing serves INA on the port: every worker's JOIN goes unanswered, one line says so
    (was a table of JoinTimeout failures and exit 1)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nobody answers there
    r = run_ina("allreduce", "--switch", f"127.0.0.1:{port}", "--jobs", "examples/jobs.json",
                "--timeout", "1")  # fmt: skip
    assert_one_line(r, f"--switch 127.0.0.1:{port}: no switch answered job 1's JOIN within 1 s")


def test_replot_and_resume_of_a_folder_that_does_not_exist(tmp_path):
    missing = tmp_path / "none"
    r = run_ina("experiment", "dc2", "--replot", "--out", str(missing))
    assert_one_line(r, f"--replot redraws the runs in --out {missing}: no such folder")
    r = run_ina("experiment", "dc2", "--sim", "--resume", "--out", str(missing))
    assert_one_line(r, f"--resume reads the runs of an earlier sweep in --out {missing}")
    assert not missing.exists()


# -- --help --------------------------------------------------------------------------------


def test_help_names_the_choices_and_exits_0():
    r = run_ina("reproduce", "--help")
    assert r.returncode == 0 and "one of: lhc, mergecomp, dc2, grace" in r.stdout, r.stdout
    r = run_ina("bench", "all", "--help")
    assert r.returncode == 0 and "usage: ina bench all" in r.stdout, r.stderr
    r = run_ina("sim", "scenarios", "generate", "--help")
    assert r.returncode == 0 and "issue" not in r.stdout.lower(), r.stdout


# -- Ctrl-C: exit status 130, as in every command ----------------------------------------------


def _interrupt(argv: list[str], ready: str, tmp_path: Path) -> tuple[int, str, str]:
    """Start ``ina ARGV`` in a process group of its own, SIGINT the group once ``ready`` is
    on its stdout (as a terminal's Ctrl-C); its status, stdout and stderr."""
    out, err = tmp_path / f"{argv[0]}.out", tmp_path / f"{argv[0]}.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "ina", *argv], stdout=fo, stderr=fe,
                                cwd=ROOT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    try:
        wait_for(lambda: ready in out.read_text() or proc.poll() is not None, TIMEOUT, ready)
        assert proc.poll() is None, err.read_text()[-2000:]
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, out.read_text(), err.read_text()


@pytest.mark.network
@pytest.mark.parametrize("shards", ["1", "2"])
def test_ctrl_c_in_the_switch_exits_130(shards, tmp_path):
    argv = ["switch", "--port", "0", "--grpc", "", "--shards", shards]
    rc, out, err = _interrupt(argv, "ina-switch ready", tmp_path)
    assert rc == 130 and err.strip() == "ina switch: interrupted", (rc, err[-2000:])
    assert '"counters"' in out  # the final counters are still printed


@pytest.mark.network
def test_ctrl_c_in_counters_watch_exits_130(tmp_path):
    from ina.switch_model.p4runtime_server import start_server
    from ina.switch_model.pipeline import Pipeline

    server = start_server(Pipeline(lanes=4, pool_total=8), "127.0.0.1:0")
    try:
        argv = ["counters", "--target", server.address, "--watch", "0.2"]
        rc, _, err = _interrupt(argv, "packets_in", tmp_path)
    finally:
        server.stop(0)
    assert rc == 130 and err.strip() == "ina counters: interrupted", (rc, err[-2000:])
