"""`ina sim collectives`: NCCL's collectives (and INA, SHARP) on a cluster, printed as
`nccl-tests` prints a measurement, so that a user can hold the model against their own
``all_reduce_perf -b 8 -e 1G -f 2 -g 1`` run on the same system.

For each size, a row per algorithm: the size in bytes, the element count and type, the
time in microseconds, the algorithm bandwidth (bytes over time) and the bus bandwidth
(algbw times the bytes a rank moves per byte, nccl-tests' definition), in GB/s; the row
named ``nccl`` is the algorithm and protocol NCCL would pick (the fastest of its own).
"""

from __future__ import annotations

import argparse
import json

from ina.errors import UsageError, output_dir
from ina.sim import collectives as coll
from ina.sim.options import add_cluster_arguments, cluster_of
from ina.workload.devices import DEVICES

DTYPES = {"float": 4, "half": 2, "bfloat16": 2}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_cluster_arguments(p)
    p.add_argument("--link-rate", default="100G", help="with --system hosts: each host's NIC")
    p.add_argument("--device", default="h100", help=f"with --system hosts: {', '.join(DEVICES)}")
    p.add_argument("--collective", default="all_reduce", choices=coll.COLLECTIVES)
    p.add_argument(
        "--algorithm",
        default="all",
        help=f"nccl (NCCL's pick), all, or a comma list of {', '.join(coll.ALGORITHMS)}",
    )
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (bytes: 8, 1K, 32M)")
    p.add_argument("-e", "--maxbytes", default="1G", help="largest size")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier per row")
    p.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPES))
    p.add_argument("--lanes", type=int, default=256, help="INA: lanes per packet")
    p.add_argument("--out", help="folder for collectives.json")


def _size(text: str, name: str) -> int:
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise ValueError(f"{name} {text!r}: a size in bytes (8, 1K, 32M, 1G)") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1 byte, got {text!r}")
    return value


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    if factor < 2:
        raise ValueError(f"--stepfactor must be >= 2, got {factor}")
    if hi < lo:
        raise ValueError("--maxbytes is below --minbytes")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def prepare(args: argparse.Namespace):
    c = cluster_of(args, 8, args.link_rate, args.device)
    if c is None:
        raise ValueError("name a --system (a preset, a cluster file, or hosts)")
    if c.gpus < 2:
        raise ValueError(f"a collective needs >= 2 GPUs; {c.name} has {c.gpus}")
    if args.lanes < 1:
        raise ValueError(f"--lanes must be >= 1, got {args.lanes}")
    have = coll.available(c, args.collective)
    if args.algorithm == "all":
        algs = ["nccl", *have]
    else:
        algs = [a.strip() for a in args.algorithm.split(",") if a.strip()]
        for a in algs:
            if a != "nccl" and a not in coll.ALGORITHMS:
                raise ValueError(
                    f"unknown --algorithm {a!r}; known: nccl, all, {', '.join(coll.ALGORITHMS)}"
                )
            if a != "nccl" and a not in have:
                raise ValueError(
                    f"{a} does not run {args.collective} on {c.name} ({c.nodes} nodes); "
                    f"available: {', '.join(have)}"
                )
    elem = DTYPES[args.datatype]
    rows = sizes(_size(args.minbytes, "--minbytes"), _size(args.maxbytes, "--maxbytes"),
                 args.stepfactor)  # fmt: skip
    rows = [max(elem, s - s % elem) for s in rows]
    return c, algs, elem, rows


def table(c, collective: str, algs: list[str], elem: int, rows: list[int], lanes: int) -> list:
    out = []
    for size in rows:
        for a in algs:
            e = (
                coll.nccl_best(c, collective, size)
                if a == "nccl"
                else coll.estimate(c, collective, a, size, elem, lanes)
            )
            out.append({"size": size, "count": size // elem, "algorithm": a,
                        "picked": e.algorithm, "protocol": e.protocol,
                        "time_us": e.seconds * 1e6, "algbw_GBps": e.algbw / 1e9,
                        "busbw_GBps": e.busbw / 1e9})  # fmt: skip
    return out


def main(args: argparse.Namespace) -> int:
    try:
        c, algs, elem, rows = prepare(args)
        out = output_dir(args.out) if args.out else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    result = table(c, args.collective, algs, elem, rows, args.lanes)
    print(f"# ina sim collectives: {args.collective} on {c.describe()}")
    print(f"# {c.gpus} ranks; the model: docs/cluster.md (nccl = NCCL's own pick)")
    print("#")
    print(f"# {'size':>12} {'count':>12} {'type':>8}  {'algorithm':>12} {'proto':>6} "
          f"{'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}")  # fmt: skip
    for r in result:
        name = f"nccl:{r['picked']}" if r["algorithm"] == "nccl" else r["algorithm"]
        print(f"  {r['size']:>12} {r['count']:>12} {args.datatype:>8}  {name:>12} "
              f"{r['protocol']:>6} {r['time_us']:>10.1f} {r['algbw_GBps']:>12.2f} "
              f"{r['busbw_GBps']:>12.2f}")  # fmt: skip
    if out is not None:
        path = out / "collectives.json"
        path.write_text(
            json.dumps(
                {
                    "cluster": c.describe(),
                    "collective": args.collective,
                    "datatype": args.datatype,
                    "rows": result,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {path}")
    return 0
