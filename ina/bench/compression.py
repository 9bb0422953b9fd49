"""Benchmark of the homomorphic compressor: traffic, speed, and peeling failure rate.

Three markdown tables:

1. **Traffic and speed vs union density and workers.** Every worker holds a bucket of
   ``--elements`` int32 values, non-zero on a support shared by all workers (as after
   shared-seed random-k), so the union density is the density of the row. Traffic is what one
   worker sends (round-1 bitmap words + round-2 lanes + repair lanes, 4 bytes each, packet
   headers not counted) against a dense int32 allreduce (4 bytes per element). Throughput is
   one worker's encode + decode (mask, bitmap, hashing, sketch, peeling, scatter: all of
   ``allreduce_int`` except the switch) in MB/s of *dense float32 input*, 4 bytes per element,
   per core: the process's CPU time, so that other work on a shared machine does not count
   (on ``cuda``, wall-clock time to the end of the GPU's work), the best of ``--repeats`` runs
   (sharing a machine only ever adds time: caches, memory bandwidth). The switch's work is
   taken out by replaying recorded round results to the timed worker. ``support`` is the same
   traffic with the ``"support"`` coding (plain lanes on the union). ``device`` is where the
   codec ran (``--devices``): ``cpu`` is what the library uses for host data and CPU tensors
   (numpy), ``cpu-torch`` the same code on torch CPU tensors (for comparison; threads as
   ``--torch-threads``), ``cuda`` torch on the GPU (timed to the end of its work).
2. **Independent top-k:** each worker keeps its own top-k of a different gradient, so the union
   grows with the number of workers.
3. **Peeling failure rate vs cells per non-zero**, without and with the sqrt(nnz) slack:
   the share of sketches that stall (and need a repair round) and the share of positions left.

Run: ``python -m ina.bench.compression [--quick] [--devices cpu,cpu-torch,cuda]`` (or
``ina bench compression``; the default devices are ``cpu``, and ``cuda`` where present).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from ina.host.arrays import ops
from ina.host.compression import HomomorphicAllreduce, HomomorphicConfig, LocalGroup, sketch
from ina.host.compression.sparsify import SparsifyCompressor
from ina.protocol import LANE_BYTES

I32 = np.iinfo(np.int32)


def _shared_support_buckets(rng, workers: int, n: int, density: float) -> list[np.ndarray]:
    """Buckets non-zero on one common support of ``density`` (random int32, no zeros)."""
    support = np.flatnonzero(rng.random(n) < density)
    out = []
    for _ in range(workers):
        v = np.zeros(n, np.int32)
        vals = rng.integers(I32.min, I32.max, support.size, endpoint=True, dtype=np.int64)
        vals[vals == 0] = 1
        v[support] = vals.astype(np.int32)
        out.append(v)
    return out


def _topk_buckets(rng, workers: int, n: int, density: float) -> list[np.ndarray]:
    """Each worker's own top-k of its own gradient, quantized with a common scale."""
    comp = SparsifyCompressor("topk", density)
    out = []
    for w in range(workers):
        grad = rng.standard_normal(n).astype(np.float32)
        sparse, ctx = comp.compress(grad, f"worker{w}")
        q = np.round(comp.decompress(sparse, ctx) * 2.0**24).astype(np.int32)
        out.append(q)
    return out


DEVICES = ("cpu", "cpu-torch", "cuda")


def _on(device: str):
    """The converter of numpy buckets to the arrays the codec runs on for ``device``, and the
    call that waits for the device's queued work (a GPU runs asynchronously)."""
    if device == "cpu":
        return (lambda a: a), (lambda: None)
    import torch

    if device == "cuda":
        return (lambda a: torch.from_numpy(a).cuda()), torch.cuda.synchronize
    return torch.from_numpy, (lambda: None)


def _measure(
    buckets: list[np.ndarray], config: HomomorphicConfig, repeats: int, device: str = "cpu"
) -> dict:
    """Run all workers once through the in-process switch, then time worker 0 alone."""
    workers = len(buckets)
    to, sync = _on(device)
    group = LocalGroup(workers)
    recorded: list[tuple] = []

    def worker(w, reduce):
        def recording(values, op, exp=0, level=0):
            out = reduce(values, op, exp, level)
            if w == 0:
                recorded.append(out)
            return out

        return HomomorphicAllreduce(config).allreduce_int(to(buckets[w]), recording)

    results = group.run(worker)
    expected = np.add.reduce(np.stack(buckets), axis=0, dtype=np.int32)
    if not all(np.array_equal(ops(r.values).to_host(r.values), expected) for r in results):
        raise AssertionError("decoded sum differs from the dense int32 sum")

    mine = to(buckets[0])
    clock = time.perf_counter if device == "cuda" else time.process_time
    times = []
    for _ in range(repeats):
        replay = iter(recorded)
        hc = HomomorphicAllreduce(config)
        sync()
        start = clock()
        hc.allreduce_int(mine, lambda *args, _it=replay: next(_it))
        sync()
        times.append(clock() - start)
    r = results[0]
    n = r.support.n
    return {
        "device": device,
        "workers": workers,
        "n": n,
        "union": r.support.nnz / n,
        "nnz": r.support.nnz,
        "cells": r.lanes / r.support.nnz if r.support.nnz else 0.0,
        "coding": r.coding,
        "ratio": LANE_BYTES * n / r.bytes_sent,
        "kib": (r.bytes_round1 / 1024, r.bytes_round2 / 1024, r.bytes_repair / 1024),
        "repaired": r.repaired,
        "mbps": LANE_BYTES * n / min(times) / 1e6,
    }


def _traffic_row(m: dict, support_ratio: float) -> str:
    r1, r2, rep = m["kib"]
    return (
        f"| {m['device']} | {m['workers']} | {100 * m['union']:.2f} | {m['nnz']} | {m['cells']:.3f} "
        f"| {r1:.0f} / {r2:.0f} / {rep:.0f} | {m['repaired']} | **{m['ratio']:.2f}x** "
        f"| {support_ratio:.2f}x | {m['mbps']:.0f} |"
    )


TRAFFIC_HEADER = (
    "| device | workers | union density % | union nnz | lanes/nnz | KiB sent r1 / r2 / repair "
    "| repaired | vs dense int32 | support coding | encode+decode MB/s |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def traffic_table(args, rng) -> list[str]:
    lines = [
        f"### Traffic and speed, {args.elements} elements per bucket, shared support",
        "",
        TRAFFIC_HEADER,
    ]
    cfg = HomomorphicConfig(seed=args.seed)
    support_cfg = HomomorphicConfig(seed=args.seed, coding="support")
    for workers in args.workers:
        for density in args.densities:
            buckets = _shared_support_buckets(rng, workers, args.elements, density / 100)
            s = _measure(buckets, support_cfg, 1)
            for device in args.devices:
                m = _measure(buckets, cfg, args.repeats, device)
                lines.append(_traffic_row(m, s["ratio"]))
    return lines


def topk_table(args, rng) -> list[str]:
    lines = [
        f"### Independent top-k at {args.topk_density} % per worker, {args.elements} elements",
        "",
        TRAFFIC_HEADER,
    ]
    cfg = HomomorphicConfig(seed=args.seed)
    support_cfg = HomomorphicConfig(seed=args.seed, coding="support")
    for workers in args.topk_workers:
        buckets = _topk_buckets(rng, workers, args.elements, args.topk_density / 100)
        s = _measure(buckets, support_cfg, 1)
        for device in args.devices:
            m = _measure(buckets, cfg, args.repeats, device)
            lines.append(_traffic_row(m, s["ratio"]))
    return lines


def failure_table(args, rng) -> list[str]:
    sizes = args.failure_nnz
    lines = [
        f"### Peeling failures vs cells per non-zero ({args.trials} sketches per cell;"
        " stalled share / positions left for repair)",
        "",
        "| cells/nnz | slack | " + " | ".join(f"nnz={s}" for s in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for slack in (0.0, sketch.DEFAULT_CELLS_SLACK):
        for load in args.loads:
            cells_txt = []
            for nnz in sizes:
                stalled = left = 0
                for t in range(args.trials):
                    pos = np.sort(rng.choice(20 * nnz, nnz, replace=False))
                    spec = sketch.SketchSpec.for_nnz(nnz, load, seed=t, slack=slack)
                    table = sketch.Table(pos, spec)
                    vals = np.ones(nnz, np.int32)  # peeling success depends on the support only
                    r = table.peel(table.encode(vals))
                    stalled += not r.complete
                    left += r.undecoded.size
                cells_txt.append(f"{stalled / args.trials:.0%} / {left / args.trials / nnz:.1%}")
            lines.append(f"| {load} | {slack} | " + " | ".join(cells_txt) + " |")
    return lines


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def _devices(text: str) -> list[str]:
    devices = text.split(",")
    for d in devices:
        if d not in DEVICES:
            raise argparse.ArgumentTypeError(f"unknown device {d!r}; known: {', '.join(DEVICES)}")
    return devices


def _default_devices() -> list[str]:
    """``cpu``, and ``cuda`` where a GPU is present."""
    import torch

    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (``ina bench compression`` passes its parser here)."""
    p.add_argument("--elements", type=int, default=1 << 22, help="bucket length (default 4M)")
    p.add_argument("--workers", type=_ints, default=[2, 4, 8], help="comma list")
    p.add_argument("--densities", type=_floats, default=[0.1, 1, 5, 10, 50], help="union %%")
    p.add_argument("--topk-density", type=float, default=5.0, help="per-worker top-k %%")
    p.add_argument("--topk-workers", type=_ints, default=[2, 4])
    p.add_argument("--loads", type=_floats, default=[1.15, 1.2, 1.22, 1.23, 1.25, 1.3])
    p.add_argument("--failure-nnz", type=_ints, default=[1000, 10000, 100000])
    p.add_argument("--trials", type=int, default=20, help="sketches per failure-table cell")
    p.add_argument("--repeats", type=int, default=5, help="timed runs (the best is reported)")
    p.add_argument(
        "--devices",
        type=_devices,
        default=None,
        help=f"comma list of {', '.join(DEVICES)} (default: cpu, and cuda where present)",
    )
    p.add_argument(
        "--tables", type=_tables, default=list(TABLES), help=f"comma list of {', '.join(TABLES)}"
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads for cpu-torch (default: torch's own choice)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")


def _settle(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on the machine or on ``--quick``."""
    if args.devices is None:
        args.devices = _default_devices()
    if args.torch_threads is not None:
        import torch

        # intra-op threads: on a shared 2-core machine a second thread mostly waits for a core
        torch.set_num_threads(args.torch_threads)
    if "cuda" in args.devices:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("ina bench compression: --devices cuda, but no CUDA device here")
    if args.quick:
        args.elements = min(args.elements, 1 << 16)
        args.workers, args.densities = [2, 4], [1, 5]
        args.topk_workers, args.loads = [4], [1.0, 1.23]
        args.failure_nnz, args.trials, args.repeats = [1000], 3, 1
    return args


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Print the tables as markdown; return 0. ``args``: parsed options (``ina bench``), or a
    command line (``python -m ina.bench.compression``)."""
    if not isinstance(args, argparse.Namespace):
        p = argparse.ArgumentParser(
            prog="ina bench compression", description=__doc__.split("\n")[0]
        )
        add_arguments(p)
        args = p.parse_args(args)
    args = _settle(args)
    rng = np.random.default_rng(args.seed)
    for name in args.tables:
        print("\n".join(TABLES[name](args, rng)), end="\n\n", flush=True)
    return 0


TABLES = {"traffic": traffic_table, "topk": topk_table, "failures": failure_table}


def _tables(text: str) -> list[str]:
    names = text.split(",")
    for name in names:
        if name not in TABLES:
            raise argparse.ArgumentTypeError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
    return names


if __name__ == "__main__":
    raise SystemExit(main())
