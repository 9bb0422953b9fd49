"""Start a local switch model and N worker processes: `ina allreduce` and the test harness.

`LocalSwitch` runs `python -m ina.switch_model.run` as a child process with a jobs file
naming the workers' addresses, and waits (with a timeout) for its ready line. The workers'
UDP ports are reserved before the switch starts, because the switch must know where the
workers are (worker_table) before they send.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path

from ina.procs import stop_process
from ina.switch_model.run import READY
from ina.switch_model.tables import JobSpec, local_job, save_jobs


def free_udp_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct UDP ports that are free right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class SwitchStartError(RuntimeError):
    """The switch model child process did not come up; the message has its own reason."""


class LocalSwitch:
    """A switch model child process on loopback, with its jobs installed from a jobs file."""

    def __init__(
        self,
        jobs: list[JobSpec],
        lanes: int = 256,
        pool: int = 1024,
        grpc: bool = True,
        startup_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
        shards: int = 1,
    ) -> None:
        self.jobs = jobs
        self.lanes = lanes
        self._dir = tempfile.TemporaryDirectory(prefix="ina-switch-")
        jobs_file = Path(self._dir.name) / "jobs.json"
        save_jobs(jobs_file, jobs)
        self.udp_port = free_udp_ports(1)[0]
        self.grpc_address = f"127.0.0.1:{free_tcp_port()}" if grpc else ""
        cmd = [
            sys.executable,
            "-m",
            "ina.switch_model.run",
            "--port",
            str(self.udp_port),
            "--lanes",
            str(lanes),
            "--pool",
            str(pool),
            "--jobs",
            str(jobs_file),
            "--grpc",
            self.grpc_address,
            "--shards",
            str(shards),
            *extra_args,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # Ctrl-C goes to our process, which stops this one
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # Drained all along: a switch that logs much would otherwise block on a full pipe.
        self._errors: collections.deque[str] = collections.deque(maxlen=50)
        self._err_reader = threading.Thread(target=self._read_errors, daemon=True)
        self._err_reader.start()
        self.final_counters: dict | None = None  # set by stop(), which a failed start calls
        self.final_shard_counters: list[dict] | None = None  # each shard's, if sharded
        try:
            self.ready_line = self._wait_ready(startup_timeout)
        except BaseException:  # Ctrl-C or SIGTERM while it starts: no switch left running
            self.stop()
            raise

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.udp_port)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def _read_errors(self) -> None:
        for line in self.proc.stderr:
            self._errors.append(line.rstrip("\n"))

    def _wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line.startswith(READY):
                return line
        exited = self.proc.poll()
        self.stop()
        self._err_reader.join(timeout=2)
        # The switch says what went wrong on its last line (`ina switch: ...`).
        last = self._errors[-1] if self._errors else "(nothing on stderr)"
        if exited is None:
            raise SwitchStartError(f"the switch model did not start within {timeout:g} s: {last}")
        raise SwitchStartError(f"the switch model exited with status {exited}: {last}")

    def stop(self, timeout: float = 10.0) -> dict | None:
        """Stop the switch (SIGTERM, then SIGKILL); return its final counters."""
        stop_process(self.proc, timeout)
        self._reader.join(timeout=2)
        while not self._lines.empty():
            line = self._lines.get()
            if line.startswith('{"counters"'):
                final = json.loads(line)
                self.final_counters = final["counters"]
                self.final_shard_counters = final.get("shards")
        self._dir.cleanup()
        return self.final_counters

    def __enter__(self) -> LocalSwitch:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def local_jobs(num_workers: int, pool_size: int, job_id: int = 1) -> list[JobSpec]:
    """One job whose workers listen on freshly reserved loopback ports."""
    ports = free_udp_ports(num_workers)
    spec = local_job(job_id=job_id, num_workers=num_workers, pool_size=pool_size)
    workers = tuple(
        type(w)(job_id=w.job_id, worker_id=w.worker_id, ip=w.ip, udp_port=p, port=w.port)
        for w, p in zip(spec.workers, ports, strict=True)
    )
    return [
        JobSpec(
            job_id=spec.job_id,
            num_workers=num_workers,
            pool_base=0,
            pool_size=pool_size,
            workers=workers,
        )
    ]
