"""P4Runtime Reads against a busy switch (`ina bench p4runtime`).

Three tables:

1. **How long a Read holds the pipeline lock**, which the data path takes for every batch
   of packets: a P4Runtime service on a switch model in this process, whose lock records
   its holds, answers wildcard Reads of every register and of every counter (always this
   checkout's service, also with ``--switch``).
2. **Data-path latency during reads.** N worker processes run ``--calls`` allreduce calls of
   ``--size`` float32 values each through a switch model process (P4 pool size: every
   slot register has 2,048 cells, 80,064 in all), half of them alone and half while a client
   in this process reads every register with one wildcard ``Read`` after another (what finsy's
   ``read(P4RegisterEntry())`` does), in alternating blocks. Per call: median, 99th
   percentile and worst time.
3. **Read throughput.** Cells per second of a wildcard Read of every register and of every
   counter, received as bytes (the switch's cost: the reply is not decoded), and decoded by
   ``ina.control.p4rt`` (protobuf 3.20's pure-Python runtime, which p4runtime-shell pins:
   the client's cost).

``--switch IP:PORT --grpc HOST:PORT --jobs FILE`` measures a switch that is already running
(e.g. an older build) instead of starting one.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import threading
import time

import grpc
import numpy as np
from p4.v1 import p4runtime_pb2

from ina.errors import UsageError
from ina.host.allreduce_cmd import worker_configs
from ina.host.transport import WorkerConfig
from ina.p4.entities import POOL_SLOTS
from ina.switch_model.tables import JobSpec, load_jobs

DEVICE_ID = 1
PHASES = ("alone", "during reads")


def _worker(cfg: WorkerConfig, size: int, calls: int, go, q) -> None:
    """Run ``calls`` allreduce calls in each block (started by ``go[block]``); report
    ``(worker, block, [(start, end), ...])`` on ``q`` (CLOCK_MONOTONIC: one clock for
    every process of the host)."""
    from ina.host.allreduce import Worker

    try:
        x = np.random.default_rng(cfg.worker_id).standard_normal(size).astype(np.float32)
        with Worker(cfg) as w:
            w.allreduce(x)  # warm-up: sockets, first RTT samples
            q.put((cfg.worker_id, "ready", []))
            for block, event in enumerate(go):
                event.wait()
                times = []
                for _ in range(calls):
                    t0 = time.monotonic()
                    w.allreduce(x)
                    times.append((t0, time.monotonic()))
                q.put((cfg.worker_id, block, times))
    except Exception as e:  # report, never hang the benchmark
        q.put((cfg.worker_id, "error", f"{type(e).__name__}: {e}"))


def raw_read(
    channel: grpc.Channel, query: p4runtime_pb2.Entity, count: bool = True
) -> tuple[int, int]:
    """One Read with the replies kept as bytes; (entities, bytes). Entities are counted
    from the wire (0 unless ``count``): each is ``0x0a len ...``, with a one-byte length for
    counter and register cells."""
    read = channel.unary_stream(
        "/p4.v1.P4Runtime/Read",
        request_serializer=p4runtime_pb2.ReadRequest.SerializeToString,
        response_deserializer=bytes,
    )
    request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[query])
    n = size = 0
    for reply in read(request, timeout=600):
        size += len(reply)
        i = 0
        while count and i < len(reply):
            i += 2 + reply[i + 1]
            n += 1
    return n, size


REGISTERS = p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry())
COUNTERS = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry())


class Reader(threading.Thread):
    """Wildcard register Reads back to back until `stop`; records (start, end, bytes)."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(address)
        self.reads: list[tuple[float, float, int]] = []
        self.started = threading.Event()
        self._stop_event = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                t0 = time.monotonic()
                self.started.set()
                # Not counted: this client's CPU time would slow the workers down.
                _, size = raw_read(self.channel, REGISTERS, count=False)
                self.reads.append((t0, time.monotonic(), size))
        except Exception as e:
            self.error = e
            self.started.set()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=600)
        self.channel.close()


def _percentile(ms: list[float], p: float) -> float:
    return float(np.percentile(ms, p)) if ms else float("nan")


def latency_rows(spec: JobSpec, switch: tuple[str, int], grpc_address: str, args) -> list[dict]:
    """Table 1: allreduce times alone and during back-to-back wildcard register Reads, in
    alternating blocks (alone, during, alone, ...) so that both see the same background
    load on a shared machine."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    blocks = 2 * args.blocks
    go = [ctx.Event() for _ in range(blocks)]
    per_block = max(1, args.calls // args.blocks)
    cfgs = worker_configs(spec, switch, args.lanes, timeout=60.0)
    procs = [ctx.Process(target=_worker, args=(c, args.size, per_block, go, q)) for c in cfgs]
    for p in procs:
        p.start()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in PHASES}
    reads: list[tuple[float, float, int]] = []

    def collect(block) -> None:
        for _ in procs:
            worker, got, data = q.get(timeout=3600)
            if got == "error":
                raise RuntimeError(f"worker {worker}: {data}")
            if isinstance(block, int):
                times[PHASES[block % 2]].extend(data)

    try:
        collect("ready")
        for block in range(blocks):
            reader = None
            if block % 2:
                reader = Reader(grpc_address)
                reader.start()
                reader.started.wait(60)
            go[block].set()
            collect(block)
            if reader is not None:
                reader.stop()
                if reader.error is not None:
                    raise RuntimeError(f"reader: {reader.error}")
                reads.extend(reader.reads)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    rows = []
    for name in PHASES:
        ms = [1e3 * (b - a) for a, b in times[name]]
        rows.append(
            {
                "phase": name,
                "calls": len(ms),
                "p50_ms": _percentile(ms, 50),
                "p99_ms": _percentile(ms, 99),
                "max_ms": max(ms),
                "reads": len(reads) if name != PHASES[0] else 0,
                "read_s": statistics.median(b - a for a, b, _ in reads) if reads else None,
            }
        )
    return rows


def throughput_rows(grpc_address: str, repeats: int, decode: bool):
    """Table 2, row by row: cells/s of wildcard Reads, as bytes and decoded by our client."""
    with grpc.insecure_channel(grpc_address) as channel:
        for what, query in (("every register", REGISTERS), ("every counter", COUNTERS)):
            times, cells, size = [], 0, 0
            for _ in range(repeats):
                t0 = time.perf_counter()
                cells, size = raw_read(channel, query)
                times.append(time.perf_counter() - t0)
            best = min(times)
            yield {
                "read": what, "client": "bytes (switch's cost)", "cells": cells,
                "seconds": best, "cells_per_s": cells / best, "mb": size / 1e6,
            }  # fmt: skip
    if decode:
        from ina.control.p4rt import P4RuntimeError, SwitchConnection

        client = "ina.control.p4rt (protobuf decode)"
        with SwitchConnection(grpc_address, arbitrate=False, timeout=30) as sw:
            t0 = time.perf_counter()
            try:
                cells = len(sw.read([REGISTERS]))
            except P4RuntimeError as e:  # e.g. past the client's deadline: say so, go on
                client += f": {e.code.name} after {time.perf_counter() - t0:.0f} s"
                cells = 0
            dt = time.perf_counter() - t0
        yield {
            "read": "every register", "client": client, "cells": cells, "seconds": dt,
            "cells_per_s": cells / dt, "mb": float("nan"),
        }  # fmt: skip


class TimedLock:
    """A lock that records how long each hold lasted (seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = 0.0
        self.holds: list[float] = []

    def acquire(self, *args, **kwargs) -> bool:
        got = self._lock.acquire(*args, **kwargs)
        if got:
            self._since = time.perf_counter()
        return got

    def release(self) -> None:
        self.holds.append(time.perf_counter() - self._since)
        self._lock.release()

    def __enter__(self) -> TimedLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_rows(lanes: int, repeats: int) -> list[dict]:
    """Table 3: how long one Read holds the pipeline lock (which the data path needs for
    every batch), with a P4Runtime service on a switch of the P4 pool size in this process."""
    from ina.switch_model.p4runtime_server import start_server
    from ina.switch_model.pipeline import Pipeline

    rows = []
    for what, query in (("every register", REGISTERS), ("every counter", COUNTERS)):
        lock = TimedLock()
        server = start_server(Pipeline(lanes=lanes, pool_total=POOL_SLOTS), "127.0.0.1:0", lock)
        try:
            with grpc.insecure_channel(server.address) as channel:
                for _ in range(repeats):
                    raw_read(channel, query, count=False)
        finally:
            server.stop(0)
        ms = [1e3 * h for h in lock.holds]
        rows.append(
            {"read": what, "reads": repeats, "median_ms": statistics.median(ms), "max_ms": max(ms)}
        )
    return rows


LOCK_HEAD = "| Read | reads | lock held per Read, median ms | worst ms |\n|---|---:|---:|---:|"
LATENCY_HEAD = (
    "| allreduce calls | calls | median ms | p99 ms | worst ms | register reads | s per read |\n"
    "|---|---:|---:|---:|---:|---:|---:|"
)
THROUGHPUT_HEAD = (
    "| Read | client | cells | seconds | cells/s | MB |\n|---|---|---:|---:|---:|---:|"
)


def latency_md(r: dict) -> str:
    reads = f"{r['reads']} | {r['read_s']:.3f}" if r["reads"] else "- | -"
    return (
        f"| {r['phase']} | {r['calls']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
        f"| {r['max_ms']:.2f} | {reads} |"
    )


def throughput_md(r: dict) -> str:
    mb = "-" if r["mb"] != r["mb"] else f"{r['mb']:.2f}"
    return (
        f"| {r['read']} | {r['client']} | {r['cells']:,} | {r['seconds']:.3f} "
        f"| {r['cells_per_s']:,.0f} | {mb} |"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--size", type=int, default=8192, help="float32 values per call (8192)")
    p.add_argument("--calls", type=int, default=200, help="allreduce calls per phase (200)")
    p.add_argument("--blocks", type=int, default=4, help="blocks per phase, alternating (4)")
    p.add_argument("--lanes", type=int, default=256, help="lanes per packet (256)")
    p.add_argument("--pool", type=int, default=64, help="the job's pool of slots (64)")
    p.add_argument("--repeats", type=int, default=5, help="Reads per throughput row (best)")
    p.add_argument("--no-decode", action="store_true", help="skip the decoding client's row")
    p.add_argument("--switch", help="IP:PORT of a running switch's INA port (with --grpc)")
    p.add_argument("--grpc", help="HOST:PORT of the running switch's P4Runtime")
    p.add_argument("--jobs", help="jobs file of the running switch (with --switch)")


def main(args: argparse.Namespace) -> list[dict]:
    if bool(args.switch) != bool(args.grpc) or bool(args.switch) != bool(args.jobs):
        raise UsageError("--switch, --grpc and --jobs go together (a running switch)")
    if args.switch:
        host, _, port = args.switch.rpartition(":")
        spec, switch, sw = load_jobs(args.jobs)[0], (host, int(port)), None
        grpc_address = args.grpc
    else:
        from ina.host.launch import LocalSwitch, local_jobs

        spec = local_jobs(args.workers, args.pool)[0]
        # The P4 program's pool: every register has its 2,048 cells.
        sw = LocalSwitch([spec], lanes=args.lanes, pool=POOL_SLOTS)
        switch, grpc_address = sw.address, sw.grpc_address
    try:
        print(LOCK_HEAD)
        for r in lock_rows(args.lanes, max(args.repeats, 5)):
            print(
                f"| {r['read']} | {r['reads']} | {r['median_ms']:.3f} | {r['max_ms']:.3f} |",
                flush=True,
            )
        print()
        print(
            f"{spec.num_workers} workers, {args.size} float32 values per allreduce, "
            f"{args.lanes} lanes, pool {spec.pool_size}; switch {switch[0]}:{switch[1]}, "
            f"P4Runtime {grpc_address}\n",
            flush=True,
        )
        lat = latency_rows(spec, switch, grpc_address, args)
        print(LATENCY_HEAD)
        for r in lat:
            print(latency_md(r), flush=True)
        print()
        print(THROUGHPUT_HEAD)
        thr = []
        for r in throughput_rows(grpc_address, args.repeats, not args.no_decode):
            print(throughput_md(r), flush=True)
            thr.append(r)
    finally:
        if sw is not None:
            sw.stop()
    return lat + thr


if __name__ == "__main__":
    import sys

    from ina.errors import run_command

    parser = argparse.ArgumentParser(prog="python -m ina.bench.p4runtime")
    add_arguments(parser)
    sys.exit(run_command("ina bench p4runtime", main, parser.parse_args()))
