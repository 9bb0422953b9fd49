"""The switch model as users run it: a separate process, fuzzed, then still serving."""

import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import fresh_python

from ina.host.allreduce import Worker
from ina.host.allreduce_cmd import worker_configs
from ina.host.launch import LocalSwitch, local_jobs
from ina.protocol import Flag, Header, encode_packet

pytestmark = pytest.mark.network


def configs(spec, switch, lanes):
    return worker_configs(spec, switch, lanes, timeout=10.0)


def allreduce_all(cfgs, x):
    out = {}

    def run(c):
        try:
            with Worker(c) as w:
                out[c.worker_id] = w.allreduce(x)
        except Exception as e:  # examined below
            out[c.worker_id] = e

    ts = [threading.Thread(target=run, args=(c,)) for c in cfgs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


@pytest.mark.parametrize("shards", [1, 2])
def test_fuzzed_switch_keeps_serving_and_counts_drops(shards):
    lanes = 32
    jobs = local_jobs(2, 16)
    with LocalSwitch(jobs, lanes=lanes, grpc=False, shards=shards) as sw:
        rng = np.random.default_rng(1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Mutations of a packet of another job: forging job 1's own packets would be a
        # (legitimate-looking) contribution, which no switch can tell from a real one.
        valid = encode_packet(Header(job_id=2, seq=5, num_lanes=lanes), np.zeros(lanes))
        sent = 0
        for i in range(3000):
            if i % 3 == 0:  # random bytes of random length
                data = rng.integers(0, 256, rng.integers(0, 400), dtype=np.uint8).tobytes()
            else:  # a valid packet with a few random bytes flipped
                b = bytearray(valid)
                for j in rng.integers(0, len(b), 3):
                    b[j] = int(rng.integers(0, 256))
                data = bytes(b)
            s.sendto(data, sw.address)
            sent += 1
        s.close()
        x = np.arange(1000, dtype=np.float32)
        out = allreduce_all(configs(jobs[0], sw.address, lanes), x)
        for r in out.values():
            assert not isinstance(r, Exception), r
            assert np.array_equal(r, 2 * x)
        assert sw.proc.poll() is None  # still running
        counters = sw.stop()
    drops = sum(v[0] for k, v in counters.items() if k.startswith("drop_"))
    assert drops > 1000
    assert counters["packets_in"][0] >= sent - 100  # loopback may drop a few under load


@pytest.mark.parametrize("shards", [1, 2])
def test_result_flag_from_a_worker_is_malformed_not_aggregated(shards):
    jobs = local_jobs(2, 4)
    with LocalSwitch(jobs, lanes=8, grpc=False, shards=shards) as sw:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(
            encode_packet(Header(job_id=1, flags=Flag.RESULT, num_lanes=8), np.ones(8)), sw.address
        )
        s.close()
        x = np.ones(8, np.float32)
        out = allreduce_all(configs(jobs[0], sw.address, 8), x)
        assert all(np.array_equal(r, 2 * x) for r in out.values())
        counters = sw.stop()
    assert counters["drop_malformed"][0] == 1


def test_ina_allreduce_command_runs_processes_and_checks_exactness():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ina",
            "allreduce",
            "--workers",
            "2",
            "--size",
            "20000",
            "--iters",
            "1",
            "--lanes",
            "64",
            "--pool",
            "16",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK, every sum exact" in r.stdout
    assert "aggregated" in r.stdout  # the switch's counters are printed


def test_a_workers_tensor_is_drawn_without_torch():
    # `ina allreduce` spawns one process per worker; each draws every worker's tensor to
    # check the sums. Without torch a worker starts in a fraction of a second.
    code = (
        "import sys\n"
        "from ina.host.allreduce_cmd import worker_tensor\n"
        "a, b = worker_tensor(0, 1, 1000), worker_tensor(0, 1, 1000)\n"
        "c = worker_tensor(0, 2, 1000)\n"
        "print(a.dtype, (a == b).all(), (a != c).any(), 'torch' in sys.modules)\n"
    )
    assert fresh_python(code).split() == ["float32", "True", "True", "False"]
