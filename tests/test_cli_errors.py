"""Mistakes a user makes get one line on stderr and exit status 2, never a traceback.

Most cases run the `ina` command in this process (the same code path as the console script);
the port-in-use cases also run it as a process, as a user would, and read its stderr.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ina_in_process

from ina.cli import main as ina_main
from ina.switch_model.tables import JobsFileError, load_jobs, local_job, save_jobs

pytestmark = pytest.mark.network


def one_line(err: str) -> str:
    """The single line of ``err`` (asserting there is exactly one, and no traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_ina(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ina", *args], capture_output=True, text=True, timeout=timeout
    )


# -- jobs files --------------------------------------------------------------------------------


def _job_json() -> dict:
    return local_job(num_workers=2, pool_size=16).to_json()


def _write(path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _no_udp_port() -> dict:
    job = _job_json()
    del job["workers"][1]["udp_port"]
    return {"jobs": [job]}


def _pool(size: int) -> dict:
    return {"jobs": [{**_job_json(), "pool_size": size}]}


BAD_JOBS = {
    "missing": (None, "No such file or directory"),
    "not json": ("{jobs: [", "not valid JSON"),
    "no jobs key": ({"job": []}, "no 'jobs' key"),
    "worker without udp_port": (_no_udp_port(), "job 1: workers[1]: missing 'udp_port'"),
    "pool not a power of two": (_pool(100), "power-of-two pool_size"),
    # BMv2 refuses multicast group ids above 32767: job_id + 1 (the default) may not pick one
    "default group beyond BMv2's": (
        {"jobs": [{**_job_json(), "job_id": 32767}]},
        "job 32767: the default 32768 (job_id + 1) is not a multicast group id BMv2 accepts",
    ),
    "mcast_grp beyond BMv2's": (
        {"jobs": [{**_job_json(), "mcast_grp": 40000}]},
        "job 1: mcast_grp 40000 is not a multicast group id BMv2 accepts (1..32767)",
    ),
    "pool_base not an integer": (
        {"jobs": [{**_job_json(), "pool_base": "0"}]},
        "'pool_base' must be an integer",
    ),
    "ip not an address": (
        {"jobs": [{**_job_json(), "workers": [
            {**_job_json()["workers"][0], "ip": "not-an-ip"}, _job_json()["workers"][1]]}]},
        "workers[0]: 'ip' 'not-an-ip' is not an IPv4 address (a.b.c.d)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_jobs_file_is_one_line(case, tmp_path, capsys):
    data, message = BAD_JOBS[case]
    path = str(tmp_path / "missing.json") if data is None else _write(tmp_path / "j.json", data)
    with pytest.raises(JobsFileError, match=re.escape(message)):
        load_jobs(path)
    assert ina_main(["switch", "--jobs", path, "--port", "0", "--grpc", ""]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"ina switch: jobs file {path}: ") and message in line


def test_bad_jobs_file_for_allreduce_against_a_running_switch(tmp_path, capsys):
    path = _write(tmp_path / "j.json", _pool(48))
    assert ina_main(["allreduce", "--switch", "127.0.0.1:47000", "--jobs", path]) == 2
    assert "power-of-two pool_size" in one_line(capsys.readouterr().err)


def test_a_good_jobs_file_round_trips(tmp_path):
    spec = local_job(num_workers=3, pool_size=32)
    save_jobs(tmp_path / "j.json", [spec])
    assert load_jobs(tmp_path / "j.json") == [spec]


# -- ports in use ------------------------------------------------------------------------------


def test_switch_on_a_udp_port_in_use_is_one_line():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        r = run_ina("switch", "--port", str(port), "--grpc", "")
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert line.startswith(f"ina switch: cannot serve INA on udp 127.0.0.1:{port}: ")
    assert "in use" in line


def test_switch_on_a_p4runtime_port_in_use_is_one_line():
    """A second switch on a P4Runtime port that a first one serves must not come up."""
    from ina.switch_model.p4runtime_server import start_server
    from ina.switch_model.pipeline import Pipeline

    first = start_server(Pipeline(lanes=4, pool_total=8), "127.0.0.1:0")
    try:
        r = run_ina("switch", "--port", "0", "--grpc", first.address)
    finally:
        first.stop(0)
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert (
        line == f"ina switch: P4Runtime cannot listen on {first.address}: the port is in use "
        "(another switch?)"
    )


# -- option values -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pool", "100"], "--pool 100: the job's pool must be a power of two"),
        (["--workers", "0"], "--workers 0: a job has 1..32 workers"),
        (["--workers", "40"], "--workers 40: a job has 1..32 workers"),
        (["--lanes", "100000"], "--lanes 100000: packets carry 1..4096 lanes"),
        (["--size", "0"], "--size 0: the tensor needs at least one value"),
        (["--switch", "127.0.0.1"], "give IP:PORT"),
        (["--jobs", "x.json"], "--jobs and --worker-id go with --switch"),
        (
            ["--switch", "10.0.0.253:47000", "--jobs", "j.json", "--world", "4"],
            "--world and --rank go together, with --worker-id",
        ),
        (
            [
                "--switch",
                "1.2.3.4:47000",
                "--jobs",
                "j",
                "--worker-id",
                "0",
                "--world",
                "4",
                "--rank",
                "4",
            ],
            "--rank 4 --world 4: need 0 <= rank < world <= 32",
        ),
    ],
)
def test_allreduce_options_are_checked_before_anything_starts(args, message, capsys):
    assert ina_main(["allreduce", *args]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("ina allreduce: ") and message in line


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lanes", "100000"], "--lanes 100000: the switch model runs 1..4096 lanes"),
        (["--lanes", "0"], "--lanes 0: the switch model runs 1..4096 lanes"),
        (["--pool", "0"], "--pool 0: the pool has 1..65536 slots"),
        (["--grpc", "localhost"], "--grpc 'localhost': give HOST:PORT"),
        (["--loss", "2"], "must be a probability"),
    ],
)
def test_switch_options_are_checked(args, message, capsys):
    assert ina_main(["switch", "--port", "0", *args]) == 2
    assert message in one_line(capsys.readouterr().err)


def test_train_lanes_beyond_the_protocol_is_one_line(capsys):
    assert ina_main(["train", "--lanes", "100000"]) == 2
    assert (
        one_line(capsys.readouterr().err)
        == "ina train: --lanes 100000: packets carry 1..4096 lanes"
    )


def test_a_switch_that_cannot_start_says_why():
    """`LocalSwitch` (under `ina allreduce` and `ina train`) reports the switch's own
    one-line reason, not an AttributeError from its clean-up."""
    from ina.host.launch import LocalSwitch, SwitchStartError, local_jobs

    with pytest.raises(SwitchStartError) as e:
        LocalSwitch(local_jobs(2, 16), lanes=100_000, grpc=False)
    assert str(e.value) == (
        "the switch model exited with status 2: "
        "ina switch: --lanes 100000: the switch model runs 1..4096 lanes"
    )


@pytest.mark.parametrize(
    "target, message",
    [
        ("localhost", "'localhost': the port is missing; give HOST:PORT (e.g. localhost:9559)"),
        ("localhost:http", "'http' is not a TCP port"),
        ("::1", "give an IPv6 address with its port as [ADDR]:PORT"),
    ],
)
def test_counters_target_without_a_port(target, message, capsys):
    assert ina_main(["counters", "--target", target]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"ina counters: --target {target!r}: ") and message in line


def test_ina_version_names_the_installed_package():
    import importlib.metadata

    r = subprocess.run([sys.executable, "-m", "ina", "--version"], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == f"ina {importlib.metadata.version('ina')}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--sim-backend", "ns3", "--max-steps", "1"], "--sim-backend ns3 is for --sim"),
        (["allreduce", "--switch", "127.0.0.1:47000", "--jobs", "examples/jobs.json",
          "--workers", "8"], "--workers 8: job 1 in examples/jobs.json has 2 workers"),
    ],
)  # fmt: skip
def test_options_that_used_to_be_ignored_are_one_line_errors(argv, message):
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "ina", *argv], capture_output=True, text=True,
                       timeout=60, cwd=root)  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


# -- issue 29: a number means one thing, messages name the cause, nothing ignored ------------


@pytest.mark.parametrize(
    "argv, message",
    [
        # a rate needs its unit everywhere (it meant Mbit/s in one command, bit/s in another)
        (["train", "--sim", "--link-rate", "1000"],
         "--link-rate 1000 needs a unit: write 1G for 1000 Mbit/s, or 1k for 1000 bit/s"),
        (["train", "--link-rate", "100"], "--link-rate 100 needs a unit: write 100M"),
        (["sim", "allreduce", "--link-rate", "1000"], "link rate 1000 needs a unit"),
        (["sim", "allreduce", "--link-rate", "1e9"], "or 1G for 1e9 bit/s"),
        (["experiment", "dc2-bound", "--link-rate", "100"], "--link-rate 100 needs a unit"),
        # options that were accepted and ignored
        (["train", "--sim", "--max-steps", "0"], "--max-steps must be >= 1, got 0"),
        (["train", "--sim", "--density", "0.5"],
         "--density is the fraction --compression homomorphic sends: --compression dense "
         "would ignore it"),
        (["train", "--sim", "--compression", "dc2", "--density", "0.3"], "dc2 chooses its own"),
        # messages that now name the cause
        (["train", "--sim", "--compression", "dc2", "--law", "aimd", "--law-param", "foo=1"],
         "--law aimd has no parameter foo; its parameters: threshold_ratio, threshold_s"),
        (["train", "--sim", "--compressor", "qsgd", "--compressor-arg", "levels=x"],
         "levels='x' is not an integer"),
        (["train", "--sim", "--scenario", "README.md"], "scenario README.md: not valid JSON"),
        (["train", "--dataset", "mnist", "--data-dir", "/nonexistent"],
         "--data-dir: /nonexistent: no train-images-idx3-ubyte"),
        (["train", "--data-dir", "/tmp"], "digits ships with its package"),
        (["sim", "allreduce", "--link-loss", "1.5"], "--link-loss must be in [0, 1), got 1.5"),
        (["sim", "allreduce", "--link-loss", "nan"], "--link-loss must be in [0, 1), got nan"),
        (["sim", "allreduce", "--size", "1e10", "--workers", "8"],
         "--size 10,000,000,000 with 8 workers needs about 1,788.1 GiB to check every sum"),
        (["sim", "allreduce", "--size", "1e15", "--timing-only"], "even timing only"),
        (["allreduce", "--size", "1.5"], "'1.5' is not a whole number"),
    ],
)  # fmt: skip
def test_mistakes_found_in_a_first_hour_are_one_line(argv, message):
    root = Path(__file__).resolve().parent.parent
    r = ina_in_process(*argv, cwd=root)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and message in lines[-1], r.stderr


def test_every_help_shows_the_defaults_once():
    for argv in (["train"], ["sim", "allreduce"], ["sim", "fidelity"], ["allreduce"],
                 ["switch"], ["experiment", "dc2"]):  # fmt: skip
        r = ina_in_process(*argv, "--help")
        text = " ".join(r.stdout.split())  # argparse wraps lines
        assert r.returncode == 0 and "(default: None)" not in text, argv
        assert len(re.findall(r"default[: ]", text)) > 5, argv
        assert re.search(r"\(default: [^)]*\) \(default", text) is None, argv
    text = " ".join(ina_in_process("train", "--help").stdout.split())
    assert "--epochs EPOCHS default: 20" in text and "--momentum MOMENTUM default: 0.9" in text


def test_one_name_for_one_option_across_commands():
    train = ina_in_process("train", "--help").stdout
    sim = ina_in_process("sim", "allreduce", "--help").stdout
    for option in ("--delay", "--sim-backend", "--link-rate"):
        assert option in train and option in sim, option
