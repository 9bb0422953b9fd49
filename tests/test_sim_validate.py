"""`ina sim validate`: the simulator against the emulator (real processes, emulated links)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ina.sim.validate import HostBusy, simulate_allreduce


def test_host_busy_sees_this_process_work_in_its_window():
    with HostBusy() as busy:
        time.sleep(0.3)  # nothing of ours runs: the share is whatever else the host does
        start = time.monotonic()
        x = 0
        while time.monotonic() - start < 0.5:  # one core fully busy for half a second
            x += 1
        end = time.monotonic()
    share = busy.share(start, end)
    assert 1 / os.cpu_count() * 0.8 <= share <= 1.0
    assert busy.share(end + 10, end + 20) != busy.share(end + 10, end + 20)  # nan: no samples


def test_simulated_side_never_beats_the_link():
    # 2 workers, 1 MB each, 50 Mbit/s both ways: at least the bytes at the link rate
    size, rate = 250_000, 50e6
    t = simulate_allreduce(2, rate, "none", size, 1, lanes=1024)
    assert t >= size * 4 * 8 / rate


def _validate(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ina", "sim", "validate", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_validate_prints_a_row_per_configuration():
    r = _validate(
        "--workers", "1", "--rates", "20M", "--profiles", "none", "--what", "allreduce",
        "--size", "20000", "--iters", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| allreduce")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    measured, simulated = float(cells[4]), float(cells[5])
    # 80 KB at 20 Mbit/s: 32 ms on the wire, whatever the host does
    assert measured >= 32.0 and simulated >= 32.0
    assert cells[7].endswith("%")
    assert "host-bound rows left out" in r.stdout


def test_validate_bad_options_are_one_line_errors():
    for args in (["--rates", "fast"], ["--lanes", "0"], ["--what", "ping"]):
        r = _validate(*args)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "ina sim validate" in r.stderr
